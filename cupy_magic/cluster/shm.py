"""The kernel's side of the same-host transport for ``%%gpu --cluster``: the ring of
shared-memory slots the blocks go through (:mod:`.transport` decides when).

A block's input rows are copied into a slot, the worker reads them there and writes the
block's row results back into the slot (:mod:`.slots`), so no array crosses a socket.

The ring holds :data:`SLOTS_PER_WORKER` slots per worker, made on the first cell that uses
them, written once (so their pages exist), grown when a block needs more and reused across
blocks and cells. It is unlinked when the cluster is left (``%gpu_cluster off``, another
cluster, unload: :func:`release`, called by :func:`~.connect.close`) and at interpreter exit.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import logging
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from ..run.errors import CellError
from ..units import format_bytes
from .ring import SLOTS_PER_WORKER, SlotRing, copy_rows, pieces, threaded
from .slots import (
    HEADER,
    SlotTask,
    align,
    detach,
    new_segment,
    run_slot_block,
    track_again,
    tracker_id,
    view,
)

__all__ = ["Ring", "release", "ring", "room", "slot_bytes", "slot_names"]

SLOT_ROUND = 1 << 20  # slot sizes in whole MiB, so blocks of nearly one size share slots

SHM_DIR = "/dev/shm"  # where Linux keeps the segments (a tmpfs: a container may make it small)

_log = logging.getLogger(__name__)


def room() -> int | None:
    """Bytes free for new segments on this host (``None`` where the system does not say).

    Writing past a full tmpfs kills the writer (SIGBUS), so no slot is made without room."""
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _size(need: int) -> int:
    """A slot's bytes for ``need``: whole MiB, so blocks of nearly one size share slots."""
    return max(SLOT_ROUND, -(-align(need) // SLOT_ROUND) * SLOT_ROUND)


@contextlib.contextmanager
def _interrupt_held() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) back until the block ends, then deliver it as it came: a
    segment made or unlinked in the block is then the ring's, or gone, when the
    ``KeyboardInterrupt`` is raised. ``try``/``finally`` cannot close this window: the
    interrupt can come inside ``SharedMemory(create=True)`` after the segment exists, or
    between the call's return and the name that keeps it. Only the main thread receives
    signals; on another one this does nothing."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is None:  # one set outside Python: kept
        yield
        return
    came: list[int] = []
    before = signal.signal(signal.SIGINT, lambda signum, frame: came.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
        if came:  # handled now by the handler it was meant for (KeyboardInterrupt)
            signal.raise_signal(signal.SIGINT)


@dataclass(eq=False)
class Slot:
    """One segment of the ring, kept for one worker; ``busy`` while a block uses it."""

    worker: str
    seg: shared_memory.SharedMemory
    mem: np.ndarray | None  # this kernel's bytes of it
    busy: bool = False
    use: int = 0  # blocks it was given so far: written in its header (slots.HEADER)

    @property
    def name(self) -> str:
        return self.seg.name

    @property
    def capacity(self) -> int:
        return self.seg.size

    def view(self, offset: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        assert self.mem is not None, "a closed slot has no bytes"
        return view(self.mem, offset, shape, dtype)


class Ring(SlotRing):
    """The kernel's shared-memory slots for one client's workers (:class:`~.ring.SlotRing`,
    whose parameters it takes)."""

    runner = staticmethod(run_slot_block)  # what a block's task runs on its worker

    def __init__(self, client: Any, workers: tuple[str, ...]) -> None:
        super().__init__(client, workers, "cupy-magic-shm")
        self.retired: list[str] = []  # slots left behind that workers may still have open
        self._unclosed: list[shared_memory.SharedMemory] = []  # a view kept them mapped
        self.tracker = tracker_id()  # the workers leave the segments to it if they share it

    def describe(self) -> str:
        """How many slots, of what size, for the report."""
        sizes = [s.capacity for s in self.slots]
        return (f"{len(sizes)} slots of {format_bytes(max(sizes))}" if sizes
                else "no slots")

    def settle(self) -> None:
        """Before a cell: close the workers' openings of retired slots."""
        if self.retired:
            names, self.retired = self.retired, []
            self.client.run(detach, names, on_error="return")
        self._close_unclosed()

    # --- what the pipeline asks of a ring (:mod:`.pipeline`) ------------------------------
    def fill(self, slot: Slot, places: dict[str, Any], local: dict[str, np.ndarray],
             start: int, rows: int) -> None:
        """Write the slot's use in its header and copy the block's input rows into it."""
        slot.view(0, (1,), HEADER)[0] = slot.use
        for name, (off, shape, dtype) in places.items():
            copy_rows(slot.view(off, shape, dtype), local[name][start:start + rows], self.pool)

    def task(self, slot: Slot, places: dict[str, Any], results_at: int,
             place: bool) -> SlotTask:
        """What the block's worker is told of its slot."""
        return SlotTask(slot.name, places, results_at, self.tracker, place, slot.use)

    def drain(self, slot: Slot, offset: int, shape: tuple[int, ...], dtype: Any,
              dst: np.ndarray) -> None:
        """Copy a row result the worker placed at ``offset`` into ``dst``."""
        copy_rows(dst, slot.view(offset, shape, dtype), self.pool)

    def finish(self) -> None:
        """Every block's results are out (the copies out here are done when they return)."""

    def end(self) -> None:
        """After a cell: keep this kernel's tracker knowing its slots
        (:func:`~.slots.track_again`)."""
        track_again([s.seg for s in self.slots])

    # --- what a slot is -------------------------------------------------------------------
    def _room(self) -> int | None:
        return room()

    def _round(self, need: int) -> int:
        return _size(need)

    def _make(self, worker: str, need: int) -> Slot:
        size, free = _size(need), room()
        if free is not None and free < size:
            ring = size * SLOTS_PER_WORKER * len(self.workers)
            raise CellError(f"{SHM_DIR} has {format_bytes(free)} free and a block's slot needs "
                            f"{format_bytes(size)}; give it room for the ring's "
                            f"{format_bytes(ring)} (docker run --shm-size="
                            f"{-(-ring * 5 // 4 // 2**30)}g) or make blocks smaller "
                            "(--batch-bytes 32MiB)")
        with _interrupt_held():  # a Ctrl-C waits until the segment is the ring's
            seg = new_segment(size)
            try:
                slot = Slot(worker, seg, np.frombuffer(seg.buf, np.uint8))
            except BaseException:
                seg.close()
                seg.unlink()
                raise
            self.slots.append(slot)
        self.size = max(self.size, size)
        mem = slot.mem
        # written once now, so its pages exist before the first copy into it
        threaded(self.pool, [lambda a=a, b=b: mem[a:b].fill(0)
                             for a, b in pieces(size, size)])
        return slot

    def _retire(self, slot: Slot) -> None:
        with _interrupt_held():  # a Ctrl-C waits until it is unlinked, not only forgotten
            self.slots.remove(slot)
            self.retired.append(slot.name)
            self._unlink(slot)

    def _unlink(self, slot: Slot) -> None:
        slot.mem = None
        track_again([slot.seg])
        with contextlib.suppress(FileNotFoundError):  # gone already: nothing to unlink
            slot.seg.unlink()
        try:
            slot.seg.close()
        except BufferError:  # a view in a traceback being handled: closed later
            self._unclosed.append(slot.seg)

    def _close_unclosed(self) -> None:
        if not self._unclosed:
            return
        gc.collect()
        left = []
        for seg in self._unclosed:
            try:
                seg.close()
            except BufferError:
                left.append(seg)
        self._unclosed = left

    def close(self, workers: bool = True) -> None:
        """Unlink every slot; with ``workers``, first close the workers' openings of them."""
        names = [s.name for s in self.slots] + self.retired
        if workers and names:
            try:
                self.client.run(detach, names, on_error="return")
            except Exception as exc:  # a cluster gone: its workers' mappings went with it
                _log.debug("cupy_magic: closing the workers' slots failed: %s", exc)
        for slot in list(self.slots):
            self._unlink(slot)
        self.slots, self.retired = [], []
        self.pool.shutdown(wait=True)
        self._close_unclosed()


_state: dict[str, Any] = {"ring": None, "atexit": False}


def ring(client: Any, workers: tuple[str, ...]) -> Ring:
    """The ring for ``client``'s ``workers`` (a new one when either changed)."""
    current = _state["ring"]
    if current is not None and (current.client is not client or current.workers != workers):
        release()
        current = None
    if current is None:
        current = _state["ring"] = Ring(client, workers)
        if not _state["atexit"]:
            atexit.register(release, workers=False)
            _state["atexit"] = True
    return current


def slot_names() -> list[str]:
    """The segments of the ring in use now (``/dev/shm/<name>`` on Linux), oldest first."""
    current = _state["ring"]
    return [s.name for s in current.slots] if current is not None else []


def slot_bytes() -> int:
    """Bytes of the ring's slots now (reused by the next cell before any new one is made)."""
    current = _state["ring"]
    return sum(s.capacity for s in current.slots) if current is not None else 0


def release(workers: bool = True) -> None:
    """Unlink the ring's slots (leaving a cluster, unload, interpreter exit); with
    ``workers``, the workers close theirs first."""
    current, _state["ring"] = _state["ring"], None
    if current is not None:
        current.close(workers=workers and getattr(current.client, "status", "") == "running")
