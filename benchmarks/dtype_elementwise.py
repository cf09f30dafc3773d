#!/usr/bin/env python3
"""Element-wise kernels in float16, float32 and float64: bytes or elements per second?

Notebook 02 found ``v * 2 + 1`` over 2**28 elements as fast in float32 as in float64 on the
H200. This benchmark asks why: for each precision it times (CUDA events, median of 20 runs
after 3 warm-ups, ``cupyx.profiler.benchmark``) CuPy's ``v * 2 + 1`` (two kernels), ``v * 2``
and ``v.copy()`` (one element-wise kernel each), a hand-written ``ElementwiseKernel``, a plain
device-to-device ``cudaMemcpy``, and ``v * 2 + 1`` through ``cupy_magic.run_cell`` as the
notebook runs it; then ``v * 2 + 1`` in float32 and float64 over sizes from 2**20 to 2**29.

Usage (GPU only): python3 benchmarks/dtype_elementwise.py [--out DIR]
Writes DIR/dtype-elementwise-DATE.json (default DIR: $OUT, else benchmarks/results).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np
from _results import DAY, RESULTS, add_out, stamp, write

import cupy_magic


def _median_ms(cp: Any, fn: Any) -> float:
    from cupyx.profiler import benchmark

    return float(np.median(benchmark(fn, n_repeat=20, n_warmup=3).gpu_times)) * 1e3


def measure(n: int = 2**28) -> dict[str, Any]:
    """Every figure, as a dict: per precision, per variant, ms, GB/s and G elements/s."""
    import cupy as cp

    axpb = cp.ElementwiseKernel("T x", "T y", "y = x * (T)2 + (T)1", "axpb")
    out: dict[str, Any] = {"gpu": cupy_magic.device_info().name, "elements": n,
                           "date": stamp(DAY), "cupy": cp.__version__}
    for dt in ("float16", "float32", "float64"):
        v = cp.random.random(n, dtype=cp.float32).astype(dt)
        w = cp.empty_like(v)
        variants = {
            "v*2+1": (2, lambda v=v: v * 2.0 + 1.0),
            "v*2 (one kernel)": (1, lambda v=v: v * 2.0),
            "v.copy() (elementwise)": (1, lambda v=v: v.copy()),
            "memcpy d2d": (1, lambda v=v, w=w: cp.cuda.runtime.memcpy(
                w.data.ptr, v.data.ptr, v.nbytes, cp.cuda.runtime.memcpyDeviceToDevice)),
            "ElementwiseKernel x*2+1": (1, lambda v=v: axpb(v)),
        }
        res: dict[str, dict[str, float]] = {}
        for name, (kernels, fn) in variants.items():
            ms = _median_ms(cp, fn)
            res[name] = {"ms": ms, "GBps": kernels * 2 * v.nbytes / ms / 1e6,
                         "Gelem_per_s": kernels * n / ms / 1e6}
        ns = {"v": v, "np": np}
        runs = [cupy_magic.run_cell("w = v * 2.0 + 1.0", ns, syncs="off") for _ in range(6)]
        res["run_cell v*2+1"] = {"ms": min(r.gpu_seconds for r in runs[1:]) * 1e3}
        out[dt] = res
        del v, w, ns, runs
        cp.get_default_memory_pool().free_all_blocks()
    sizes: dict[int, dict[str, float]] = {}
    for p in (20, 22, 24, 26, 28, 29):
        row = {}
        for dt in ("float32", "float64"):
            v = cp.ones(2**p, dtype=dt)
            row[dt] = _median_ms(cp, lambda v=v: v * 2.0 + 1.0)
            del v
        sizes[2**p] = row
    out["sizes_ms"] = sizes
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_out(parser, os.environ.get("OUT") or RESULTS)
    args = parser.parse_args(argv)
    if cupy_magic.device_info().backend != "cupy":
        print("dtype_elementwise: needs a GPU (CuPy with a CUDA device); nothing measured")
        return 1
    fig = measure()
    for dt in ("float16", "float32", "float64"):
        for name, r in fig[dt].items():
            rates = (f"{r['GBps']:8.0f} GB/s {r['Gelem_per_s']:6.0f} G elements/s"
                     if "GBps" in r else "")
            print(f"{dt:8} {name:26} {r['ms']:7.3f} ms {rates}")
    write(args.out, f"dtype-elementwise-{fig['date']}", fig)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
