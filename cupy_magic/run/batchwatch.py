"""Inputs a batched run's later batches change through another name than their own.

The first batch runs under :class:`~.inputwrites.InputWatch`, which waits for the device and
refuses a change the cell's source does not show (``center(x)`` with ``def center(a): a -=
a.mean(axis=1, keepdims=True)``). A later batch may make one the first did not: the change
depends on its rows (``a[a.max(axis=1) > 900] -= 1``), and a plain cell would have made it
to the user's array. :class:`BatchWatch` watches each later batch's copies of the batched
inputs on the batch's own stream, with nothing waiting (:meth:`~cupy_magic.backend.Backend.
watch_queued`), launched or replayed as a CUDA graph, and reads the answer when the host
waits for the slot anyway, before it runs the slot's next batch, and after the last; the
copies of the shared inputs, one per device, are fingerprinted once, before the first batch
on their device, and again after the last batch. A change (or a new shape, strides or dtype,
``y = x; y.shape = (2, 3)``) refuses the run, with nothing committed. Work the cell queues on
streams of its own is not waited for (a batched run's results assume the slot's stream).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..backend import Backend
from .inputwrites import layout, unseen_change

__all__ = ["BatchWatch"]

Bounds = tuple[int, int, int]  # a batch's number (from 0) and rows a:b
Found = tuple[Bounds, str]  # the batch that changed an input, and the refusal


class BatchWatch:
    """The watch of the inputs the cell reads, does not store, and may change through
    another name (not ``only_read``): ``batched`` in each batch after the first, ``shared``
    over the run; ``run`` names the run in the refusal (``"a batched run"``)."""

    def __init__(self, be: Backend, batched: list[str], shared: list[str], run: str) -> None:
        self.be, self.batched, self.shared, self.run = be, batched, shared, run
        # per slot: (batch, names, their layouts, the reader of the queued comparison)
        self.pending: dict[int, list[tuple[Bounds, list[str], list[Any],
                                           Callable[[], list[bool]]]]] = {}
        self.whole: list[tuple[str, Any]] = []  # (name, watch) of each shared copy
        self.seen: set[int] = set()  # the shared copies watched (by id; one per device)

    @property
    def names(self) -> list[str]:
        return [*self.batched, *self.shared]

    def start(self, batch: Bounds, work: dict[str, Any]) -> Any:
        """Fingerprint the batch's copies (after their upload, before the cell, on the slot's
        stream; for the first batch, which :class:`InputWatch` watches, only the shared
        copies not yet watched); give what it returns to :meth:`end` after the cell."""
        for name in self.shared:
            copy = work.get(name)
            if copy is not None and id(copy) not in self.seen:  # waits: other streams follow
                self.seen.add(id(copy))
                self.whole.append((name, self.be.watch([copy])))
        names = [n for n in self.batched if n in work] if batch[0] else []
        if not names:
            return None
        copies = [work[n] for n in names]  # held until end(): `del x` in the cell frees none
        return batch, names, copies, [layout(c) for c in copies], self.be.watch_queued(copies)

    def end(self, slot: int, started: Any) -> Found | None:
        """After the cell ran (or a graph replayed) the batch on ``slot``'s stream: queue the
        comparison; a new layout is found at once."""
        if started is None:
            return None
        batch, names, copies, layouts, token = started
        moved = [n for n, c, was in zip(names, copies, layouts, strict=True) if layout(c) != was]
        if moved:
            return batch, unseen_change(moved[0], self.run, batch[0] + 1)
        self.pending.setdefault(slot, []).append(
            (batch, names, layouts, self.be.changed_queued(token)))
        return None

    def check(self, slot: int | None = None) -> Found | None:
        """The first change among the comparisons queued on ``slot`` (each slot's, in batch
        order, and the shared copies': ``None``, after the drain), whose work the host has
        waited for; None if there was none. The others stay queued: a refused run's abort
        drains the streams before their fingerprint words go back to the spares."""
        queued = self.pending.pop(slot, []) if slot is not None else sorted(
            (q for s in list(self.pending) for q in self.pending.pop(s)), key=lambda q: q[0])
        for batch, names, _, read in queued:
            changed = [n for n, c in zip(names, read(), strict=True) if c]
            if changed:
                return batch, unseen_change(changed[0], self.run, batch[0] + 1)
        if slot is None:
            for name, token in self.whole:
                if self.be.changed(token)[0]:
                    return (0, 0, 0), unseen_change(name, self.run, -1)
        return None
