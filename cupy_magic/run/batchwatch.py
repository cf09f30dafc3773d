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

Where = tuple[tuple[int, int, int], Any]  # a batch's number (from 0), rows a:b; its device
Found = tuple[Where | None, str]  # the batch that changed an input (None: unknown), the refusal


class BatchWatch:
    """The watch of the inputs the cell may change through another name (not
    ``only_read``): ``batched``, those it does not store, and ``maybe``, those it may
    rebind, where the first batch left them as it got them, in each batch after the first;
    ``shared`` over the run; ``run`` names the run in the refusal (``"a batched run"``)."""

    def __init__(self, be: Backend, batched: list[str], maybe: list[str], shared: list[str],
                 run: str) -> None:
        self.be, self.batched, self.maybe, self.shared, self.run = be, batched, maybe, shared, run
        # per slot: (batch, names, the reader of the queued comparison)
        self.pending: dict[int, list[tuple[Where, list[str], Callable[[], list[bool]]]]] = {}
        self.whole: list[tuple[str, Any]] = []  # (name, watch) of each shared copy
        self.seen: set[int] = set()  # the shared copies watched (by id; one per device)

    @classmethod
    def of(cls, be: Backend, plan: Any, batched: dict[str, Any], run: str) -> BatchWatch:
        """The watch of a run of ``plan`` (a :class:`~.plan.CellPlan`) over ``batched``."""
        unseen = [n for n in plan.inputs if n not in plan.only_read
                  and (n not in plan.stored or n in plan.unseen)]
        return cls(be, [n for n in unseen if n in batched and n not in plan.stored],
                   [n for n in unseen if n in batched and n in plan.stored],
                   [n for n in unseen if n not in batched], run)

    def start(self, where: Where, work: dict[str, Any], left: set[str]) -> Any:
        """Fingerprint the batch's copies (after their upload, before the cell, on the slot's
        stream; for the first batch, which :class:`InputWatch` watches, only the shared
        copies not yet watched); ``left``: the inputs the first batch left as it got them.
        Give what it returns to :meth:`end` after the cell."""
        for name in self.shared:
            copy = work.get(name)
            if copy is not None and id(copy) not in self.seen:  # waits: other streams follow
                self.seen.add(id(copy))
                self.whole.append((name, self.be.watch([copy])))
        names = [n for n in (*self.batched, *(m for m in self.maybe if m in left))
                 if n in work] if where[0][0] else []
        if not names:
            return None
        copies = [work[n] for n in names]  # held until end(): `del x` in the cell frees none
        return where, names, copies, [layout(c) for c in copies], self.be.watch_queued(copies)

    def end(self, slot: int, started: Any) -> Found | None:
        """After the cell ran (or a graph replayed) the batch on ``slot``'s stream: queue the
        comparison; a new layout is found at once."""
        if started is None:
            return None
        where, names, copies, layouts, token = started
        moved = [n for n, c, was in zip(names, copies, layouts, strict=True) if layout(c) != was]
        if moved:
            return where, unseen_change(moved[0], self.run, where[0][0] + 1)
        self.pending.setdefault(slot, []).append((where, names, self.be.changed_queued(token)))
        return None

    def check(self, slot: int | None = None) -> Found | None:
        """The first change among the comparisons queued on ``slot`` (each slot's, in batch
        order, and the shared copies': ``None``, after the drain), whose work the host has
        waited for; None if there was none. The others stay queued: a refused run's abort
        drains the streams before their fingerprint words go back to the spares."""
        queued = self.pending.pop(slot, []) if slot is not None else sorted(
            (q for s in list(self.pending) for q in self.pending.pop(s)), key=lambda q: q[0][0])
        for where, names, read in queued:
            changed = [n for n, c in zip(names, read(), strict=True) if c]
            if changed:
                return where, unseen_change(changed[0], self.run, where[0][0] + 1)
        if slot is None:
            for name, token in self.whole:
                if self.be.changed(token)[0]:
                    return None, unseen_change(name, self.run, -1)
        return None

    def clear(self) -> None:
        """Let the queued comparisons and the shared copies go (after the run's drain)."""
        self.pending.clear()
        self.whole.clear()
