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

from typing import Any

from ..units import format_bytes
from . import progress
from .batchcost import MARGIN

__all__ = ["batches_in_flight", "in_flight_line", "measure_full"]


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


def measure_full(run: Any, first: int, rows: int, peak_row: float,
                 bounds: list[tuple[int, int]]) -> int:
    """Run ``bounds[0]``, the first batch of the planned size, alone and measured where a
    budget holds the run and that batch has more rows than the measuring one; set
    ``run.batch_fixed`` (pool bytes beyond its rows at ``peak_row`` per row) and
    ``run.in_flight``. Returns how many of ``bounds`` it ran (0 or 1).

    ``run`` is a :class:`~.batched.BatchRun` (not one over several devices: each has its own
    budget and streams); its batch ``i`` goes to slot ``i % run.in_flight``.
    """
    __tracebackhide__ = True
    free = run.budget_left()
    if (not run.fits_in_flight or free is None or not bounds or rows <= first
            or bounds[0][1] - bounds[0][0] != rows):
        return 0
    streams = run.in_flight
    run.in_flight = 1  # on the measuring batch's slot, after it
    try:
        with run.tracked() as mem:
            run.batch(1, *bounds[0])
    finally:
        run.in_flight = streams
    progress.step(1, rows * run.row_bytes)
    run.peak = max(run.peak, mem.peak_bytes)
    run.batch_fixed = max(0, int(mem.peak_bytes - mem.start_bytes - rows * peak_row))
    run.in_flight = batches_in_flight(free, rows, peak_row, run.batch_fixed, streams)
    return 1


def in_flight_line(lanes: int, streams: int, rows: int, fixed: int, host: bool) -> str:
    """The report's line where fewer than ``streams`` batches were kept in flight
    (``host``: as the CPU fallback ran them, one after another)."""
    where, why = ("in memory", "") if host else \
        ("in the pool", ", such as CUB's for a full reduction")
    kept = "are counted as in flight" if host else "run at once"
    return (f"  batch in flight: {lanes} of {streams} {'batches' if host else 'streams'}: a "
            f"full batch of {rows:,} rows took {format_bytes(fixed)} {where} beyond its rows "
            f"(work that does not grow with them{why}), so {lanes} {kept}, as many such "
            f"batches as {MARGIN:.0%} of the free budget holds (at least one)")
