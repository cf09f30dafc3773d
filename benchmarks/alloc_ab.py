"""The streamed second cell under the allocator cupy_magic installs now and the one before.

``stream_bench.py`` at 659d19a (``stream-2026-12-04T1301.md``) streamed the second cell at 0.88
of the copy ceiling, below the 0.93-1.03 of earlier runs, the first run after the allocator
change of ef75a92 (``CupyBackend._allocator``: the pool's own limit, Python only for a retry
and the peak; before, ``CupyBackend._malloc`` checked every request in Python). This runs
``stream_bench``'s cell (``y = np.sqrt(x * x + 1)``, batched, results to the host) over one
float32 input once to lock it, then as a second cell ``--rounds`` times under each allocator
in the order A B B A ..., and prints the input GB/s of each run and the best of each.

Usage: ``python3 benchmarks/alloc_ab.py [--size 8GiB] [--rounds 4] [--out DIR]`` (GPU only;
writes ``alloc-ab-<UTC time>.json``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cupy_magic import BatchOptions, backend, run_cell, use_backend  # noqa: E402
from cupy_magic.backend.cupy import probe_cupy  # noqa: E402
from cupy_magic.units import parse_size  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from _results import add_out, stamp, write  # noqa: E402
from stream_bench import TRANSFER_CELL as CELL  # noqa: E402  (the cell it streams)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="8GiB")
    ap.add_argument("--rounds", type=int, default=4)
    add_out(ap)
    args = ap.parse_args(argv)
    cp, why = probe_cupy()
    if cp is None:
        print(f"alloc_ab: no GPU visible ({why}); nothing measured")
        return 0
    use_backend("cupy")
    be: Any = backend.current()
    x = np.random.default_rng(0).random(parse_size(args.size) // 4, dtype=np.float32)
    ns: dict[str, Any] = {"np": np, "x": x}

    def cell() -> float:
        t0 = time.perf_counter()
        run_cell(CELL, ns, batch=BatchOptions(forced=True), syncs="off")
        seconds = time.perf_counter() - t0
        y = ns.pop("y")  # its page-locked block is reused by the next cell
        assert float(y[-1]) == float(np.sqrt(x[-1] * x[-1] + 1, dtype=np.float32))
        return seconds

    installed = cp.cuda.get_allocator()
    allocators = {"now": installed, "before": be._malloc}
    cell()  # first touch: locks x and the result block
    runs: dict[str, list[float]] = {"now": [], "before": []}
    order = ["now", "before", "before", "now"] * max(1, args.rounds // 2)
    try:
        for name in order:
            cp.cuda.set_allocator(allocators[name])
            runs[name].append(cell())
    finally:
        cp.cuda.set_allocator(installed)
    gb = x.nbytes / 1e9
    print(f"second cell over {x.nbytes / 2**30:.1f} GiB float32 on {be.info().name}, "
          f"order {' '.join(order)}")
    for name, times in runs.items():
        print(f"  {name:<7} " + "  ".join(f"{gb / t:5.1f}" for t in times)
              + f"  GB/s; best {gb / min(times):.1f}")
    write(args.out, f"alloc-ab-{stamp()}", {
        "device": be.info().name, "input_bytes": int(x.nbytes), "order": order,
        "seconds": runs, "best_gbps": {k: gb / min(v) for k, v in runs.items()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
