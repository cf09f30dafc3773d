"""Overhead of the runtime host-sync record on a cell of 10,000 small device operations.

Runs the same compiled cell with and without :class:`cupy_magic.syncs.record.SyncRecorder`,
alternating, and reports the median of each and the relative overhead (target: < 5%). The
cell launches small kernels and syncs a few times (every 1,000 operations), so both the
installed hook's pass-through cost and the per-sync frame walk are inside the timing.

Usage::

    python benchmarks/sync_overhead.py [--repeats 15] [--ops 10000]

On a GPU it prints the figures and writes ``benchmarks/results/sync_overhead-<date>.json``.
Without one it runs the same cell with NumPy (no sync is declared there, so it only times the
hook install), says that no GPU is present, and writes no result file.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _results import DAY, RESULTS, gpu_name, python, stamp, when, write  # noqa: E402

from cupy_magic.syncs.record import SyncRecorder  # noqa: E402

CELL_FILENAME = "<sync-overhead-cell>"
CELL = """
y = x
for i in range(OPS):
    y = y * 1.0001 + 1e-6
    if i % 1000 == 999:
        s = float(y[0])
"""


def array_module() -> tuple[Any, bool]:
    """Return CuPy and True when a GPU is usable, else NumPy and False."""
    try:
        import cupy
    except ImportError:
        import numpy

        return numpy, False
    if cupy.cuda.is_available():
        return cupy, True
    import numpy

    return numpy, False


def time_cell(code: Any, xp: Any, on_gpu: bool, ops: int, record: bool) -> float:
    """Seconds for one run of the cell, synchronised at both ends."""
    ns = {"x": xp.ones(256, dtype=xp.float32), "OPS": ops}
    if on_gpu:
        xp.cuda.Device().synchronize()
    start = time.perf_counter()
    if record:
        with SyncRecorder(CELL_FILENAME, CELL):
            exec(code, ns)
    else:
        exec(code, ns)
    if on_gpu:
        xp.cuda.Device().synchronize()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="timed runs of each variant")
    parser.add_argument("--ops", type=int, default=10_000, help="device operations per cell")
    args = parser.parse_args(argv)

    xp, on_gpu = array_module()
    if not on_gpu:
        print("no GPU present: timing the cell with NumPy on the CPU; no result file written")
    code = compile(CELL, CELL_FILENAME, "exec")
    time_cell(code, xp, on_gpu, args.ops, record=False)  # warm-up: kernel compilation
    time_cell(code, xp, on_gpu, args.ops, record=True)
    plain, recorded = [], []
    for _ in range(args.repeats):
        plain.append(time_cell(code, xp, on_gpu, args.ops, record=False))
        recorded.append(time_cell(code, xp, on_gpu, args.ops, record=True))
    with SyncRecorder(CELL_FILENAME, CELL) as probe:
        exec(code, {"x": xp.ones(256, dtype=xp.float32), "OPS": args.ops})
    base, hooked = statistics.median(plain), statistics.median(recorded)
    result: dict[str, Any] = {
        "benchmark": "sync_overhead",
        "date": when(),
        "array_module": f"{xp.__name__} {xp.__version__}",
        "gpu": on_gpu,
        "python": python(),
        "ops": args.ops,
        "repeats": args.repeats,
        "syncs_recorded_per_run": sum(c.count for c in probe.counts),
        "median_seconds_plain": base,
        "median_seconds_recorded": hooked,
        "overhead": hooked / base - 1.0,
        "target": "< 5%",
    }
    if on_gpu:
        result["device"] = gpu_name()
    print(
        f"{args.ops:,} ops, {args.repeats} runs each: plain {base * 1e3:.2f} ms, with the sync"
        f" record {hooked * 1e3:.2f} ms, overhead {result['overhead']:+.2%}"
        f" ({result['syncs_recorded_per_run']} syncs recorded per run)"
    )
    if on_gpu:
        write(RESULTS, f"sync_overhead-{stamp(DAY)}", result)
    return result


if __name__ == "__main__":
    main()
