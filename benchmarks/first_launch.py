"""Where a fresh process's first ``%%gpu`` cell spends its time when every kernel is cached.

On the H200, a cell's first run in a new kernel took 0.3 to 0.45 s of "GPU time" even with all
its kernels loaded from a warm ``CUPY_CACHE_DIR`` (``peer_bench.py``, ``compile_cache.py``);
run again in the same process it took 10 to 90 ms. This splits that first cost, each case in
a fresh process over one warm cache (filled by a first process):

- ``steps``: before cupy_magic is loaded, the CUDA context (``cudaFree(0)``), a first
  allocation and fill, a first element-wise kernel and reduction, a second kernel, each timed
  (synchronised); then the ``small_loop`` cell of ``peer_bench.py`` through
  :func:`cupy_magic.run_cell`;
- ``cell at once``: the cell right after the backend starts (as ``%load_ext`` does), while
  its background first launch (``cupy_magic.backend.preheat.preheat``) may still run;
- ``loaded, then cell``: the backend started, its first launch waited for (a user reading
  the load line), then the cell.

Each process then runs a cell of two 1024 x 1024 float32 matmuls (``MATMUL_CELL``) twice and
once over a 300 x 300 float64 matrix (``other_matmul_cell_s``: kernels cuBLAS had not loaded);
the ``steps`` add the main thread's cuBLAS handle (``cublas_handle_s``), a first and a second
matmul: the process's first cuBLAS use. The background first launch starts cuBLAS too (2x2
products through a handle of its own); ``loaded, cuBLAS handle, then cell`` times the main
thread's own handle apart, since CuPy keeps one per thread.

Usage::

    python benchmarks/first_launch.py [--out DIR]

Prints the figures and writes ``first-launch-<UTC time>.json`` under ``--out``
(``benchmarks/results``). Without a GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _results import add_out, gpu_name, stamp, write

ROOT = Path(__file__).resolve().parents[1]
CELL = "y = v\nfor _ in range(300):\n    y = y * 0.999 + 0.001\n"
MATMUL_CELL = "p = m @ m\np = p @ m\n"


def _steps(cp: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    t = time.perf_counter()
    cp.cuda.runtime.free(0)
    out["context_s"] = time.perf_counter() - t
    t = time.perf_counter()
    x = cp.ones(4, dtype=cp.float32)
    cp.cuda.Device().synchronize()
    out["first_alloc_fill_s"] = time.perf_counter() - t
    t = time.perf_counter()
    (x * 2).sum()
    cp.cuda.Device().synchronize()
    out["first_elementwise_s"] = time.perf_counter() - t
    t = time.perf_counter()
    cp.sqrt(x)
    cp.cuda.Device().synchronize()
    out["second_kernel_s"] = time.perf_counter() - t
    t = time.perf_counter()  # the process's first cuBLAS use: this thread's handle...
    cp.cuda.device.get_cublas_handle()
    out["cublas_handle_s"] = time.perf_counter() - t
    m = cp.ones((1024, 1024), dtype=cp.float32)
    for key in ("first_matmul_s", "second_matmul_s"):  # ... then its first product
        t = time.perf_counter()
        m @ m
        cp.cuda.Device().synchronize()
        out[key] = time.perf_counter() - t
    return out


def child(mode: str) -> None:
    """One fresh process: ``mode`` is steps, now, loaded or handle (loaded, then this
    thread's cuBLAS handle made and timed before the cells); prints one JSON line."""
    import numpy as np

    sys.path.insert(0, str(ROOT))
    import cupy as cp

    fig: dict[str, Any] = {}
    if mode == "steps":
        fig.update(_steps(cp))
    import cupy_magic
    from cupy_magic import backend

    cupy_magic.device_info()  # what %load_ext does: the backend starts
    if mode in ("loaded", "handle"):
        t = time.perf_counter()
        fig["preheat_done"] = backend.current().preheated.wait(60)
        fig["preheat_wait_s"] = time.perf_counter() - t
    if mode == "handle":  # this thread's cuBLAS handle made before the cells, timed apart
        t = time.perf_counter()
        cp.cuda.device.get_cublas_handle()
        fig["cublas_handle_s"] = time.perf_counter() - t
    t = time.perf_counter()
    report = cupy_magic.run_cell(CELL, {"np": np, "v": np.ones(10_000, np.float32)},
                                 to_host=True)
    fig["cell_s"] = time.perf_counter() - t
    fig["cell_gpu_s"] = report.gpu_seconds
    t = time.perf_counter()
    cupy_magic.run_cell(CELL, {"np": np, "v": np.ones(10_000, np.float32)}, to_host=True)
    fig["cell_again_s"] = time.perf_counter() - t
    for key in ("matmul_cell_s", "matmul_cell_again_s"):  # then a cell whose work is cuBLAS's
        t = time.perf_counter()
        cupy_magic.run_cell(MATMUL_CELL, {"np": np, "m": np.ones((1024, 1024), np.float32)})
        fig[key] = time.perf_counter() - t
    t = time.perf_counter()  # a product of other shapes and dtype: cuBLAS picks other kernels
    cupy_magic.run_cell(MATMUL_CELL, {"np": np, "m": np.ones((300, 300), np.float64)})
    fig["other_matmul_cell_s"] = time.perf_counter() - t
    print(json.dumps(fig))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_out(ap)
    args = ap.parse_args()
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no CuPy or no device
        print(f"first_launch: no GPU ({type(exc).__name__}); nothing measured")
        return 0
    env = {**os.environ, "CUPY_CACHE_DIR": tempfile.mkdtemp(prefix="first-launch-")}
    code = f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import first_launch; "
    runs: dict[str, Any] = {}
    for label, mode in (("fill the cache", "steps"), ("steps", "steps"), ("cell at once", "now"),
                        ("loaded, then cell", "loaded"), ("cell at once again", "now"),
                        ("loaded, then cell again", "loaded"),
                        ("loaded, cuBLAS handle, then cell", "handle")):
        done = subprocess.run([sys.executable, "-c", code + f"first_launch.child({mode!r})"],
                              env=env, capture_output=True, text=True, check=True, cwd=ROOT)
        runs[label] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{label:<24} " + "  ".join(
            f"{k} {v * 1e3:8.1f} ms" if isinstance(v, float) else f"{k} {v}"
            for k, v in runs[label].items()), flush=True)
    write(args.out, f"first-launch-{stamp()}", {
        "benchmark": "first_launch", "cell": CELL, "matmul_cell": MATMUL_CELL,
        "device": gpu_name(), "runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
