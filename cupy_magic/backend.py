"""The one place that knows whether CuPy on a GPU or NumPy on the host runs the cells.

Both backends implement :class:`Backend`: move arrays in and out, time the device work,
account for pool memory, and enforce the VRAM budget. Every other module asks the live
backend (:func:`current`) and never imports CuPy itself.
"""

from __future__ import annotations

import contextlib
import importlib
import linecache
import os
import re
import sys
import threading
import time
import tracemalloc
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType, ModuleType
from typing import Any

import numpy as np

from .budget import format_bytes

__all__ = [
    "Backend",
    "BudgetExceeded",
    "CupyBackend",
    "DeviceInfo",
    "HostBackend",
    "PoolStats",
    "Transfer",
    "current",
    "probe_cupy",
    "select",
]


REGISTER_MIN_BYTES = 16 * 2**20  # below this a pageable copy beats registering the buffer


class BudgetExceeded(MemoryError):
    """A cell asked for more memory than the VRAM budget allows."""


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


@dataclass(frozen=True)
class PoolStats:
    """Memory pool figures at one instant (bytes)."""

    used: int
    held: int
    limit: int | None
    device_used: int
    device_total: int

    @property
    def cached_free(self) -> int:
        return self.held - self.used


@dataclass(frozen=True)
class Transfer:
    """One array moved to the device."""

    array: Any
    seconds: float
    nbytes: int
    pinned: bool


class _PeakTracker:
    """Running current/peak of pool bytes, fed by allocation callbacks."""

    def __init__(self, start: int) -> None:
        self.start = start
        self.current = start
        self.peak = start

    def add(self, nbytes: int) -> None:
        self.current += nbytes
        if self.current > self.peak:
            self.peak = self.current

    def sub(self, nbytes: int) -> None:
        self.current -= nbytes


class Backend:
    """The protocol shared by the CuPy and host backends."""

    name: str = ""
    is_gpu: bool = False
    xp: ModuleType = np

    def __init__(self) -> None:
        self._limit: int | None = None

    # --- description -------------------------------------------------------------------
    def info(self) -> DeviceInfo:
        raise NotImplementedError

    def device_memory(self) -> tuple[int, int]:
        """Return ``(used, total)`` bytes of the device (host RAM for the host backend)."""
        raise NotImplementedError

    # --- arrays -------------------------------------------------------------------------
    def is_device_array(self, obj: object) -> bool:
        raise NotImplementedError

    def to_device(self, array: np.ndarray) -> Transfer:
        raise NotImplementedError

    def to_host(self, array: Any) -> np.ndarray:
        raise NotImplementedError

    def keep_on_device(self, obj: object) -> None:
        """Note that a result of a cell lives on the device (the GPU does this by itself)."""

    # --- pool ---------------------------------------------------------------------------
    def pool_used(self) -> int:
        raise NotImplementedError

    def pool_held(self) -> int:
        raise NotImplementedError

    def free_cached(self) -> int:
        """Release cached blocks to the device; return the bytes released."""
        raise NotImplementedError

    def set_limit(self, nbytes: int | None) -> None:
        self._limit = nbytes

    @property
    def limit(self) -> int | None:
        return self._limit

    def stats(self) -> PoolStats:
        used, total = self.device_memory()
        return PoolStats(self.pool_used(), self.pool_held(), self._limit, used, total)

    # --- running ------------------------------------------------------------------------
    @contextlib.contextmanager
    def track_memory(self, code_filename: str) -> Iterator[_Measurement]:
        """Follow the peak pool bytes of a block (and enforce the budget in it)."""
        raise NotImplementedError
        yield  # pragma: no cover

    @contextlib.contextmanager
    def time_device(self) -> Iterator[_Measurement]:
        """Time the device work of a block (CUDA events on the GPU)."""
        raise NotImplementedError
        yield  # pragma: no cover

    def synchronize(self) -> None:
        pass

    def close(self) -> None:
        """Undo what this backend changed in the process (pool limit, hooks)."""
        self.set_limit(None)


@dataclass
class _Measurement:
    seconds: float = 0.0
    peak_bytes: int = 0
    start_bytes: int = 0


# ---------------------------------------------------------------------------------------
# CuPy on a GPU
# ---------------------------------------------------------------------------------------


def probe_cupy() -> tuple[ModuleType | None, str]:
    """Import CuPy and check a device is usable; return ``(cupy or None, reason)``."""
    try:
        cupy = importlib.import_module("cupy")
    except ImportError as exc:
        return None, f"CuPy is not installed ({exc.name or exc}); pip install 'cupy-magic[cuda13]'"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError and friends: say why, fall back
        return None, f"{type(exc).__name__}: {exc}".split("\n")[0]
    if count == 0:
        return None, "CUDA reports 0 devices"
    return cupy, ""


_POOLS: dict[int, Any] = {}


class CupyBackend(Backend):
    """CuPy on the current CUDA device, with a memory pool the extension installs.

    CuPy's default pool hides its per-stream arenas; a ``SingleDeviceMemoryPool`` installed
    with ``cupy.cuda.set_allocator`` has the same statistics and limit, and lets the panel
    read the largest free block (fragmentation). The same pool is reused across loads, so
    arrays from an earlier load stay counted; unload restores CuPy's default allocator.
    """

    name = "cupy"
    is_gpu = True

    def __init__(self, cupy: ModuleType) -> None:
        super().__init__()
        self.cp = cupy
        self.xp = cupy
        device = cupy.cuda.Device().id
        if device not in _POOLS:
            _POOLS[device] = cupy.cuda.memory.SingleDeviceMemoryPool()
        self.pool = _POOLS[device]
        cupy.cuda.set_allocator(self._malloc)
        self._registered: dict[int, weakref.finalize] = {}
        self._hook_base = importlib.import_module("cupy.cuda.memory_hook").MemoryHook

    def _malloc(self, size: int) -> Any:
        """Allocate from the pool; over the limit, release cached blocks once and retry.

        CuPy's limit counts the pool's cached free blocks too, and it does not release them
        before refusing: without this, memory a cell freed would still count against the
        budget.
        """
        try:
            return self.pool.malloc(size)
        except self.cp.cuda.memory.OutOfMemoryError:
            if not self.pool.free_bytes():
                raise
            self.pool.free_all_blocks()
            return self.pool.malloc(size)

    def info(self) -> DeviceInfo:
        cp = self.cp
        rt = cp.cuda.runtime
        dev = cp.cuda.Device()
        props = rt.getDeviceProperties(dev.id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])

        def ver(v: int) -> str:
            return f"{v // 1000}.{(v % 1000) // 10}"

        return DeviceInfo(
            backend=self.name,
            name=name,
            total_bytes=int(props["totalGlobalMem"]),
            driver=_nvidia_driver_version() or f"CUDA {ver(rt.driverGetVersion())}",
            runtime=ver(rt.runtimeGetVersion()),
            cupy_version=cp.__version__,
        )

    def device_memory(self) -> tuple[int, int]:
        free, total = self.cp.cuda.runtime.memGetInfo()
        return int(total - free), int(total)

    def is_device_array(self, obj: object) -> bool:
        return isinstance(obj, self.cp.ndarray)

    def to_device(self, array: np.ndarray) -> Transfer:
        cp = self.cp
        t0 = time.perf_counter()
        contiguous = array.flags.c_contiguous or array.flags.f_contiguous
        if contiguous and array.nbytes >= REGISTER_MIN_BYTES and self.register(array):
            out = cp.empty(array.shape, array.dtype,
                           order="C" if array.flags.c_contiguous else "F")
            stream = cp.cuda.get_current_stream()
            out.set(array, stream=stream)  # asynchronous from page-locked memory
            stream.synchronize()
            return Transfer(out, time.perf_counter() - t0, int(array.nbytes), pinned=True)
        out = cp.asarray(array)
        cp.cuda.get_current_stream().synchronize()
        return Transfer(out, time.perf_counter() - t0, int(array.nbytes), pinned=False)

    def register(self, array: np.ndarray) -> bool:
        """Page-lock the buffer that holds ``array`` (cudaHostRegister), once while it lives.

        The registration is undone when the buffer's owner is collected, or at unload.
        Returns False when the buffer cannot be registered (then copies are pageable).
        """
        owner = array
        while isinstance(owner.base, np.ndarray):
            owner = owner.base
        if owner.base is not None or not owner.flags.owndata:
            return False  # memory owned by another object (mmap, bytes): leave it alone
        ptr = owner.ctypes.data
        if ptr in self._registered:
            return True
        try:
            self.cp.cuda.runtime.hostRegister(ptr, owner.nbytes, 0)
        except self.cp.cuda.runtime.CUDARuntimeError:
            return False
        self._registered[ptr] = weakref.finalize(owner, _unregister, self.cp, ptr,
                                                 self._registered)
        return True

    def to_host(self, array: Any) -> np.ndarray:
        return self.cp.asnumpy(array)

    def pool_used(self) -> int:
        return int(self.pool.used_bytes())

    def pool_held(self) -> int:
        return int(self.pool.total_bytes())

    def free_cached(self) -> int:
        before = self.pool_held()
        self.pool.free_all_blocks()
        return before - self.pool_held()

    def set_limit(self, nbytes: int | None) -> None:
        self.pool.set_limit(size=0 if nbytes is None else int(nbytes))
        super().set_limit(nbytes)

    def synchronize(self) -> None:
        self.cp.cuda.get_current_stream().synchronize()

    @contextlib.contextmanager
    def track_memory(self, code_filename: str) -> Iterator[_Measurement]:
        tracker = _PeakTracker(self.pool_used())
        m = _Measurement(start_bytes=tracker.start, peak_bytes=tracker.start)

        class _Hook(self._hook_base):  # type: ignore[misc, name-defined]
            name = "cupy_magic.peak"

            def malloc_postprocess(self, **kw: Any) -> None:
                if kw.get("mem_ptr"):
                    tracker.add(int(kw["mem_size"]))

            def free_postprocess(self, **kw: Any) -> None:
                tracker.sub(int(kw["mem_size"]))

        try:
            with _Hook():
                yield m
        finally:
            m.peak_bytes = tracker.peak

    @contextlib.contextmanager
    def time_device(self) -> Iterator[_Measurement]:
        cp = self.cp
        m = _Measurement()
        stream = cp.cuda.get_current_stream()
        start, end = cp.cuda.Event(), cp.cuda.Event(block=True)
        start.record(stream)
        try:
            yield m
        finally:
            end.record(stream)
            with contextlib.suppress(Exception):
                end.synchronize()
                m.seconds = cp.cuda.get_elapsed_time(start, end) / 1e3

    def close(self) -> None:
        self.set_limit(None)
        self.cp.cuda.set_allocator(self.cp.get_default_memory_pool().malloc)
        for fin in list(self._registered.values()):
            fin()


def _unregister(cp: ModuleType, ptr: int, table: dict[int, Any]) -> None:
    table.pop(ptr, None)
    # The buffer is being freed or the extension unloaded: a failure here has no one to
    # report to, and the pointer must not stay in the table either way.
    with contextlib.suppress(cp.cuda.runtime.CUDARuntimeError):
        cp.cuda.runtime.hostUnregister(ptr)


def _nvidia_driver_version() -> str:
    """Return the NVIDIA driver version (e.g. '580.159.04') from the kernel module."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as fh:
            first = fh.readline()
    except OSError:
        return ""
    found = re.search(r"\s(\d{3,}\.\d+(?:\.\d+)?)\s", first)
    return found.group(1) if found else ""


# ---------------------------------------------------------------------------------------
# NumPy on the host
# ---------------------------------------------------------------------------------------


def _host_ram_total() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def _host_ram_used() -> int:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            fields = {ln.split(":")[0]: int(ln.split()[1]) * 1024 for ln in fh if ":" in ln}
        return fields["MemTotal"] - fields.get("MemAvailable", fields.get("MemFree", 0))
    except (OSError, KeyError, ValueError, IndexError):
        return 0


class HostBackend(Backend):
    """NumPy on the CPU: the fallback without a GPU, and a baseline to compare against.

    The "pool" is the memory the cell's Python and NumPy allocations hold, followed with
    :mod:`tracemalloc` while a cell runs; the budget is enforced at every line of the cell.
    """

    name = "host"
    is_gpu = False

    def __init__(self, reason: str = "") -> None:
        super().__init__()
        self.xp = np
        self.reason = reason
        self._local = threading.local()
        # Arrays that cells produced stand for device arrays: they are not moved again.
        self._resident: weakref.WeakValueDictionary[int, np.ndarray] = \
            weakref.WeakValueDictionary()

    def info(self) -> DeviceInfo:
        return DeviceInfo(backend=self.name, name="CPU (NumPy)", total_bytes=_host_ram_total(),
                          reason=self.reason)

    def device_memory(self) -> tuple[int, int]:
        return _host_ram_used(), _host_ram_total()

    def is_device_array(self, obj: object) -> bool:
        return isinstance(obj, np.ndarray) and self._resident.get(id(obj)) is obj

    def keep_on_device(self, obj: object) -> None:
        if isinstance(obj, np.ndarray):
            self._resident[id(obj)] = obj

    def to_device(self, array: np.ndarray) -> Transfer:
        t0 = time.perf_counter()
        # A copy, like an upload: in-place changes in the cell must not reach the user's array.
        out = np.array(array, copy=True, order="K")
        return Transfer(out, time.perf_counter() - t0, int(array.nbytes), pinned=False)

    def to_host(self, array: Any) -> np.ndarray:
        self._resident.pop(id(array), None)
        return np.asarray(array)

    def resident_bytes(self) -> int:
        """Bytes of the arrays earlier cells left "on the device" (in host RAM here)."""
        return sum(int(a.nbytes) for a in list(self._resident.values()))

    def pool_used(self) -> int:
        in_cell = 0
        if tracemalloc.is_tracing() and getattr(self._local, "base", None) is not None:
            in_cell = max(0, tracemalloc.get_traced_memory()[0] - self._local.base)
        return self.resident_bytes() + in_cell

    def pool_held(self) -> int:
        return self.pool_used()

    def free_cached(self) -> int:
        return 0

    @contextlib.contextmanager
    def track_memory(self, code_filename: str) -> Iterator[_Measurement]:
        started = not tracemalloc.is_tracing()
        if started:
            tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        self._local.base = base
        tracemalloc.reset_peak()
        held = self.resident_bytes()  # earlier cells' arrays count, as they do in a GPU pool
        m = _Measurement(start_bytes=held, peak_bytes=held)
        limit = self._limit

        last_line: dict[int, int] = {}

        def local_trace(frame: FrameType, event: str, arg: Any) -> Any:
            if event in ("line", "return"):
                peak = held + tracemalloc.get_traced_memory()[1] - base
                culprit = last_line.get(id(frame), frame.f_lineno)
                last_line[id(frame)] = frame.f_lineno
                if limit is not None and peak > limit:
                    tracemalloc.reset_peak()
                    code = linecache.getline(code_filename, culprit).strip()
                    earlier = (f", {format_bytes(held)} of it arrays from earlier cells"
                               if held else "")
                    err = BudgetExceeded(
                        f"line {culprit} `{code}` took the cell to {format_bytes(peak)} of host "
                        f"memory{earlier}, over the budget of {format_bytes(limit)}"
                    )
                    err.line = culprit  # type: ignore[attr-defined]
                    raise err
            return local_trace

        def global_trace(frame: FrameType, event: str, arg: Any) -> Any:
            return local_trace if frame.f_code.co_filename == code_filename else None

        old_trace = sys.gettrace()
        if limit is not None:
            sys.settrace(global_trace)
        try:
            yield m
        finally:
            if limit is not None:
                sys.settrace(old_trace)
            m.peak_bytes = held + max(0, tracemalloc.get_traced_memory()[1] - base)
            if started:
                tracemalloc.stop()
            self._local.base = None

    @contextlib.contextmanager
    def time_device(self) -> Iterator[_Measurement]:
        m = _Measurement()
        t0 = time.perf_counter()
        try:
            yield m
        finally:
            m.seconds = time.perf_counter() - t0


# ---------------------------------------------------------------------------------------
# selection
# ---------------------------------------------------------------------------------------

_live: Backend | None = None


def select(prefer: str | None = None) -> tuple[Backend, str]:
    """Choose the backend: ``"cupy"``, ``"host"``, or ``None`` for CuPy when a GPU works.

    Returns the backend and, when it is the host one, the reason a GPU is not used.
    Raises ``RuntimeError`` when ``"cupy"`` is asked for and cannot run.
    """
    global _live
    if prefer not in (None, "cupy", "host"):
        raise ValueError(f"unknown backend {prefer!r}; choose 'cupy' or 'host'")
    reason = "host backend chosen"
    if prefer != "host":
        cupy, why = probe_cupy()
        if cupy is not None:
            _switch(lambda: CupyBackend(cupy))
            return _live, ""  # type: ignore[return-value]
        if prefer == "cupy":
            raise RuntimeError(f"the CuPy backend cannot run: {why}")
        reason = why
    _switch(lambda: HostBackend(reason))
    return _live, reason  # type: ignore[return-value]


def _switch(make: Callable[[], Backend]) -> None:
    """Close the live backend, then make the new one (the order matters: closing the CuPy
    backend restores CuPy's default allocator, which the new one may install again)."""
    global _live
    if _live is not None:
        _live.close()
        _live = None
    _live = make()


def current() -> Backend:
    """Return the live backend, choosing one on first use."""
    if _live is None:
        select()
    assert _live is not None
    return _live


def reset() -> None:
    """Close the live backend and forget it (used at unload)."""
    global _live
    if _live is not None:
        _live.close()
    _live = None
