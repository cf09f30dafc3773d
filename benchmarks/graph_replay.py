"""Would replaying a batch's work as a CUDA graph cut the cost per batch? (issue 20, point 2)

A Black-Scholes batch (dozens of element-wise launches) over fixed device buffers, at batch
sizes from the 16 MB-budget case of the issue (37,183 float64 rows) up to 1M rows, on one
non-blocking stream: (a) launched op by op as CuPy does, (b) captured once with CuPy 14's
stream capture (``Stream.begin_capture`` / ``end_capture``, relaxed mode) and replayed with
``Graph.launch``, per batch: upload into the fixed input buffers, run, download from the fixed
output buffer (pinned host memory both ways). Every replayed result is checked against the
launched one. Host and device time per batch are printed and written to
``graph-replay-<stamp>.json`` under ``--out``.

Why ``%%gpu`` does not replay graphs yet: a graph writes to the addresses it was captured
with, so every batch must reuse the same buffers (the pool's stream order keeps the
temporaries safe only while nothing else allocates between replays), the cell's Python runs
once only (values it computes per batch are not recomputed), host syncs are refused during
capture, and the last, shorter batch needs its own graph. This measures the gain first.

    python3 benchmarks/graph_replay.py [--batches 200] [--out DIR]

Without a GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np
from _results import add_out, gpu_name, stamp, write

ROWS = (37_183, 131_072, 1_048_576)


def pricing(xp: Any, S: Any, K: Any, T: Any, out: Any) -> None:
    r, v = 0.02, 0.3
    d1 = (xp.log(S / K) + (r + 0.5 * v * v) * T) / (v * xp.sqrt(T))
    d2 = d1 - v * xp.sqrt(T)
    cdf1 = 0.5 * (1 + xp.tanh(0.7978845608 * (d1 + 0.044715 * d1 ** 3)))
    cdf2 = 0.5 * (1 + xp.tanh(0.7978845608 * (d2 + 0.044715 * d2 ** 3)))
    out[...] = S * cdf1 - K * xp.exp(-r * T) * cdf2


def measure(cp: Any, rows: int, batches: int) -> dict[str, Any]:
    s = cp.cuda.Stream(non_blocking=True)
    rng = np.random.default_rng(0)
    host_in = [cp.cuda.alloc_pinned_memory(rows * 8) for _ in range(3)]
    views = [np.frombuffer(m, np.float64, rows) for m in host_in]
    for v in views:
        v[:] = rng.random(rows) + 0.5
    host_out = np.frombuffer(cp.cuda.alloc_pinned_memory(rows * 8), np.float64, rows)
    fig: dict[str, Any] = {"rows": rows, "batches": batches}
    with s:
        dev = [cp.empty(rows, np.float64) for _ in range(3)]
        out = cp.empty(rows, np.float64)

        def one(step: Any) -> None:
            for d, h in zip(dev, views, strict=True):
                d.set(h, stream=s)
            step()
            out.get(stream=s, out=host_out, blocking=False)

        def launched() -> None:
            pricing(cp, *dev, out)
        one(launched)  # compiles, warms the pool arena; the reference result
        s.synchronize()
        want = host_out.copy()
        s.begin_capture()
        launched()
        graph = s.end_capture()
        graph.upload(s)
        for name, step in (("launched", launched), ("graph", lambda: graph.launch(s))):
            host_out[:] = -1
            t0 = time.perf_counter()
            for _ in range(batches):
                one(step)
            issued = time.perf_counter() - t0
            s.synchronize()
            total = time.perf_counter() - t0
            fig[name] = {"host_us_per_batch": issued / batches * 1e6,
                         "wall_us_per_batch": total / batches * 1e6,
                         "correct": bool(np.array_equal(host_out, want))}
    fig["graph/launched wall"] = fig["graph"]["wall_us_per_batch"] / \
        fig["launched"]["wall_us_per_batch"]
    return fig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=200)
    add_out(ap)
    args = ap.parse_args(argv)
    from cupy_magic.backend.cupy import probe_cupy

    cp, why = probe_cupy()
    if cp is None:
        print(f"graph_replay: no GPU visible ({why}); nothing measured")
        return 0
    runs = [measure(cp, rows, args.batches) for rows in ROWS]
    for f in runs:
        print(f"{f['rows']:>9,} rows: launched {f['launched']['wall_us_per_batch']:8.1f} us "
              f"(host {f['launched']['host_us_per_batch']:.1f}), graph "
              f"{f['graph']['wall_us_per_batch']:8.1f} us (host "
              f"{f['graph']['host_us_per_batch']:.1f}), ratio {f['graph/launched wall']:.2f}, "
              f"correct {f['launched']['correct'] and f['graph']['correct']}")
    write(args.out, f"graph-replay-{stamp()}",
          {"gpu": gpu_name(), "cupy": cp.__version__, "runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
