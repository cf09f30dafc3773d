"""How many batches a run under a budget keeps in flight, measured on its first full batch.

The first, measuring batch (:mod:`.firstbatch`) is small, and what it takes in the pool per
row sizes the batches after it (:func:`~.batching.size_rows`: ``streams`` batches in flight
fit :data:`~.batchcost.MARGIN` of the free budget). Some work takes pool memory that does not
grow with the rows and that a small batch does not show: CuPy sends a full reduction
(``x.max()``) through CUB, whose temporary storage comes from the pool. On an H100 (CuPy
14.2, ``benchmarks/results/cub-workspace-2026-12-07T1314-h100.txt``) it asked for 1 byte up
to 2,048 float64 elements and 42,495 bytes past them. ``mx = x.max()`` over 21,000 x 4
float64 under ``%vram_budget 160KB`` measured 312 rows (1,248 elements), planned batches of
1,178 rows on 3 streams, and was refused now and then (session 38): each stream's arena
needed that workspace on top of its rows. Measured now, a full batch took 38,367 bytes
beyond its rows, and 1 batch in flight.

So under a budget, the first batch of the planned size runs alone (on the measuring batch's
slot, whose arena it then leaves as later batches need it) and is measured too: what it took
beyond its rows at the first batch's rate is an amount per batch, and the run keeps as many
batches in flight as fit the free budget with it (at least one: that batch just ran).
"""

from __future__ import annotations

import gc
from typing import Any

from ..units import format_bytes
from . import progress
from .batchcost import MARGIN, rows_in_margin

__all__ = ["batches_in_flight", "fit_in_flight", "in_flight_line", "resized_why"]


def batches_in_flight(free: int, rows: int, peak_row: float, fixed: int, streams: int) -> int:
    """Batches of ``rows`` rows that fit :data:`MARGIN` of ``free`` bytes in flight together,
    each taking ``rows * peak_row + fixed`` bytes; between 1 and ``streams``.

    Examples
    --------
    >>> batches_in_flight(160_000, 1_178, 34.0, 0, 3)
    3
    >>> batches_in_flight(160_000, 1_178, 34.0, 43_008, 3)
    1
    """
    per_batch = rows * max(peak_row, 1.0) + max(fixed, 0)
    return max(1, min(streams, int(free * MARGIN // max(per_batch, 1.0))))


MEASURED = 3  # full batches run alone and measured at most (a resized one measured again)
GROW = 1.25  # batches are resized for fewer in flight only where that makes them this much larger
SHRINK = 0.9  # ... or smaller, where a full batch took this much over its share of the margin


Bounds = list[tuple[int, int]]  # (start, end) rows of the batches


def fit_in_flight(run: Any, first: int, rows: int, peak_row: float, bounds: Bounds,
                  cap: int) -> tuple[int, int, Bounds]:
    """Run the first batches of the planned size alone and measured, where a budget holds
    the run (``run.budget_left()`` not None) and they have more rows than the measuring one;
    set ``run.batch_fixed`` (pool bytes beyond its rows at ``peak_row`` per row),
    ``run.in_flight`` and, where the batches were resized, ``run.resized`` (the plan's
    reason) and ``run.n_batches``.

    - A full batch over the budget (work beyond its rows the measuring batch did not show)
      is undone and runs again on half its rows, down to the measuring batch's (which ran
      alone within the budget); a resized batch over it gives way to the last size that
      ran, and no batch is made larger after one went over. (``--batch-rows`` and
      ``--batch-bytes`` size the measuring batch too: none is measured here.)
    - The batches after a measured one are sized for as many in flight as fit
      :data:`MARGIN` of the free budget with the bytes it took beyond its rows (the most
      measured; at most ``cap`` rows, the size the budget would not limit) where that makes
      them :data:`GROW` times larger with fewer in flight than ``streams`` (the size planned
      for ``streams`` was too small for them) or :data:`SHRINK` times smaller (it took more
      than its share of the margin); the first of that size runs alone and measured too (at most
      :data:`MEASURED` in all), so that no batch size runs that has not first run alone
      within the budget.

    ``run`` is a :class:`~.batched.BatchRun` (not one over several devices: each has its own
    budget and streams); its batch ``i`` goes to slot ``i % run.in_flight``. Returns how many
    batches of ``bounds`` ran here, the rows of a full batch from then on, and the bounds
    left to run.
    """
    __tracebackhide__ = True
    free = run.budget_left()
    if (not run.fits_in_flight or free is None or not bounds or rows <= first
            or bounds[0][1] - bounds[0][0] != rows):
        return 0, rows, bounds
    streams, done, start, over, good = run.in_flight, 0, bounds[0][0], 0, (0, 0, 0)
    while start + rows <= run.total and done < MEASURED:
        run.n_batches = max(run.n_batches, 2 + done)
        run.more_partial_rows(run.n_batches)  # (batch 1 + done's row, before it runs)
        run.in_flight = 1  # alone, on the measuring batch's slot
        try:
            went_over = _measure(run, 1 + done, start, rows, peak_row, rows > first)
        finally:
            run.in_flight = streams
        if went_over:
            over = over or rows
            if good[0]:  # a resized batch over the budget: the last size that ran, and stop
                rows, run.in_flight, run.sized_for = good  # (batch_fixed: the most measured)
                break
            rows = max(first, rows // 2)
            continue
        done, start = done + 1, start + rows
        run.in_flight = batches_in_flight(free, rows, peak_row, run.batch_fixed, streams)
        good = (rows, run.in_flight, run.sized_for)
        fit = rows_in_margin(free, run.in_flight, peak_row, run.batch_fixed)
        size = max(first, min(fit, cap, run.total - start))
        grow = run.in_flight < streams and size >= rows * GROW and not over  # (fewer in
        if done == MEASURED or not (grow or size < rows * SHRINK):  # flight than planned;
            break  # none after a batch went over the budget: smaller only)
        rows, run.sized_for = size, run.in_flight
    left = [(a, min(a + rows, run.total)) for a in range(start, run.total, rows)]
    run.sized_for = run.in_flight if run.sized_for else 0  # (as the last measure found)
    if over or run.sized_for:
        run.resized = resized_why(over, run.sized_for, peak_row, run.batch_fixed)
    run.n_batches = 1 + done + len(left)
    run.more_partial_rows(run.n_batches)  # (more batches: smaller ones)
    progress.recount(run.n_batches)
    return done, rows, left


def resized_why(over: int, lanes: int, peak_row: float, fixed: int) -> str:
    """The plan's reason (``sized by ...``) for batches :func:`fit_in_flight` resized: a full
    batch of ``over`` rows went over the budget (0: none did), sized for ``lanes`` in flight
    (0: not) with ``fixed`` bytes beyond a full batch's rows.

    Examples
    --------
    >>> resized_why(0, 1, 36.1, 38_367)  # doctest: +NORMALIZE_WHITESPACE
    "measured 36 B per row in the pool and 37.47 KiB beyond a full batch's rows: 1 batch in
    flight fits 80% of the free budget"
    """
    why = [f"a full batch of {over:,} rows over the budget (work beyond its rows that the "
           "first batch did not show): fewer rows, a size that ran alone within it"] if over \
        else []
    if lanes:
        why.append(f"measured {format_bytes(peak_row)} per row in the pool and "
                   f"{format_bytes(fixed)} beyond a full batch's rows: {lanes} batch"
                   f"{'es' * (lanes != 1)} in flight fit{'s' * (lanes == 1)} {MARGIN:.0%} of "
                   "the free budget")
    return "; ".join(why)


def _measure(run: Any, i: int, a: int, rows: int, peak_row: float, retry: bool) -> bool:
    """Run batch ``i`` (rows ``a:a + rows``) alone and measured: set ``run.batch_fixed``.
    Over the budget and where it may ``retry``: undo what it left, and return True."""
    __tracebackhide__ = True
    kept = ({n: len(p) for n, p in run.partials.items()}, dict(run.written),
            set(run.moved_in_place), set(run.touched), dict(run.constants))
    try:
        with run.tracked() as mem:
            run.batch(i, a, a + rows)
    except MemoryError:  # BudgetExceeded on the host, CuPy's OutOfMemoryError
        if not retry:
            raise
        over = True
    else:
        over = False
    if over:  # (out of the handler: the error's frames, and the batch's work, let go)
        run.eng.drain(quiet=True)  # its copies (batch 0's were finished when it started)
        for name in list(run.partials):  # (a name the batch bound first: dropped)
            if name in kept[0]:
                del run.partials[name][kept[0][name]:]
            else:
                del run.partials[name]
        for now, was in zip((run.written, run.moved_in_place, run.touched, run.constants),
                            kept[1:], strict=True):
            now.clear()
            now.update(was)
        gc.collect()
        return True
    progress.step(1, rows * run.row_bytes)
    run.peak = max(run.peak, mem.peak_bytes)
    run.batch_fixed = max(run.batch_fixed, int(mem.peak_bytes - mem.start_bytes - rows * peak_row))
    return False


def in_flight_line(lanes: int, streams: int, rows: int, fixed: int, host: bool) -> str:
    """The report's line where fewer than ``streams`` batches were kept in flight
    (``host``: as the CPU fallback ran them, one after another)."""
    where, why = ("in memory", "") if host else \
        ("in the pool", ", such as CUB's for a full reduction")
    kept = (f"{'is' if lanes == 1 else 'are'} counted as in flight" if host else
            f"run{'s' * (lanes == 1)} at once")
    return (f"  batch in flight: {lanes} of {streams} {'batches' if host else 'streams'}: a "
            f"full batch of {rows:,} rows took {format_bytes(fixed)} {where} beyond its rows "
            f"(work that does not grow with them{why}), so {lanes} {kept}, as many such "
            f"batches as {MARGIN:.0%} of the free budget holds (at least one)")
