"""What a ``%%gpu`` cell costs beyond its own work, and where that time goes (issue 20).

``peer_bench.py`` measured the ``small_loop`` cell (300 steps of ``y = y * 0.999 + 0.001`` on
10,000 float32) at 1.38x the hand port on the H200 (10.11 against 7.31 ms), and
``stream_bench.py`` a tiny cell (``y = a + 1``) at 2.6 ms through ``run_cell`` against 0.05 ms
plain: a fixed cost per cell of the same size as the gap. This times, in one process:

- ``tiny``: ``y = a + 1`` on 10 elements, plain ``exec`` on the device against
  :func:`cupy_magic.run_cell` (median of ``--reps``), with ``syncs`` ``"warn"`` and ``"off"``;
- ``small_loop``: the same for peer_bench's cell, ``to_host=["y"]`` as the hand port brings
  ``y`` back;

each cell through the ``%%gpu`` magic of a real IPython shell (``--quiet``, with ``--to-host
y`` where the cell brings ``y`` back): what the magic adds to ``run_cell`` (reading its options
line, the shell's transform of the cell, the shell's own magic call), where IPython is
installed;

and each cell through ``run_cell`` in a namespace of 3,000 more names (``_i0`` ... ``_i2999``:
IPython keeps every cell's text as ``_iN``, so a long session's cells run against thousands of
names; since 2026-12-04T15 the commit and the checks scan them in C), and in that namespace
with a million-item list and dict of numbers beside it (``cell_big_holders_ms``: the CPU
fallback's commit copied each to look for arrays in it, 50 ms a container a cell, until
2026-12-07T18);

then profiles ``--profile-reps`` tiny cells (a tenth as many small loops) through ``run_cell``
with :mod:`cProfile` and records the functions with the most time of their own and the
most time under them.

Usage::

    python benchmarks/cell_overhead.py [--reps 200] [--profile-reps 300] [--out DIR]

Prints the figures and writes ``cell-overhead-<UTC time>-<gpu|host>.json`` under ``--out``
(``benchmarks/results``). Without a GPU it runs on the CPU fallback (NumPy), labelled ``host``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _results import add_out, stamp, write
from _shell import ipython_shell, started_backend

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LONG_SESSION_NAMES = 3000  # a namespace after about 1,500 cells (each leaves _iN, many _N)
BIG_HOLDER = 1_000_000  # items of the list and the dict beside the cell (not its inputs)
CELLS = {
    "tiny": ("y = a + 1\n", 10, None),
    "small_loop": ("y = a\nfor _ in range(300):\n    y = y * 0.999 + 0.001\n", 10_000, ["y"]),
}


def _median_ms(fn: Any, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def _paired_ms(first: Any, second: Any, reps: int) -> tuple[float, float]:
    """The median of ``first``, and the median of its time less ``second``'s, run in turn
    (so that a slower stretch of the machine weighs on both alike)."""
    firsts, diffs = [], []
    for _ in range(reps):
        t = time.perf_counter()
        first()
        t1 = time.perf_counter()
        second()
        t2 = time.perf_counter()
        firsts.append(t1 - t)
        diffs.append((t1 - t) - (t2 - t1))
    return statistics.median(firsts) * 1e3, statistics.median(diffs) * 1e3


def _top(stats: pstats.Stats, key: str, n: int = 25) -> list[dict[str, Any]]:
    rows = []
    for (path, line, name), (_cc, calls, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append({"function": f"{Path(path).name}:{line}({name})", "calls": calls,
                     "tottime_s": tt, "cumtime_s": ct})
    rows.sort(key=lambda r: r[key], reverse=True)
    return rows[:n]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--profile-reps", type=int, default=300)
    add_out(ap)
    args = ap.parse_args()

    import cupy_magic

    be, label = started_backend()  # as at %load_ext
    xp = be.xp

    def sync() -> None:
        if be.is_gpu:
            xp.cuda.Device().synchronize()

    fig: dict[str, Any] = {}
    for name, (code, n, to_host) in CELLS.items():
        compiled = compile(code, f"<{name}>", "exec")
        host_a = np.arange(n, dtype=np.float32)
        dev_a = xp.asarray(host_a)

        def plain(compiled: Any = compiled, dev_a: Any = dev_a, to_host: Any = to_host) -> None:
            ns = {"np": xp, "a": dev_a}
            exec(compiled, ns)
            if to_host and be.is_gpu:
                ns["y"].get()
            sync()

        def cell(syncs: str, code: str = code, host_a: Any = host_a,
                 to_host: Any = to_host) -> None:
            cupy_magic.run_cell(code, {"np": np, "a": host_a}, to_host=to_host or False,
                                syncs=syncs)

        plain()
        cell("warn")
        row = {"plain_ms": _median_ms(plain, args.reps),
               "cell_ms": _median_ms(lambda cell=cell: cell("warn"), args.reps),
               "cell_syncs_off_ms": _median_ms(lambda cell=cell: cell("off"), args.reps)}
        shell = ipython_shell()
        if shell is not None:  # the same cell typed under %%gpu
            shell.user_ns.update(np=np, a=host_a)
            line = "--quiet" + (" --to-host " + ",".join(to_host) if to_host else "")
            magic, over = _paired_ms(
                lambda shell=shell, line=line, code=code: shell.run_cell_magic("gpu", line, code),
                lambda cell=cell: cell("warn"), args.reps)
            row["magic_ms"], row["magic_over_run_cell_ms"] = magic, over
        row["overhead_ms"] = row["cell_ms"] - row["plain_ms"]
        row["ratio"] = row["cell_ms"] / row["plain_ms"]
        # the same cell in a long session's namespace: IPython keeps _iN (and _N) per cell
        long_ns = {f"_i{i}": f"x = {i}\n" for i in range(LONG_SESSION_NAMES)}
        long_ns.update(np=np, a=host_a)  # one namespace, as a session's (the cell rebinds y)
        row["cell_long_session_ms"] = _median_ms(
            lambda code=code, ns=long_ns, to_host=to_host: cupy_magic.run_cell(
                code, ns, to_host=to_host or False), args.reps)
        # and beside a million-item list and dict of plain numbers (a data scientist's rows)
        big_ns = {**long_ns, "rows": list(range(BIG_HOLDER)),
                  "index": dict.fromkeys(range(BIG_HOLDER), 0.0)}
        row["cell_big_holders_ms"] = _median_ms(
            lambda code=code, ns=big_ns, to_host=to_host: cupy_magic.run_cell(
                code, ns, to_host=to_host or False), max(args.reps // 10, 5))
        fig[name] = row
        print(f"{name:11s} plain {row['plain_ms']:8.3f} ms   run_cell {row['cell_ms']:8.3f} ms "
              f"(syncs off {row['cell_syncs_off_ms']:8.3f}; {LONG_SESSION_NAMES:,} more names "
              f"{row['cell_long_session_ms']:8.3f}; and {BIG_HOLDER:,}-item list and dict "
              f"{row['cell_big_holders_ms']:8.3f})   overhead {row['overhead_ms']:.3f} ms"
              f"   x{row['ratio']:.2f}")
        if "magic_ms" in row:
            print(f"{'':11s} %%gpu {row['magic_ms']:8.3f} ms: "
                  f"{row['magic_over_run_cell_ms'] * 1e3:.0f} us over run_cell (median of the "
                  "differences, run in turn)")

    profiles: dict[str, Any] = {}
    for name, (code, n, to_host) in CELLS.items():  # small_loop: a tenth of the runs
        host_a = np.arange(n, dtype=np.float32)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.profile_reps if name == "tiny" else max(1, args.profile_reps // 10)):
            cupy_magic.run_cell(code, {"np": np, "a": host_a}, to_host=to_host or False,
                                syncs="warn")
        prof.disable()
        for key in ("tottime", "cumulative"):
            text = io.StringIO()
            pstats.Stats(prof, stream=text).sort_stats(key).print_stats(25)
            print(f"--- {name}, by {key}\n{text.getvalue()}")
        stats = pstats.Stats(prof)
        profiles[name] = {"tottime": _top(stats, "tottime_s"), "cumtime": _top(stats, "cumtime_s")}

    write(args.out, f"cell-overhead-{stamp()}-{label}", {
        "benchmark": "cell_overhead", "backend": label, "device": be.info().name,
        "reps": args.reps, "profile_reps": args.profile_reps, "cells": fig,
        "profiles": profiles})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
