"""What the stale-read guard costs a cell that calls the notebook's functions.

Where a function from an earlier cell writes a global (``global counter``), every ``%%gpu``
cell runs with the guard (``cupy_magic/run/staleguard.py``): a trace function sees each call
of the notebook's functions, so that what they write reaches the cell's namespace and no call
reads a name the cell has rebound. This times, in one process, a cell of ``--calls`` calls of
a one-line notebook function ``f`` (``s = f(s)`` in a loop):

- ``plain``: ``exec`` of the cell in the namespace, as a plain cell;
- ``no_guard``: :func:`cupy_magic.run_cell`, no function of the notebook writing a global;
- ``guarded``: the same with a writer ``w`` defined beside ``f`` (the guard set; ``f``
  neither reads what the cell binds nor writes);
- ``writer_calls``: the cell calling a function that writes a global (``counter = a``) each
  time, a tenth as many calls.

Each the median of ``--reps`` runs. On the CPU fallback the cell runs under tracemalloc, whose
cost for each allocation grows with the length of the function allocating: the guard's
figures there are the CPU fallback's, not a GPU's.

Usage::

    python benchmarks/guard_cost.py [--calls 200000] [--reps 5] [--out DIR]

Prints the figures and writes ``guard-cost-<UTC time>-<gpu|host>.json`` under ``--out``
(``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _results import add_out, stamp, write
from _shell import started_backend

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NOTEBOOK = "def f(a):\n    return a + 1\n"
WRITER = "counter = 0\ndef w():\n    global counter\n    counter += 1\n"
WRITES = "def g(a):\n    global counter\n    counter = a\n    return a + 1\n"
CELL = "s = 0\nfor _ in range({n}):\n    s = {fn}(s)\ny = a + s\n"


def _namespace(*cells: str) -> dict[str, Any]:
    """A notebook's namespace after ``cells`` (their functions' globals are it)."""
    ns: dict[str, Any] = {"np": np, "a": np.arange(10.0)}
    for code in cells:
        exec(code, ns)
    return ns


def _median_s(fn: Any, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=5)
    add_out(ap)
    args = ap.parse_args()

    import cupy_magic

    be, label = started_backend()
    n, few = args.calls, max(1, args.calls // 10)
    runs = {
        "plain": (_namespace(NOTEBOOK), CELL.format(n=n, fn="f"), None),
        "no_guard": (_namespace(NOTEBOOK), CELL.format(n=n, fn="f"), "run"),
        "guarded": (_namespace(NOTEBOOK, WRITER), CELL.format(n=n, fn="f"), "run"),
        "writer_calls": (_namespace(WRITES), CELL.format(n=few, fn="g"), "run"),
        "writer_calls_plain": (_namespace(WRITES), CELL.format(n=few, fn="g"), None),
    }
    fig: dict[str, Any] = {}
    for name, (ns, code, how) in runs.items():
        compiled = compile(code, f"<{name}>", "exec")

        def once(ns: dict[str, Any] = ns, code: str = code, compiled: Any = compiled,
                 how: str | None = how) -> None:
            if how is None:
                exec(compiled, ns)
            else:
                cupy_magic.run_cell(code, ns, syncs="off")

        once()  # its kernels and wrappers made
        expected = n if "writer" not in name else few
        assert int(ns["s"]) == expected, (name, ns["s"])
        if "writer" in name:
            assert ns["counter"] == few - 1, (name, ns["counter"])  # the last call's write
        fig[name] = {"seconds": _median_s(once, args.reps),
                     "calls": few if "writer" in name else n}
        per_call = fig[name]["seconds"] / fig[name]["calls"] * 1e6
        fig[name]["us_per_call"] = per_call
        print(f"{name:19s} {fig[name]['seconds']:8.3f} s  {fig[name]['calls']:>8,} calls  "
              f"{per_call:6.2f} us a call")
    write(args.out, f"guard-cost-{stamp()}-{label}", {
        "benchmark": "guard_cost", "backend": label, "device": be.info().name,
        "reps": args.reps, "runs": fig})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
