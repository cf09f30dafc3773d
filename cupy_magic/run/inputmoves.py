"""The copies of a cell's inputs on the device, and whether they fit its budget.

Shared by the whole and the batched run (:mod:`cupy_magic.run.whole`,
:mod:`cupy_magic.run.batched`); what the cell is comes from :mod:`.plan`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..backend import Backend, BudgetExceeded
from ..compat.views import stands_strided
from ..units import dtype_name, format_bytes
from .batching import BatchOptions
from .overlap import Span, move_overlaps, shared_spans, spans_words, strided_spans
from .plan import CellPlan, cast_target
from .report import InputMove

__all__ = ["batch_reason", "check_budget", "has_rows", "input_shortfall", "inputs_need",
           "move_inputs", "shared_input_spans", "streamed_rows"]


def move_inputs(plan: CellPlan, dtype: str | None,
                be: Backend) -> tuple[dict[str, Any], list[InputMove]]:
    """Copy the plan's inputs to the device (cast under ``--dtype``); the report's rows."""
    moved: dict[str, Any] = {}
    moves: list[InputMove] = []
    shared = move_overlaps(plan.inputs, shared_input_spans(plan, dtype), be)
    for name, arr in plan.inputs.items():
        if name in shared:
            moved[name], move = shared[name]
            moves.append(move)
            continue
        cast_from, saved, host, cast_s = "", 0, arr, 0.0
        target = cast_target(arr, dtype)
        if target != arr.dtype:
            t0 = time.perf_counter()
            host = arr.astype(target)
            host.flags.writeable = arr.flags.writeable  # read-only stays read-only
            cast_from, saved = dtype_name(arr.dtype), arr.nbytes - host.nbytes
            cast_s = time.perf_counter() - t0
        t = be.to_device(host)
        moved[name] = t.array
        if not (arr.flags.c_contiguous or arr.flags.f_contiguous):  # its ravel: a copy
            stands_strided(t.array)
        moves.append(InputMove(name, t.nbytes, t.seconds + cast_s, t.pinned, dtype_name(host.dtype),
                               cast_from, saved))
    return moved, moves


def batch_reason(plan: CellPlan, opts: BatchOptions | None,
                 be: Backend, dtype: str | None) -> str:
    """Why the cell is run in batches, or ``""`` when it runs whole."""
    if opts is not None and opts.requested:
        return "asked for with --batch" + (f"-rows {opts.rows}" if opts.rows else "") + \
            (f"-bytes {format_bytes(opts.nbytes)}" if opts.nbytes else "")
    if not has_rows(plan.inputs):
        return ""
    short = input_shortfall(plan, dtype, be)
    if short is None or be.limit is None:
        return ""
    need, free = short
    budget = "VRAM budget" if be.is_gpu else "memory budget (host; the VRAM budget on a GPU)"
    return (f"the inputs need {format_bytes(need)} but the {budget} of "
            f"{format_bytes(be.limit)} leaves {format_bytes(max(free, 0))}")


def has_rows(inputs: dict[str, np.ndarray]) -> bool:
    """Whether an input has a leading axis of more than one row (the cell can be batched)."""
    return any(a.ndim >= 1 and a.shape[0] > 1 for a in inputs.values())


def input_shortfall(plan: CellPlan, dtype: str | None, be: Backend) -> tuple[int, int] | None:
    """``(bytes the inputs need, bytes the budget leaves)`` when they do not fit, else None."""
    free = be.budget_left()
    need = 0 if free is None or not plan.inputs else inputs_need(plan, dtype)
    return (need, free) if free is not None and need > free else None


def shared_input_spans(plan: CellPlan, dtype: str | None) -> dict[tuple[str, ...], Span]:
    """The plan's groups of inputs sharing memory that move as one stretch of bytes, and the
    strided inputs the cell may change that move as the stretch that holds them."""
    def cast(a: np.ndarray) -> bool:
        return cast_target(a, dtype) != a.dtype

    spans = shared_spans(plan.inputs, plan.overlaps, cast, plan.only_read) \
        if plan.overlaps else {}
    # nothing the cell may change; or it sorts in place, which CuPy does only on a
    # contiguous array (the strided view's device copy stays one)
    if plan.sorts_in_place or plan.only_read.issuperset(plan.inputs):
        return spans
    return {**spans, **strided_spans(plan.inputs, plan.overlaps, cast, plan.only_read)}


def inputs_need(plan: CellPlan, dtype: str | None) -> int:
    """Device bytes of the inputs' copies (after ``--dtype``; inputs sharing memory copied as
    the one stretch that holds them, :mod:`.overlap`); whole when they fit the budget
    (:func:`input_shortfall`)."""
    spans = shared_input_spans(plan, dtype)
    shared = {n for group in spans for n in group}
    return sum(a.size * cast_target(a, dtype).itemsize for n, a in plan.inputs.items()
               if n not in shared) + sum(s.host.nbytes for s in spans.values())


def check_budget(plan: CellPlan, dtype: str | None, be: Backend) -> None:
    """Refuse, before anything moves, a whole cell whose inputs do not fit the budget."""
    short = input_shortfall(plan, dtype, be)
    if short is None or be.limit is None:
        return
    need, free = short
    sizes = ", ".join(f"{n} ({format_bytes(a.nbytes)})" for n, a in plan.inputs.items())
    hint = "" if dtype else (", --dtype float32 (dtype='float32' from Python) to halve float64 "
                             "inputs")
    # batching cannot keep inputs that share memory apart when the cell may change them
    changed = plan.changed_overlaps
    data = f"copying one in a plain cell first ({changed[0][-1]} = {changed[0][-1]}.copy())" \
        if changed else "batching the data"
    # The words of the report (report.py): on the CPU fallback the budget is one of host
    # memory, and there are no cached blocks to release.
    budget, last = (("VRAM budget", ", a larger %vram_budget (cupy_magic.set_budget), or "
                     "releasing cached blocks (cupy_magic.free_cached())") if be.is_gpu
                    else ("memory budget (host)",
                          " or a larger %vram_budget (cupy_magic.set_budget)"))
    raise BudgetExceeded(
        f"the cell's inputs {sizes} need {format_bytes(need)} but the {budget} "
        f"{format_bytes(be.limit)} leaves {format_bytes(max(free, 0))}"
        f"{spans_words(shared_input_spans(plan, dtype), plan.inputs)}; try {data}{hint}{last}",
        explained=True)


def streamed_rows(inputs: dict[str, np.ndarray], dtypes: dict[str, np.dtype],
                  direct: Any, seconds: float) -> list[InputMove]:
    """The report's rows for the inputs a batched run streamed in ``seconds`` (``direct``:
    the engine's test of whether an input's rows were copied without staging)."""
    rows = []
    for name, arr in inputs.items():
        dt = dtypes[name]
        moved = arr.size * dt.itemsize
        rows.append(InputMove(name, moved, seconds, direct(arr, dt), dt.name,
                              arr.dtype.name if dt != arr.dtype else "", arr.nbytes - moved,
                              streamed=True))
    return rows
