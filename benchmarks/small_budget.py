"""Batches under a small VRAM budget: what one batch costs, and the budget that pays for it.

Issue 20: on the H200 a Black-Scholes cell over 40M float64 rows under a 16 MB budget ran as
1,076 batches of 37,183 rows in 4.33 s (0.1 GB/s of input per array), slower than NumPy on
the CPU, and the report did not say why. The planner now measures the first batch's cost
(launches and Python beyond its upload) and, when the budget holds batches smaller than
those that pay for it (cost <= 10% of a batch's transfer), the report says so with the budget
that would run them at full speed. This runs peer_bench's pricing cell (``--to-host call``):

- ``numpy``: the cell under NumPy on the CPU;
- ``budget <B>``: ``run_cell`` under the VRAM budget ``--budget`` (16 MB, the issue's case);
- ``recommended``: under the budget that run's report named (``BatchPlan.full_speed_budget``),
  and under twice that budget (since 2026-12-04T14: the budget named should make the batches
  pay, name no budget again, and run about as fast as a larger one);
- ``no budget``: ``run_cell`` without one (batched only if the inputs do not fit);
- ``budget <B>, --no-graph``: the small budget again, every batch launched op by op
  (``BatchOptions(graph=False)``): the comparison for the CUDA-graph replay of the full
  batches (issue 20, point 2), which the ``budget <B>`` run may use; each row records the
  report's ``batch graphs`` line and how many batches replayed.

Each row records wall seconds (best of ``--repeats``), batches, rows per batch, input GB/s,
the measured cost per batch and its share of a batch's transfer, the report's ``batch cost``
lines, and whether ``call`` equals NumPy's (rtol 2e-3). On the CPU fallback (no GPU) the same
planner runs with a host budget and ``--rows`` scales the input down.

Usage::

    python benchmarks/small_budget.py [--rows 40000000] [--budget 16MB] [--repeats 3] [--out DIR]

Prints a table and writes ``small-budget-<UTC time>-<gpu|host>.{json,md}`` under ``--out``
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
from peer_bench import CELLS  # noqa: E402  (the same pricing cell)

from cupy_magic.run.batchcost import COST_SHARE  # noqa: E402
from cupy_magic.run.batchoptions import BatchOptions  # noqa: E402


def _replayed(report: Any) -> int:
    """Batches the run of ``report`` replayed from CUDA graphs."""
    plan = report.batch if report is not None else None
    return plan.graph.replayed if plan is not None and plan.graph else 0


def _row(label: str, seconds: float, report: Any, input_bytes: int, correct: bool) -> dict:
    plan = report.batch if report is not None else None
    cost = plan.cost if plan is not None else None
    return {
        "run": label, "seconds": seconds, "input_gbps": input_bytes / seconds / 1e9,
        "batches": plan.batches if plan is not None else 0,
        "rows_per_batch": plan.rows if plan is not None else 0,
        "cost_ms": cost.seconds * 1e3 if cost is not None else None,
        "cost_share": (cost.share(plan.rows, plan.row_bytes)
                       if cost is not None and plan.rows else None),
        "full_speed_budget": plan.full_speed_budget if plan is not None else None,
        "cost_lines": [ln.strip() for ln in plan.lines() if "batch cost" in ln
                       or "held small" in ln or "capped" in ln] if plan is not None else [],
        "graph_lines": [ln.strip() for ln in plan.lines() if "batch graphs" in ln]
        if plan is not None else [],
        "replayed": _replayed(report),
        "correct": correct,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=None,
                    help="rows of S, K and T (default 40M on a GPU, 2M on the CPU fallback)")
    ap.add_argument("--budget", default="16MB")
    ap.add_argument("--repeats", type=int, default=3)
    add_out(ap)
    args = ap.parse_args()

    import cupy_magic

    be, label = started_backend()
    n = args.rows or (40_000_000 if be.is_gpu else 2_000_000)
    _, code, results, _ = CELLS["pricing"]
    rng = np.random.default_rng(0)
    inputs = {k: rng.random(n) + 0.5 for k in ("S", "K", "T")}
    input_bytes = sum(a.nbytes for a in inputs.values())
    ref: dict[str, Any] = {"np": np, **inputs}
    t0 = time.perf_counter()
    exec(code, ref)
    rows = [{"run": "numpy", "seconds": time.perf_counter() - t0}]
    rows[0]["input_gbps"] = input_bytes / rows[0]["seconds"] / 1e9
    want = ref["call"]

    def cell(graph: bool = True) -> dict[str, Any]:
        ns: dict[str, Any] = {"np": np, **inputs}
        cupy_magic.run_cell(code, ns, to_host=results,
                            batch=None if graph else BatchOptions(graph=False))
        return ns

    def measured(run: str, budget: Any, graph: bool = True) -> dict:
        """The best of ``--repeats`` timed runs after a first (which compiles), with that
        run's own report; every run's result is checked against NumPy's, and each run's
        seconds and replayed batches are kept (a run decides about graphs on its own)."""
        cupy_magic.set_budget(budget)
        try:
            correct = bool(np.allclose(cell(graph)["call"], want, rtol=2e-3))
            timed: list[tuple[float, Any]] = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                ns = cell(graph)
                timed.append((time.perf_counter() - t0, cupy_magic.last_report()))
                correct = correct and bool(np.allclose(ns["call"], want, rtol=2e-3))
            seconds, report = min(timed, key=lambda t: t[0])
            row = _row(run, seconds, report, input_bytes, correct)
            row["each"] = [{"seconds": t, "replayed": _replayed(r)} for t, r in timed]
            return row
        finally:
            cupy_magic.set_budget("off")

    try:
        small = measured(f"budget {args.budget}", args.budget)
    except Exception as exc:  # e.g. inputs that fit the budget, temporaries that do not
        print(f"budget {args.budget}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
        return 1
    rows.append(small)
    launched = measured(f"budget {args.budget}, --no-graph", args.budget, graph=False)
    rows.append(launched)
    named = small["full_speed_budget"]
    if named:
        rows.append(measured(f"recommended {named:,} B", named))
        # what the budget named claims: its batches pay (cost share within COST_SHARE, and
        # it names no budget again), and a budget twice as large runs no faster
        try:  # a budget that fits the inputs runs the cell whole: its temporaries may not fit
            rows.append(measured(f"twice that, {2 * named:,} B", 2 * named))
        except Exception as exc:
            rows.append({"run": f"twice that, {2 * named:,} B", "seconds": float("nan"),
                         "input_gbps": float("nan"), "refused": str(exc).splitlines()[0]})
    rows.append(measured("no budget", "off"))
    for r in rows:
        extra = ("" if "batches" not in r else "  not batched" if not r["batches"] else
                 f"  {r['batches']:>6,} batches of {r['rows_per_batch']:>10,} rows")
        each = ", ".join(f"{e['seconds']:.3f}" + (f" ({e['replayed']} replayed)"
                                                   if e["replayed"] else "")
                         for e in r.get("each", []))
        print(f"{r['run']:<34} {r['seconds']:8.3f} s  {r['input_gbps']:6.2f} GB/s{extra}"
              + (f"  [runs: {each}]" if each else ""))
        for line in [*r.get("cost_lines", []), *r.get("graph_lines", [])]:
            print(f"    {line}")

    when = stamp()
    doc = {"benchmark": "small_budget", "backend": label, "device": be.info().name,
           "rows": n, "input_bytes": input_bytes, "budget": args.budget,
           "repeats": args.repeats, "cell": code, "runs": rows}
    md = [f"Pricing cell over {n:,} float64 rows ({input_bytes / 1e9:.2f} GB of input) on "
          f"{be.info().name} [{label}], {when}, best of {args.repeats}", "",
          "| run | s | input GB/s | batches | rows per batch | cost per batch ms | cost share "
          "| correct |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        share = r.get("cost_share")
        cost = r.get("cost_ms")
        md.append(f"| {r['run']} | {r['seconds']:.3f} | {r['input_gbps']:.2f} | "
                  f"{r.get('batches', '')} | {r.get('rows_per_batch', '')} | "
                  f"{'' if cost is None else f'{cost:.2f}'} | "
                  f"{'' if share is None else f'{share:.0%}'} | {r.get('correct', '')} |")
    md += ["", *(f"- {r['run']}: {line}" for r in rows
                 for line in [*r.get("cost_lines", []), *r.get("graph_lines", [])])]
    md += ["", "Each timed run (the table's figures and lines are the fastest one's, from its "
           "own report; every run's result checked against NumPy's):", "",
           *(f"- {r['run']}: " + ", ".join(f"{e['seconds']:.3f} s, {e['replayed']} replayed"
                                             for e in r["each"]) for r in rows if r.get("each"))]
    graphs = (f"CUDA graphs under {args.budget}: {small['replayed']} of {small['batches']} "
              f"batches replayed, {small['seconds']:.3f} s against {launched['seconds']:.3f} s "
              f"with --no-graph ({launched['seconds'] / small['seconds']:.2f}x)"
              + ("" if be.is_gpu else "; the CPU fallback has no graphs: both runs are the "
                 "same, their difference is noise"))
    print(graphs)
    md += ["", graphs]
    doc["graphs"] = graphs
    md += [f"- {r['run']}: refused: {r['refused']}" for r in rows if "refused" in r]
    if named:
        rec, twice = rows[3], rows[4]
        share = rec["cost_share"]
        pays = ("not batched (the inputs fit)" if share is None else
                f"cost share {share:.0%} (within {COST_SHARE:.0%}: {share <= COST_SHARE})")
        then = (f"{twice['seconds']:.3f} s under twice that budget" if "refused" not in twice
                else f"twice that budget refused the cell ({twice['refused'][:120]}...)")
        verdict = (f"the budget named: {pays}, names a budget again: "
                   f"{bool(rec['full_speed_budget'])}; {rec['seconds']:.3f} s against {then}")
        print(verdict)
        md += ["", verdict]
        doc["verdict"] = verdict
    write(args.out, f"small-budget-{when}-{label}", doc, "\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
