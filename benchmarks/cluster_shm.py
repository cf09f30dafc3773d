"""Issue 15's idea, measured before it is built: hand a local worker its NumPy blocks through
shared memory instead of scattering them over TCP.

``cluster_bench.py`` on the H200 (``cluster-2026-12-03T1653``) ran ``y = np.sqrt(x * x + 1)``
over 16 GiB through one local worker in 66.3 s against 2.4 s in the kernel: scattering the
input took 30.6 s, the worker was busy 1.1 s, and gathering the result most of the rest. A
worker on the same machine can read the kernel's input from a shared-memory segment and write
its result into another one that the kernel maps, so no array crosses a socket. This measures,
in one run, on the same input and the same element-wise work (plain NumPy or CuPy, not
``%%gpu``, so the figures show the transport alone):

- ``kernel``: the blocks run in this process (NumPy on the CPU; ``cupy.asarray`` of each block
  and ``.get()`` of its result on a GPU);
- ``scatter``: the blocks scattered to the workers, one task each, the results gathered;
- ``shm``: the input copied once into a shared-memory segment (timed apart), one task per block
  reading its rows there and writing its result rows into an output segment this process maps;
- ``shm_threads`` (since 2026-12-04T0650): the same with the copy in, and a first write of the
  output segment's pages, on ``--threads`` threads (on the H200 the one-thread copy took 7.83
  of the 18.35 s of ``shm``). The two run in the order shm, shm_threads, shm_threads, shm,
  best of two each: a run right after another frees its segments fills memory faster.

Each checks its result against the kernel's. Usage::

    python3 benchmarks/cluster_shm.py [--size 256MiB] [--workers 2] [--block 32MiB] [--out DIR]

On a GPU (CuPy and dask-cuda importable) the workers are a ``LocalCUDACluster``, one per GPU,
and ``--size`` defaults to 8GiB (the runs hold about six copies of it in host memory);
elsewhere a ``LocalCluster`` of ``--workers`` processes on the CPU, labelled so. Writes
``cluster-shm-<UTC time>[-host].json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import numpy as np
from _results import add_out, python, stamp, write

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cupy_magic.backend.cupy import probe_cupy  # noqa: E402
from cupy_magic.units import format_bytes, parse_size  # noqa: E402


def _gpu() -> bool:
    """A GPU to measure on: CuPy with a device (cupy_magic's own probe) and dask-cuda."""
    if probe_cupy()[0] is None:
        return False
    try:
        import dask_cuda  # noqa: F401
    except ImportError:
        return False
    return True


def work(block: np.ndarray, gpu: bool, out: np.ndarray | None = None) -> np.ndarray:
    """The cell's element-wise step on one block, on the GPU when there is one."""
    if not gpu:
        return np.sqrt(block * block + 1, out=out)
    import cupy as cp

    d = cp.asarray(block)
    r = cp.sqrt(d * d + 1)
    if out is None:
        return r.get()
    r.get(out=out)
    return out


def shm_task(names: tuple[str, str], shape: tuple[int, ...], dtype: str, start: int,
             stop: int, gpu: bool) -> int:
    """One block through shared memory: rows ``start:stop`` of the input segment in, the
    same rows of the output segment out; returns the bytes read."""
    src = shared_memory.SharedMemory(name=names[0])
    dst = shared_memory.SharedMemory(name=names[1])
    try:
        x = np.ndarray(shape, dtype, buffer=src.buf)
        y = np.ndarray(shape, dtype, buffer=dst.buf)
        work(x[start:stop], gpu, out=y[start:stop])
        return int(x[start:stop].nbytes)
    finally:
        del x, y
        src.close()
        dst.close()


def _bounds(rows: int, block_rows: int) -> list[tuple[int, int]]:
    return [(a, min(a + block_rows, rows)) for a in range(0, rows, block_rows)]


def _threaded(fn: Any, bounds: list[tuple[int, int]], threads: int) -> None:
    """``fn(a, b)`` over the row ranges on ``threads`` threads (NumPy copies release the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda ab: fn(*ab), bounds))


def _shm_run(client: Any, x: np.ndarray, ref: np.ndarray, bounds: list[tuple[int, int]],
             gpu: bool, threads: int) -> tuple[float, float, bool]:
    """The blocks through two shared-memory segments: seconds in all, seconds of the copy
    in, and whether the result equals ``ref``. ``threads``: 0 copies in on this thread;
    more copy in, and write the output segment's pages first, on that many threads (so the
    workers neither wait for one thread's copy nor fault the result's pages one by one)."""
    t0 = time.perf_counter()
    src = shared_memory.SharedMemory(create=True, size=x.nbytes)
    dst = shared_memory.SharedMemory(create=True, size=x.nbytes)
    xin = yout = copy_in = None  # views of the segments: released before they close
    try:
        xin = np.ndarray(x.shape, x.dtype, buffer=src.buf)
        yout = np.ndarray(x.shape, x.dtype, buffer=dst.buf)
        if threads:
            def copy_in(a: int, b: int, i: np.ndarray = xin, o: np.ndarray = yout) -> None:
                np.copyto(i[a:b], x[a:b])
                o[a:b] = 0
            _threaded(copy_in, bounds, threads)
        else:
            np.copyto(xin, x)
        copy_s = time.perf_counter() - t0
        tasks = [client.submit(shm_task, (src.name, dst.name), x.shape, x.dtype.str, a, b,
                               gpu, pure=False) for a, b in bounds]
        moved = sum(client.gather(tasks))
        seconds = time.perf_counter() - t0
        equal = bool(moved == x.nbytes and np.array_equal(yout, ref))
    finally:
        xin = yout = copy_in = None  # a failed task's error is not hidden by close()
        for seg in (src, dst):
            seg.close()
            seg.unlink()
    return seconds, copy_s, equal


def run(size: int, workers: int, block: int, gpu: bool, threads: int) -> dict[str, Any]:
    from distributed import Client, LocalCluster

    cols = 1024
    rows = size // (4 * cols)
    x = np.random.default_rng(0).random((rows, cols), dtype=np.float32)
    bounds = _bounds(rows, max(1, block // (4 * cols)))
    figures: dict[str, Any] = {"input_bytes": int(x.nbytes), "blocks": len(bounds)}

    t0 = time.perf_counter()
    ref = np.empty_like(x)
    for a, b in bounds:
        work(x[a:b], gpu, out=ref[a:b])
    figures["kernel_s"] = time.perf_counter() - t0

    if gpu:
        from dask_cuda import LocalCUDACluster

        cluster = LocalCUDACluster()
    else:
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=None)
    with cluster, Client(cluster) as client:
        client.run(lambda: None)  # every worker up
        client.gather(client.map(work, [x[:8]] * len(client.scheduler_info()["workers"]),
                                 gpu=gpu, pure=False))  # warm: imports, kernels
        t0 = time.perf_counter()
        parts = client.scatter([x[a:b] for a, b in bounds], hash=False)
        figures["scatter_in_s"] = time.perf_counter() - t0
        done = client.map(work, parts, gpu=gpu, pure=False)
        got = np.concatenate(client.gather(done))
        figures["scatter_s"] = time.perf_counter() - t0
        figures["scatter_equal"] = bool(np.array_equal(got, ref))
        del parts, done, got

        # shm, then shm_threads, then each again in the other order (ABBA), best of two:
        # each run frees two segments, and filling memory just freed is faster than fresh
        runs: dict[str, list[tuple[float, float, bool]]] = {"shm": [], "shm_threads": []}
        for path in ("shm", "shm_threads", "shm_threads", "shm"):
            runs[path].append(_shm_run(client, x, ref, bounds, gpu,
                                       threads if path == "shm_threads" else 0))
        for path, got in runs.items():
            best = min(got)
            figures[f"{path}_s"], figures[f"{path}_copy_in_s"] = best[0], best[1]
            figures[f"{path}_equal"] = all(r[2] for r in got)
        figures["copy_threads"] = threads
        figures["workers"] = len(client.scheduler_info()["workers"])
    for path in ("kernel", "scatter", "shm", "shm_threads"):
        figures[f"{path}_gbps"] = x.nbytes / figures[f"{path}_s"] / 1e9
    figures["scatter_over_kernel"] = figures["kernel_s"] / figures["scatter_s"]
    figures["shm_over_kernel"] = figures["kernel_s"] / figures["shm_s"]
    figures["shm_threads_over_kernel"] = figures["kernel_s"] / figures["shm_threads_s"]
    return figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="", help="input size (default 8GiB on a GPU, "
                    "256MiB on the CPU)")
    ap.add_argument("--workers", type=int, default=2, help="worker processes on the CPU")
    ap.add_argument("--block", default="", help="bytes per block (default 128MiB on a GPU, "
                    "32MiB on the CPU)")
    ap.add_argument("--threads", type=int, default=0, help="threads of the shm_threads "
                    "copy (default: one per CPU this process may run on)")
    add_out(ap)
    args = ap.parse_args(argv)
    gpu = _gpu()
    size = parse_size(args.size or ("8GiB" if gpu else "256MiB"))
    block = parse_size(args.block or ("128MiB" if gpu else "32MiB"))
    figures = run(size, args.workers, block, gpu,
                  args.threads or len(os.sched_getaffinity(0)))
    label = "GPU (LocalCUDACluster)" if gpu else "host (CPU: NumPy, LocalCluster of processes)"
    print(f"cluster_shm on {label}: {format_bytes(size)} float32, {figures['blocks']} blocks, "
          f"{figures['workers']} worker(s)")
    for path in ("kernel", "scatter", "shm", "shm_threads"):
        print(f"  {path:<11} {figures[f'{path}_s']:8.2f} s  {figures[f'{path}_gbps']:6.2f} GB/s"
              + (f"  ({figures[path + '_over_kernel']:.2f} of the kernel)"
                 if path != "kernel" else ""))
    print(f"  scatter: its input moved in {figures['scatter_in_s']:.2f} s; shm: the copy into "
          f"the segment {figures['shm_copy_in_s']:.2f} s; equal to the kernel's: "
          f"scatter {figures['scatter_equal']}, shm {figures['shm_equal']}; shm_threads: "
          f"the copy in and the output's pages on {figures['copy_threads']} threads "
          f"{figures['shm_threads_copy_in_s']:.2f} s, equal {figures['shm_threads_equal']}")
    write(args.out, f"cluster-shm-{stamp()}{'' if gpu else '-host'}",
          {"label": label, "size": size, "python": python(), **figures})
    return 0 if all(figures[f"{p}_equal"] for p in ("scatter", "shm", "shm_threads")) else 1


if __name__ == "__main__":
    sys.exit(main())
