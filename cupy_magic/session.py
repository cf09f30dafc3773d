"""The functions users call from Python; the magics are thin parsers in front of them.

``%%gpu`` is :func:`run_cell`, ``%vram_budget 8GB`` is :func:`set_budget`, ``%gpu_backend
host`` is :func:`use_backend`, ``%gpu_syncs error`` is :func:`set_sync_mode`,
``%vram_panel`` is :func:`show_panel`. The settings they default to live in
:mod:`cupy_magic.config`; the budget in force is the live backend's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from . import backend as _backend
from .backend import BudgetSpec, DeviceInfo, PoolStats, parse_budget
from .config import BACKENDS, settings
from .holders import account as _holders
from .holders.free import FreeResult, shell_copies
from .holders.free import free as _free
from .holders.records import HolderReport
from .monitor.sampler import shared_sampler
from .run import progress
from .run.batching import DEFAULT_STREAMS, BatchOptions
from .run.cell import SYNC_MODES, CellOutcome
from .run.cell import run_cell as _run_cell
from .run.report import RunReport
from .units import Estimate, SizeError, estimate, estimate_array, format_bytes
from .view import panel as _panel
from .view import progressbar

__all__ = [
    "BudgetStatus",
    "budget_status",
    "describe_device",
    "device_info",
    "estimate",
    "estimate_name",
    "free_cached",
    "last_report",
    "memory_pool",
    "panel_summary",
    "pause_panels",
    "resume_panels",
    "run_cell",
    "run_cell_outcome",
    "set_budget",
    "set_fallback",
    "set_sync_mode",
    "settings",
    "show_panel",
    "stop_panels",
    "use_backend",
    "vram_free",
    "vram_holders",
]

_last: list[RunReport] = []  # the last report, kept here only


@dataclass(frozen=True)
class BudgetStatus(PoolStats):
    """The budget and what the pool and the device hold now (``%vram_budget``)."""

    backend: str = ""
    budget: BudgetSpec | None = None

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
        return (
            f"budget: {budget}\n"
            f"pool: {format_bytes(self.used)} used, {format_bytes(self.held)} held "
            f"({format_bytes(self.cached_free)} cached)\n"
            f"{unit}: {format_bytes(self.device_used)} used of {format_bytes(self.device_total)}"
        )

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))


def budget_status() -> BudgetStatus:
    """Return the budget, pool used/held and device used/total."""
    be = _backend.current()
    st = be.stats()
    return BudgetStatus(st.used, st.held, st.limit, st.device_used, st.device_total,
                        backend=be.name, budget=be.budget)


def set_budget(budget: str | int | None) -> BudgetStatus:
    """Set the VRAM budget, enforced by the pool limit; ``None`` or ``"off"`` removes it.

    Parameters
    ----------
    budget
        ``"8GB"``, ``"1.5GiB"``, ``"512MB"``, ``"50%"``, ``"0.5"`` (a fraction of the device)
        or a number of bytes.

    Raises
    ------
    cupy_magic.units.SizeError
        For a value that cannot be read, is not positive, or exceeds the device.
    """
    be = _backend.current()
    if budget is None or (isinstance(budget, str) and budget.strip().lower() == "off"):
        be.set_budget(None)
        return budget_status()
    text = f"{budget}B" if isinstance(budget, int) and not isinstance(budget, bool) else budget
    be.set_budget(parse_budget(str(text), be.info().total_bytes))
    return budget_status()


def use_backend(name: str | None) -> DeviceInfo:
    """Switch the backend: ``"cupy"``, ``"host"``, or ``None`` for CuPy when a GPU works.

    The budget in force moves to the new backend. Raises ``ValueError`` for an unknown name
    and ``RuntimeError`` when ``"cupy"`` cannot run (the message says why).
    """
    if name is not None and name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; use {' or '.join(map(repr, BACKENDS))}")
    _backend.select(name)
    return _backend.current().info()


def device_info() -> DeviceInfo:
    """What the cells run on: backend ("cupy" or "host"), device name, memory, versions."""
    return _backend.current().info()


def describe_device() -> str:
    """The one line printed at load: GPU, VRAM, driver, CUDA runtime, CuPy, budget."""
    be = _backend.current()
    info = be.info()
    budget = be.budget.describe() if be.budget else "off"
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
    if mode is not None:
        if mode not in SYNC_MODES:
            raise ValueError(f"unknown sync mode {mode!r}; use "
                             f"{', '.join(SYNC_MODES[:-1])} or {SYNC_MODES[-1]}")
        settings().syncs = mode
    return settings().syncs


def set_fallback(mode: bool | str | None = None) -> bool:
    """Set (or, with ``None``, show) whether ``%%gpu`` cells run with NumPy the calls CuPy
    cannot run (``%gpu_fallback on|off``; ``run_cell(fallback=...)`` for one cell).

    Parameters
    ----------
    mode
        ``True``/``"on"`` or ``False``/``"off"``; ``None`` shows the setting.
    """
    if mode is not None:
        words = {"on": True, "off": False}
        if isinstance(mode, str) and mode.strip().lower() in words:
            mode = words[mode.strip().lower()]
        if not isinstance(mode, bool):
            raise ValueError(f"fallback mode {mode!r} is neither on nor off; use "
                             "cupy_magic.set_fallback('on') or set_fallback('off')")
        settings().fallback = mode
    return settings().fallback


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
    """The report of the last ``%%gpu`` cell (or :func:`run_cell`) that succeeded."""
    return _last[-1] if _last else None


def estimate_name(name: str, namespace: dict[str, Any]) -> Estimate:
    """Estimate what the array bound to ``name`` takes on the device."""
    if name not in namespace:
        raise SizeError(f"no variable named {name!r}; give a defined array or a shape such as "
                        "20000x20000 float32")
    return estimate_array(namespace[name], label=name)


def show_panel(interval: float | None = None, device: int = 0,
               text: bool = False) -> Any:
    """Display the live VRAM panel (``%vram_panel``); in a terminal print a summary.

    ``interval`` defaults to the period of the sampler the panels share, or, before the
    first panel, ``CupyMagic.panel_interval``.
    """
    if interval is None and shared_sampler() is None:
        interval = settings().panel_interval
    return _panel.show_panel(interval=interval, device=device, text=text)


def panel_summary(device: int = 0) -> str:
    """The panel's figures as text (``%vram_panel --text``)."""
    return _panel.panel_summary(device)


def pause_panels() -> None:
    """Pause every panel's sampling (``%vram_panel --pause``)."""
    _panel.pause()


def resume_panels() -> None:
    """Resume every panel's sampling (``%vram_panel --resume``)."""
    _panel.resume()


def stop_panels() -> None:
    """Close every panel and stop sampling (``%vram_panel --stop``)."""
    _panel.close_all()


def run_cell(
    source: str,
    namespace: dict[str, Any],
    *,
    to_host: bool | Iterable[str] = False,
    dtype: str | None = None,
    warmup: bool = False,
    syncs: str | None = None,
    batch: BatchOptions | None = None,
    fallback: bool | None = None,
    panel: bool = False,
    filename: str | None = None,
    label: str | None = None,
    lines: bool = False,
    nvtx: bool = False,
) -> RunReport:
    """Run ``source`` on the GPU against ``namespace``, as a transaction (``%%gpu``).

    Parameters
    ----------
    source
        The cell's code.
    namespace
        The user namespace: read for inputs, written only if the cell succeeds.
    to_host
        ``True`` brings every device array the cell assigns back as NumPy; a list of names
        brings back those; ``False`` (default) leaves results on the device.
    dtype
        ``"float32"`` downcasts float64 (and complex128) inputs on the way in; ``"float16"``
        downcasts float64 and float32 inputs.
    warmup
        Run the cell once on the first rows of its longest inputs first (kernel compilation,
        pool growth), and time only the real run. The cell runs twice, so its side effects
        (prints, appends to outside lists) happen twice; the warm-up commits nothing.
    syncs
        ``"warn"`` reports the host syncs found before the run (static check) and, on the
        GPU, those counted while it ran; ``"error"`` stops at the first one, naming its
        line (on the CPU fallback: at the first one the static check finds, before running);
        ``"off"`` looks for none. ``None``: the session's mode (:func:`set_sync_mode`).
    batch
        How to batch the cell over the leading axis of its inputs
        (:class:`~cupy_magic.run.batching.BatchOptions`); without it a cell is batched only
        when its NumPy inputs do not fit the VRAM budget.
    fallback
        Run with NumPy on the host the calls CuPy cannot run (a name it lacks, an option or
        dtype it has not), their copies and time in the report, instead of stopping the
        cell with the CuPy way to write them. ``None``: the session's setting
        (:func:`set_fallback`, ``c.CupyMagic.fallback``).
    panel
        Show a live VRAM panel above the cell's output while it runs (in a notebook).
    filename
        The name the cell's code is compiled under (tracebacks show it with the cell's lines).
    label
        What the panel and the progress bar call the cell (``In [3]``).
    lines
        Record where the cell's time goes, line by line (``%%gpu --lines``): a table after
        the report and ``report.line_stats``, one
        :class:`~cupy_magic.run.lines.LineStat` per line that ran (its runs, GPU and host
        time, bytes moved, syncs and their wait, compile time, share); each line is also an
        NVTX range on the GPU.
    nvtx
        Make each line an NVTX range named ``In[3]:L2 <code>`` for Nsight Systems, without
        the table (``%%gpu --nvtx``).

    Returns
    -------
    RunReport
        What moved, how long the device worked, peak pool bytes, and what was committed;
        also kept as :func:`last_report`.

    Raises
    ------
    cupy_magic.run.errors.CellError
        For inputs CuPy cannot hold or options that do not fit the cell.
    cupy_magic.backend.BudgetExceeded
        When the inputs or the cell's allocations do not fit the VRAM budget.
    BaseException
        Whatever the cell raised, with a traceback that starts at the cell's own lines.
    """
    __tracebackhide__ = True
    return run_cell_outcome(source, namespace, to_host=to_host, dtype=dtype, warmup=warmup,
                            syncs=syncs, batch=batch, fallback=fallback, panel=panel,
                            filename=filename,
                            label=label, lines=lines, nvtx=nvtx).report


def run_cell_outcome(
    source: str,
    namespace: dict[str, Any],
    *,
    to_host: bool | Iterable[str] = False,
    dtype: str | None = None,
    warmup: bool = False,
    syncs: str | None = None,
    batch: BatchOptions | None = None,
    fallback: bool | None = None,
    panel: bool = False,
    filename: str | None = None,
    label: str | None = None,
    lines: bool = False,
    nvtx: bool = False,
) -> CellOutcome:
    """:func:`run_cell`, also returning the value of the cell's last expression.

    ``%%gpu`` returns that value, so IPython shows it and sets ``Out``/``_`` as for a plain
    cell. The parameters and errors are :func:`run_cell`'s.

    Returns
    -------
    CellOutcome
        ``.report`` (also kept as :func:`last_report`) and ``.value`` (``None`` when the
        cell ends with a statement or ran in batches).
    """
    __tracebackhide__ = True
    if batch is None and settings().streams != DEFAULT_STREAMS:
        batch = BatchOptions(streams=settings().streams, streams_given=False)
    progress.start(label or filename or "%%gpu cell")
    try:
        with _panel.cell_panel() if panel else contextlib.nullcontext(), \
                progressbar.for_cell():
            outcome = _run_cell(source, namespace, to_host=to_host, dtype=dtype,
                                warmup_run=warmup, syncs=syncs or settings().syncs,
                                fallback=settings().fallback if fallback is None else fallback,
                                filename=filename, batch=batch, lines=lines,
                                nvtx=nvtx, label=label or "")
    finally:
        progress.finish()
    _last[:] = [outcome.report]
    _holders.note_cell(label or filename or "a %%gpu cell", source,
                       [o.name for o in outcome.report.outputs], namespace, outcome.value,
                       _backend.current(), value_on_device=to_host is not True)
    return outcome


def _shell() -> Any:
    """The running IPython shell, or ``None`` (plain Python)."""
    ipython = __import__("sys").modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


def _namespace(namespace: dict[str, Any] | None) -> dict[str, Any]:
    if namespace is not None:
        return namespace
    shell = _shell()
    if shell is None:
        raise ValueError("no IPython shell is running; pass your namespace, e.g. "
                         "cupy_magic.vram_holders(globals())")
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
        else list(targets)
    ns, shell = _namespace(namespace), _shell()
    be = _backend.current()

    copies = shell_copies(shell, be) if shell is not None and ns is shell.user_ns else None
    return _free([n for n in names if n], ns, be, copies)


def apply_settings() -> None:
    """Put the configured backend and budget in force (at load)."""
    conf = settings()
    use_backend(conf.preferred_backend())
    if conf.budget:
        set_budget(conf.budget)


def reset() -> None:
    """Forget the last report and close the backend (an unload step)."""
    _last.clear()
    _backend.reset()
