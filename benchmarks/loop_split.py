"""Where the small loop's time goes, before, inside and after its loop (issue 20).

``peer_bench.py``'s small loop (300 steps of ``y = y * 0.999 + 0.001`` on 10,000 float32)
runs through ``%%gpu --to-host`` at 1.08 to 1.12 of the hand port on an H100, about 0.5 to
0.7 ms more, of which ``allocator_cost.py`` put 0.17 ms on the allocator and 0.29 to 0.41
on a cell's fixed cost. This splits each run at two marks the cell itself takes
(``mark(now())`` before ``y = v`` and after the loop: ``time.perf_counter`` into a list):

- ``pre``: from the call to the first mark (the hand port: ``cupy.asarray`` of the input;
  ``run_cell``: planning, moving the input, opening the measurements);
- ``loop``: between the marks (the host's launches; the same code in both);
- ``post``: from the second mark to the return (the hand port: ``cupy.asnumpy`` of ``y``,
  which waits for the GPU; ``run_cell``: the timing event's wait, the commit, the report).

Rows, timed in turn (best of ``--repeats`` each, a, b, b, a): ``hand`` (CuPy's default pool),
``hand_measured`` (cupy_magic's allocator inside ``track_memory``, the cell's own allocator
state), ``cell`` (``run_cell(..., to_host=("y",))``) and ``cell_syncs_off``. Then
``--profile`` runs of the cell under :mod:`cProfile`: the functions with most time of their
own, in microseconds per cell; and ``--stages`` runs of it, and of a one-step cell on 16
elements, with the stages of a run (:data:`STAGES`, the backend's :data:`CONTEXTS`) timed
by wrappers (no profiler's cost per call): microseconds per cell in each, with what it
calls.

Usage::

    python3 benchmarks/loop_split.py [--repeats 200] [--profile 300] [--out DIR]

Writes ``loop-split-<UTC time>-<gpu|host>.json``. Without a GPU it runs on the CPU fallback
(NumPy), where the cell runs under ``tracemalloc`` and a line trace (the host's budget), so
only the GPU's figures speak for issue 20.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _results import add_out, stamp, write

# the stages of a whole run, by the module attribute each is called through: the time spent
# in each (with what it calls) per cell, timed by wrappers while cells run (no profiler)
STAGES = {
    "cupy_magic.session.cells": ["check_options", "to_host_names", "cluster_remote",
                                 "_run_cell", "cell_warnings"],
    "cupy_magic.run.progress": ["start", "finish"],
    "cupy_magic.view.progressbar": ["for_cell"],
    "cupy_magic.holders.account": ["note_cell"],
    "cupy_magic.run.cell": ["plan_cell", "_lint", "_recorder", "_line_record", "batch_reason",
                            "held_changes", "check_sizes", "run_whole", "_attach_records",
                            "register_source"],
    "cupy_magic.run.whole": ["check_budget", "move_inputs", "input_homes", "InputWatch",
                             "commit", "leave_copy", "shown_value", "whole_groups",
                             "_refuse_both_sides", "_let_go"],
}
CONTEXTS = ["track_memory", "time_device", "watch_compiles"]  # the backend's, enter and exit

CODE = ("mark(now())\ny = v\nfor _ in range(300):\n    y = y * 0.999 + 0.001\nmark(now())\n")


def stage_times(run: Callable[[], None], cells: int, be: Any) -> dict[str, float]:
    """Microseconds per cell spent in each of :data:`STAGES` and :data:`CONTEXTS` (with what
    they call) over ``cells`` runs of ``run``, timed by wrappers put in and taken out here."""
    import importlib

    spent: dict[str, float] = {}

    def timed(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - t0
        return wrapper

    def timed_context(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @contextlib.contextmanager
        def wrapper(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            with fn(*a, **k) as got:
                spent[label + " enter"] = spent.get(label + " enter", 0.0) + \
                    time.perf_counter() - t0
                try:
                    yield got
                finally:
                    t1 = time.perf_counter()
            spent[label + " exit"] = spent.get(label + " exit", 0.0) + time.perf_counter() - t1
        return wrapper

    undo: list[tuple[Any, str, Any]] = []
    for path, names in STAGES.items():
        module = importlib.import_module(path)
        for name in names:
            undo.append((module, name, getattr(module, name)))
            setattr(module, name, timed(f"{path.rsplit('.', 1)[1]}.{name}",
                                        getattr(module, name)))
    for name in CONTEXTS:
        undo.append((be, name, None))
        setattr(be, name, timed_context(f"backend.{name}", getattr(be, name)))
    try:
        t0 = time.perf_counter()
        for _ in range(cells):
            run()
        spent["all"] = time.perf_counter() - t0
    finally:
        for owner, name, old in reversed(undo):
            if old is None:
                delattr(owner, name)  # the instance's wrapper: the class's method again
            else:
                setattr(owner, name, old)
    return {k: v / cells * 1e6 for k, v in sorted(spent.items(), key=lambda kv: -kv[1])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_out(ap)
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--profile", type=int, default=300)
    ap.add_argument("--stages", type=int, default=300, help="cells timed stage by stage")
    args = ap.parse_args(argv)
    import cupy_magic
    from cupy_magic import backend

    be = backend.current()
    v = np.random.default_rng(0).random(10_000).astype(np.float32)
    marks: list[float] = []
    # built-in callables, as a Python function's source would be read for each cell
    mark, now = marks.append, time.perf_counter

    if be.is_gpu:
        import cupy as cp

        be.preheated.wait(30)
        default = cp.get_default_memory_pool().malloc
        magic = be._allocator()

        def hand_with(alloc: Any, measured: bool) -> Callable[[], None]:
            def run() -> None:
                with cp.cuda.using_allocator(alloc), \
                        (be.track_memory("<loop_split>") if measured
                         else contextlib.nullcontext()):
                    ns = {"np": cp, "v": cp.asarray(v), "mark": mark, "now": now}
                    exec(CODE, ns)
                    cp.asnumpy(ns["y"])
            return run
        hand, hand_measured = hand_with(default, False), hand_with(magic, True)
    else:
        def hand() -> None:
            ns = {"np": np, "v": v.copy(), "mark": mark, "now": now}
            exec(CODE, ns)
            np.asarray(ns["y"])
        hand_measured = hand

    def cell() -> None:
        cupy_magic.run_cell(CODE, {"np": np, "v": v, "mark": mark, "now": now}, to_host=("y",))

    def cell_syncs_off() -> None:
        cupy_magic.run_cell(CODE, {"np": np, "v": v, "mark": mark, "now": now}, to_host=("y",),
                            syncs="off")

    rows = {"hand": hand, "hand_measured": hand_measured, "cell": cell,
            "cell_syncs_off": cell_syncs_off}
    best: dict[str, dict[str, float]] = {k: {} for k in rows}
    for fn in rows.values():
        fn()
    order = list(rows.items())
    for i in range(args.repeats):
        for name, fn in order if i % 2 == 0 else order[::-1]:
            marks.clear()
            t0 = time.perf_counter()
            fn()
            t1 = time.perf_counter()
            split = {"total": t1 - t0, "pre": marks[0] - t0, "loop": marks[1] - marks[0],
                     "post": t1 - marks[1]}
            for k, s in split.items():
                best[name][k] = min(best[name].get(k, float("inf")), s * 1e3)
    print(f"{'row':16s} {'total':>8s} {'pre':>8s} {'loop':>8s} {'post':>8s}  (best, ms)")
    for name, b in best.items():
        print(f"{name:16s} " + " ".join(f"{b[k]:8.3f}" for k in ("total", "pre", "loop",
                                                                    "post")))
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.profile):
        cell()
    prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    summed: dict[str, list[float]] = {}  # each run's cell has a file name of its own
    for (f, ln, fn), (_cc, nc, tt, ct, _callers) in stats.items():
        label = "the cell's code" if f.startswith("<gpu-cell") else f"{Path(f).name}:{ln}({fn})"
        row = summed.setdefault(label, [0.0, 0.0, 0.0])
        row[0], row[1], row[2] = row[0] + tt, row[1] + ct, row[2] + nc
    top = sorted(((tt, ct, nc, label) for label, (tt, ct, nc) in summed.items()),
                 reverse=True)[:40]
    own = [{"function": name, "own_us": tt / args.profile * 1e6,
            "under_us": ct / args.profile * 1e6, "calls": nc / args.profile}
           for tt, ct, nc, name in top]
    print("\nmost time of their own, us per cell (cProfile):")
    for r in own[:25]:
        print(f"  {r['own_us']:8.1f} {r['under_us']:8.1f} {r['calls']:6.1f}  {r['function']}")
    tiny = v[:16].copy()

    def one_step() -> None:  # the small loop's input, one step: a cell's fixed cost
        cupy_magic.run_cell("y = v + 0\n", {"np": np, "v": tiny}, to_host=("y",))

    stages = {"small_loop": stage_times(cell, args.stages, be),
              "one_step_16": stage_times(one_step, args.stages, be)}
    for what, got in stages.items():
        print(f"\nstages of {what}, us per cell (with what each calls; wrappers, no profiler):")
        for k, us in got.items():
            print(f"  {us:9.1f}  {k}")
    kind = "gpu" if be.is_gpu else "host"
    write(args.out, f"loop-split-{stamp()}-{kind}",
          {"device": be.info().name, "code": CODE, "repeats": args.repeats,
           "best_ms": best, "profile_cells": args.profile, "own_time": own,
           "stage_cells": args.stages, "stages_us": stages})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
