"""Batch numbers per slot and the start and end marks of each batch (``--timeline``): the
part both batch engines of :mod:`cupy_magic.backend.streams` share."""

from __future__ import annotations

from typing import Any

__all__ = ["Timeline"]


class Timeline:
    """Batch numbers per slot, and with ``timed`` the start and end marks of each batch, for
    :attr:`BatchPlan.timeline`.

    ``_mark(slot)`` makes one mark (a time on the host, a timing event on a GPU stream);
    ``_seconds(a, b)`` turns two marks into seconds.
    """

    slots: int

    def _init_timeline(self, timed: bool) -> None:
        self.timed = timed
        self._count = 0
        self._current: list[int] = [0] * self.slots  # the batch each slot runs last
        self._open: list[Any] = [None] * self.slots
        self.marks: dict[int, tuple[int, Any, Any]] = {}  # batch: (slot, start, end)

    def _mark(self, slot: int) -> Any:
        raise NotImplementedError

    def _seconds(self, a: Any, b: Any) -> float:
        raise NotImplementedError

    def start(self, slot: int) -> None:
        """A new batch begins on the slot."""
        self._current[slot] = self._count
        self._count += 1
        if self.timed:
            self._open[slot] = self._mark(slot)

    def _end(self, slot: int) -> int:
        """Mark the end of the slot's batch (again, for more work of it); return its number."""
        batch = self._current[slot]
        if self.timed:
            begun = self._open[slot] if batch not in self.marks else self.marks[batch][1]
            self.marks[batch] = (slot, begun, self._mark(slot))
        return batch

    def record(self, slot: int) -> None:
        self._end(slot)

    def timeline(self) -> list[tuple[int, float, float]]:
        """``(slot, start, end)`` seconds of each batch since the first one began (timed only)."""
        if not self.marks:
            return []
        marks = [self.marks[k] for k in sorted(self.marks)]
        origin = marks[0][1]
        return [(k, self._seconds(origin, a), self._seconds(origin, b)) for k, a, b in marks]
