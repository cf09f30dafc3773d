"""The cost of one batch besides moving its rows, and when a batch pays for it (issue 20).

Pure logic, like :mod:`cupy_magic.run.batching`, which sizes batches with it: the executor
(:mod:`cupy_magic.run.batched`) measures the first batch, this module turns the figures into
rows and into the report's words.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..units import format_bytes

__all__ = ["COST_SHARE", "MARGIN", "MAX_BATCH_BYTES", "BatchCost", "PayingBudget", "budget_to_pay",
           "rows_in_margin"]

# Issue 20: a batch pays for itself when its fixed cost (launches, Python) is at most this
# share of the time its rows take to move; batches grow to that size when the budget allows,
# up to the largest batch the H200 sweep measured (1 GiB of input: 33.6 GB/s, 128 MiB 45.9).
COST_SHARE = 0.10
MAX_BATCH_BYTES = 2**30
MARGIN = 0.8  # share of the free budget the batches in flight may take (sizing and naming)

@dataclass(frozen=True)
class BatchCost:
    """What one batch costs besides moving its rows, measured on the first batch.

    Parameters
    ----------
    seconds
        Host seconds of the first batch after its upload, less kernel builds: launching the
        cell's kernels and running its Python (any host sync in the cell waits here too; on
        the CPU fallback this is the NumPy work itself). Taken as the same for every batch.
    moved_seconds
        Seconds the first batch's upload took, waited for (on the CPU fallback: the copy of
        its rows in host RAM, which stands in for the transfer).
    moved_bytes
        Input bytes of the first batch.
    host
        Measured on the CPU fallback.
    large_rate
        Bytes per second of a large page-locked upload on this device (measured at load,
        :meth:`cupy_magic.backend.Backend.upload_rate`), set when the budget held the first
        batch smaller than a measuring batch: a small batch moves slower than large ones
        (on the H200 a 1.2 MB first batch uploaded at 7.7 GB/s, 4 MiB ones at 18 GB/s), so
        its rate alone would name batches, and a budget, too small to pay.
    """

    seconds: float
    moved_seconds: float
    moved_bytes: int
    host: bool = False
    large_rate: float | None = None

    @property
    def rate(self) -> float:
        """Bytes per second of moving input rows (``inf`` when too quick to time)."""
        return self.moved_bytes / self.moved_seconds if self.moved_seconds > 0 else math.inf

    @property
    def pay_rate(self) -> float:
        """The rate the batches that pay are sized at: the first batch's, or the large
        upload's where that is known and faster."""
        large = self.large_rate if self.large_rate and math.isfinite(self.large_rate) else 0.0
        return max(self.rate, large)

    def with_large_rate(self, rate: float | None) -> BatchCost:
        """This cost, its paying batches sized at ``rate`` where that is faster."""
        return replace(self, large_rate=rate)

    def transfer_seconds(self, rows: int, row_bytes: int) -> float:
        """Seconds ``rows`` rows of input take to move at the measured rate."""
        return rows * row_bytes / self.rate

    def share(self, rows: int, row_bytes: int) -> float:
        """The cost as a share of the transfer time of a batch of ``rows`` rows."""
        moving = self.transfer_seconds(rows, row_bytes)
        return self.seconds / moving if moving > 0 else (0.0 if self.seconds <= 0 else math.inf)

    def rows_to_pay(self, row_bytes: int) -> int:
        """The fewest rows per batch whose transfer time, at :attr:`pay_rate`, is at least
        ``1 / COST_SHARE`` times the cost (1 when the upload was too quick to time)."""
        rate = self.pay_rate
        if not math.isfinite(rate) or self.seconds <= 0:
            return 1
        return max(1, math.ceil(self.seconds * rate / (COST_SHARE * max(row_bytes, 1))))

    def lines(self, rows: int, total: int, row_bytes: int, sized_by: str,
              full: PayingBudget | None) -> list[str]:
        """The report's words: the cost against a batch's transfer, and what holds it back.

        ``rows``: rows per batch as planned; ``sized_by``: the planner's reason;
        ``full``: the budget at which batches would pay for themselves, when the budget is
        what holds them back (:func:`budget_to_pay`).
        """
        share = self.share(rows, row_bytes)
        rate = f"{self.rate / 1e9:.2f} GB/s"
        work, how, verb = (
            ("Python and NumPy work beyond copying its rows", "on the CPU fallback that copy "
             "in host RAM stands in for the transfer", "copy") if self.host else
            ("kernel launches and Python beyond its upload", f"upload {rate}", "upload"))
        verdict = "within" if share <= COST_SHARE else "over"
        out = [f"batch cost: {self.seconds * 1e3:.2f} ms per batch of {work} (measured on the "
               f"first batch; {how}): {share:.0%} of the "
               f"{self.transfer_seconds(rows, row_bytes) * 1e3:.2f} ms a batch of {rows:,} rows "
               f"takes to {verb}, {verdict} the {COST_SHARE:.0%} a batch should cost"]
        if share <= COST_SHARE or rows >= total:
            return out
        pay = min(self.rows_to_pay(row_bytes), total)
        size = f"{pay:,} rows ({format_bytes(pay * row_bytes)})"
        if self.pay_rate > self.rate:
            size += (f" (sized at the {self.pay_rate / 1e9:.2f} GB/s of a large page-locked "
                     "upload, measured at load: the budget held the first batch too small to "
                     "show a large batch's rate)")
        budget = "memory budget (host)" if self.host else "VRAM budget"
        held = f"batch held small by the budget: batches of {size} would keep the cost under " \
            f"{COST_SHARE:.0%}"
        whole = ", but a budget that holds them also holds the cell's inputs whole, and a " \
            "cell whose inputs fit runs unbatched, without streaming; "
        if full is not None and not full.capped:
            out.append(f"{held}; a {budget} of {format_bytes(full.budget)} would allow them")
        elif full is not None and full.named(rows) is None:
            out.append(f"{held}{whole}this {budget} is about the largest that keeps it batched")
        elif full is not None:
            out.append(f"{held}{whole}a {budget} of {format_bytes(full.budget)}, the largest "
                       f"that keeps it batched, allows batches of {full.rows:,} rows "
                       f"({self.share(full.rows, row_bytes):.0%} of their transfer time at the "
                       "first batch's rate)")
        elif sized_by.startswith("--batch"):
            out.append(f"batch held small by {sized_by}: batches of {size} would keep the cost "
                       f"under {COST_SHARE:.0%}")
        elif pay * row_bytes > MAX_BATCH_BYTES:
            out.append(f"batch size capped at {format_bytes(MAX_BATCH_BYTES)} of input (the "
                       f"largest measured); {size} would keep the cost under {COST_SHARE:.0%}")
        return out


@dataclass(frozen=True)
class PayingBudget:
    """The budget a report names when the budget holds batches smaller than those that pay.

    Parameters
    ----------
    budget
        The VRAM budget (bytes) to name.
    rows
        Rows per batch it leaves room for.
    capped
        The budget that holds paying batches would also hold the cell's inputs whole, and a
        cell whose inputs fit runs unbatched (one upload, then the work, then the download:
        no streaming; on the H200 the pricing cell of ``benchmarks/small_budget.py`` ran
        whole in 0.12 s, in batches under a budget just below that in 0.037 s): ``budget``
        is then the largest that keeps the cell batched, and ``rows`` what it allows.
    """

    budget: int
    rows: int
    capped: bool = False

    def grows(self, rows: int) -> bool:
        """Whether this budget allows batches clearly larger than ``rows`` (a capped budget
        may be about the one in use: then there is no larger one to name)."""
        return self.rows > rows * 1.05

    def named(self, rows: int) -> int | None:
        """The budget a report names for batches of ``rows``: ``None`` when it is capped
        and about the one in use (no larger one keeps the cell batched)."""
        return None if self.capped and not self.grows(rows) else self.budget


def budget_to_pay(rows: int, total: int, row_bytes: int, peak_row_bytes: float,
                  streams: int, cost: BatchCost, free: int | None,
                  limit: int | None, whole: int | None = None,
                  fixed: int = 0) -> PayingBudget | None:
    """The budget at which batches would pay for themselves, when the budget is what holds
    them to ``rows`` rows; ``None`` when it is not (no budget, they pay already, or no
    budget that keeps the cell batched allows larger batches).

    The batches that pay are those of :meth:`BatchCost.rows_to_pay` rows (at most
    :data:`MAX_BATCH_BYTES` of input and the whole input); the budget must leave room for
    ``streams`` of them at the measured pool bytes per row, and ``fixed`` bytes each (what
    a full batch took beyond its rows, :mod:`.inflight`), within the planner's margin, on
    top of what is in use now (``limit - free``). ``whole``: the budget at which the cell's
    inputs fit, so that it would run unbatched; the budget named stays under it
    (:class:`PayingBudget`).
    """
    if limit is None or free is None:
        return None
    cap = MAX_BATCH_BYTES // max(row_bytes, 1)  # 1 GiB, above the 128 MiB target
    need_rows = min(cost.rows_to_pay(row_bytes), max(cap, 1), total)
    if rows >= need_rows:
        return None
    in_use = max(0, limit - free)
    per_row = max(peak_row_bytes, float(row_bytes))
    need = in_use + math.ceil(streams * (need_rows * per_row + fixed) / MARGIN)
    if whole is None or need < whole:
        return PayingBudget(need, need_rows)
    below = whole - 1
    rows_below = min(total, rows_in_margin(below - in_use, streams, per_row, fixed))
    return PayingBudget(below, rows_below, capped=True)


def rows_in_margin(free: int | float, lanes: int, per_row: float, fixed: int = 0) -> int:
    """Rows a batch may have so that ``lanes`` of them in flight, each ``per_row`` bytes a
    row and ``fixed`` bytes beyond its rows, fit :data:`MARGIN` of ``free`` bytes (0: none).

    >>> rows_in_margin(160_000, 1, 36.1, 38_367)
    2482
    """
    return max(0, int((free * MARGIN / lanes - fixed) / max(per_row, 1.0)))
