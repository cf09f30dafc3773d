"""The peak of a pool's bytes in use over each open measurement, for one compare per array.

CuPy's pool keeps no high-water mark, so the allocator cupy_magic installs reads the bytes in
use after each array while a measurement is open. Raising every open measurement's peak there
(a loop over them, an attribute each) took 157 ns more per array than not measuring on an
H100 (``benchmarks/allocator_cost.py``); here the allocator raises one number, and opening and
closing a measurement do the rest.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["HighWater"]


class HighWater:
    """The highest bytes in use of one pool over each open measurement's window.

    The time since the first open measurement is cut into segments at each opening: each
    open measurement keeps the highest level of the segment it opened, and :attr:`level`
    holds the live one's (the last opened). A measurement's peak is the highest of its
    segment and every later one, whatever the order measurements close in (threads).

    Attributes
    ----------
    level : list of int
        One number: the highest bytes in use since the last opening or closing. The
        allocator raises it (:meth:`raise_to`, or inline where a call costs).
    active : list of bool
        Non-empty while a measurement is open: the allocator reads the bytes in use only
        then.
    """

    def __init__(self) -> None:
        self.level = [0]
        self.active: list[bool] = []
        self._open: list[list[Any]] = []  # [measurement, its segment's highest], in order
        self._lock = threading.Lock()

    def open(self, m: Any, now: int) -> None:
        """Start ``m``'s window (``m.peak_bytes`` is raised at :meth:`close`) at ``now``
        bytes in use."""
        with self._lock:
            if self._open:
                self._open[-1][1] = max(self._open[-1][1], self.level[0])
            self._open.append([m, now])
            self.level[0] = now
            self.active[:] = [True]

    def close(self, m: Any) -> None:
        """End ``m``'s window: raise ``m.peak_bytes`` to the highest bytes in use in it."""
        with self._lock:
            last = self._open[-1]
            last[1] = max(last[1], self.level[0])
            i = next(k for k, (o, _) in enumerate(self._open) if o is m)
            m.peak_bytes = max(m.peak_bytes, *(seg for _, seg in self._open[i:]))
            seg = self._open.pop(i)[1]
            if i > 0:  # an earlier measurement's window holds this segment too
                self._open[i - 1][1] = max(self._open[i - 1][1], seg)
            if self._open:
                self.level[0] = self._open[-1][1]
            else:
                self.active[:] = []

    def raise_to(self, now: int) -> None:
        """Raise the live segment's level to ``now`` bytes in use (when measuring)."""
        if self.active and now > self.level[0]:
            self.level[0] = now
