"""What every ring of slots of ``%%gpu --cluster`` shares, whatever its slots are: which
slot a block takes, when the ring grows, and this kernel's copying threads.

A ring keeps :data:`SLOTS_PER_WORKER` slots per worker. Its slots are segments of shared
memory (:class:`~.shm.Ring`) or device buffers the workers open by CUDA IPC handles
(:class:`~.devring.DeviceRing`); :mod:`.pipeline` runs a cell's blocks through either.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import os
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["COPY_THREADS", "SLOTS_PER_WORKER", "SlotRing", "copy_rows", "pieces", "threaded"]

SLOTS_PER_WORKER = 3  # one running, one queued on the worker, one being filled or drained
# up to 16 threads (the H200 host has 16 cores): in cluster_bench there, a run's copies into
# and out of the slots moved 32 GiB in 2.34 s (cluster-2026-12-04T1526)
COPY_THREADS = max(1, min(16, os.cpu_count() or 1))
COPY_PIECE = 8 << 20  # bytes a copying thread takes at least (fewer threads for less)


def pieces(rows: int, nbytes: int) -> list[tuple[int, int]]:
    """``rows`` of ``nbytes`` cut into a piece per copying thread (none under 8 MiB)."""
    n = max(1, min(COPY_THREADS, nbytes // COPY_PIECE, rows))
    bounds = [rows * k // n for k in range(n + 1)]
    return list(itertools.pairwise(bounds))


def threaded(pool: cf.Executor, jobs: list[Callable[[], Any]]) -> None:
    """Run ``jobs`` on ``pool`` (one on this thread when alone); on an error or Ctrl-C,
    wait for the ones running before raising, so none writes into a slot afterwards."""
    if len(jobs) == 1:
        jobs[0]()
        return
    futures = [pool.submit(job) for job in jobs]
    try:
        for f in futures:
            f.result()
    except BaseException:
        for f in futures:
            f.cancel()
        cf.wait(futures)
        raise


def copy_rows(dst: np.ndarray, src: np.ndarray, pool: cf.Executor) -> None:
    """``dst[...] = src`` split by rows over the copying threads (NumPy lets go of the GIL)."""
    threaded(pool, [lambda a=a, b=b: np.copyto(dst[a:b], src[a:b])
                    for a, b in pieces(len(dst), dst.nbytes)])


class SlotRing:
    """The slots of one client's workers and how a block gets one.

    A subclass says what a slot is: :meth:`_room` (bytes free for new slots, ``None``:
    not known), :meth:`_round` (a slot's bytes for a need), :meth:`_make` and
    :meth:`_retire`. A slot has ``worker``, ``capacity``, ``busy`` and ``use``.

    Parameters
    ----------
    client
        The ``distributed.Client`` whose workers read the slots.
    workers
        Their addresses; a block goes to the least busy one with a slot free.
    """

    key_suffix = ""  # ends its blocks' task keys (``cupy-magic-<cell>-block-<i>``)

    def __init__(self, client: Any, workers: tuple[str, ...], thread_name: str) -> None:
        self.client, self.workers = client, workers
        self.slots: list[Any] = []
        self.size = 0  # the largest slot made: the ring's slots only grow, all of them
        self.pool = cf.ThreadPoolExecutor(COPY_THREADS, thread_name_prefix=thread_name)

    def take(self, need: int, least: int) -> Any | None:
        """A free slot of at least ``need`` bytes for the least busy worker (made or grown
        now if needed), marked busy; None while every worker has all its slots busy.

        Once a slot grew, a smaller one grows too before it is used again: a cell's first
        blocks ask by their inputs alone (their results are not known yet), and a slot left
        small would send their results back over the socket though the ring has grown.
        Where there is no room for a bigger slot, a free one of ``least`` bytes (the block's
        inputs) does: the block's results then come back over the socket."""
        want = max(need, self.size)  # the ring's size, where there is room for it
        busy = Counter(s.worker for s in self.slots if s.busy)
        open_ = [w for w in self.workers if busy[w] < SLOTS_PER_WORKER]
        if not open_:
            return None
        worker = min(open_, key=lambda w: busy[w])
        idle = sorted((s for s in self.slots if s.worker == worker and not s.busy),
                      key=lambda s: -s.capacity)  # the largest first: results most likely fit
        if idle and idle[0].capacity >= want:
            slot = idle[0]
        else:  # the room asked only when the idle slot is too small
            free = self._room()
            if free is not None and free < self._round(want):
                want = need  # no room to grow the ring: as large as this block needs
            if idle and (idle[0].capacity >= want or (
                    free is not None and free < self._round(want)
                    and idle[0].capacity >= least)):
                slot = idle[0]
            else:
                if idle:  # too small for this block: a bigger one instead
                    self._retire(idle[0])
                slot = self._make(worker, want)
        slot.busy = True
        return slot

    def give_back(self, slot: Any) -> None:
        slot.busy = False

    def retire_busy(self) -> int:
        """Leave out every busy slot (after a failure a block may still write into it):
        made anew when needed. Returns how many."""
        busy = [s for s in self.slots if s.busy]
        for slot in busy:
            self._retire(slot)
        return len(busy)

    # --- what a slot is -------------------------------------------------------------------
    def _room(self) -> int | None:
        raise NotImplementedError

    def _round(self, need: int) -> int:
        raise NotImplementedError

    def _make(self, worker: str, need: int) -> Any:
        raise NotImplementedError

    def _retire(self, slot: Any) -> None:
        raise NotImplementedError
