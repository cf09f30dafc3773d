"""The first launch of a process, done in the background from load on (issue 20)."""

from __future__ import annotations

import logging
import sys
import threading
from types import ModuleType

import numpy as np

_log = logging.getLogger(__name__)


UPLOAD_PROBE_BYTES = 32 * 2**20  # page-locked bytes the load-time upload rate moves
LAZY = ("cupyx",)  # what CuPy imports lazily (cupy.random._generator: cupyx) and runs itself


def finish_lazy_imports(names: tuple[str, ...] = LAZY) -> None:
    """Run, on the calling thread, the modules in ``names`` that ``sys.modules`` holds as
    lazy modules (``importlib.util.LazyLoader``), before :func:`preheat` starts its thread.

    A lazy module runs on its first attribute read, under a lock of its own; while it runs it
    imports, taking the import system's lock of each module. Two threads doing this at once
    can each hold the lock the other waits for, a deadlock Python does not detect: on an H100
    a first cell read ``cupyx.__file__`` (:mod:`cupy_magic.compat.blame`) while the
    background first launch imported CuPy code that reads ``cupyx``, and the process hung
    (``scripts/warm-cache``'s stack dump, session 24). Loading ``cupyx`` after ``cupy`` took
    6 ms on a CPU machine.
    """
    for name in names:
        module = sys.modules.get(name)
        if module is None:
            continue
        try:
            getattr(module, "__name__", None)  # a lazy module's first read runs it
        except Exception as exc:  # a broken install: the cell that needs it says so
            _log.warning("cupy_magic: importing %s failed: %s", name, exc)


# the devices whose first launch this process ran, each with the upload rate it measured:
# a backend made again in the process (%reload_ext, %gpu_backend, each test's load) finds
# CuPy's kernels and cuBLAS started and the rate known, and skips it
DONE: dict[int, float] = {}


def preheat(cp: ModuleType, device: int, done: threading.Event) -> None:
    """Launch a first element-wise kernel, reduction and cuBLAS product on the home
    device, in the background from load on, with memory from no pool; then measure the
    rate of a large page-locked upload into ``DONE[device]`` (see :func:`upload_rate`).

    On the H200 the first kernel launch of a process took about 0.3 s even with every
    kernel in CuPy's cache (``benchmarks/first_launch.py``), a one-time cost that landed
    in the first cell's GPU time; after this, a first cell took 14 ms against 323 ms.
    Its few bytes come straight from ``cudaMalloc`` (a thread-local allocator of none),
    not from the cells' pool, whose use and peaks the cells' reports and ``%vram_who``
    count; ``CupyBackend.close`` joins its thread. A failure is logged, never raised: the
    first cell then pays the cost as before, and the device stays out of :data:`DONE`.
    """
    try:
        with cp.cuda.Device(device), cp.cuda.using_allocator(None):
            x = cp.ones(4, dtype=cp.float32)
            (x * 2).sum()
            _first_gemms(cp)
            cp.cuda.get_current_stream().synchronize()
            del x
            DONE[device] = upload_rate(cp)
    except Exception as exc:  # a broken device shows in the first cell, with its cause
        _log.warning("cupy_magic: the background first launch failed: %s", exc)
    finally:
        done.set()


def upload_rate(cp: ModuleType, nbytes: int = UPLOAD_PROBE_BYTES, repeats: int = 3) -> float:
    """Bytes per second of the best of ``repeats`` uploads of ``nbytes`` of page-locked
    host memory to the current device, timed by CUDA events on a stream of its own.

    A batched cell's first batch is small (a few MiB at most, less under a small budget) and
    moves slower than the large batches that follow: on the H200 a 1.2 MB first batch of a
    pageable input uploaded at 7.7 GB/s, 4 MiB batches of a page-locked one at 18 GB/s. The
    batch size a report names as paying for itself must not rest on the small batch's rate
    alone (:class:`cupy_magic.run.batchcost.BatchCost`). Memory comes from no pool: the
    host side is ``cudaHostAlloc``'d apart from CuPy's pinned pool, the device side by the
    caller's allocator (``preheat`` runs it with none), and both are freed on return.
    """
    host = cp.cuda.PinnedMemory(nbytes)
    dev = cp.empty(nbytes, dtype=cp.uint8)
    stream = cp.cuda.Stream(non_blocking=True)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    best = float("inf")
    for _ in range(repeats):
        start.record(stream)
        dev.data.copy_from_host_async(host.ptr, nbytes, stream)
        end.record(stream)
        end.synchronize()
        best = min(best, cp.cuda.get_elapsed_time(start, end) / 1e3)
    del dev, host
    return nbytes / best if best > 0 else float("inf")


def _first_gemms(cp: ModuleType) -> None:
    """Start cuBLAS and run a float32 and a float64 product of 2x2 matrices through a
    handle of its own, destroyed at the end.

    On the H200 a process's first ``@`` took about 0.1 s (``benchmarks/first_launch.py``:
    the first matmul cell 116 ms, then 4.5 ms): the library's start, paid once per
    process; after this, 38 to 45 ms (the shape's kernels still load at first launch).
    CuPy keeps one handle per thread, so one of CuPy's made here would serve no cell."""
    from cupy_backends.cuda.libs import cublas

    handle = cublas.create()
    try:
        for dtype, gemm in ((np.float32, cublas.sgemm), (np.float64, cublas.dgemm)):
            a = cp.ones((2, 2), dtype=dtype)
            c = cp.empty((2, 2), dtype=dtype)
            one, zero = np.ones(1, dtype=dtype), np.zeros(1, dtype=dtype)
            gemm(handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, 2, 2, 2, one.ctypes.data,
                 a.data.ptr, 2, a.data.ptr, 2, zero.ctypes.data, c.data.ptr, 2)
            cp.cuda.Device().synchronize()  # the host scalars outlive the call
            if float(c[0, 0]) != 2.0:
                raise RuntimeError(f"cuBLAS gave {float(c[0, 0])} for 2.0")
    finally:
        cublas.destroy(handle)

