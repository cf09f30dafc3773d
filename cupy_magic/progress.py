"""Which ``%%gpu`` cell runs now and how far it got, for the live panel.

The runner calls :func:`start`, :func:`step` and :func:`finish`; the panel's sampler thread
reads :func:`current`. Readers get an immutable snapshot, so no lock is held while drawing.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace

__all__ = ["CellProgress", "current", "finish", "start", "step"]


@dataclass(frozen=True)
class CellProgress:
    """The running cell: its label, batches done of total (0 when not batched), start time."""

    cell_label: str
    batches_done: int
    batches_total: int
    started: float

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


_lock = threading.Lock()
_current: CellProgress | None = None


def start(label: str, total: int = 0) -> CellProgress:
    """Record that the cell ``label`` started, to run ``total`` batches (0: not batched)."""
    global _current
    with _lock:
        _current = CellProgress(label, 0, max(0, int(total)), time.monotonic())
        return _current


def step(n: int = 1) -> None:
    """Count ``n`` more batches done for the running cell (ignored when none runs)."""
    global _current
    with _lock:
        if _current is not None:
            _current = replace(_current, batches_done=_current.batches_done + n)


def finish() -> None:
    """Record that no cell runs any more."""
    global _current
    with _lock:
        _current = None


def current() -> CellProgress | None:
    """The running cell, or ``None``."""
    return _current
