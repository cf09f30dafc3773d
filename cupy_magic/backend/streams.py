"""Transfer engines of the batch executor: CUDA streams on a GPU, plain copies on the host.

An engine owns the slots (one stream each), moves batch rows in and out, and says when a
slot may be reused. The executor in :mod:`cupy_magic.run.batched` is the same for both.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from ..lifecycle import on_unload
from .base import Backend
from .cupy import CupyBackend
from .hostmem import D2H
from .timeline import Timeline
from .writes import host_copy_of

__all__ = ["make_engine"]

# Host copies into pinned buffers: one thread reaches 5-9 GB/s, 16 about 33 (measured on the
# H200 in the first session); with
# 16 threads a first touch streamed 25 GB/s on the H200, with 8 threads 20.
STAGE_THREADS = min(16, os.cpu_count() or 1)
_PARALLEL_MIN = 4 * 2**20
Allocate = Callable[..., np.ndarray]  # (shape, dtype, empty=np.empty) -> array


class HostEngine(Timeline):
    """The host backend: batches run one after the other, copies are plain NumPy copies."""

    staged_batches = 0

    def __init__(self, streams: int, allocate: Allocate, timed: bool = False,
                 slow: float = 1.0) -> None:
        self.staged_why: dict[str, str] = {}  # nothing is staged on the host
        self.slots = streams
        self._allocate = allocate
        self._init_timeline(timed)
        # a device the host backend stands for may run slow: each batch takes `slow` times
        # as long (HostBackend.slow), so that dealing by throughput shows without a GPU
        self.slow, self._began = slow, [0.0] * streams

    def start(self, slot: int) -> None:
        super().start(slot)
        self._began[slot] = time.perf_counter()

    def record(self, slot: int) -> None:
        if self.slow > 1:
            time.sleep((self.slow - 1) * (time.perf_counter() - self._began[slot]))
        super().record(slot)

    def done(self, slot: int) -> bool:
        """Whether the slot's last batch is finished (on the host: always, once recorded)."""
        return True

    @contextlib.contextmanager
    def on(self, slot: int) -> Iterator[None]:
        yield

    def upload(self, slot: int, name: str, arr: np.ndarray, a: int, b: int,
               dtype: np.dtype) -> np.ndarray:
        return host_copy_of(arr, slice(a, b), dtype)

    def download(self, slot: int, name: str, value: Any, out: np.ndarray, a: int, b: int) -> None:
        np.copyto(out[a:b], np.asarray(value))

    def allocate(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        return self._allocate(shape, np.dtype(dtype), np.empty)

    def small_rows(self, key: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        return np.empty(shape, dtype)

    def download_small(self, slot: int, value: Any, out: np.ndarray) -> None:
        np.copyto(out, np.asarray(value))

    def finish_locking(self, arr: np.ndarray) -> None:
        pass

    def copy_home(self, dst: np.ndarray, src: np.ndarray) -> None:
        """Copy gathered rows ``src`` into the user's array ``dst`` (same shape and dtype)."""
        np.copyto(dst, src)

    def settle(self, arr: np.ndarray, dtype: np.dtype) -> None:
        pass

    def direct(self, arr: np.ndarray, dtype: np.dtype) -> bool:
        return False

    def warm(self, rows: int, peak_row: float,
             buffers: dict[str, tuple[np.ndarray, int, np.dtype]],
             slots: Iterable[int] | None = None) -> None:
        pass

    def _mark(self, slot: int) -> float:
        return time.perf_counter()

    def _seconds(self, a: float, b: float) -> float:
        return b - a

    def wait(self, slot: int) -> None:
        pass

    def drain(self, quiet: bool = False) -> None:
        pass

    def close(self) -> None:
        pass


# Streams are kept per device across cells: each has its own arena in CuPy's pool, and a
# destroyed stream would strand the blocks cached there. Released at unload.
_streams: dict[int, tuple[Any, list[Any]]] = {}


def _release_streams() -> None:
    for pool, streams in _streams.values():
        for s in streams:
            s.synchronize()
            pool.free_all_blocks(stream=s)
    _streams.clear()


def batch_streams(device: int) -> list[Any]:
    """The streams batched cells have used on ``device`` (each has its own pool arena)."""
    return list(_streams.get(device, (None, []))[1])


def _get_streams(be: CupyBackend, k: int) -> list[Any]:
    dev = be.cp.cuda.Device().id  # streams belong to the device current when made
    if not _streams:
        on_unload(_release_streams)
    _pool, streams = _streams.setdefault(dev, (be.pool_of(dev), []))
    while len(streams) < k:
        streams.append(be.cp.cuda.Stream(non_blocking=True))
    return streams[:k]


class CupyEngine(Timeline):
    """CuPy: non-blocking streams, page-locked host memory, asynchronous copies, events.

    An input a cell reads for the first time goes through per-slot pinned staging buffers
    filled by several host threads, and is page-locked on a helper thread after the run
    (:mod:`cupy_magic.backend.hostmem`; kept while the array lives, so a second cell copies straight
    from it). Inputs that are cast or not C-ordered are staged in every batch. Gathered
    results go into locked blocks reused across cells; a fresh block is filled through
    staging and locked after the run too.
    """

    def __init__(self, be: CupyBackend, streams: int, allocate: Allocate,
                 timed: bool = False) -> None:
        self.be, self.cp, self.host = be, be.cp, be.host
        self.slots = streams
        self.streams = _get_streams(be, streams)
        self.events: list[Any] = [None] * streams
        self.pending: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(streams)]
        self.staging: dict[tuple[int, str], np.ndarray] = {}
        self._allocate = allocate
        self._copier: cf.ThreadPoolExecutor | None = None
        self._staged_this: set[int] = set()
        self._staged: set[int] = set()  # batches (by number) with a staged copy
        self.staged_why: dict[str, str] = {}  # what was staged, and why (the report says)
        self._init_timeline(timed)

    @property
    def staged_batches(self) -> int:
        return len(self._staged)

    # --- page-locking -------------------------------------------------------------------
    @staticmethod
    def _directable(arr: np.ndarray, dtype: np.dtype) -> bool:
        """Whether ``arr``'s batches can copy straight from it once it is page-locked."""
        return arr.dtype == dtype and arr.flags.c_contiguous

    def direct(self, arr: np.ndarray, dtype: np.dtype) -> bool:
        """Whether ``arr``'s batches copy straight from page-locked memory (no staging)."""
        return self._directable(arr, dtype) and self.host.locked(arr)

    def finish_locking(self, arr: np.ndarray) -> None:
        """Wait for a page-locking of ``arr`` still under way (one a cell started).

        A run never starts one: registering while the batches stream slows the staged copies
        (20.7 against 26.5 GB/s on the H200, benchmarks/first_touch.py).
        """
        region = self.host.find(arr)
        if region is not None and not region.done():
            self.host.wait(region)

    def settle(self, arr: np.ndarray, dtype: np.dtype) -> None:
        """After the run: page-lock ``arr`` (an input or a fresh result block) in the
        background, if its batches could then copy straight from it."""
        if self._directable(arr, dtype):
            self.host.lock(arr)

    # --- buffers ------------------------------------------------------------------------
    def _buffer(self, slot: int, key: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        buf = self.staging.get((slot, key))
        if buf is None or buf.nbytes < nbytes:
            if buf is not None:
                # The slot's stream may still copy through it, and its staged rows may still
                # wait to be copied out: finish both before anyone else may take it.
                self.wait(slot)
                self.host.unstage(buf)
            buf = self.host.staging(nbytes, touch=self._touch)
            self.staging[(slot, key)] = buf
        return buf[:nbytes].view(dtype).reshape(shape)

    def _split(self, arr: np.ndarray, job: Callable[[int, int], Any]) -> None:
        """Run ``job(p, q)`` over row ranges of ``arr`` on the staging threads (one call when
        ``arr`` is small)."""
        if arr.nbytes < _PARALLEL_MIN or arr.ndim == 0 or len(arr) < 2:
            job(0, len(arr) if arr.ndim else 1)
            return
        if self._copier is None:
            self._copier = cf.ThreadPoolExecutor(STAGE_THREADS,
                                                 thread_name_prefix="cupy-magic-stage")
        edges = np.linspace(0, len(arr), min(STAGE_THREADS, len(arr)) + 1).astype(int)
        for done in [self._copier.submit(job, p, q) for p, q in itertools.pairwise(edges)]:
            done.result()

    def copy_home(self, dst: np.ndarray, src: np.ndarray) -> None:
        """Copy gathered rows ``src`` into the user's array ``dst`` (same shape and dtype) on
        the staging threads."""
        self._copy(dst, src)

    def _touch(self, buf: np.ndarray) -> None:
        """Fault a fresh buffer's pages in on several threads (before it is page-locked)."""
        self._split(buf, lambda p, q: buf[p:q].fill(0))

    def _copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        if dst.ndim == 0:
            np.copyto(dst, src, casting="same_kind")
            return
        self._split(dst, lambda p, q: np.copyto(dst[p:q], src[p:q], casting="same_kind"))

    # --- one batch ----------------------------------------------------------------------
    @contextlib.contextmanager
    def on(self, slot: int) -> Iterator[None]:
        with self.streams[slot]:
            yield

    def upload(self, slot: int, name: str, arr: np.ndarray, a: int, b: int,
               dtype: np.dtype) -> Any:
        dev = self.cp.empty(arr[a:b].shape, dtype)  # from this stream's arena
        return self.upload_into(slot, name, arr, a, b, dev)

    def upload_into(self, slot: int, name: str, arr: np.ndarray, a: int, b: int,
                    dev: Any) -> Any:
        """Queue rows ``a:b`` of ``arr`` into the device array ``dev`` (C-ordered, of their
        shape, in the dtype they move in) on the slot's stream, allocating nothing on the
        device: a replayed graph reads its inputs at the addresses it was captured with."""
        s = self.streams[slot]
        host, dtype = arr[a:b], dev.dtype
        if host.dtype == dtype and host.flags.c_contiguous and self.host.copy_in(dev, host, s):
            return dev  # asynchronous, from page-locked memory
        buf = self._buffer(slot, "in:" + name, host.shape, dtype)
        self._copy(buf, host)
        dev.set(buf, stream=s)
        self._staged_this.add(slot)
        if name not in self.staged_why:
            self.staged_why[name] = (f"input cast to {dtype}" if host.dtype != dtype else
                                     "input not C-contiguous" if not host.flags.c_contiguous
                                     else "input not page-locked (yet)")
        return dev

    def download(self, slot: int, name: str, value: Any, out: np.ndarray, a: int, b: int) -> None:
        s = self.streams[slot]
        if isinstance(value, np.ndarray):
            np.copyto(out[a:b], value)
            return
        if not value.flags.c_contiguous:
            value = self.cp.ascontiguousarray(value)  # on this stream, before the copy
        # The pool reuses value's memory only for later work on this stream: after the copy.
        if self.host.copy_out(out[a:b], value, s):
            return
        buf = self._buffer(slot, "out:" + name, out[a:b].shape, out.dtype)
        value.get(stream=s, out=buf, blocking=False)
        self.pending[slot].append((out[a:b], buf))
        self._staged_this.add(slot)
        self.staged_why.setdefault(name, "result in new host memory")

    def allocate(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A full-length result array in page-locked memory (a block reused across cells)."""
        return self._allocate(shape, np.dtype(dtype), self.host.empty)

    def small_rows(self, key: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A small page-locked host array for the run (``--reduce`` partials, a row per
        batch, made once per run): a staging buffer, given back at :meth:`close`."""
        return self._buffer(-1, "rows:" + key, shape, np.dtype(dtype))

    def download_small(self, slot: int, value: Any, out: np.ndarray) -> None:
        """Copy the device array ``value`` into ``out`` (from :meth:`small_rows`, its shape)
        on the slot's stream: no staging, nothing for the report."""
        if not value.flags.c_contiguous:
            value = self.cp.ascontiguousarray(value)  # on this stream, before the copy
        if value.nbytes:
            self.host.rt.memcpyAsync(out.ctypes.data, value.data.ptr, value.nbytes, D2H,
                                     self.streams[slot].ptr)

    def warm(self, rows: int, peak_row: float,
             buffers: dict[str, tuple[np.ndarray, int, np.dtype]],
             slots: Iterable[int] | None = None) -> None:
        """Grow each stream's pool arena, and the staging buffers still needed, before the loop.

        Pool growth (cudaMalloc) and pinned allocation synchronise the device. ``buffers``
        maps ``"in:x"`` / ``"out:y"`` to the host array, its bytes per row on the device and
        the dtype on the device; ``slots``: those to warm (default: every slot).
        """
        per_batch = int(rows * peak_row)
        slots = list(range(self.slots) if slots is None else slots)
        for slot in slots:
            if per_batch > 0:
                with self.streams[slot]:
                    block = self.cp.empty(per_batch, np.uint8)
                    del block
        for slot in slots:
            for key, (arr, row_bytes, dtype) in buffers.items():
                if not self.direct(arr, dtype):  # staged (until locked, or in every batch)
                    self._buffer(slot, key, (rows * row_bytes,), np.dtype(np.uint8))

    def _mark(self, slot: int) -> Any:
        """A timing event recorded on the slot's stream (only for ``timed`` runs).

        The GPU writes a timing event's time only once the work queued ahead of it is done,
        on every stream: on the H200 a second cell streamed 36.6 GB/s when every batch had
        two of them, 47.9 GB/s with none and 42.4 with --timeline (benchmarks/stream_bench.py,
        where the slot waits now use events without timing).
        """
        event = self.cp.cuda.Event(block=True)
        event.record(self.streams[slot])
        return event

    def _seconds(self, a: Any, b: Any) -> float:
        return self.cp.cuda.get_elapsed_time(a, b) / 1e3

    def record(self, slot: int) -> None:
        """Mark the end of the slot's batch with an event the host waits on to reuse the slot."""
        batch = self._end(slot)
        event = self.cp.cuda.Event(block=True, disable_timing=True)
        event.record(self.streams[slot])
        self.events[slot] = event
        if slot in self._staged_this:
            self._staged.add(batch)
            self._staged_this.discard(slot)

    def done(self, slot: int) -> bool:
        """Whether the slot's last batch is finished on the device (does not wait)."""
        event = self.events[slot]
        return event is None or bool(event.done)  # cupy.cuda.Event.done: cudaEventQuery

    def wait(self, slot: int) -> None:
        """Block until the slot's last batch is done, then finish its staged copies."""
        event = self.events[slot]
        if event is not None:
            # A blocking-sync event: the host sleeps instead of spinning. Polling it was no
            # faster on the H200 (36.6 against 36.7 GB/s in a second cell).
            event.synchronize()
        for out, buf in self.pending[slot]:
            self._copy(out, buf)
        self.pending[slot].clear()

    def drain(self, quiet: bool = False) -> None:
        for slot in range(self.slots):
            if not quiet:
                self.wait(slot)
                continue
            self.pending[slot].clear()
            # Draining after a failure: a broken device must not hide the cell's own error.
            with contextlib.suppress(self.cp.cuda.runtime.CUDARuntimeError):
                self.streams[slot].synchronize()

    def close(self) -> None:
        if self._copier is not None:
            self._copier.shutdown(wait=True)
        for s in self.streams:  # drained already, unless a second Ctrl-C cut the drain short
            with contextlib.suppress(self.cp.cuda.runtime.CUDARuntimeError):
                s.synchronize()
        for buf in self.staging.values():  # no stream reads them now: free to reuse
            self.host.unstage(buf)
        self.staging.clear()
        self.events = [None] * self.slots


def make_engine(be: Backend, streams: int, allocate: Allocate,
                timed: bool = False) -> Any:
    """The engine for the live backend on its current device; ``timed`` records each
    batch's start and end."""
    if isinstance(be, CupyBackend):
        return CupyEngine(be, streams, allocate, timed)
    return HostEngine(streams, allocate, timed)
