"""The budget and the memory: ``%vram_budget`` and ``%vram_who`` as functions."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from .. import backend as _backend
from ..backend import BudgetSpec, PoolStats, parse_budget
from ..backend.budget import MIN_BARE_BYTES, small_budget
from ..holders import account as _holders
from ..holders.free import FreeResult, shell_copies
from ..holders.free import free as _free
from ..holders.records import HolderReport
from ..units import Estimate, SizeError, estimate, estimate_array, format_bytes, short_repr, whole

__all__ = ["BudgetStatus", "budget_status", "estimate_name", "free_cached", "memory_pool",
           "set_budget", "vram_free", "vram_holders"]


@dataclass(frozen=True)
class BudgetStatus(PoolStats):
    """The budget and what the pool and the device hold now (``%vram_budget``)."""

    backend: str = ""
    budget: BudgetSpec | None = None
    device: int = 0
    # the other devices of the host, when there are several (%vram_budget without --device)
    others: tuple[BudgetStatus, ...] = ()
    devices: int = 1  # how many the host has: with several, the text names this one

    @property
    def budget_bytes(self) -> int | None:
        """The budget's bytes, or ``None`` without one."""
        return self.budget.nbytes if self.budget else None

    @property
    def pool_used(self) -> int:
        """Bytes the cells' arrays hold in the pool."""
        return self.used

    @property
    def pool_held(self) -> int:
        """Bytes the pool holds from the device (used and cached)."""
        return self.held

    def __str__(self) -> str:
        unit = "VRAM" if self.backend == "cupy" else "host memory (CPU fallback)"
        budget = self.budget.describe() if self.budget else "off (no limit)"
        text = (
            f"budget: {budget}\n"
            f"pool: {format_bytes(self.used)} used, {format_bytes(self.held)} held "
            f"({format_bytes(self.cached_free)} cached)\n"
            f"{unit}: {format_bytes(self.device_used)} used of {format_bytes(self.device_total)}"
        )
        if not self.others:  # one device's, named where the host has several (--device 1)
            return f"device {self.device}:\n{text}" if self.devices > 1 else text
        rows = [f"device {o.device}: budget {o.budget.describe() if o.budget else 'off'}, "
                f"pool {format_bytes(o.used)} used, {format_bytes(o.held)} held"
                for o in self.others]
        return f"device {self.device}:\n{text}\n" + "\n".join(rows)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))


def _device(device: int | None, be: Any, status: bool = False) -> int:
    """``device`` checked against the devices of the host (``None``: the home device);
    ``status``: the fix shows the budget (:func:`budget_status`) rather than sets it."""
    magic, call = (("%vram_budget --device 0", "budget_status(device=0)") if status
                   else ("%vram_budget 8GB --device 0", "set_budget('8GB', device=0)"))
    if device is None:
        return int(be.home)
    count = be.device_count()
    number = whole(device)
    if number is None:
        raise ValueError(f"device={short_repr(device)} is not a device number; e.g. "
                         f"cupy_magic.{call}")
    device = number
    if not 0 <= device < count:
        raise ValueError(f"--device {device} is not a visible device: there "
                         f"{'is 1' if count == 1 else f'are {count}'} (0 to {count - 1}); "
                         f"e.g. {magic} ({call} from Python)")
    return device


def _status(be: Any, device: int, devices: int = 1) -> BudgetStatus:
    st = be.stats(device)
    return BudgetStatus(st.used, st.held, st.limit, st.device_used, st.device_total,
                        backend=be.name, budget=be.budgets.get(device), device=device,
                        devices=devices)


def budget_status(device: int | None = None) -> BudgetStatus:
    """Return the budget, pool used/held and device used/total of ``device`` (default: the
    home device, with a line for each other device of the host in ``others``)."""
    be = _backend.current()
    home = _device(device, be, status=True)
    count = be.device_count()
    status = _status(be, home, count)
    if device is None and count > 1:
        others = tuple(_other(be, d) for d in range(count) if d != home)
        status = replace(status, others=others)
    return status


def _other(be: Any, device: int) -> BudgetStatus:
    """Another device's line: its budget and pool. Its used memory is read only where this
    kernel already has a pool there, since reading it makes a CUDA context on the device
    (hundreds of MiB, and refused on a GPU another process holds in exclusive mode)."""
    if be.is_gpu and getattr(be, "made_pool", lambda d: None)(device) is None:
        return BudgetStatus(0, 0, be.limit_of(device), 0, be.device_total(device),
                            backend=be.name, budget=be.budgets.get(device), device=device)
    return _status(be, device)


def set_budget(budget: str | int | None, device: int | None = None) -> BudgetStatus:
    """Set the VRAM budget, enforced by the pool limit; ``None`` or ``"off"`` removes it.

    Parameters
    ----------
    budget
        ``"8GB"``, ``"1.5GiB"``, ``"512MB"``, ``"50%"``, ``"0.5"`` or ``0.5`` (a fraction of
        the device), or a whole number of bytes (an ``int`` or NumPy integer; under 1 MiB it
        is refused as a size missing its unit: ``set_budget(8)`` asks whether ``'8GB'`` was
        meant, ``'8B'`` is 8 bytes).
    device
        The device whose budget to set (``%vram_budget 8GB --device 1``); ``None`` (default)
        sets the same budget on every device of the host, each share resolved against its
        own device (all of them or none, if one device is too small).

    Raises
    ------
    cupy_magic.units.SizeError
        For a value that cannot be read, is not positive, exceeds the device, or is a
        whole number of bytes under 1 MiB.
    ValueError
        For a ``device`` that is not visible.
    """
    be = _backend.current()
    targets = range(be.device_count()) if device is None else [_device(device, be)]
    if budget is None or (isinstance(budget, str) and budget.strip().lower() == "off"):
        specs: dict[int, BudgetSpec | None] = dict.fromkeys(targets)
    else:
        number = whole(budget)  # an int or NumPy integer: bytes, as 8GB's 8000000000
        if number is not None and 0 <= number < MIN_BARE_BYTES:
            raise SizeError(small_budget(number, min(be.device_total(d) for d in targets)))
        text = budget if number is None else f"{number}B"
        specs = {d: parse_budget(str(text), be.device_total(d)) for d in targets}
    for d, spec in specs.items():
        be.set_budget(spec, d)
    return budget_status(device)


def memory_pool() -> Any:
    """The CuPy memory pool the cells allocate from, or ``None`` on the host backend.

    While the extension is loaded this is a ``cupy.cuda.SingleDeviceMemoryPool`` it installed
    as CuPy's allocator (so the panel can read fragmentation), not
    ``cupy.get_default_memory_pool()``; unloading restores CuPy's default allocator.
    """
    be = _backend.current()
    return getattr(be, "pool", None) if be.is_gpu else None


def free_cached() -> int:
    """Release the pool's cached blocks to the device (guide section 5); return bytes freed."""
    return _backend.current().free_cached()


def estimate_name(name: str, namespace: dict[str, Any], dtype: str | None = None) -> Estimate:
    """Estimate what the array bound to ``name`` takes on the device: in its own dtype, or
    its shape in ``dtype`` (``%vram_budget --estimate x float32``: what ``--dtype float32``
    would move)."""
    if name not in namespace:
        raise SizeError(f"no variable named {name!r}; give a defined array or a shape such as "
                        "20000x20000 float32")
    own = estimate_array(namespace[name], label=name)
    if dtype is None:
        return own
    return replace(estimate(own.shape, dtype), label=f"{name} as {dtype}")


def _shell() -> Any:
    """The running IPython shell, or ``None`` (plain Python)."""
    ipython = __import__("sys").modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


def _namespace(namespace: dict[str, Any] | None, call: str = "vram_holders(globals())"
               ) -> dict[str, Any]:
    """``namespace``, or the IPython shell's; ``call``: the fix, as the caller is called."""
    if isinstance(namespace, dict):
        return namespace
    if namespace is not None:
        raise TypeError(f"namespace={short_repr(namespace)} is not a dict of your "
                        f"variables; e.g. cupy_magic.{call}")
    shell = _shell()
    if shell is None:
        raise ValueError(f"no IPython shell is running; pass your namespace, e.g. "
                         f"cupy_magic.{call}")
    return shell.user_ns


def vram_holders(namespace: dict[str, Any] | None = None) -> HolderReport:
    """Who holds the memory (``%vram_who``): the device arrays you can reach, largest first,
    by path, and the rest of the device memory, measured (host memory on the CPU fallback).

    ``namespace`` defaults to the IPython shell's.
    """
    return _holders.vram_holders(_namespace(namespace), _backend.current())


def vram_free(targets: str | Iterable[str],
              namespace: dict[str, Any] | None = None) -> FreeResult:
    """Drop holders and release cached blocks (``%vram_who --free``); measure what came back.

    ``targets``: your names (comma-separated or a list), ``Out``, ``traceback`` or
    ``all-unnamed``. Nothing else in the namespace is deleted.
    """
    names = [t.strip() for t in targets.split(",")] if isinstance(targets, str) \
        else list(targets) if isinstance(targets, Iterable) else None
    if names is None or not all(isinstance(n, str) for n in names):
        raise TypeError(f"vram_free({short_repr(targets)}): give names as a string or a list "
                        "of strings; e.g. cupy_magic.vram_free('y, Out')")
    ns, shell = _namespace(namespace, f"vram_free({short_repr(targets)}, globals())"), _shell()
    be = _backend.current()

    copies = shell_copies(shell, be) if shell is not None and ns is shell.user_ns else None
    return _free([n for n in names if n], ns, be, copies)
