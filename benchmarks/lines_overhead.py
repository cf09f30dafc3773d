"""What ``%%gpu --lines`` costs: the same cells run with and without it, best of N.

Two cells, each run through :func:`cupy_magic.run_cell` (the function under ``%%gpu``),
alternating plain and ``lines=True`` runs, best of ``--repeats``:

- ``small ops``: a loop of ``--ops`` (10,000) small device operations: one line event each,
  so the tracer's cost per event (a CUDA event record, an NVTX range, a host timestamp) is
  most of what it adds. The worst case, not a target.
- ``bandwidth``: a few lines over a large device array (``--mib`` MiB of float32, kept on
  the device between runs): the target is <= 5% overhead there on the H200.

Usage::

    python benchmarks/lines_overhead.py [--repeats 7] [--ops 10000] [--mib 1024]

Prints a table and writes ``benchmarks/results/lines-overhead-<UTC time>-<gpu|host>.json``.
Without a GPU the cells run on the CPU fallback (NumPy; host time per line, no events, no
NVTX): those figures are labelled ``host`` and say nothing about the GPU's.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _results import RESULTS, python, stamp, write  # noqa: E402

import cupy_magic  # noqa: E402
from cupy_magic import backend as _backend  # noqa: E402

SMALL = "y = x\nfor i in range(OPS):\n    y = y * 1.0001 + 1e-6\n"
BANDWIDTH = "y = x * 2 + 1\nz = np.sqrt(y)\nw = z - y\n"


def best(source: str, namespace: dict[str, Any], repeats: int, lines: bool) -> tuple[float, Any]:
    """Best wall seconds of ``repeats`` runs of ``source`` (and the last report)."""
    times, report = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        report = cupy_magic.run_cell(source, dict(namespace), lines=lines, syncs="off")
        times.append(time.perf_counter() - t0)
    return min(times), report


def measure(name: str, source: str, namespace: dict[str, Any], repeats: int) -> dict[str, Any]:
    """Plain and ``lines=True`` runs, alternating, best of each; the ratio."""
    best(source, namespace, 1, False)  # compile the kernels and grow the pool first
    best(source, namespace, 1, True)
    plain, with_lines = [], []
    report = None
    for _ in range(repeats):
        plain.append(best(source, namespace, 1, False)[0])
        seconds, report = best(source, namespace, 1, True)
        with_lines.append(seconds)
    p, w = min(plain), min(with_lines)
    rows = report.lines if report is not None else []
    return {"cell": name, "source": source, "plain_s": p, "lines_s": w,
            "overhead": w / p - 1, "line_events": sum(r.count for r in rows),
            "tracer_note": next((n for n in report.notes if n.startswith("--lines")), "")
            if report is not None else "",
            "rows": [{"line": r.line, "count": r.count, "gpu_s": r.gpu_s,
                      "host_s": r.host_s, "share": r.share} for r in rows]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--ops", type=int, default=10_000)
    parser.add_argument("--mib", type=int, default=1024)
    args = parser.parse_args()
    be = _backend.current()
    xp = be.xp
    small = {"x": xp.ones(1000, dtype=xp.float32), "np": xp}
    big = {"x": xp.ones(args.mib * (1 << 20) // 4, dtype=xp.float32), "np": xp}
    results = [measure("small ops", SMALL.replace("OPS", str(args.ops)), small, args.repeats),
               measure("bandwidth", BANDWIDTH, big, args.repeats)]
    where = "gpu" if be.is_gpu else "host"
    print(f"--lines overhead on {be.info().name} [{where}], best of {args.repeats}")
    for r in results:
        print(f"  {r['cell']:<10} plain {r['plain_s'] * 1e3:9.2f} ms  --lines "
              f"{r['lines_s'] * 1e3:9.2f} ms  overhead {r['overhead']:+7.1%}  "
              f"({r['line_events']:,} line events)")
    if not be.is_gpu:
        print("  (CPU fallback: host time per line only, no CUDA events, no NVTX; these are "
              "not GPU figures)")
    write(RESULTS, f"lines-overhead-{stamp()}-{where}", {
        "benchmark": "lines_overhead", "backend": where, "device": be.info().name,
        "python": python(), "repeats": args.repeats, "ops": args.ops,
        "mib": args.mib, "target": "bandwidth overhead <= 5% on the H200",
        "results": results})


if __name__ == "__main__":
    main()
