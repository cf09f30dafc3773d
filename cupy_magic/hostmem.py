"""Page-locked host memory: NumPy buffers locked chunk by chunk, and a cache of locked blocks.

Copies between the GPU and page-locked ("pinned") host memory run asynchronously at PCIe
speed; from pageable memory they go through a driver buffer on one host thread. Measured on
the H200 (``benchmarks/first_touch.py``, 8 GiB): ``cudaHostRegister`` of touched memory in one
call 21 GB/s, in 128 MiB chunks from 4 threads 48 GB/s; of untouched (freshly allocated)
memory 4.8 GB/s, because the kernel faults every page in first.

- :meth:`HostMemory.lock` registers the buffer under a NumPy array in :data:`CHUNK_BYTES`
  chunks on helper threads, in order, so the first rows can be copied while later chunks are
  still being locked. The registration is kept while the buffer lives (a second cell finds it
  locked) and undone when the buffer is collected, or at :meth:`HostMemory.close`.
- One copy may not span two registrations (CUDA answers "invalid argument"):
  :meth:`HostMemory.copy_in` and :meth:`HostMemory.copy_out` split copies at chunk boundaries.
- :meth:`HostMemory.empty` gives a result array backed by a locked block: one given back
  earlier (its array was collected) when the cache has one of a fitting size, else fresh
  memory whose chunks are touched and locked on the helper threads. Blocks whose arrays are
  collected go back to the cache, up to :attr:`HostMemory.cache_limit` bytes;
  :meth:`HostMemory.release_cached` gives them back to the system.

Only :mod:`cupy_magic._backend_cupy` creates a :class:`HostMemory`; it needs CUDA's runtime
API (``cupy.cuda.runtime``) and nothing else from CuPy.
"""

from __future__ import annotations

import bisect
import concurrent.futures as cf
import contextlib
import ctypes
import itertools
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["CHUNK_BYTES", "LOCK_THREADS", "MIN_BYTES", "HostMemory", "Region"]

CHUNK_BYTES = 128 * 2**20
LOCK_THREADS = 4  # 4 threads locked chunks fastest on the H200 (48 GB/s; 1: 37, 8: 42)
AHEAD = 2 * LOCK_THREADS  # chunks queued ahead of the one a copy waits for
MIN_BYTES = 16 * 2**20  # below this a pageable copy beats locking the buffer
PAGE = 4096
H2D, D2H = 1, 2  # cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost


def _default_cache_limit() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


@dataclass(eq=False)
class Region:
    """One host buffer ``[base, end)`` that is locked, or being locked, chunk by chunk.

    Chunk ``i`` spans ``[starts[i], starts[i + 1])``; inner boundaries fall on pages, so no
    page belongs to two registrations.
    """

    base: int
    end: int
    starts: list[int]
    jobs: list[cf.Future | None]
    touch: bool = False
    failed: str = ""
    released: bool = False

    @classmethod
    def over(cls, base: int, nbytes: int, touch: bool = False) -> Region:
        end = base + nbytes
        aligned = -(-base // PAGE) * PAGE
        starts = [base, *range(aligned + CHUNK_BYTES, end, CHUNK_BYTES)]
        return cls(base, end, starts, [None] * len(starts), touch)

    @property
    def nbytes(self) -> int:
        return self.end - self.base

    def chunk(self, i: int) -> tuple[int, int]:
        return self.starts[i], self.starts[i + 1] if i + 1 < len(self.starts) else self.end

    def covering(self, lo: int, hi: int) -> range:
        """Indices of the chunks that overlap ``[lo, hi)``."""
        first = bisect.bisect_right(self.starts, lo) - 1
        last = bisect.bisect_left(self.starts, hi) - 1
        return range(max(first, 0), max(last, first) + 1)

    def pieces(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """``[lo, hi)`` cut where a chunk starts: each piece lies in one registration."""
        cuts = [s for s in self.starts if lo < s < hi]
        edges = [lo, *cuts, hi]
        return [(p, q) for p, q in itertools.pairwise(edges) if q > p]

    def done(self) -> bool:
        """Every chunk locked (no job pending, none failed)."""
        if self.failed or self.released:
            return False
        for job in self.jobs:
            if job is None or not job.done() or job.cancelled() or job.exception() is not None:
                return False
        return True


@dataclass(eq=False)
class _Block:
    """A locked buffer for results; ``owner`` holds the memory, ``region`` its registration."""

    owner: np.ndarray
    region: Region
    leases: int = 0
    last_used: float = field(default=0.0)


def _bytes_at(ptr: int, nbytes: int) -> Any:
    return (ctypes.c_char * nbytes).from_address(ptr)


class HostMemory:
    """Chunked page-locking of NumPy buffers and a cache of locked result blocks.

    Parameters
    ----------
    runtime
        CUDA's runtime API: ``hostRegister``, ``hostUnregister``, ``memcpyAsync`` as in
        ``cupy.cuda.runtime``.
    threads
        Helper threads that lock chunks.
    cache_limit
        Bytes of locked result blocks kept for reuse after their arrays are collected
        (default: a quarter of the host's memory).
    """

    def __init__(self, runtime: Any, threads: int = LOCK_THREADS,
                 cache_limit: int | None = None, on_thread: Callable[[], None] | None = None
                 ) -> None:
        self.rt = runtime
        self.threads = threads
        self.cache_limit = _default_cache_limit() if cache_limit is None else cache_limit
        self._on_thread = on_thread
        self._mutex = threading.RLock()
        self._bases: list[int] = []  # sorted region bases, for lookups by address
        self._regions: dict[int, Region] = {}
        self._finalizers: dict[int, weakref.finalize] = {}
        self._cache: list[_Block] = []
        self._pool: cf.ThreadPoolExecutor | None = None
        self._clock = 0.0

    # --- registry -------------------------------------------------------------------------
    def find(self, arr: np.ndarray) -> Region | None:
        """The live region that holds all of ``arr``'s bytes, if any."""
        if arr.nbytes == 0:
            return None
        lo = arr.ctypes.data
        hi = lo + arr.nbytes
        with self._mutex:
            k = bisect.bisect_right(self._bases, lo) - 1
            if k < 0:
                return None
            region = self._regions[self._bases[k]]
        if region.failed or region.released or hi > region.end:
            return None
        return region

    def _add(self, region: Region) -> None:
        with self._mutex:
            bisect.insort(self._bases, region.base)
            self._regions[region.base] = region

    def _executor(self) -> cf.ThreadPoolExecutor:
        if self._pool is None:
            self._pool = cf.ThreadPoolExecutor(self.threads, thread_name_prefix="cupy-magic-lock",
                                               initializer=self._on_thread)
        return self._pool

    def _lock_chunk(self, region: Region, i: int) -> None:
        p, q = region.chunk(i)
        if region.touch:  # fresh memory: fault its pages in here, on several threads
            np.frombuffer(_bytes_at(p, q - p), np.uint8).fill(0)
        self.rt.hostRegister(p, q - p, 0)

    def _submit(self, region: Region, upto: int) -> None:
        """Queue the chunks before ``upto`` that are not queued yet.

        Chunks are queued a window ahead of the copies that wait for them, so that the
        chunks of several buffers (a batch's input and its result) lock in step.
        """
        pool = self._executor()
        for i in range(min(upto, len(region.jobs))):
            job = region.jobs[i]
            if job is None or job.cancelled():
                region.jobs[i] = pool.submit(self._lock_chunk, region, i)

    # --- locking user buffers -------------------------------------------------------------
    def lock(self, arr: np.ndarray) -> Region | None:
        """Start locking the buffer under ``arr`` (chunks lock on helper threads).

        Returns the region, or None when the buffer is not locked: smaller than
        :data:`MIN_BYTES`, not contiguous, owned by something other than a NumPy array
        (a memory map, bytes), or refused by CUDA earlier.
        """
        found = self.find(arr)
        if found is not None:
            if not found.done():
                self._submit(found, AHEAD)  # jobs cancelled by an interrupted run start again
            return found
        if arr.nbytes < MIN_BYTES or not (arr.flags.c_contiguous or arr.flags.f_contiguous):
            return None
        owner = arr
        while isinstance(owner.base, np.ndarray):
            owner = owner.base
        if owner.base is not None or not owner.flags.owndata:
            return None
        with self._mutex:
            if owner.ctypes.data in self._regions:  # one that failed: do not retry
                return None
            region = Region.over(owner.ctypes.data, owner.nbytes)
            self._add(region)
            # Undone before the memory is freed: NumPy clears weak references first.
            fin = weakref.finalize(owner, self._forget, region)
            fin.atexit = False  # at exit the process lets go of its memory anyway
            self._finalizers[region.base] = fin
        self._submit(region, AHEAD)
        return region

    def wait(self, region: Region, lo: int, hi: int) -> bool:
        """Block until the chunks over ``[lo, hi)`` are locked; False if locking failed."""
        chunks = region.covering(lo, hi)
        self._submit(region, chunks.stop + AHEAD)
        for i in chunks:
            job = region.jobs[i]
            if job is None or job.cancelled():
                self._submit(region, chunks.stop + AHEAD)
                job = region.jobs[i]
            assert job is not None
            exc = job.exception()
            if exc is not None:
                region.failed = f"{type(exc).__name__}: {exc}".split("\n")[0]
                return False
        return not region.failed

    def locked(self, arr: np.ndarray) -> bool:
        """Whether all of ``arr`` lies in memory that is locked now (no job pending)."""
        region = self.find(arr)
        return region is not None and region.done()

    def _unlock(self, region: Region) -> None:
        """Cancel pending chunk jobs, wait for running ones, unregister the locked chunks."""
        region.released = True
        for job in region.jobs:
            if job is not None:
                job.cancel()
        for i, job in enumerate(region.jobs):
            if job is None or job.cancelled():
                continue
            if job.exception() is not None:  # a chunk that failed to lock is not registered
                continue
            # The buffer is going away: a failure here has no one to report to.
            with contextlib.suppress(Exception):
                self.rt.hostUnregister(region.chunk(i)[0])
        with self._mutex:
            if self._regions.get(region.base) is region:
                del self._regions[region.base]
                self._bases.remove(region.base)
            self._finalizers.pop(region.base, None)

    def _forget(self, region: Region) -> None:
        self._unlock(region)

    # --- copies ---------------------------------------------------------------------------
    def copy_in(self, dev: Any, host: np.ndarray, stream: Any) -> bool:
        """Queue ``host -> dev`` on ``stream`` from locked memory, piece by piece.

        ``dev`` is a contiguous CuPy array with ``host``'s bytes and layout. Returns False
        (nothing queued) when ``host`` is not in a locked region; the caller copies another way.
        """
        return self._copy(host, dev.data.ptr, stream, H2D)

    def copy_out(self, host: np.ndarray, dev: Any, stream: Any) -> bool:
        """Queue ``dev -> host`` on ``stream`` into locked memory; False as for :meth:`copy_in`."""
        return self._copy(host, dev.data.ptr, stream, D2H)

    def _copy(self, host: np.ndarray, dev_ptr: int, stream: Any, kind: int) -> bool:
        if not (host.flags.c_contiguous or host.flags.f_contiguous):
            return False
        region = self.find(host)
        if region is None:
            return False
        lo = host.ctypes.data
        hi = lo + host.nbytes
        ptr = getattr(stream, "ptr", stream)
        for p, q in region.pieces(lo, hi):
            # Each piece is copied once its chunk is locked, while later chunks still lock.
            # If one fails, the caller copies everything another way, on the same stream.
            if not self.wait(region, p, q):
                return False
            if kind == H2D:
                self.rt.memcpyAsync(dev_ptr + (p - lo), p, q - p, H2D, ptr)
            else:
                self.rt.memcpyAsync(p, dev_ptr + (p - lo), q - p, D2H, ptr)
        return True

    # --- result blocks --------------------------------------------------------------------
    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A C-ordered array in locked memory, reused from the cache when one fits.

        A fresh block's chunks are touched and locked on the helper threads; wait for them
        with :meth:`wait` (copies through :meth:`copy_out` do). When its array and every view
        of it are collected, the block goes back to the cache.
        """
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        nbytes = count * dtype.itemsize
        if nbytes < MIN_BYTES:
            return np.empty(shape, dtype)
        block = self._take(nbytes)
        if block is None:
            owner = np.empty(max(nbytes, 1), np.uint8)
            region = Region.over(owner.ctypes.data, owner.nbytes, touch=True)
            block = _Block(owner, region)
            self._add(region)
            self._submit(region, AHEAD)
        block.leases += 1
        lease = _bytes_at(block.owner.ctypes.data, max(nbytes, 1))
        weakref.finalize(lease, self._give_back, block).atexit = False
        return np.frombuffer(lease, dtype, count).reshape(shape)

    def _take(self, nbytes: int) -> _Block | None:
        with self._mutex:
            fits = [b for b in self._cache if nbytes <= b.region.nbytes <= 2 * max(nbytes, 1)]
            if not fits:
                return None
            best = min(fits, key=lambda b: b.region.nbytes)
            self._cache.remove(best)
            return best

    def _give_back(self, block: _Block) -> None:
        block.leases -= 1
        if block.leases:
            return
        if not block.region.done():
            self._unlock(block.region)  # an interrupted run: not worth keeping
            return
        with self._mutex:
            self._clock += 1
            block.last_used = self._clock
            self._cache.append(block)
            held = sum(b.region.nbytes for b in self._cache)
            evict = []
            while held > self.cache_limit and self._cache:
                oldest = min(self._cache, key=lambda b: b.last_used)
                self._cache.remove(oldest)
                evict.append(oldest)
                held -= oldest.region.nbytes
        for old in evict:
            self._unlock(old.region)

    def release_cached(self) -> int:
        """Unlock and free the cached result blocks; return the bytes given back."""
        with self._mutex:
            blocks, self._cache = self._cache, []
        for block in blocks:
            self._unlock(block.region)
        return sum(b.region.nbytes for b in blocks)

    def stats(self) -> dict[str, int]:
        """Bytes locked now (user buffers and result blocks) and bytes cached for reuse."""
        with self._mutex:
            regions = list(self._regions.values())
            cached = sum(b.region.nbytes for b in self._cache)
        locked = sum(r.nbytes for r in regions if r.done())
        return {"locked_bytes": locked, "cached_bytes": cached, "cached_blocks": len(self._cache)}

    def close(self) -> None:
        """Undo every registration and free the cache (at unload)."""
        self.release_cached()
        with self._mutex:
            regions = list(self._regions.values())
            finalizers = list(self._finalizers.values())
        for fin in finalizers:
            fin.detach()
        for region in regions:
            self._unlock(region)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
