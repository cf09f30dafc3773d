"""The kernel's side of the CUDA IPC transport of ``%%gpu --cluster``: a ring of device slots
on this kernel's GPU that workers on the same GPU open by their IPC handles
(:mod:`.transport` decides when; the worker's side is :mod:`.devslots`).

The kernel copies a block's input rows into a slot at its own page-locked speed (the copy a
worker in another process could not make from the kernel's memory), the worker computes on
them and writes the block's row results into the slot, on the device, and the kernel copies
them out. Measured first in ``benchmarks/cluster_ipc.py``.

A ring lives for one run of a cell: its slots are made on the run's first blocks (each an
allocation of its own, :class:`~cupy_magic.backend.ipc.DeviceBuffer`), held against this
kernel's VRAM budget while they exist (:meth:`~cupy_magic.backend.Backend.reserve`), and
freed at the end of the run, on a failure too, once every worker closed its openings of them
(CUDA's rule). Slots a block still used after a failure stay, still held against the budget,
until their workers close them: asked again before the next cell (:func:`settle`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backend import Backend
from ..backend.ipc import DeviceBuffer, copy_in, copy_out
from ..units import format_bytes
from .devslots import DeviceTask, IpcUnavailable, close_run, run_device_block
from .ring import SlotRing
from .slots import HEADER

__all__ = ["DEVICE_ROUND", "DeviceRing", "DeviceSlot", "device_size", "leftover_bytes",
           "settle"]

DEVICE_ROUND = 2 << 20  # slot sizes in whole 2 MiB: what cudaMalloc gives at least
# after a failure, how long the workers' cancelled blocks may take to let go of the slots
# before the slots are kept for a later cell (asked every CLOSE_POLL seconds meanwhile)
CLOSE_WAIT, CLOSE_POLL = 5.0, 0.05

_log = logging.getLogger(__name__)


def device_size(need: int) -> int:
    """A device slot's bytes for ``need``: whole :data:`DEVICE_ROUND`."""
    return max(DEVICE_ROUND, -(-need // DEVICE_ROUND) * DEVICE_ROUND)


@dataclass(eq=False)
class DeviceSlot:
    """One device buffer of the ring, kept for one worker; ``busy`` while a block uses it."""

    worker: str
    buf: DeviceBuffer
    busy: bool = False
    use: int = 0  # blocks it was given so far: written in its header (slots.HEADER)
    reading_from: int | None = None  # the lowest byte a queued copy out still reads

    @property
    def capacity(self) -> int:
        return self.buf.nbytes

    def view(self, offset: int, shape: tuple[int, ...], dtype: Any) -> Any:
        return self.buf.view(offset, shape, dtype)


class DeviceRing(SlotRing):
    """The device slots of one run of a cell (:class:`~.ring.SlotRing`).

    Parameters
    ----------
    client, workers
        The client and its workers' addresses (every one on this kernel's GPU).
    be
        This kernel's backend (the GPU's): the slots' budget and its page-locked memory.
    run
        The run's name: the workers close its slots' openings together.
    """

    runner = staticmethod(run_device_block)  # what a block's task runs on its worker
    # keys of their own: where the run falls back, the same blocks run again as tasks of the
    # plain keys, and Dask would give a new task the result of a cancelled one of its key
    # still executing on a worker (its worker resumes it): this run's, placed in a device slot
    key_suffix = "-ipc"

    def __init__(self, client: Any, workers: tuple[str, ...], be: Backend, run: str) -> None:
        super().__init__(client, workers, "cupy-magic-ipc")
        self.be, self.run = be, run
        self.retired: list[DeviceSlot] = []  # outgrown: freed with the others at the end
        self.reserved = 0  # bytes of this kernel's budget the slots hold
        self.peak = 0  # the most they held at once (the report's)
        self.limit = be.limit  # the budget they came out of, as it was at the start

    def describe(self) -> str:
        """How many slots, of what size, and how much of the budget, for the report."""
        sizes = [s.capacity for s in [*self.slots, *self.retired]]
        if not sizes:
            return "no device slots"
        budget = (f" of this kernel's {format_bytes(self.limit)} budget" if self.limit
                  else " of this kernel's GPU (no budget)")
        return (f"{len(sizes)} device slots of {format_bytes(max(sizes))} ("
                f"{format_bytes(self.peak)}{budget}, held for the run)")

    # --- what the pipeline asks of a ring (:mod:`.pipeline`) ------------------------------
    def take(self, need: int, least: int) -> DeviceSlot | None:
        """As :meth:`.SlotRing.take`; where no slot can be made (CUDA or the budget refused
        it), None while a block holds one (it gives it back), else :class:`IpcUnavailable`
        (the run goes through shared memory instead)."""
        try:
            return super().take(need, least)
        except (MemoryError, RuntimeError, ImportError) as exc:  # budget, CUDA, no CuPy
            if any(s.busy for s in self.slots):
                return None
            raise IpcUnavailable(f"this kernel could not make a device slot of "
                                 f"{format_bytes(self._round(max(need, self.size)))} "
                                 f"({type(exc).__name__}: {exc})".split("\n")[0]) from None

    def fill(self, slot: DeviceSlot, places: dict[str, Any], local: dict[str, np.ndarray],
             start: int, rows: int) -> None:
        """Copy the slot's use into its header and the block's input rows into it, on the
        slot's stream, and wait until they are there and the slot's last block's copies out
        are done (the worker then writes its results where they read).

        The copies out run on the slot's other stream, so the inputs arrive while the last
        results leave: on the H200 a slot's 512 MiB copied in behind its last 512 MiB out on
        one stream took 18.7 ms per block (0.60 s of a 16 GiB run,
        benchmarks/results/cluster-2026-12-05T0335.md), about each direction's 10.7 ms in
        turn. Where the inputs would overwrite bytes a copy out still reads (a block with
        more rows than the slot's last), that copy is waited for first."""
        stream = slot.buf.stream
        end = max((off + math.prod(shape) * np.dtype(dtype).itemsize
                   for off, shape, dtype in places.values()), default=0)
        if slot.reading_from is not None and end > slot.reading_from:
            slot.buf.out_stream.synchronize()
            slot.reading_from = None
        copy_in(self.be, slot.view(0, (1,), HEADER), np.array([slot.use], HEADER), stream)
        for name, (off, shape, dtype) in places.items():
            if self.be.host is not None:  # page-locked in the background (once): later
                self.be.host.lock(local[name])  # blocks and cells copy at pinned speed
            copy_in(self.be, slot.view(off, shape, dtype), local[name][start:start + rows],
                    stream)
        slot.buf.synchronize()  # inputs in, last results out: before the worker runs
        slot.reading_from = None

    def task(self, slot: DeviceSlot, places: dict[str, Any], results_at: int,
             place: bool) -> DeviceTask:
        """What the block's worker is told of its slot."""
        return DeviceTask(self.run, slot.buf.handle, slot.capacity, places, results_at,
                          place, slot.use)

    def drain(self, slot: DeviceSlot, offset: int, shape: tuple[int, ...], dtype: Any,
              dst: np.ndarray) -> None:
        """Queue the copy of a row result the worker placed at ``offset`` into ``dst`` on the
        slot's stream for copies out (the slot's next block is copied in meanwhile,
        :meth:`fill`)."""
        at = offset if slot.reading_from is None else min(offset, slot.reading_from)
        slot.reading_from = at
        copy_out(self.be, dst, slot.view(offset, shape, dtype), slot.buf.out_stream)

    def finish(self) -> None:
        """Wait for every copy out still queued (on every slot, though one fails: the first
        error is raised after)."""
        failed: BaseException | None = None
        for slot in [*self.slots, *self.retired]:
            try:
                slot.buf.synchronize()
                slot.reading_from = None
            except BaseException as exc:  # raised below, after the others
                failed = failed or exc
        if failed is not None:
            raise failed

    def end(self) -> None:
        """After the blocks: nothing here; :meth:`close` frees the slots."""

    # --- what a slot is -------------------------------------------------------------------
    def _room(self) -> int | None:
        used, total = self.be.device_memory()
        left = self.be.budget_left()
        return total - used if left is None else min(left, total - used)

    def _round(self, need: int) -> int:
        return device_size(need)

    def _make(self, worker: str, need: int) -> DeviceSlot:
        size = self._round(need)
        self.be.reserve(size, "this cell's device slots")
        try:
            buf = DeviceBuffer(size)
        except BaseException:
            self.be.unreserve(size)
            raise
        self.reserved += size
        self.peak = max(self.peak, self.reserved)
        self.size = max(self.size, size)
        slot = DeviceSlot(worker, buf)
        self.slots.append(slot)
        return slot

    def _retire(self, slot: DeviceSlot) -> None:
        """Give the slot to no block any more; it stays made until :meth:`close` (a worker
        may have it open, or a block still use it after a failure)."""
        self.slots.remove(slot)
        self.retired.append(slot)

    # --- the end of the run ---------------------------------------------------------------
    def close(self) -> int:
        """The run is over (done, failed or interrupted): the workers close their openings
        of its slots and the slots are freed; those a block still uses are kept until the
        workers close them (:func:`settle`). Returns how many were kept."""
        slots, self.slots, self.retired = [*self.slots, *self.retired], [], []
        self.pool.shutdown(wait=True)
        kept = _close(self.client, self.run, slots, self.be)
        self.reserved = sum(s.capacity for s in kept)
        return len(kept)


# runs whose slots a worker still had open when they ended: (client, run, slots, backend)
_leftover: list[tuple[Any, str, list[DeviceSlot], Backend]] = []


def _close(client: Any, run: str, slots: list[DeviceSlot], be: Backend) -> list[DeviceSlot]:
    """Ask the workers to close the run's openings; free the slots once none is left open
    (on every worker); keep them all otherwise (remembered for :func:`settle`)."""
    for slot in slots:
        with contextlib.suppress(Exception):  # a failed device: the free below says so
            slot.buf.synchronize()
    try:
        left = _ask_closed(client, run) if slots else 0
    except BaseException:  # Ctrl-C meanwhile: not known to be closed, kept
        _leftover.append((client, run, slots, be))
        raise
    if left:
        _leftover.append((client, run, slots, be))
        return slots
    _free(slots, be)
    return []


def _free(slots: list[DeviceSlot], be: Backend) -> None:
    """Free slots no worker has open any more and give their bytes back to the budget."""
    for slot in slots:
        slot.buf.free()
        be.unreserve(slot.capacity)


def _ask_closed(client: Any, run: str, wait: float = CLOSE_WAIT) -> int:
    """Close the workers' openings of ``run``'s slots: how many are still open after up to
    ``wait`` seconds (blocks cancelled after a failure let go of theirs as they end)."""
    if getattr(client, "status", "") != "running":
        return 0  # the client closed with its cluster: the workers' openings went with it
    end = time.monotonic() + wait
    while True:
        try:
            answers = client.run(close_run, run, on_error="return")
        except Exception as exc:  # not known to be closed: kept, asked again
            _log.debug("cupy_magic: closing the workers' device slots failed: %s", exc)
            return 1
        left = sum(a if isinstance(a, int) else 1 for a in answers.values())
        if not left or time.monotonic() >= end:
            return left
        time.sleep(CLOSE_POLL)


def settle() -> None:
    """Before a cell: free the slots of earlier runs that a late block kept open, where their
    workers closed them since (or the client closed, with the cluster it started)."""
    pending, _leftover[:] = list(_leftover), []
    for c, run, slots, be in pending:
        if _ask_closed(c, run, wait=0):
            _leftover.append((c, run, slots, be))
            continue
        _free(slots, be)


def leftover_bytes() -> int:
    """Bytes of device slots kept after their run, until their workers close them."""
    return sum(s.capacity for _, _, slots, _ in _leftover for s in slots)
