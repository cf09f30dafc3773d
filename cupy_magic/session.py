"""The extension's state in this process, and the functions users call from Python.

The magics are thin parsers in front of these functions: ``%vram_budget 8GB`` is
``set_budget("8GB")``, ``%gpu_backend host`` is ``use_backend("host")``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import backend as _backend
from .budget import BudgetSpec, Estimate, estimate, estimate_array, format_bytes, parse_budget
from .report import RunReport

__all__ = [
    "BudgetStatus",
    "budget_status",
    "describe_device",
    "device_info",
    "free_cached",
    "last_report",
    "memory_pool",
    "set_budget",
    "set_sync_mode",
    "use_backend",
]


@dataclass
class _State:
    budget: BudgetSpec | None = None
    last: RunReport | None = None
    syncs: str = "warn"


_state = _State()


@dataclass(frozen=True)
class BudgetStatus:
    """The budget and what the pool and the device hold now."""

    backend: str
    budget: BudgetSpec | None
    pool_used: int
    pool_held: int
    device_used: int
    device_total: int

    @property
    def budget_bytes(self) -> int | None:
        return self.budget.nbytes if self.budget else None

    def __str__(self) -> str:
        unit = "VRAM" if self.backend == "cupy" else "host memory (CPU fallback)"
        budget = self.budget.describe() if self.budget else "off (no limit)"
        return (
            f"budget: {budget}\n"
            f"pool: {format_bytes(self.pool_used)} used, {format_bytes(self.pool_held)} held "
            f"({format_bytes(self.pool_held - self.pool_used)} cached)\n"
            f"{unit}: {format_bytes(self.device_used)} used of {format_bytes(self.device_total)}"
        )

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))


def budget_status() -> BudgetStatus:
    """Return the budget, pool used/held and device used/total."""
    be = _backend.current()
    used, total = be.device_memory()
    return BudgetStatus(be.name, _state.budget, be.pool_used(), be.pool_held(), used, total)


def set_budget(budget: str | int | None) -> BudgetStatus:
    """Set the VRAM budget, enforced by the pool limit; ``None`` or ``"off"`` removes it.

    Parameters
    ----------
    budget
        ``"8GB"``, ``"1.5GiB"``, ``"512MB"``, ``"50%"``, ``"0.5"`` (a fraction of the device)
        or a number of bytes.

    Raises
    ------
    cupy_magic.budget.SizeError
        For a value that cannot be read, is not positive, or exceeds the device.
    """
    be = _backend.current()
    if budget is None or (isinstance(budget, str) and budget.strip().lower() == "off"):
        _state.budget = None
        be.set_limit(None)
        return budget_status()
    total = be.info().total_bytes
    text = f"{budget}B" if isinstance(budget, int) and not isinstance(budget, bool) else budget
    spec = parse_budget(str(text), total)
    be.set_limit(spec.nbytes)
    _state.budget = spec
    return budget_status()


def _reapply_budget() -> None:
    be = _backend.current()
    spec = _state.budget
    if spec is None:
        be.set_limit(None)
        return
    try:
        spec = parse_budget(spec.text, be.info().total_bytes)
    except ValueError:
        spec = BudgetSpec(spec.text, min(spec.nbytes, be.info().total_bytes))
    _state.budget = spec
    be.set_limit(spec.nbytes)


def use_backend(name: str | None) -> _backend.DeviceInfo:
    """Switch the backend: ``"cupy"``, ``"host"``, or ``None`` for CuPy when a GPU works."""
    _backend.select(name)
    _reapply_budget()
    return _backend.current().info()


def device_info() -> _backend.DeviceInfo:
    """What the cells run on: backend ("cupy" or "host"), device name, memory, versions."""
    return _backend.current().info()


def describe_device() -> str:
    """The one line printed at load: GPU, VRAM, driver, CUDA runtime, CuPy, budget."""
    be = _backend.current()
    info = be.info()
    budget = _state.budget.describe() if _state.budget else "off"
    if info.backend == "cupy":
        return (f"cupy_magic: {info.name}, {format_bytes(info.total_bytes)} VRAM, driver "
                f"{info.driver}, CUDA runtime {info.runtime}, CuPy {info.cupy_version}, "
                f"budget {budget}")
    why = info.reason or "host backend chosen"
    if why == "host backend chosen":
        return f"cupy_magic: host backend chosen: cells run on NumPy (CPU), budget {budget}"
    return (f"cupy_magic: no NVIDIA GPU visible ({why}): cells run on NumPy (CPU fallback), "
            f"budget {budget}")


def set_sync_mode(mode: str | None = None) -> str:
    """Set (or, with ``None``, show) the default ``--syncs`` mode: warn, error or off."""
    from .runner import SYNC_MODES

    if mode is not None:
        if mode not in SYNC_MODES:
            raise ValueError(f"unknown sync mode {mode!r}; use warn, error or off")
        _state.syncs = mode
    return _state.syncs


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


def last_report() -> RunReport | None:
    """The report of the last ``%%gpu`` cell that succeeded in this process."""
    return _state.last


def record(report: RunReport) -> None:
    _state.last = report


def estimate_name(name: str, namespace: dict[str, Any]) -> Estimate:
    """Estimate what the array bound to ``name`` takes on the device."""
    if name not in namespace:
        from .budget import SizeError

        raise SizeError(f"no variable named {name!r}; give a defined array or a shape such as "
                        "20000x20000 float32")
    return estimate_array(namespace[name], label=name)


def reset() -> None:
    """Forget the budget and the last report and close the backend (used at unload)."""
    _state.budget = None
    _state.last = None
    _state.syncs = "warn"
    _backend.reset()


__all__ += ["estimate", "estimate_name"]
