"""What the batch watch costs a batched cell, per batch.

Since 2026-12-07 a batched run fingerprints each later batch's copy of an input the cell may
change through another name (``run/batchwatch.py``): the input handed to a function,
``s = total(x)``. A cell whose source shows it only reads the input (``s = (x * 2.0 +
1.0).sum(axis=1)``, the same work inline) is not watched. This times both cells over the
same input, batched into the same rows (``BatchOptions(rows=...)``), the CUDA-graph replay
on and off, and reports the difference per batch:

- ``inline``: the work written in the cell (no watch);
- ``function``: the same work in a function the cell calls (each later batch watched: the
  function is this script's, not a cell's, so ``run/readers.py`` does not read its source;
  one made in a notebook cell that only reads its argument is not watched at all).

Each row is the best of ``--repeats`` timed runs after a first; the results are checked
against NumPy's. The difference of the two includes the function call itself (a Python
call per batch, about a microsecond), not only the watch.

Usage::

    python benchmarks/batch_watch.py [--rows 8000000] [--batch-rows 100000] [--repeats 5]
        [--out DIR]

Prints a table and writes ``batch-watch-<UTC time>-<gpu|host>.json`` under ``--out``
(``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _results import add_out, stamp, write  # noqa: E402
from _shell import started_backend  # noqa: E402

from cupy_magic.run.batchoptions import BatchOptions  # noqa: E402

CELLS = {
    "inline": "s = (x * 2.0 + 1.0).sum(axis=1)\n",
    "function": "s = total(x)\n",
}


def total(a: Any) -> Any:
    """The function the ``function`` cell hands its input to (it only reads it)."""
    return (a * 2.0 + 1.0).sum(axis=1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=None,
                    help="rows of x, 8 float64 columns (default 8M on a GPU, 400k on the CPU)")
    ap.add_argument("--batch-rows", type=int, default=None,
                    help="rows per batch (default rows / 80)")
    ap.add_argument("--repeats", type=int, default=5)
    add_out(ap)
    args = ap.parse_args()

    import cupy_magic

    be, label = started_backend()
    n = args.rows or (8_000_000 if be.is_gpu else 400_000)
    per = args.batch_rows or max(1, n // 80)
    x = np.random.default_rng(0).random((n, 8))
    want = (x * 2.0 + 1.0).sum(axis=1)

    def timed(cell: str, graph: bool) -> dict[str, Any]:
        opts = BatchOptions(rows=per, forced=True, graph=graph)
        best, report, correct = float("inf"), None, True
        for i in range(args.repeats + 1):
            ns: dict[str, Any] = {"np": np, "x": x, "total": total}
            t0 = time.perf_counter()
            cupy_magic.run_cell(CELLS[cell], ns, to_host=["s"], batch=opts)
            took = time.perf_counter() - t0
            correct = correct and bool(np.allclose(ns["s"], want))
            if i and took < best:
                best, report = took, cupy_magic.last_report()
        plan = report.batch if report is not None else None
        return {"cell": cell, "graph": graph, "seconds": best, "correct": correct,
                "batches": plan.batches if plan is not None else 0,
                "replayed": plan.graph.replayed if plan is not None and plan.graph else 0}

    rows = [timed(cell, graph) for graph in (True, False) for cell in CELLS]
    print(f"x: {n:,} x 8 float64 ({x.nbytes / 1e9:.2f} GB) in batches of {per:,} rows "
          f"on {be.info().name} [{label}], best of {args.repeats}")
    for r in rows:
        print(f"{r['cell']:<9} graph={r['graph']!s:<5} {r['seconds'] * 1e3:9.2f} ms  "
              f"{r['batches']:>4} batches ({r['replayed']} replayed)  correct={r['correct']}")
    per_batch = {}
    for graph in (True, False):
        a, b = (next(r for r in rows if r["cell"] == c and r["graph"] == graph) for c in CELLS)
        watched = max(b["batches"] - 1, 1)  # the first batch is InputWatch's, in both cells
        per_batch[str(graph)] = (b["seconds"] - a["seconds"]) / watched * 1e6
        print(f"graph={graph}: function - inline = {(b['seconds'] - a['seconds']) * 1e3:.2f} ms"
              f", {per_batch[str(graph)]:.1f} us per watched batch "
              f"({b['seconds'] / a['seconds']:.3f}x)")
    doc = {"benchmark": "batch_watch", "backend": label, "device": be.info().name,
           "rows": n, "batch_rows": per, "repeats": args.repeats, "cells": CELLS,
           "runs": rows, "us_per_watched_batch": per_batch}
    write(args.out, f"batch-watch-{stamp()}-{label}", doc)
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
