"""Inputs a batched run's later batches change through another name than their own.

The first batch runs under :class:`~.inputwrites.InputWatch`, which waits for the device and
refuses a change the cell's source does not show (``center(x)`` with ``def center(a): a -=
a.mean(axis=1, keepdims=True)``). A later batch may make one the first did not: the change
depends on its rows (``a[a.max(axis=1) > 30] -= 1``), and a plain cell would have made it
to the user's array. :class:`BatchWatch` watches each later batch's copies of those inputs
on the batch's own stream, with nothing waiting (:meth:`~cupy_magic.backend.Backend.
watch_queued`), and reads the answer once the host waits for the slot anyway, before it
runs the slot's next batch, and after the last; a change refuses the run, with nothing
committed. The batches a CUDA graph replays run no Python to watch them: a run with
such inputs is launched op by op (:func:`~.graphs.graph_replay`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..backend import Backend
from .errors import CellError
from .inputwrites import unseen_change

__all__ = ["BatchWatch"]


class BatchWatch:
    """The later batches' watch of ``names``: the inputs, batched or shared, that the cell
    reads, does not store, and may change through another name (not ``only_read``)."""

    def __init__(self, be: Backend, names: list[str], run: str) -> None:
        self.be, self.names, self.run = be, names, run
        # per slot: (batch number, names, the reader of the queued comparison)
        self.pending: dict[int, list[tuple[int, list[str], Callable[[], list[bool]]]]] = {}

    def start(self, i: int, work: dict[str, Any]) -> tuple[int, list[str], Any] | None:
        """Fingerprint batch ``i``'s copies (after their upload, before the cell, on the
        slot's stream); None for the first batch, which :class:`InputWatch` watches."""
        names = [n for n in self.names if n in work] if i else []
        if not names:
            return None
        return i, names, self.be.watch_queued([work[n] for n in names])

    def end(self, slot: int, started: tuple[int, list[str], Any] | None) -> None:
        """After the cell ran batch ``started`` on ``slot``'s stream: queue the comparison."""
        if started is not None:
            i, names, token = started
            self.pending.setdefault(slot, []).append((i, names, self.be.changed_queued(token)))

    def check(self, slot: int | None = None) -> None:
        """Read the comparisons queued on ``slot`` (each slot's: ``None``, after the drain),
        whose work the host has waited for; refuse the first change."""
        queued = self.pending.pop(slot, []) if slot is not None else sorted(
            (q for s in list(self.pending) for q in self.pending.pop(s)), key=lambda q: q[0])
        for i, names, read in queued:  # in batch order: the first change is the one named
            changed = [n for n, c in zip(names, read(), strict=True) if c]
            if changed:  # the others stay queued: the run's abort drains the streams first
                raise CellError(unseen_change(changed[0], self.run, i + 1))
