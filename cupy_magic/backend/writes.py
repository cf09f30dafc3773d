"""Whether a cell changed an input's device copy, whatever name it wrote through.

A cell changes an input in place through its own name (``x[0] = 1``), which the cell's
source shows, but also through another: an alias (``y = x; y += 1``), a view
(``r = x[0]; r[:] = 0``) or a function (``def center(a): a -= a.mean()``, then
``center(x)``). A plain cell leaves ``x`` changed in all of them; so must a ``%%gpu`` cell,
so the run looks at each input's device copy after the cell instead of trusting the source.

On the CPU fallback the "device copy" is a NumPy copy of the user's array: its bytes are
summed by CRC-32 and Adler-32 (:func:`host_checksum`, zlib, 64 bits in all) after the copy and
after the cell; comparing the copy with the user's array instead would take a change the cell
made to that array through another reference (``d["a"][0] = 5``) for one of the copy, and
write the stale copy back. On a GPU the device
copy's bytes are summed into a 64-bit fingerprint right after the upload and again after
the cell (:data:`FINGERPRINT_KERNEL`, one pass over the copy in device memory, no
temporaries); two different contents give the same fingerprint with a chance of about one
in 2**64. :func:`fingerprint_reference` is the same sum in NumPy.
"""

from __future__ import annotations

import functools
import weakref
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["FINGERPRINT_KERNEL", "DeviceFingerprints", "fingerprint_reference", "holders",
           "host_changed", "host_checksum", "host_copy_of", "host_mark"]


def holders(copies: Sequence[Any], weak: Sequence[bool] = ()) -> list[Callable[[], Any]]:
    """What a watch keeps of each of ``copies``: a weak reference where ``weak`` says so (the
    copy goes when the cell drops it, and reads ``None`` after), else a strong one."""
    weak = list(weak) + [False] * (len(copies) - len(weak))
    return [weakref.ref(c) if w else (lambda c=c: c) for c, w in zip(copies, weak, strict=True)]


def host_checksum(arr: np.ndarray) -> tuple[int, int]:
    """CRC-32 and Adler-32 of the bytes of ``arr`` in memory (a packed copy is read as it
    is; another is packed first), about 2 GB/s together on one core."""
    data = arr if arr.flags.c_contiguous or arr.flags.f_contiguous else np.ascontiguousarray(arr)
    view = memoryview(data.reshape(-1, order="A").view(np.uint8)) if data.size else b""
    return zlib.crc32(view), zlib.adler32(view)


def host_copy_of(arr: np.ndarray, rows: slice | None = None, dtype: Any = None) -> np.ndarray:
    """The CPU fallback's "upload" of ``arr[rows]`` (all of it without ``rows``: a 0-d array
    has no rows; cast to ``dtype``): a copy, so that the cell's in-place changes do not reach
    the user's array, read-only where ``arr`` is, so that a write raises NumPy's error as on
    the user's array."""
    out = np.array(arr if rows is None else arr[rows], dtype=dtype,
                   order="K" if dtype is None else "C", copy=True)
    out.flags.writeable = bool(arr.flags.writeable)
    return out


def host_mark(arr: np.ndarray) -> Any:
    """What :func:`host_changed` compares ``arr`` with later: its checksums, or a copy where
    its items are references (NumPy's ``StringDType``: no bytes to sum)."""
    if arr.dtype.hasobject or arr.dtype.kind == "T":
        return arr.copy()
    return host_checksum(arr)


def host_changed(arr: np.ndarray, mark: Any) -> bool:
    """Whether ``arr`` differs from when :func:`host_mark` gave ``mark``."""
    if isinstance(mark, np.ndarray):
        return not np.array_equal(arr, mark)
    return host_checksum(arr) != mark


# The fingerprint of the bytes p[0 .. n): the sum, modulo 2**64, of mix(w_i ^ (i * GOLDEN))
# over the n // 8 words w_i (little-endian), then of mix(b_j ^ ((j + 1) << 56) ^ T) over the
# last n % 8 bytes b_j (T a constant), with mix splitmix64's finaliser: a sum of mixed
# (value, place) pairs, so that a changed word or two swapped words change it.
FINGERPRINT_KERNEL = r"""
__device__ __forceinline__ unsigned long long cm_mix(unsigned long long v) {
    v ^= v >> 30; v *= 0xBF58476D1CE4E5B9ULL;
    v ^= v >> 27; v *= 0x94D049BB133111EBULL;
    return v ^ (v >> 31);
}
extern "C" __global__ void cupy_magic_fingerprint(
        const unsigned char* p, unsigned long long n, unsigned long long* out) {
    const unsigned long long* w = (const unsigned long long*)p;
    unsigned long long words = n >> 3, acc = 0;
    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < words; i += step) {
        acc += cm_mix(w[i] ^ (i * 0x9E3779B97F4A7C15ULL));
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        for (unsigned long long j = words << 3; j < n; ++j) {
            acc += cm_mix((unsigned long long)p[j] ^ ((j - (words << 3) + 1) << 56)
                          ^ 0xD1B54A32D192ED03ULL);
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        acc += __shfl_down_sync(0xffffffffu, acc, offset);
    }
    // one atomic per block, not per warp: thousands on one word queue up in L2
    __shared__ unsigned long long warps[32];
    if ((threadIdx.x & 31) == 0) {
        warps[threadIdx.x >> 5] = acc;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long sum = 0;
        for (unsigned int k = 0; k < (blockDim.x + 31) / 32; ++k) {
            sum += warps[k];
        }
        atomicAdd(out, sum);
    }
}
"""

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_TAIL = np.uint64(0xD1B54A32D192ED03)


def _mix(v: np.ndarray) -> np.ndarray:
    v = v ^ (v >> np.uint64(30))
    v = v * np.uint64(0xBF58476D1CE4E5B9)
    v = v ^ (v >> np.uint64(27))
    v = v * np.uint64(0x94D049BB133111EB)
    return v ^ (v >> np.uint64(31))


def fingerprint_reference(data: Any) -> int:
    """:data:`FINGERPRINT_KERNEL`'s sum over the bytes of ``data`` (a bytes-like object or a
    C-contiguous array), in NumPy."""
    raw = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
    words = len(raw) // 8
    with np.errstate(over="ignore"):
        w = raw[:words * 8].view("<u8")
        acc = _mix(w ^ (np.arange(words, dtype=np.uint64) * _GOLDEN)).sum(dtype=np.uint64)
        tail = raw[words * 8:].astype(np.uint64)
        places = (np.arange(1, len(tail) + 1, dtype=np.uint64) << np.uint64(56))
        acc = acc + _mix(tail ^ places ^ _TAIL).sum(dtype=np.uint64)
    return int(acc)


_KERNEL: list[Any] = []  # the RawKernel, made once (CuPy compiles it per device, cached)
_SPARE: dict[int, list[Any]] = {}  # per device: word buffers no watch holds, for the next
_SPARES_KEPT = 4


def _take_words(cp: Any, device: int, n: int) -> tuple[Any, np.ndarray]:
    """A buffer of at least ``n`` words of device memory from no pool (not the cell's: its
    pool figures and budget do not see them), and one of as many words of page-locked host
    memory (the fingerprints come back into it asynchronously, on the stream that made them:
    a blocking copy waits behind the other streams' transfers), spare ones if there are: a
    ``cudaMalloc`` and ``cudaFree`` per cell would cost more than the fingerprints. Each
    watch alive has its own (a cell that runs another through ``get_ipython().run_cell``, a
    worker's threads)."""
    spares = _SPARE.setdefault(device, [])
    for i, (words, _) in enumerate(spares):
        if words.size >= n:
            return spares.pop(i)
    n = max(n, 64)
    with cp.cuda.using_allocator(None):
        words = cp.empty(n, dtype=cp.uint64)
    pinned = cp.cuda.alloc_pinned_memory(8 * n)  # held by the array's buffer
    return words, np.frombuffer(pinned, dtype=np.uint64, count=n)


class DeviceFingerprints:
    """The fingerprints of CuPy device copies on the current device: taken at once and
    again by :meth:`changed`, into words of this watch's own."""

    def __init__(self, cp: Any, copies: list[Any], weak: Sequence[bool] = (),
                 wait: bool = True) -> None:
        self.cp = cp
        self.copies = holders(copies, weak)  # a copy gone by the end reads as changed
        self.device = cp.cuda.Device().id
        if not _KERNEL:
            _KERNEL.append(cp.RawKernel(FINGERPRINT_KERNEL, "cupy_magic_fingerprint"))
        self._words = _take_words(cp, self.device, 2 * len(copies))
        self.prints = self._words[0][:2 * len(copies)]
        # CUDA calls, not CuPy kernels: a batched run pays this host time for each batch
        stream = cp.cuda.get_current_stream()
        cp.cuda.runtime.memsetAsync(self.prints.data.ptr, 0, self.prints.nbytes, stream.ptr)
        for k, copy in enumerate(copies):
            self._launch(copy, k)
        # done before the cell runs: a stream the cell makes (non-blocking) is not ordered
        # after this one, and a write on it must not come before the first fingerprint
        # (``wait`` false: a batch's watch, whose work runs on the slot's stream)
        if wait:
            stream.synchronize()

    def _launch(self, copy: Any, k: int) -> None:
        if copy.size == 0:
            return
        if not (copy.flags.c_contiguous or copy.flags.f_contiguous) or copy.data.ptr % 8:
            copy = copy.copy()  # not a fresh copy: read as a new, packed and aligned one
        threads = 256  # a block per 256 words up to 1,024 (each thread loops over the rest)
        blocks = max(1, min(1024, -(-(copy.nbytes // 8) // threads)))
        out = np.uint64(self.prints.data.ptr + 8 * k)  # (the word's address, by value)
        _KERNEL[0]((blocks,), (threads,), (copy, np.uint64(copy.nbytes), out))

    def changed(self) -> list[bool]:
        """Whether each copy's bytes differ from when this was made, after all the work
        queued on the device so far (every stream: a cell may have made its own)."""
        with self.cp.cuda.Device(self.device):
            self.cp.cuda.runtime.deviceSynchronize()
            return self.queue_changed()()

    def queue_changed(self) -> Callable[[], list[bool]]:
        """Queue the second fingerprints on the current stream now, without waiting; the
        function returned waits for that stream and compares (a batched run calls it once
        the slot's batch is done). The copies are not held meanwhile: one gone by now reads
        as changed."""
        cp, n = self.cp, len(self.copies)
        alive = [held() for held in self.copies]
        gone = [copy is None for copy in alive]
        for k, copy in enumerate(alive):
            if copy is not None:
                self._launch(copy, n + k)
        del alive
        stream = cp.cuda.get_current_stream()
        both = self._words[1][:2 * n]  # back after the fingerprints, with nothing waiting
        cp.cuda.runtime.memcpyAsync(both.ctypes.data, self.prints.data.ptr, both.nbytes,
                                    cp.cuda.runtime.memcpyDeviceToHost, stream.ptr)
        # the function holds this watch: its words go back to the spares with it, not while
        # the copy into them is queued
        return functools.partial(self._read, stream, both, gone)

    def _read(self, stream: Any, both: np.ndarray, gone: list[bool]) -> list[bool]:
        stream.synchronize()  # (done where the host waited for the batch)
        n = len(gone)
        return [g or bool(both[k] != both[n + k]) for k, g in enumerate(gone)]

    def __del__(self) -> None:  # its words go back to the spares (no CUDA call here)
        spares = _SPARE.get(getattr(self, "device", -1))
        words = getattr(self, "_words", None)
        if spares is not None and words is not None and len(spares) < _SPARES_KEPT:
            spares.append(words)
