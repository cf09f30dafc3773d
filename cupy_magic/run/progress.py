"""Which ``%%gpu`` cell runs now and how far it got, for the live panel and the progress bar.

The runner calls :func:`start`, :func:`step` and :func:`finish`; the panel's sampler thread
reads :func:`current`. Readers get an immutable snapshot, so no lock is held while drawing.
Listeners (the notebook progress bar) are called with each new snapshot on the thread that
made it, outside the lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

__all__ = [
    "CellProgress",
    "add_listener",
    "current",
    "finish",
    "remove_listener",
    "start",
    "step",
]


@dataclass(frozen=True)
class CellProgress:
    """The running cell: its label, batches done of total (0 when not batched), start time,
    the input bytes of the batches done (for a rate), and what a step is called (``"batch"``;
    ``"block"`` on a cluster, whose report speaks of blocks)."""

    cell_label: str
    batches_done: int
    batches_total: int
    started: float
    bytes_done: int = 0
    bytes_total: int = 0
    unit: str = "batch"

    @property
    def units(self) -> str:
        """The plural of :attr:`unit`: ``"batches"``, ``"blocks"``."""
        return self.unit + ("es" if self.unit.endswith("ch") else "s")

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


Listener = Callable[[CellProgress], None]

_lock = threading.Lock()
_current: CellProgress | None = None
_listeners: list[Listener] = []


def _tell(snapshot: CellProgress | None) -> None:
    if snapshot is None:
        return
    for listener in list(_listeners):
        listener(snapshot)


def start(label: str, total: int = 0, nbytes: int = 0, unit: str = "batch") -> CellProgress:
    """Record that the cell ``label`` started, to run ``total`` batches (0: not batched)
    over ``nbytes`` of input; ``unit``: what a step is called (``"block"`` on a cluster)."""
    global _current
    with _lock:
        _current = CellProgress(label, 0, max(0, int(total)), time.monotonic(),
                                bytes_total=max(0, int(nbytes)), unit=unit)
        snapshot = _current
    _tell(snapshot)
    return snapshot


def step(n: int = 1, nbytes: int = 0) -> None:
    """Count ``n`` more batches (``nbytes`` of input) done for the running cell (ignored when
    none runs)."""
    global _current
    with _lock:
        if _current is None:
            return
        _current = replace(_current, batches_done=_current.batches_done + n,
                           bytes_done=_current.bytes_done + nbytes)
        snapshot = _current
    _tell(snapshot)


def recount(total: int) -> None:
    """The running cell's batches were counted again (resized while it ran): ``total``."""
    global _current
    with _lock:
        if _current is None:
            return
        _current = replace(_current, batches_total=max(0, int(total)))
        snapshot = _current
    _tell(snapshot)


def finish() -> None:
    """Record that no cell runs any more."""
    global _current
    with _lock:
        _current = None


def current() -> CellProgress | None:
    """The running cell, or ``None``."""
    return _current


def add_listener(listener: Listener) -> None:
    """Call ``listener`` with every new snapshot until :func:`remove_listener`."""
    _listeners.append(listener)


def remove_listener(listener: Listener) -> None:
    """Stop calling ``listener``; harmless if it was not added."""
    if listener in _listeners:
        _listeners.remove(listener)
