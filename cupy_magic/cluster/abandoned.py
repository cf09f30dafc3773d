"""Blocks of an interrupted cell that still run on the workers.

Ctrl-C stops the kernel's wait for a cluster cell, and the cell's futures are cancelled:
its queued blocks never start, but a block a worker already runs cannot be stopped
(``distributed`` runs it on a worker thread, and a thread cannot be killed). It finishes in
the background and keeps its worker's thread until then, so the next cell's blocks would
queue behind it, and that cell's report would show the wait as its own time. So the
interrupted cell's line names those blocks (:func:`running`, asked of the workers after
the cancel), and the next cluster cell first waits for them (:func:`wait`), with a note in
its report of how long and why.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

__all__ = ["POLL_SECONDS", "Abandoned", "executing", "forget", "leave", "pending",
           "running", "wait"]

POLL_SECONDS = 0.1  # how often the next cell asks whether the blocks still run


def executing(prefix: str, dask_worker: Any = None) -> list[str]:
    """On a worker (``Client.run``): the keys starting with ``prefix`` that its threads run
    now, a cancelled task still running included."""
    return sorted(str(ts.key) for ts in dask_worker.state.executing
                  if str(ts.key).startswith(prefix))


def running(client: Any, prefix: str, workers: list[str] | None = None) -> dict[str, list[str]]:
    """The keys starting with ``prefix`` each worker still runs (workers that run none, or
    do not answer, left out)."""
    if getattr(client, "status", "") != "running":
        return {}
    try:
        found = client.run(executing, prefix, workers=workers, on_error="return")
    except Exception:  # the scheduler does not answer: nothing known to wait for
        return {}
    return {w: keys for w, keys in sorted(found.items()) if isinstance(keys, list) and keys}


@dataclass
class Abandoned:
    """The blocks an interrupted cell left running: ``label`` names the cell (``In [5]``),
    ``blocks`` says which, ``on`` maps each worker to its keys."""

    client: Any
    label: str
    prefix: str
    blocks: str
    on: dict[str, list[str]]

    def describe(self) -> str:
        """``blocks 3, 4 of 8 of In [5] on tcp://a, tcp://b``."""
        return f"{self.blocks} of {self.label} on {', '.join(self.on)}"


_left: list[Abandoned] = []  # at most one: the last interrupted cell's blocks still running


def leave(found: Abandoned) -> None:
    """Remember the blocks an interrupted cell left running, for the next cell to wait for."""
    _left[:] = [found]


def forget() -> None:
    """Nothing to wait for any more (the cluster was left)."""
    _left.clear()


def pending(client: Any) -> Abandoned | None:
    """The blocks of an interrupted cell left running on ``client``'s cluster, if any."""
    if _left and _left[0].client is not client:
        _left.clear()  # another cluster's: its workers are none of this one's
    return _left[0] if _left else None


def wait(client: Any) -> str:
    """Wait until the blocks an interrupted cell left running on ``client``'s cluster end;
    the report's note of the wait (``""`` when none ran any more). A Ctrl-C here keeps them
    remembered: the cell after waits again."""
    found = pending(client)
    if found is None:
        return ""
    t0 = time.perf_counter()
    while running(client, found.prefix, list(found.on)):
        time.sleep(POLL_SECONDS)
    _left.clear()
    waited = time.perf_counter() - t0
    if waited < POLL_SECONDS:  # they had ended before this cell
        return ""
    return (f"{waited * 1e3:,.1f} ms waiting for {found.describe()} to end first: that cell "
            "was interrupted while they ran, and a running block cannot be stopped (its "
            "futures were cancelled; the block finishes on its worker's thread)")
