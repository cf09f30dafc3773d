"""Page-locked host memory: NumPy buffers locked in the background, and reused result blocks.

Copies between the GPU and page-locked ("pinned") host memory run asynchronously at PCIe
speed; from pageable memory they go through a driver buffer on one host thread. Measured on
the H200 (``benchmarks/first_touch.py``, 8 GiB float32, two runs;
``benchmarks/results/first-touch-2026-12-02.md``):

- ``cudaHostRegister`` of touched memory in one call: 21 to 23 GB/s (0.4 s for 8 GiB); of
  untouched, freshly allocated memory 4.8 to 6.3 GB/s, because the kernel faults every page in
  first. ``cudaHostAlloc``: 2.5 GB/s.
- Registering in 128 MiB chunks is faster (37 to 57 GB/s), but a buffer registered in
  pieces breaks CuPy's own copies (``cupy.asarray`` over it does one copy across two
  registrations: "invalid argument"), so a buffer users reach is registered in one piece.

So :meth:`HostMemory.lock` registers a whole buffer on a helper thread and returns at once;
copies use it when done (until then :meth:`HostMemory.copy_in`/``copy_out`` answer False and
the caller stages rows through pinned buffers). The registration, portable (locked for every
GPU), lasts while the buffer lives. :meth:`HostMemory.empty` gives result arrays in locked
blocks given back earlier, kept up to :attr:`HostMemory.cache_limit` bytes. Only
:mod:`cupy_magic.backend.cupy` makes one, with CUDA's runtime API (``cupy.cuda.runtime``).
"""

from __future__ import annotations

import bisect
import collections
import concurrent.futures as cf
import contextlib
import mmap
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .hostbuf import best_fit, bytes_at, default_cache_limit, pages

__all__ = ["MIN_BYTES", "HostMemory", "Region"]

MIN_BYTES = 16 * 2**20  # below this a pageable copy beats locking the buffer
LOCK_THREADS = 2
STAGING_LIMIT = 2 * 2**30  # free page-locked staging buffers kept for later runs
H2D, D2H = 1, 2  # cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost
PORTABLE = 1  # cudaHostRegisterPortable (%%gpu --devices copies from it on every GPU)


@dataclass(eq=False)
class Region:
    """One host buffer ``[base, end)``, registered (or being registered) in one piece."""

    base: int
    end: int
    job: cf.Future | None = None
    failed: str = ""
    released: bool = False

    @property
    def nbytes(self) -> int:
        return self.end - self.base

    def done(self) -> bool:
        """Registered now (not pending, not failed, not undone)."""
        job = self.job
        return (job is not None and job.done() and not job.cancelled()
                and job.exception() is None and not self.released)


@dataclass(eq=False)
class _Block:
    """A buffer for gathered results; ``owner`` holds the memory, ``region`` its registration."""

    owner: np.ndarray
    region: Region
    leases: int = 0
    last_used: float = 0.0


class HostMemory:
    """Background page-locking of NumPy buffers and a cache of locked result blocks.

    Parameters
    ----------
    runtime
        CUDA's runtime API (``hostRegister``, ``hostUnregister``, ``memcpyAsync``).
    cache_limit
        Bytes of locked result blocks kept for reuse after their arrays are collected
        (default: a quarter of the host's memory).
    on_thread
        Called once in each helper thread before it locks anything (sets the CUDA device).
    """

    def __init__(self, runtime: Any, cache_limit: int | None = None,
                 on_thread: Callable[[], None] | None = None) -> None:
        self.rt = runtime
        self.cache_limit = default_cache_limit() if cache_limit is None else cache_limit
        self._on_thread = on_thread
        self._mutex = threading.RLock()
        self._bases: list[int] = []  # sorted region bases, for lookups by address
        self._regions: dict[int, Region] = {}
        self._finalizers: dict[int, weakref.finalize] = {}
        self._cache: list[_Block] = []
        self._pool: cf.ThreadPoolExecutor | None = None
        self._clock = 0.0
        self._staging: list[np.ndarray] = []  # free page-locked staging buffers
        self._returns: collections.deque[_Block] = collections.deque()  # collected leases
        self._closed = False

    # --- registry -------------------------------------------------------------------------
    def find(self, arr: np.ndarray) -> Region | None:
        """The live region that holds all of ``arr``'s bytes, if any."""
        if arr.nbytes == 0:
            return None
        lo = arr.ctypes.data
        with self._mutex:
            k = bisect.bisect_right(self._bases, lo) - 1
            if k < 0:
                return None
            region = self._regions[self._bases[k]]
        if region.failed or region.released or lo + arr.nbytes > region.end:
            return None
        return region

    def _add(self, region: Region) -> None:
        with self._mutex:
            bisect.insort(self._bases, region.base)
            self._regions[region.base] = region

    def _submit(self, region: Region) -> None:
        if region.released or self._closed or (  # undone, at unload, or under way
                region.job is not None and not region.job.cancelled()):
            return
        with self._mutex:
            if self._pool is None:
                self._pool = cf.ThreadPoolExecutor(
                    LOCK_THREADS, thread_name_prefix="cupy-magic-lock",
                    initializer=self._on_thread)
            region.job = self._pool.submit(self.rt.hostRegister, region.base, region.nbytes,
                                           PORTABLE)

    # --- locking user buffers -------------------------------------------------------------
    def lock(self, arr: np.ndarray) -> Region | None:
        """Start page-locking the buffer under ``arr`` on a helper thread; return at once.

        Returns the region, or None when the buffer is not locked: smaller than
        :data:`MIN_BYTES`, not contiguous, owned by something other than a NumPy array
        (a memory map, bytes), or refused by CUDA earlier.
        """
        found = self.find(arr)
        if found is not None:
            self._submit(found)  # a fresh result block: its rows are written, lock it now
            return found
        if arr.nbytes < MIN_BYTES or arr.dtype.hasobject or \
                not (arr.flags.c_contiguous or arr.flags.f_contiguous):
            return None  # object arrays: pointers, never copied to a device
        owner = arr
        while isinstance(owner.base, np.ndarray):
            owner = owner.base
        if owner.base is not None or not owner.flags.owndata:
            return None
        with self._mutex:
            if owner.ctypes.data in self._regions:  # refused before: do not retry
                return None
            region = Region(owner.ctypes.data, owner.ctypes.data + owner.nbytes)
            self._add(region)
            # Undone before the memory is freed: NumPy clears weak references first.
            fin = weakref.finalize(owner, self._unlock, region)
            fin.atexit = False  # at exit the process lets go of its memory anyway
            self._finalizers[region.base] = fin
        self._submit(region)
        return region

    def adopt(self, base: int, nbytes: int) -> Region | None:
        """Page-lock ``nbytes`` at ``base``, memory this process maps but did not allocate
        (a shared-memory segment of another process), in one piece, and wait for it.

        Returns the region (copies to and from views inside it then run asynchronously), or
        None where CUDA refused it. :meth:`disown` undoes it; call it before the memory is
        unmapped, since nothing here watches that memory's life.
        """
        region = Region(base, base + nbytes)
        self._add(region)
        if self.wait(region):
            return region
        self._unlock(region)
        return None

    def disown(self, region: Region) -> None:
        """Undo :meth:`adopt`: unlock the memory and forget it (safe after :meth:`close`)."""
        self._unlock(region)

    def wait(self, region: Region) -> bool:
        """Block until ``region`` is registered; False if CUDA refused it, or it was undone."""
        self._submit(region)
        if region.job is None or region.job.cancelled():
            return False
        exc = region.job.exception()
        if exc is not None:
            region.failed = f"{type(exc).__name__}: {exc}".split("\n")[0]
        return region.done()

    def locked(self, arr: np.ndarray) -> bool:
        """Whether all of ``arr`` lies in memory that is page-locked now."""
        region = self.find(arr)
        return region is not None and region.done()

    def _unlock(self, region: Region) -> None:
        """Cancel or wait for the region's job, undo the registration, forget the region."""
        already, region.released = region.released, True
        job = region.job
        if not already and job is not None and not job.cancel() and job.exception() is None:
            # The buffer is going away: a failure here has no one to report to.
            with contextlib.suppress(Exception):
                self.rt.hostUnregister(region.base)
        with self._mutex:
            if self._regions.get(region.base) is region:
                del self._regions[region.base]
                self._bases.remove(region.base)
            self._finalizers.pop(region.base, None)

    # --- copies ---------------------------------------------------------------------------
    def copy_in(self, dev: Any, host: np.ndarray, stream: Any) -> bool:
        """Queue ``host -> dev`` on ``stream`` if ``host`` is page-locked now.

        ``dev`` is a contiguous CuPy array with ``host``'s bytes and layout. Returns False
        (nothing queued) otherwise; the caller copies another way.
        """
        return self._copy(host, dev.data.ptr, stream, H2D)

    def copy_out(self, host: np.ndarray, dev: Any, stream: Any) -> bool:
        """Queue ``dev -> host`` on ``stream``; False as for :meth:`copy_in`."""
        return self._copy(host, dev.data.ptr, stream, D2H)

    def _copy(self, host: np.ndarray, dev_ptr: int, stream: Any, kind: int) -> bool:
        if host.nbytes == 0 or not (host.flags.c_contiguous or host.flags.f_contiguous):
            return False
        if not self.locked(host):
            return False
        ptr = getattr(stream, "ptr", stream)
        src, dst = (host.ctypes.data, dev_ptr) if kind == H2D else (dev_ptr, host.ctypes.data)
        self.rt.memcpyAsync(dst, src, host.nbytes, kind, ptr)
        return True

    # --- result blocks --------------------------------------------------------------------
    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A C-ordered array for gathered results: a locked block from the cache if one fits.

        Otherwise fresh memory; call :meth:`lock` once its rows are written to lock it in the
        background (touched memory registers four times faster than untouched memory, and
        doing it after the run keeps it off the copies). When the array and every view of it
        are collected, the block goes back to the cache (if locked by then).
        """
        self._handle_returns()
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        nbytes = count * dtype.itemsize
        if nbytes < MIN_BYTES or dtype.hasobject:  # a reused block holds no valid objects
            return np.empty(shape, dtype)
        block = best_fit(self._cache, nbytes, lambda b: b.region.nbytes, self._mutex)
        if block is None:
            owner = pages(nbytes)
            block = _Block(owner, Region(owner.ctypes.data, owner.ctypes.data + owner.nbytes))
            self._add(block.region)
        block.leases += 1
        lease = bytes_at(block.owner.ctypes.data, nbytes)
        weakref.finalize(lease, self._give_back, block).atexit = False
        return np.frombuffer(lease, dtype, count).reshape(shape)

    # --- staging buffers ------------------------------------------------------------------
    def staging(self, nbytes: int, touch: Callable[[np.ndarray], None] | None = None
                ) -> np.ndarray:
        """A page-locked ``uint8`` buffer of at least ``nbytes`` for staged copies.

        Reused across runs (give it back with :meth:`unstage`). A new one is NumPy memory,
        touched by ``touch`` (e.g. on several threads) and registered in one call: on the H200
        ``cudaHostAlloc`` gave 2.5 GB/s, registering touched memory 21 to 23 GB/s. Asked for
        in whole pages (what a buffer is made of), so that one given back serves a later
        request of the same pages, however few bytes of them each uses.
        """
        nbytes = -(-max(nbytes, 1) // mmap.PAGESIZE) * mmap.PAGESIZE
        buf = best_fit(self._staging, nbytes, lambda b: b.nbytes, self._mutex)
        if buf is None:
            buf = pages(nbytes)
            (touch or (lambda b: b.fill(0)))(buf)
            self.rt.hostRegister(buf.ctypes.data, buf.nbytes, PORTABLE)
        return buf

    def unstage(self, buf: np.ndarray) -> None:
        """Give back a buffer from :meth:`staging` (after the copies through it are done).

        Free buffers beyond :data:`STAGING_LIMIT` bytes are unregistered, oldest first.
        """
        with self._mutex:
            self._staging.append(buf)
            drop = []
            while sum(b.nbytes for b in self._staging) > STAGING_LIMIT and len(self._staging) > 1:
                drop.append(self._staging.pop(0))
        for old in drop:
            with contextlib.suppress(Exception):
                self.rt.hostUnregister(old.ctypes.data)

    def _release_staging(self) -> int:
        with self._mutex:
            bufs, self._staging = self._staging, []
        for buf in bufs:
            with contextlib.suppress(Exception):
                self.rt.hostUnregister(buf.ctypes.data)
        return sum(b.nbytes for b in bufs)

    def _give_back(self, block: _Block) -> None:
        """A lease was collected (called from the garbage collector, on any thread).

        Only queued here: a collection can run inside this object's own critical sections,
        and waiting for a registration must not happen inside the collector. The queue is
        handled at the next call that reads or changes the cache.
        """
        if not self._closed:  # after close nothing is registered and nothing will be reused
            self._returns.append(block)

    def _handle_returns(self) -> None:
        while self._returns:
            try:
                block = self._returns.popleft()
            except IndexError:
                return
            self._return_block(block)

    def _return_block(self, block: _Block) -> None:
        block.leases -= 1
        if block.leases:
            return
        # Kept only if locked: never locked means an interrupted run; one still locking is
        # waited for (worth keeping); one undone at close or refused is let go.
        if block.region.job is None or not self.wait(block.region):
            self._unlock(block.region)
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
        self._handle_returns()
        with self._mutex:
            blocks, self._cache = self._cache, []
        for block in blocks:
            self._unlock(block.region)
        return sum(b.region.nbytes for b in blocks) + self._release_staging()

    def stats(self) -> dict[str, int]:
        """Bytes page-locked now (user buffers, result blocks, free staging buffers), bytes of
        result blocks cached for reuse, and bytes of free staging buffers."""
        self._handle_returns()
        with self._mutex:
            regions = list(self._regions.values())
            cached = sum(b.region.nbytes for b in self._cache)
            n_cached = len(self._cache)
            staging = sum(b.nbytes for b in self._staging)
        locked = sum(r.nbytes for r in regions if r.done()) + staging
        return {"locked_bytes": locked, "cached_bytes": cached, "cached_blocks": n_cached,
                "staging_bytes": staging}

    def close(self) -> None:
        """Undo every registration and free the cache (at unload)."""
        self._closed = True
        if self._pool is not None:  # drop the queued registrations before waiting for any
            self._pool.shutdown(wait=False, cancel_futures=True)
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
