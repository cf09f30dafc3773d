"""The first, measuring batch of a batched run, measured again on fewer rows when it goes
over the budget.

:func:`~.batching.probe_rows` sizes the first batch before anything is measured: a share
of the budget bounds its inputs, not what the cell holds beside them. A cell whose
temporaries take many times its inputs, or (on the CPU fallback) the Python objects a cell
builds once, its checked NumPy functions among them, can take the first batch over the
budget; nothing is committed then, so it is measured again on half as many rows
(:func:`~.batching.probe_again`) until it fits, or one row does not, which is refused.
"""

from __future__ import annotations

import gc
from typing import Any

from .batching import probe_again

__all__ = ["measure_first"]


def measure_first(run: Any, first: int, avoid: set[int], free: int | None) -> tuple[int, Any]:
    """Run batch 0 of ``run`` (a :class:`~.batched.BatchRun`) on ``first`` rows, followed by
    its ``tracked()`` measurement; over the budget, again on fewer rows.

    Returns the rows it ran and the measurement. Only a run under a budget (``free`` not
    None) whose first batch the user did not size (``--batch-rows``) is measured again; an
    error that is not about memory, or one row over the budget, is raised as it came.
    """
    __tracebackhide__ = True
    while True:
        try:
            with run.tracked() as mem:
                run.batch(0, 0, first)
            return first, mem
        except MemoryError:  # BudgetExceeded on the host, CuPy's OutOfMemoryError
            again = probe_again(first, avoid) if free is not None and run.opts.rows is None \
                else None
            if again is None:
                raise
        _forget_first(run)
        first = again


def _forget_first(run: Any) -> None:
    """Drop what a first batch over the budget left (nothing of it was committed), and
    collect its garbage, so that the next measure starts from what is held."""
    run.eng.drain(quiet=True)
    run.forget()
    run.cost = None
    gc.collect()
