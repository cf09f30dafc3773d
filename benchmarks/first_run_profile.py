"""Where a cell's first run in a fresh process goes after ``scripts/warm-cache`` (issue 20).

``peer_bench.py`` records the first run after warm-cache at 1.25x to 15x the warm time. This
runs ``scripts/warm-cache`` over ``peer_bench``'s cells once, then, for each cell, a fresh
process that loads cupy_magic, waits for the load's first launch, and runs the cell twice
under ``cProfile``; it prints each run's wall time and the functions that took the most time
of their own (``tottime``) and in all (``cumtime``) in the first run, and records both runs'
tops.

Usage::

    python3 benchmarks/first_run_profile.py [--out DIR] [--cells pricing,matmul]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _results import add_out, stamp, write
from peer_bench import CELLS, HERE, ROOT, _notebook

TOP = 25


def child(name: str, scale: float) -> None:
    """The first and second run of ``name`` in this fresh process, profiled; one JSON line."""
    import cProfile
    import io
    import pstats
    import time

    import numpy as np
    from peer_bench import make_inputs

    import cupy_magic
    from cupy_magic import backend

    cupy_magic.device_info()
    backend.current().preheated.wait(60)
    _, code, results, _ = CELLS[name]
    out: dict[str, Any] = {}
    for run in ("first", "second"):
        ns = {"np": np, **make_inputs(name, scale)}
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        cupy_magic.run_cell(code, ns, to_host=results)
        prof.disable()
        out[f"{run}_s"] = time.perf_counter() - t0
        for key in ("tottime", "cumtime"):
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(TOP)
            lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
            out[f"{run}_{key}"] = lines[-(TOP + 1):]
    print(json.dumps(out))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_out(ap)
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--scale", type=float, default=1.0)
    args = ap.parse_args(argv)
    cache = tempfile.mkdtemp(prefix="first-prof-")
    env = {**os.environ, "CUPY_CACHE_DIR": cache}
    nb = Path(cache) / "peer_cells.ipynb"
    _notebook(nb, args.scale)
    subprocess.run([sys.executable, str(ROOT / "scripts" / "warm-cache"), str(nb)], env=env,
                   capture_output=True, text=True, cwd=ROOT, check=True)
    record: dict[str, Any] = {}
    for name in args.cells.split(","):
        code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); import first_run_profile; "
                f"first_run_profile.child({name!r}, {args.scale!r})")
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, cwd=ROOT, check=True)
        rec = record[name] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"== {name}: first {rec['first_s'] * 1e3:.1f} ms, second "
              f"{rec['second_s'] * 1e3:.1f} ms (both under cProfile)")
        for key in ("first_tottime", "first_cumtime"):
            print(f"-- {key}")
            print("\n".join(rec[key]))
    write(args.out, f"first-run-profile-{stamp()}-gpu", record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
