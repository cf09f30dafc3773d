"""The backend protocol and the types both backends share (see :mod:`cupy_magic.backend`)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from ..units import format_bytes
from .budget import BudgetSpec
from .compiles import NoCompiles


class BudgetExceeded(MemoryError):
    """A cell asked for more memory than the VRAM budget allows.

    Parameters
    ----------
    message
        What was asked, the budget, and what to try.
    line
        The cell line that went over the budget, when the backend knows it.
    explained
        The message already says what to try, so the runner passes it on unchanged.
    """

    def __init__(self, message: str, *, line: int | None = None,
                 explained: bool = False) -> None:
        super().__init__(message)
        self.line = line
        self.explained = explained


def address(array: np.ndarray) -> int:
    """Where a NumPy array's first element lies in host memory."""
    return int(array.__array_interface__["data"][0])


def byte_span(first: int, array: Any) -> tuple[int, int]:
    """The bytes an array (anything with ``shape``, ``strides``, ``itemsize`` and ``size``)
    spans, as ``(low, high)`` (one past the last), where its first element starts at byte
    ``first`` (an address, or an offset); ``(first, first)`` when it is empty."""
    if array.size == 0:
        return first, first
    low = high = first
    for n, st in zip(array.shape, array.strides, strict=True):
        low, high = (low + (n - 1) * st, high) if st < 0 else (low, high + (n - 1) * st)
    return low, high + array.itemsize


@dataclass(frozen=True)
class DeviceInfo:
    """What the live backend runs on, for the load line and the reports."""

    backend: str
    name: str
    total_bytes: int
    driver: str = ""
    runtime: str = ""
    cupy_version: str = ""
    reason: str = ""
    # which physical GPU ("GPU-<hex>", as nvidia-smi -L names it): a process whose
    # CUDA_VISIBLE_DEVICES differs numbers it otherwise; "" on the CPU fallback
    uuid: str = ""


@dataclass(frozen=True)
class PoolStats:
    """Memory pool figures at one instant (bytes): the one record of them.

    The panel's :class:`~cupy_magic.monitor.sources.PoolFigures` and ``%vram_budget``'s
    :class:`~cupy_magic.session.BudgetStatus` extend it with what they add.
    """

    used: int = 0
    held: int = 0
    limit: int | None = None
    device_used: int = 0
    device_total: int = 0

    @property
    def cached_free(self) -> int:
        """Bytes the pool holds in cached free blocks."""
        return max(0, self.held - self.used)


@dataclass(frozen=True)
class Transfer:
    """One array moved to the device."""

    array: Any
    seconds: float
    nbytes: int
    pinned: bool


class Backend:
    """The protocol shared by the CuPy and host backends."""

    name: str = ""
    is_gpu: bool = False
    # whether keep_on_device notes anything (the host backend's bookkeeping; a GPU knows its
    # arrays by their type): a commit walks a result's containers only where it does
    notes_device_arrays: bool = False
    xp: ModuleType = np
    # page-locked host memory (a HostMemory) where there is a device to copy to and from
    host: Any = None
    # times the pool gave cached blocks back to the device (free_all_blocks): a CUDA graph
    # that wrote to a released block must not be replayed (cupy_magic.run.graphs)
    releases = 0

    def __init__(self) -> None:
        # one budget per device, by device number; the home device's is "the budget"
        self._budgets: dict[int, BudgetSpec] = {}
        # bytes of a budget held by device memory outside the pool (a cluster run's device
        # slots, :meth:`reserve`): the pool's limit is the budget less these
        self._reserved: dict[int, int] = {}
        self.home = 0  # the device cells run on unless told otherwise (%%gpu --devices)
        # set once the backend's background first launch is done (the GPU's; none here)
        self.preheated = threading.Event()
        self.preheated.set()

    # --- description -------------------------------------------------------------------
    def info(self) -> DeviceInfo:
        raise NotImplementedError

    def device_memory(self, device: int | None = None) -> tuple[int, int]:
        """Return ``(used, total)`` bytes of ``device`` (default: the home device; host RAM
        for the host backend)."""
        raise NotImplementedError

    # --- the devices of the host (``%%gpu --devices``) -----------------------------------
    def device_count(self) -> int:
        """How many devices cells can run on (CUDA's visible devices on a GPU)."""
        return 1

    def device_name(self, device: int) -> str:
        """What ``device`` is, for the report's row of it."""
        return self.info().name

    def device_total(self, device: int) -> int:
        """Bytes of ``device``, which a budget such as ``50%`` is resolved against."""
        return self.info().total_bytes

    def on_device(self, device: int) -> contextlib.AbstractContextManager[Any]:
        """Make ``device`` current in the block (CuPy's ``Device(i)``; nothing on the host)."""
        return contextlib.nullcontext()

    def move_to(self, value: Any, device: int) -> Any:
        """``value`` on ``device``: a device array elsewhere is copied there (a partial of
        ``--reduce`` from another device); anything else is returned as it is."""
        return value

    # --- arrays -------------------------------------------------------------------------
    def is_device_array(self, obj: object) -> bool:
        raise NotImplementedError

    def to_device(self, array: np.ndarray) -> Transfer:
        raise NotImplementedError

    def to_host(self, array: Any) -> np.ndarray:
        raise NotImplementedError

    def allocation(self, array: Any) -> tuple[int, Any, int]:
        """The device allocation ``array`` lies in: a key that names it while it lives, the
        allocation as a 1-d ``uint8`` device array from its first byte (which keeps it alive;
        :meth:`view_of` reads it), and the byte offset of ``array``'s first element in it."""
        raise NotImplementedError

    def view_of(self, copy: Any, offset: int, shape: tuple[int, ...],
                strides: tuple[int, ...], dtype: np.dtype) -> Any:
        """An array of ``shape``, ``strides`` and ``dtype`` over ``copy``'s memory (a 1-d
        ``uint8`` device array) from byte ``offset`` on: an input that shares memory with
        another (:mod:`cupy_magic.run.overlap`)."""
        raise NotImplementedError

    def keep_on_device(self, obj: object) -> None:
        """Note that a result of a cell lives on the device (the GPU does this by itself)."""

    def watch(self, copies: list[Any], weak: Sequence[bool] = ()) -> Any:
        """Note the contents of device copies (checksums), so that :meth:`changed` can tell
        which the cell changed, whatever name it wrote through
        (:mod:`cupy_magic.backend.writes`). Returns the token to give it. A copy ``weak``
        marks is not kept alive by the token; one gone by :meth:`changed` reads as changed."""
        raise NotImplementedError

    def changed(self, token: Any) -> list[bool]:
        """For each copy :meth:`watch` noted, whether its contents differ now (``True`` for
        a weakly held one that is gone)."""
        raise NotImplementedError

    def watch_queued(self, copies: list[Any]) -> Any:
        """:meth:`watch`, held weakly, for work queued on the current stream (a batch's on
        its slot's): on a GPU the fingerprints are queued there, nothing waits. Give the
        token to :meth:`changed_queued` after the work."""
        return self.watch(copies, [True] * len(copies))

    def changed_queued(self, token: Any) -> Callable[[], list[bool]]:
        """:meth:`changed` for a :meth:`watch_queued` token, as a function to call once the
        stream's work is done (the host backend's answer is known at once)."""
        answer = self.changed(token)
        return lambda: answer

    def to_host_into(self, value: Any, out: np.ndarray) -> None:
        """Copy ``value`` (a device array, or a NumPy one) into ``out``, a host array of
        its shape and dtype (a slot of shared memory the kernel reads)."""
        np.copyto(out, np.asarray(value), casting="no")

    def pin_shared(self, base: int, nbytes: int) -> Any:
        """Page-lock ``nbytes`` at ``base`` (shared memory this process maps) so copies
        between it and the device run at pinned speed; a handle for :meth:`unpin_shared`,
        or ``None`` where nothing was locked (the CPU fallback has no device to copy to)."""
        return self.host.adopt(base, nbytes) if self.host is not None else None

    def unpin_shared(self, handle: Any) -> None:
        """Undo :meth:`pin_shared` (before the memory is unmapped)."""
        if self.host is not None and handle is not None:
            self.host.disown(handle)

    def host_result(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A host array for a result joined from blocks run elsewhere (a cluster's): on the
        GPU a page-locked block an earlier result gave back when one fits (its pages exist,
        so filling it faults none), else fresh memory; see :meth:`host_result_done`."""
        return self.host.empty(shape, dtype) if self.host is not None else np.empty(shape, dtype)

    def host_result_done(self, arr: np.ndarray) -> None:
        """``arr`` from :meth:`host_result` is filled: on the GPU start page-locking it in
        the background, so that its block is kept for a later result once it goes."""
        if self.host is not None:
            self.host.lock(arr)

    # --- pool ---------------------------------------------------------------------------
    def pool_used(self, device: int | None = None) -> int:
        """Bytes the pool of ``device`` (default: the home device) gives out now."""
        raise NotImplementedError

    def pool_held(self, device: int | None = None) -> int:
        """Bytes the pool of ``device`` (default: the home device) holds from it."""
        raise NotImplementedError

    def free_cached(self) -> int:
        """Release cached blocks to the device; return the bytes released."""
        raise NotImplementedError

    # --- the budget: this backend owns the one in force, per device -----------------------
    def set_budget(self, spec: BudgetSpec | None, device: int | None = None) -> None:
        """Put ``spec`` in force on ``device`` (default: the home device) and enforce it;
        ``None`` removes that device's budget."""
        device = self.home if device is None else device
        if spec is None:
            self._budgets.pop(device, None)
        else:
            self._budgets[device] = spec
        self._enforce(self.pool_limit(device), device)

    def _enforce(self, nbytes: int | None, device: int) -> None:
        """Apply a limit of ``nbytes`` to the pool of ``device`` (the CuPy backend sets the
        pool's)."""

    @property
    def budget(self) -> BudgetSpec | None:
        """The home device's budget in force, as the user wrote it, or ``None``."""
        return self._budgets.get(self.home)

    @property
    def budgets(self) -> dict[int, BudgetSpec]:
        """Every device's budget in force, by device number (a copy)."""
        return dict(self._budgets)

    @property
    def limit(self) -> int | None:
        """The home device's budget in bytes, or ``None`` without a budget."""
        return self.limit_of(self.home)

    def limit_of(self, device: int) -> int | None:
        """The budget of ``device`` in bytes, or ``None`` without one."""
        spec = self._budgets.get(device)
        return None if spec is None else spec.nbytes

    def pool_limit(self, device: int) -> int | None:
        """The limit of the pool of ``device``: its budget less the bytes :meth:`reserve`
        holds there (``None`` without a budget)."""
        limit = self.limit_of(device)
        return None if limit is None else max(0, limit - self._reserved.get(device, 0))

    def reserved(self, device: int | None = None) -> int:
        """Bytes of ``device``'s budget (default: the home device's) held outside the pool."""
        return self._reserved.get(self.home if device is None else device, 0)

    def reserve(self, nbytes: int, what: str) -> None:
        """Hold ``nbytes`` of the home device's budget for device memory made outside the
        pool (``what``: the report's words for it), so that the pool and they together stay
        within the budget: the pool's limit drops by them until :meth:`unreserve`. Raises
        :class:`BudgetExceeded` when the budget has not that much left."""
        left = self.budget_left()
        if left is not None and nbytes > left:
            raise BudgetExceeded(f"{what} need {format_bytes(nbytes)} and the budget has "
                                 f"{format_bytes(max(0, left))} left; give a larger budget "
                                 "(%vram_budget) or smaller blocks (--batch-bytes)",
                                 explained=True)
        self._reserved[self.home] = self.reserved() + nbytes
        if self.limit is not None:
            self._enforce(self.pool_limit(self.home), self.home)

    def unreserve(self, nbytes: int) -> None:
        """Give back ``nbytes`` held by :meth:`reserve` (that memory was freed)."""
        self._reserved[self.home] = max(0, self.reserved() - nbytes)
        if self.limit is not None:
            self._enforce(self.pool_limit(self.home), self.home)

    def budget_left(self, device: int | None = None) -> int | None:
        """Bytes the budget leaves the pool of ``device`` (default: the home device) now
        (negative when over), or None without one; memory held by :meth:`reserve` counts."""
        device = self.home if device is None else device
        limit = self.pool_limit(device)
        return None if limit is None else limit - self.pool_used(device)

    def stats(self, device: int | None = None) -> PoolStats:
        """The pool figures of ``device`` (default: the home device)."""
        device = self.home if device is None else device
        used, total = self.device_memory(device)
        return PoolStats(self.pool_used(device), self.pool_held(device), self.limit_of(device),
                         used, total)

    # --- running ------------------------------------------------------------------------
    @contextlib.contextmanager
    def track_memory(self, code_filename: str,
                     device: int | None = None) -> Iterator[_Measurement]:
        """Follow the peak pool bytes of a block (and enforce the budget in it); with
        ``device``, only that device's pool and budget."""
        raise NotImplementedError
        yield  # pragma: no cover

    def uncounted(self) -> contextlib.AbstractContextManager[None]:
        """A context for the extension's own work inside a cell (building a NumPy function's
        wrapper): what it allocates is not the cell's. Nothing to do where the pool is the
        device's (the work allocates host memory); the CPU fallback, whose pool is the
        process's memory, leaves it out."""
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def time_device(self) -> Iterator[_Measurement]:
        """Time the device work of a block (CUDA events on the GPU)."""
        raise NotImplementedError
        yield  # pragma: no cover

    def watch_compiles(self, code_filename: str) -> Any:
        """A context manager recording the kernels built while a cell runs, charged to the
        lines of ``code_filename`` (:class:`~cupy_magic.backend.compiles.CompileRecord` on the
        GPU; the CPU fallback builds none)."""
        return NoCompiles()

    def line_marks(self) -> Any:
        """Timing marks on the device at each line of a cell (``%%gpu --lines``): an
        :class:`~cupy_magic.backend.marks.EventMarks` on the GPU; ``None`` on the CPU
        fallback, which has no device clock (its rows have host time only)."""
        return None

    def upload_rate(self, device: int | None = None) -> float | None:
        """Bytes per second of a large page-locked upload to ``device``, measured once in
        the background at load (the home device only); ``None`` where none was measured,
        as on the CPU fallback, which uploads nothing."""
        return None

    def synchronize(self) -> None:
        pass

    def close(self) -> None:
        """Undo what this backend changed in the process (pool limits, hooks)."""
        for device in list(self._budgets):
            self.set_budget(None, device)


@dataclass
class _Measurement:
    seconds: float = 0.0
    peak_bytes: int = 0
    start_bytes: int = 0
    compile_seconds: float = 0.0  # kernel builds inside time_device, left out of ``seconds``
