"""CuPy on a GPU: the backend :func:`cupy_magic.backend.select` picks when a device works."""

from __future__ import annotations

import atexit
import contextlib
import importlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from .base import (
    Backend,
    DeviceInfo,
    Transfer,
    _Measurement,
)
from .compiles import CompileRecord, timed
from .flat import flat_device_index
from .gpuinfo import describe, device_name
from .hostmem import HostMemory
from .marks import EventMarks
from .peaks import HighWater
from .preheat import DONE as preheat_done
from .preheat import finish_lazy_imports, preheat
from .writes import DeviceFingerprints


def probe_cupy() -> tuple[ModuleType | None, str]:
    """Import CuPy and check a device is usable; return ``(cupy or None, reason)``."""
    try:
        cupy = importlib.import_module("cupy")
    except ImportError as exc:
        return None, (f"CuPy is not installed ({exc.name or exc}); pip install cupy-cuda13x "
                      "for a CUDA 13 driver (cupy-cuda12x for CUDA 12)")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError and friends: say why, fall back
        return None, f"{type(exc).__name__}: {exc}".split("\n")[0]
    if count == 0:
        return None, "CUDA reports 0 devices"
    return cupy, ""


_POOLS: dict[int, Any] = {}
_log = logging.getLogger(__name__)


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
        self.home = device
        self.pool = self.pool_of(device)
        # each device's properties, read once: a read took 1.1 ms on the H200, twice a cell
        # (benchmarks/cell_overhead.py), and they do not change while the process lives
        self._properties: dict[int, dict[str, Any]] = {}
        self._infos: dict[int, DeviceInfo] = {}  # read every cell, fixed while it lives
        # the peaks of the measurements track_memory has open, by device (the allocator
        # raises the home device's, _malloc the others')
        self._peaks: dict[int, HighWater] = {}
        # non-empty while the home pool holds more than its limit in arrays
        self._strict: list[bool] = []
        cupy.cuda.set_allocator(self._allocator())
        self._restore_flat = flat_device_index(cupy)
        self.host = HostMemory(cupy.cuda.runtime,
                               on_thread=lambda: cupy.cuda.Device(device).use())
        self.preheated = threading.Event()  # unset until preheat is done (or failed)
        self._preheater: threading.Thread | None = None
        if device in preheat_done:  # once per process: a backend made again skips it
            self.preheated.set()
        else:
            finish_lazy_imports()  # not in two threads at once: that can deadlock
            self._preheater = threading.Thread(target=preheat,
                                               args=(cupy, device, self.preheated),
                                               name="cupy_magic-preheat", daemon=True)
            self._preheater.start()
            # a process that ends within its ~0.3 s (a script, a worker) lets it finish
            # first rather than tear CUDA down under it
            atexit.register(self._preheater.join, 5)

    def pool_of(self, device: int) -> Any:
        """The pool cells allocate from on ``device``, made on first use with the device's
        budget as its limit (the budget exists from load on; a pool would make a CUDA
        context on every GPU at load, so it waits until a cell runs there)."""
        pool = _POOLS.get(device)
        if pool is None:
            with self.cp.cuda.Device(device):
                pool = _POOLS[device] = self.cp.cuda.memory.SingleDeviceMemoryPool()
        limit = self.pool_limit(device)
        if limit is not None and pool.get_limit() != limit:
            pool.set_limit(size=limit)
        return pool

    def made_pool(self, device: int) -> Any | None:
        """The pool of ``device`` if cells already allocated there, else ``None`` (reading
        it makes no pool and no CUDA context)."""
        return _POOLS.get(device)

    def _allocator(self) -> Any:
        """CuPy's allocator: the home pool, its limit CuPy's, the open measurements' peaks.

        In Python only what the pool cannot do: a refusal releases the cached blocks once and
        retries (CuPy counts them in its limit and refuses without releasing), and while a
        cell measures, the bytes in use are read after each allocation. :meth:`_fit` keeps
        what the pool holds within the budget, so its arrays stay within it; other devices,
        and the home one while it holds more than its limit, go through :meth:`_malloc`.
        A Python call per array costs: ``benchmarks/op_overhead.py`` (a CuPy
        ``MemoryHook`` would cost four calls into Python per array).
        """
        home, strict, peaks = self.home, self._strict, self._peaks_of(self.home)
        pool, malloc, checked = self.pool, self.pool.malloc, self._malloc
        used, get_device = self.pool.used_bytes, self.cp.cuda.runtime.getDevice
        refused = self.cp.cuda.memory.OutOfMemoryError
        measuring, level = peaks.active, peaks.level
        # one device visible: none other can be current, so no call asks (getDevice took
        # 53 ns of the 137 an array costs over CuPy's own pool on an H100, allocator_cost.py)
        several = self.device_count() > 1

        def allocate(size: int) -> Any:
            if strict or (several and get_device() != home):
                return checked(size)
            try:
                mem = malloc(size)
            except refused:
                mem = self._grow(pool, size)
            if measuring:  # read after: another thread's allocation on this pool counts too
                now = used()
                if now > level[0]:
                    level[0] = now
            return mem

        return allocate

    def _malloc(self, size: int) -> Any:
        """Allocate from the current device's pool, each request checked against the bytes in
        use (CuPy checks its limit only when the pool grows, and cached blocks from before a
        lower budget could serve it); raise the peaks of the measurements open there."""
        device = self.cp.cuda.runtime.getDevice()
        pool = self.pool if device == self.home else self.pool_of(device)
        limit = pool.get_limit()
        if limit:
            before = pool.used_bytes()
            if before + -(-size // 512) * 512 > limit:  # the pool's 512-byte units
                raise self.cp.cuda.memory.OutOfMemoryError(size, before, limit)
        mem = self._grow(pool, size)
        peaks = self._peaks.get(device)
        if peaks is not None and peaks.active:
            peaks.raise_to(pool.used_bytes())
        return mem

    def _peaks_of(self, device: int) -> HighWater:
        """The high-water marks of the measurements open on ``device`` (made on first use)."""
        peaks = self._peaks.get(device)
        if peaks is None:
            peaks = self._peaks[device] = HighWater()
        return peaks

    def _fit(self, device: int) -> None:
        """Keep the pool of ``device`` within its limit: cached blocks go when it holds more;
        requests are checked (:meth:`_malloc`) while its arrays alone do (the home device's)."""
        pool = self._pool(device)
        if pool is None:
            return
        limit = pool.get_limit()
        over = bool(limit) and pool.total_bytes() > limit
        if over:
            pool.free_all_blocks()
            over = pool.total_bytes() > limit
        if device == self.home:  # a list: the allocator reads it without a lookup
            self._strict[:] = [True] if over else []

    def _grow(self, pool: Any, size: int) -> Any:
        """``pool.malloc(size)``; refused, its cached free blocks released once and retried."""
        try:
            return pool.malloc(size)
        except self.cp.cuda.memory.OutOfMemoryError:
            if not pool.free_bytes():
                raise
            self.releases += 1
            pool.free_all_blocks()
            return pool.malloc(size)

    def info(self) -> DeviceInfo:
        device = self.cp.cuda.Device().id
        info = self._infos.get(device)
        if info is None:
            info = self._infos[device] = self._info(device)
        return info

    def _info(self, device: int) -> DeviceInfo:
        return describe(self.cp, self.name, self._props(device), device)

    def device_memory(self, device: int | None = None) -> tuple[int, int]:
        with self.on_device(self.home if device is None else device):
            free, total = self.cp.cuda.runtime.memGetInfo()
        return int(total - free), int(total)

    def device_count(self) -> int:
        return int(self.cp.cuda.runtime.getDeviceCount())

    def _props(self, device: int) -> dict[str, Any]:
        props = self._properties.get(device)
        if props is None:
            props = self._properties[device] = self.cp.cuda.runtime.getDeviceProperties(device)
        return props

    def device_name(self, device: int) -> str:
        return device_name(self._props(device))

    def device_total(self, device: int) -> int:
        return int(self._props(device)["totalGlobalMem"])

    def on_device(self, device: int) -> Any:
        return self.cp.cuda.Device(device)

    def move_to(self, value: Any, device: int) -> Any:
        """A device array on another GPU copied to ``device`` (peer to peer where the GPUs
        allow it), after the work queued on its own device."""
        cp = self.cp
        if not isinstance(value, cp.ndarray) or value.device.id == device:
            return value
        with value.device:
            src = cp.ascontiguousarray(value)
            cp.cuda.get_current_stream().synchronize()
        with cp.cuda.Device(device):
            out = cp.empty(src.shape, src.dtype)
            stream = cp.cuda.get_current_stream()  # the copy and the wait on one stream,
            out.data.copy_from_device_async(src.data, src.nbytes, stream)  # also per-thread
            stream.synchronize()
        return out

    def is_device_array(self, obj: object) -> bool:
        return issubclass(type(obj), self.cp.ndarray)  # not isinstance: see HostBackend's

    def to_device(self, array: np.ndarray) -> Transfer:
        cp = self.cp
        t0 = time.perf_counter()
        region = self.host.lock(array)
        # Locking then copying beats a pageable copy (21 + 55 GB/s against 7.5), and a later
        # cell over the same array finds it locked.
        if region is not None and self.host.wait(region):
            out = cp.empty(array.shape, array.dtype,
                           order="C" if array.flags.c_contiguous else "F")
            stream = cp.cuda.get_current_stream()
            if self.host.copy_in(out, array, stream):  # asynchronous from page-locked memory
                stream.synchronize()
                return Transfer(out, time.perf_counter() - t0, int(array.nbytes), pinned=True)
        out = cp.asarray(array)
        cp.cuda.get_current_stream().synchronize()
        return Transfer(out, time.perf_counter() - t0, int(array.nbytes), pinned=False)

    def view_of(self, copy: Any, offset: int, shape: tuple[int, ...],
                strides: tuple[int, ...], dtype: np.dtype) -> Any:
        return self.cp.ndarray(shape, dtype, memptr=copy.data + offset, strides=strides)

    def watch(self, copies: list[Any], weak: Sequence[bool] = ()) -> Any:
        return DeviceFingerprints(self.cp, copies, weak)

    def changed(self, token: Any) -> list[bool]:
        return token.changed()

    def watch_queued(self, copies: list[Any]) -> Any:
        return DeviceFingerprints(self.cp, copies, [True] * len(copies), wait=False)

    def changed_queued(self, token: Any) -> Callable[[], list[bool]]:
        return token.queue_changed()

    def to_host(self, array: Any) -> np.ndarray:
        return self.cp.asnumpy(array)

    def allocation(self, array: Any) -> tuple[int, Any, int]:
        mem = array.data.mem
        whole = self.cp.ndarray((mem.size,), np.uint8, memptr=self.cp.cuda.MemoryPointer(mem, 0))
        return id(mem), whole, array.data.ptr - mem.ptr

    def to_host_into(self, value: Any, out: np.ndarray) -> None:
        if not self.is_device_array(value):
            super().to_host_into(value, out)
            return
        src = self.cp.ascontiguousarray(value)
        stream = self.cp.cuda.get_current_stream()
        if out.flags.c_contiguous and self.host.copy_out(out, src, stream):
            stream.synchronize()  # asynchronous into page-locked memory: wait for it
        else:
            src.get(out=out)

    def _pool(self, device: int | None) -> Any:
        """The pool of ``device`` if one was made (``None``: the home device's)."""
        return self.pool if device is None or device == self.home else _POOLS.get(device)

    def pool_used(self, device: int | None = None) -> int:
        pool = self._pool(device)
        return int(pool.used_bytes()) if pool is not None else 0

    def pool_held(self, device: int | None = None) -> int:
        pool = self._pool(device)
        return int(pool.total_bytes()) if pool is not None else 0

    def free_cached(self) -> int:
        """Release the cached blocks of every device's pool; return the bytes released."""
        pools = [p for d, p in _POOLS.items() if d < self.device_count()]
        before = sum(int(p.total_bytes()) for p in pools)
        self.releases += 1
        for pool in pools:
            pool.free_all_blocks()
        return before - sum(int(p.total_bytes()) for p in pools)

    def _enforce(self, nbytes: int | None, device: int) -> None:
        pool = self._pool(device)
        if pool is not None:  # otherwise pool_of sets it when the pool is made
            pool.set_limit(size=0 if nbytes is None else int(nbytes))
            self._fit(device)

    def synchronize(self) -> None:
        self.cp.cuda.get_current_stream().synchronize()

    @contextlib.contextmanager
    def track_memory(self, code_filename: str,
                     device: int | None = None) -> Iterator[_Measurement]:
        """The bytes in use in the pool of ``device`` (default: the home device) at the
        start and at their peak while the block runs, on any thread (:meth:`_malloc`)."""
        device = self.home if device is None else device
        self._fit(device)
        start = self.pool_used(device)
        m = _Measurement(start_bytes=start, peak_bytes=start)
        peaks = self._peaks_of(device)
        peaks.open(m, start)
        try:
            yield m
        finally:
            peaks.close(m)

    def watch_compiles(self, code_filename: str) -> CompileRecord:
        return CompileRecord(code_filename)

    def line_marks(self) -> EventMarks:
        return EventMarks()

    @contextlib.contextmanager
    def time_device(self) -> Iterator[_Measurement]:
        """CUDA events around the block, less the host's kernel builds inside it: the GPU
        idles while CuPy compiles between launches, and the events would count that."""
        cp = self.cp
        m = _Measurement()
        stream = cp.cuda.get_current_stream()
        start, end = cp.cuda.Event(), cp.cuda.Event(block=True)
        start.record(stream)
        with timed() as building:
            try:
                yield m
            finally:
                end.record(stream)
                m.compile_seconds = building.seconds
                with contextlib.suppress(Exception):
                    end.synchronize()
                    elapsed = cp.cuda.get_elapsed_time(start, end) / 1e3
                    m.seconds = max(0.0, elapsed - building.seconds)

    def upload_rate(self, device: int | None = None) -> float | None:
        if device is not None and device != self.home:
            return None  # measured on the home device only
        self.preheated.wait(10)  # measured at load, in about 0.3 s with the first launch
        return preheat_done.get(self.home)

    def close(self) -> None:
        thread = self._preheater
        if thread is not None:
            thread.join(30)  # its thread ends before the backend does
            if thread.is_alive():
                _log.warning("cupy_magic: the background first launch still runs after 30 s; "
                             "the backend closes without it")
        super().close()
        self.cp.cuda.set_allocator(self.cp.get_default_memory_pool().malloc)
        self._restore_flat()
        for pool in _POOLS.values():  # give back what the cells freed; live arrays keep theirs
            pool.free_all_blocks()
        self.host.close()
