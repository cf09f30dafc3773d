"""Which inputs of a ``%%gpu`` cell are batched, how big the batches are, and how results join.

Pure logic, no device access: :mod:`cupy_magic.run.batched` measures and runs, this module
decides (:mod:`cupy_magic.run.reduce` joins the results). Batches cut the leading axis of
the batched inputs; everything else is shared.
"""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import textwrap
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..units import format_bytes
from .batchcost import (
    COST_SHARE,
    MARGIN,
    MAX_BATCH_BYTES,
    BatchCost,
    PayingBudget,
    budget_to_pay,
    rows_in_margin,
)
from .batchoptions import DEFAULT_STREAMS, MAX_STREAMS, RULES, BatchOptions
from .errors import CellError
from .graphplan import GraphNote
from .inflight import in_flight_line
from .report import IN_PLACE_ROWS
from .rowwise import XP_NAMES, RowCheck, check_cell

__all__ = [
    "COST_SHARE",
    "DEFAULT_STREAMS",
    "MAX_STREAMS",
    "PROMISE",
    "RULES",
    "BatchCost",
    "BatchOptions",
    "BatchPlan",
    "PayingBudget",
    "budget_to_pay",
    "check_rows",
    "probe_again",
    "probe_held_small",
    "probe_rows",
    "select_inputs",
    "size_rows",
]

# Measured on the H200 (a sweep of batch sizes, first session): 128 MiB batches with 3
# streams streamed fastest; larger batches fill and drain the pipeline more slowly.
TARGET_BATCH_BYTES = 128 * 2**20
PROBE_BYTES = 4 * 2**20  # the first, measuring batch: small, yet large enough to time
PROBE_SHARE = 16  # the first batch's inputs take at most 1/16 of the free budget
# values a name from an earlier cell may hold and still depend on no batched row: no call
# of a method the check cannot see (np.float32(obj) calls obj.__float__)
_PLAIN = (int, float, complex, str, bytes, np.generic, np.ndarray)
PROMISE = "each row's results depend only on that row (the promise batching relies on)"


def select_inputs(inputs: dict[str, np.ndarray], opts: BatchOptions) -> tuple[list[str], int]:
    """Choose the batched inputs and their common leading length.

    By default every input whose leading length is the largest among the inputs is batched;
    the others are uploaded once and shared by every batch.
    """
    with_rows = {n: a for n, a in inputs.items() if a.ndim >= 1}
    if opts.names is not None:
        listed = ", ".join(f"{n} {a.shape}" for n, a in inputs.items()) or "none"
        for name in opts.names:
            if name not in inputs:
                first = next(iter(inputs), "x")
                raise CellError(f"--batch names {name!r}, which is not a NumPy input of the "
                                f"cell (its NumPy inputs: {listed}); e.g. %%gpu --batch {first} "
                                f"(BatchOptions(names='{first}', forced=True) from Python)")
            if inputs[name].ndim == 0:
                raise CellError(f"--batch {name}: {name!r} is 0-d and has no rows to batch; "
                                "batch inputs with a leading axis")
        lengths = {inputs[n].shape[0] for n in opts.names}
        if len(lengths) > 1:
            shapes = ", ".join(f"{n} {inputs[n].shape}" for n in opts.names)
            raise CellError(f"--batch {','.join(opts.names)}: the inputs have different "
                            f"leading lengths ({shapes}); batch inputs whose rows match")
        return list(opts.names), lengths.pop()
    if not with_rows:
        raise CellError("the cell has no NumPy input with a leading axis to batch over; "
                        "remove --batch, or pass an array input")
    total = max(a.shape[0] for a in with_rows.values())
    return [n for n, a in with_rows.items() if a.shape[0] == total], total


def probe_rows(total: int, row_bytes: int, avoid: set[int], fixed: int | None,
               free: int | None = None) -> int:
    """Rows of the first, measuring batch.

    Small (a few MiB, and a small share of the free budget: temporaries are not known yet),
    and different from every other length among the inputs' axes, so that a result whose
    leading length equals the batch's rows is told apart from one that does not.
    """
    if fixed is not None:
        # The later batches keep the size asked for (--batch-rows, or the rows --batch-bytes
        # holds: BatchOptions.fixed_rows); the first one only must not coincide with another
        # axis length, or a reduction of that length would pass for rows.
        rows = min(fixed, total)
        candidates = itertools.chain(range(rows, 0, -1), range(rows + 1, total + 1))
        return next((r for r in candidates if r not in avoid), rows)
    cap = PROBE_BYTES if free is None else min(PROBE_BYTES, max(free, 0) // PROBE_SHARE)
    rows = max(1, min(total, cap // max(row_bytes, 1), max(total // 8, 1)))
    while rows in avoid and rows < total:
        rows += 1
    return rows


def probe_again(rows: int, avoid: set[int]) -> int | None:
    """Rows of the first batch measured again after ``rows`` went over the budget, or
    ``None`` when no smaller batch is left (one row went over).

    The first batch is sized before anything is measured: its share of the budget bounds
    its inputs, not what the cell holds beside them (temporaries, and on the CPU fallback
    the Python objects the cell builds once, such as its checked NumPy functions: 80 KB for
    a Black-Scholes cell, more than its 1,250 rows took). Half as many rows are measured
    again, different from every other axis length as :func:`probe_rows` keeps them; what
    the cell built once stays built, so the second measure is of the rows.
    """
    if rows <= 1:
        return None
    half = rows // 2
    return next((r for r in range(half, 0, -1) if r not in avoid), 1)


def probe_held_small(first: int, total: int, row_bytes: int, fixed: int | None,
                     free: int | None) -> bool:
    """Whether the budget (``free`` bytes left) made the first batch's ``first`` rows fewer
    than :func:`probe_rows` picks without one (a batch too small to show a large batch's
    upload rate)."""
    if fixed is not None or free is None:
        return False
    return first < probe_rows(total, row_bytes, set(), None) \
        and max(free, 0) // PROBE_SHARE < PROBE_BYTES


def size_rows(total: int, row_bytes: int, peak_row_bytes: float, free: int | None,
              streams: int, opts: BatchOptions, cost: BatchCost | None = None) -> tuple[int, str]:
    """Rows per batch after the first, and how that size was chosen.

    Parameters
    ----------
    total
        Rows of the batched inputs.
    row_bytes
        Input bytes per row (all batched inputs).
    peak_row_bytes
        Peak pool bytes per row measured on the first batch (inputs, temporaries, outputs).
    free
        Budget bytes left (``None``: no budget).
    streams
        Batches in flight.
    opts
        The user's options; a fixed size wins.
    cost
        The first batch's measured cost: batches grow past 128 MiB of input, up to
        :data:`MAX_BATCH_BYTES`, until that cost is at most :data:`COST_SHARE` of their
        transfer time, where the budget allows.
    """
    fixed = opts.fixed_rows(row_bytes)
    if fixed is not None:
        return max(1, min(fixed, total)), "--batch-rows" if opts.rows else "--batch-bytes"
    target = max(1, TARGET_BATCH_BYTES // max(row_bytes, 1))
    want, why = target, "128 MiB of input per batch (fastest measured on the H200)"
    pay = cost.rows_to_pay(row_bytes) if cost is not None else 0
    if cost is not None and pay > target:
        want = min(pay, max(target, MAX_BATCH_BYTES // max(row_bytes, 1)))
        why = (f"{format_bytes(want * row_bytes)} of input per batch, so that the cost of a "
               f"batch ({cost.seconds * 1e3:.2f} ms, measured) stays under {COST_SHARE:.0%} "
               "of its transfer" + (f" (at most {format_bytes(MAX_BATCH_BYTES)})"
                                    if want < pay else ""))
    if free is None:
        return min(total, want), why
    if (fit := rows_in_margin(free, streams, peak_row_bytes)) < 1:
        raise CellError(
            f"one row of the batched inputs needs {format_bytes(peak_row_bytes)} in the pool "
            f"(measured) and {streams} streams need {format_bytes(streams * peak_row_bytes)}, "
            f"but the budget leaves {format_bytes(free)}; try --streams 1, --dtype float32 or "
            "a larger %vram_budget (BatchOptions(streams=1), dtype='float32' or "
            "cupy_magic.set_budget from Python)")
    if fit < want:
        return min(total, fit), (f"measured {format_bytes(peak_row_bytes)} per row in the pool; "
                                 f"{streams} batch{'es' * (streams != 1)} in flight "
                                 f"fit{'s' * (streams == 1)} {MARGIN:.0%} of the free budget")
    return min(total, want), why if want > target else \
        "128 MiB of input per batch (the budget allows more)"


@dataclass
class BatchPlan:
    """What a batched run did: inputs, batch sizes, streams, and how results were joined."""

    batched: tuple[str, ...]
    shared: tuple[str, ...]
    total_rows: int
    row_bytes: int
    streams: int
    reason: str
    first_rows: int = 0
    rows: int = 0
    batches: int = 0
    peak_row_bytes: float = 0.0
    sized_by: str = ""
    gathered: tuple[str, ...] = ()
    reduced: dict[str, str] = field(default_factory=dict)
    staged_batches: int = 0
    # what went through the staging buffers, and why: {"x": "input not page-locked (yet)"}
    staged: dict[str, str] = field(default_factory=dict)
    # (slot, start s, end s) of each batch: device time from CUDA events on a GPU; recorded
    # only with --timeline (BatchOptions.timeline), like the phases
    timeline: tuple[tuple[int, float, float], ...] = ()
    # host seconds of the run's phases: setup, first batch, full batch (run.inflight), warm-up,
    # batches, finish (a report line with --timeline)
    phases: dict[str, float] = field(default_factory=dict)
    # the first batch's measured cost (issue 20), and the budget at which batches would pay
    # for it when the budget holds them smaller
    cost: BatchCost | None = None
    full_speed: PayingBudget | None = None
    # what the run did about replaying its batches as CUDA graphs (None: nothing to say)
    graph: GraphNote | None = None
    # of the gathered results, batched inputs written into the user's arrays (changed in place)
    in_place: tuple[str, ...] = ()
    # batches in flight (0: streams) and a full batch's bytes beyond its rows (run.inflight)
    in_flight: int = 0
    batch_fixed: int = 0
    sized_for: int = 0  # the batches in flight the batches were resized for (0: not resized)

    @property
    def full_speed_budget(self) -> int | None:
        """The budget the report names (:class:`PayingBudget`), or ``None`` (none, or none
        larger than the one in use)."""
        return None if self.full_speed is None else self.full_speed.named(self.rows)

    @property
    def overlap(self) -> float | None:
        """Batches in flight on average: the batches' summed time over the run's span."""
        if not self.timeline:
            return None
        span = max(e for _, _, e in self.timeline) - min(s for _, s, _ in self.timeline)
        busy = sum(e - s for _, s, e in self.timeline)
        return busy / span if span > 0 else None

    @property
    def in_flight_bytes(self) -> int:
        """Pool bytes the batches in flight may take (measured bytes per row x rows, and
        what a full batch took beyond its rows)."""
        per_row = max(self.peak_row_bytes, float(self.row_bytes))
        return int(min(self.lanes, self.batches) * (self.rows * per_row + self.batch_fixed))

    @property
    def lanes(self) -> int:
        """Batches in flight together (the streams in use)."""
        return self.in_flight or self.streams

    def lines(self, host: bool = False) -> list[str]:
        """The plan as plain-text report lines (``host``: as the CPU fallback ran it)."""
        both = ", ".join(self.batched)
        flight = format_bytes(self.in_flight_bytes)
        sized = self.sized_for or self.streams
        kept = f", kept as if {self.lanes}" if self.lanes < sized else ""
        lanes = (f"{self.batches} batches one after another (no CUDA streams on the CPU; "
                 f"sized as if {sized} were in flight{kept}, {flight})" if host else
                 f"{self.batches} batches, {self.lanes} stream{'s' * (self.lanes != 1)}, "
                 f"{flight} in flight")
        pool = "in memory" if host else "in the pool"
        out = [f"  batch {both} over the leading axis ({self.total_rows:,} rows, "
               f"{format_bytes(self.row_bytes * self.total_rows)}): {self.reason}",
               f"  batch relies on: {PROMISE}",
               f"  batch plan: first batch {self.first_rows:,} row{'s' * (self.first_rows != 1)}"
               f" (measured {format_bytes(self.peak_row_bytes)}/row peak {pool}), then "
               f"{self.rows:,} row{'s' * (self.rows != 1)} per batch; {lanes}; sized by "
               f"{self.sized_by.replace('in the pool', pool)}"]
        if self.lanes < self.streams:
            out.append(in_flight_line(self.lanes, self.streams, self.rows, self.batch_fixed, host))
        if self.shared:
            once = "copied once" if host else "uploaded once"
            out.append(f"  batch shared by every batch ({once}): {', '.join(self.shared)}")
        if self.cost is not None:
            out.extend("  " + line for line in self.cost.lines(
                self.rows, self.total_rows - self.first_rows, self.row_bytes, self.sized_by,
                self.full_speed))
        if self.graph is not None:
            out.extend("  " + line for line in self.graph.lines(self.batches))
        joined = [f"{n} ({IN_PLACE_ROWS if n in self.in_place else 'rows gathered on the host'})"
                  for n in self.gathered]
        joined += [f"{n} ({r})" for n, r in self.reduced.items()]
        if joined:
            out.append(f"  batch results: {', '.join(joined)}")
        if self.overlap is not None:
            span = max(e for _, _, e in self.timeline)
            out.append(f"  batch timeline: {len(self.timeline)} batches in {span:.3f} s, "
                       f"{self.overlap:.1f} in flight on average (BatchPlan.timeline)")
        if self.phases and self.timeline:
            out.append("  batch phases: " + ", ".join(f"{k} {v:.3f} s"
                                                       for k, v in self.phases.items()))
        if self.staged_batches:
            why = "; ".join(f"{n}: {w}" for n, w in self.staged.items())
            out.append(f"  batch {self.staged_batches} batches staged through pinned buffers"
                       + (f" ({why})" if why else ""))
        return out

    def __str__(self) -> str:
        return "\n".join(line.strip() for line in self.lines())


def check_rows(source: str, inputs: Mapping[str, Any], batched: Iterable[str],
               namespace: Mapping[str, Any], xp: Iterable[str], reason: str,
               asked: bool, rules: Mapping[str, str] | None = None) -> RowCheck:
    """Refuse a batched run that would give other results than the whole cell.

    ``asked``: batched on request (``--batch``, ``--devices``, a cluster), where only a
    certain mix stops the cell; otherwise (batched because the inputs exceed the budget)
    any place the check cannot follow stops it too, naming ``--batch`` as the way to promise.
    ``rules``: the ``--reduce`` rules, each checked against what its result holds. Returns
    the check (:class:`.rowwise.RowCheck`): the names the cell leaves holding a value over a
    batch's rows without a rule (``over_rows``: the batched run keeps none of them), and
    those bound to values that depend on no batched row (``row_free``: a NumPy scalar among
    them is kept where every batch agrees).
    """
    batched = tuple(batched)
    check = check_cell(source, {n: np.ndim(inputs[n]) for n in batched}, rules or {},
                       (*xp, *XP_NAMES),
                       lambda name: type(namespace.get(name)).__name__ == "ufunc",
                       lambda name: _definition(namespace.get(name)),
                       lambda name: _generator(namespace.get(name)),
                       lambda name: isinstance(namespace.get(name), _PLAIN),
                       {n: tuple(np.shape(inputs[n])[1:]) for n in batched})
    found = check.found
    certain = next((m for m in found if m.certain), None)
    if certain is not None:
        whole = ("run it whole, without --batch, --devices or --cluster" if asked else
                 "run it whole under a larger %vram_budget (cupy_magic.set_budget from Python)")
        raise CellError(f"batches would give other results than NumPy on the whole array "
                        f"({reason}): {certain.describe()}; split the cell: what needs all "
                        "the rows in a cell of its own (a total kept with a rule, e.g. "
                        "--reduce NAME=mean; BatchOptions(reduce={'NAME': 'mean'}) from "
                        f"Python), the row-wise part in the next; or {whole}")
    if found and not asked:
        raise CellError(f"{reason}, and batching it would rely on each row's results "
                        f"depending only on that row, which the check cannot see at "
                        f"{found[0].describe()}; if that holds, run %%gpu --batch "
                        "(batch=BatchOptions(forced=True) from Python), else a larger "
                        "%vram_budget (cupy_magic.set_budget from Python)")
    return check


def relied_on(check: RowCheck, how: str = "--batch") -> list[str]:
    """Report notes for the places a batched run went on the user's word (``how``: the
    option that asked for it):
    where the row check could not see whether the cell keeps its rows apart. A batch that
    breaks the promise there gives other results than NumPy on the whole array, which no
    check after the run can tell, so the report names each place."""
    return [f"batched on your word ({how}) at {m.describe()}: the check could not confirm "
            "that each row's results depend only on that row there; if they do not, the "
            "results differ from NumPy's on the whole array: run the cell whole to be sure"
            for m in check.found if not m.certain]


def _generator(obj: Any) -> bool:
    """Whether ``obj`` is a random generator (NumPy's or CuPy's): each batch would draw
    its own numbers from it."""
    module = type(obj).__module__ or ""
    return module.split(".")[0] in ("numpy", "cupy") and ".random" in module


def _definition(obj: Any) -> ast.FunctionDef | None:
    """A Python function's definition from its source (an earlier cell's: IPython keeps the
    cells' text), or None where there is none to read."""
    if not inspect.isfunction(obj):
        return None
    target = inspect.unwrap(obj)  # as inspect.getsource reads a wrapped function
    return _parsed(target.__code__) if inspect.isfunction(target) else None


@functools.lru_cache(maxsize=1024)
def _parsed(code: types.CodeType) -> ast.FunctionDef | None:
    """The definition of the function of ``code``, read and parsed once per code object (a
    cell calling a function paid its reading and parsing every run: ``y = scale(v, 2)``, a
    three-line function from a file, ran in 1.01 ms on the CPU fallback against 0.73 ms
    with this, best of 300). A cell that defines the function again makes a new code
    object; the trees are only read."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(code)))
    except (OSError, TypeError, SyntaxError):
        return None
    node = tree.body[0] if tree.body else None
    return node if isinstance(node, ast.FunctionDef) else None
