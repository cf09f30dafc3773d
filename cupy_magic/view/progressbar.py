"""A progress bar under a batched ``%%gpu`` cell that runs longer than about two seconds.

It listens to :mod:`cupy_magic.run.progress` on the cell's own thread (the batch loop), so it
updates one display between batches (at most every quarter second) and, at the end, replaces
itself with a one-line summary, or says where the run stopped.
"""

from __future__ import annotations

import contextlib
import html
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..run import progress
from ..run.progress import CellProgress
from ..theme import DIM

__all__ = ["BatchProgressBar", "for_cell"]

DELAY = 2.0  # seconds before a bar appears: short runs stay quiet
MIN_INTERVAL = 0.25  # seconds between two redraws


def _rate(nbytes: int, seconds: float) -> str:
    """Bytes per second in the unit that shows them (a small input reads MB/s, not 0.0 GB/s)."""
    if seconds <= 0 or not nbytes:
        return "-"
    rate = nbytes / seconds
    return f"{rate / 1e9:.1f} GB/s" if rate >= 1e9 else f"{rate / 1e6:.1f} MB/s"


class BatchProgressBar:
    """Draw the batches of the running cell; feed it :class:`CellProgress` snapshots.

    Parameters
    ----------
    show
        ``show(html) -> handle`` displays a new output and returns an object with
        ``update(html)`` (IPython's ``display(..., display_id=True)`` in a notebook).
    clock
        Seconds, monotonic (injectable for tests).
    """

    def __init__(self, show: Callable[[str], Any], clock: Callable[[], float] = time.monotonic,
                 delay: float = DELAY, min_interval: float = MIN_INTERVAL) -> None:
        self._show = show
        self._clock = clock
        self._delay = delay
        self._min_interval = min_interval
        self._handle: Any = None
        self._drawn_at = 0.0
        self.last: CellProgress | None = None

    def __call__(self, snap: CellProgress) -> None:
        if snap.batches_total == 0:
            return
        self.last = snap
        now = self._clock()
        if now - snap.started < self._delay:
            return
        finished = snap.batches_done >= snap.batches_total
        if self._handle is not None and now - self._drawn_at < self._min_interval \
                and not finished:
            return
        self._draw(self._bar(snap, now - snap.started))
        self._drawn_at = now

    def _draw(self, body: str) -> None:
        if self._handle is None:
            self._handle = self._show(body)
        else:
            self._handle.update(body)

    @staticmethod
    def _bar(snap: CellProgress, seconds: float) -> str:
        return (f"<div class='cupy-magic-progress' style='font-family:monospace;font-size:90%'>"
                f"<progress value='{snap.batches_done}' max='{snap.batches_total}' "
                f"style='width:240px;vertical-align:middle'></progress> "
                f"{html.escape(snap.cell_label)}: {snap.unit} "
                f"{snap.batches_done}/{snap.batches_total}"
                f", {_rate(snap.bytes_done, seconds)} of input, {seconds:.1f} s</div>")

    def close(self, ok: bool) -> None:
        """Replace the bar with a summary (or where the run stopped), if it was shown."""
        snap = self.last
        if self._handle is None or snap is None:
            return
        seconds = self._clock() - snap.started
        if ok:
            text = (f"{snap.batches_total} {snap.units}, {_rate(snap.bytes_total, seconds)} of "
                    f"input, in {seconds:.1f} s")
        else:
            text = (f"stopped after {snap.unit} {snap.batches_done} of {snap.batches_total} "
                    f"({seconds:.1f} s)")
        self._draw(f"<div class='cupy-magic-progress' style='font-family:monospace;"
                   f"font-size:90%;color:{DIM}'>{html.escape(text)}</div>")


def _notebook_show(body: str) -> Any:
    from IPython.display import HTML, display

    handle = display(HTML(body), display_id=True)

    class _Handle:
        def update(self, new: str) -> None:
            handle.update(HTML(new))

    return _Handle()


@contextlib.contextmanager
def for_cell(shell: Any = None) -> Iterator[BatchProgressBar | None]:
    """Show a progress bar for the batches of the cell run inside, in a notebook kernel.

    ``shell`` defaults to the running IPython (never imported here: its import alone took
    0.2 s, which a first cell called from plain Python paid inside its timing). In a
    terminal (no kernel) nothing is shown: the report says how the run went.
    """
    if shell is None and "IPython" in sys.modules:  # no IPython loaded: no kernel to draw in
        shell = sys.modules["IPython"].get_ipython()
    if type(shell).__name__ != "ZMQInteractiveShell":
        yield None
        return
    bar = BatchProgressBar(_notebook_show)
    progress.add_listener(bar)
    ok = False
    try:
        yield bar
        ok = True
    finally:
        progress.remove_listener(bar)
        bar.close(ok)
