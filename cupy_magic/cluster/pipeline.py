"""A ``%%gpu --cluster`` run through a ring of slots: shared memory on this host
(:mod:`.shm`) or device buffers on this kernel's GPU the workers open by CUDA IPC handles
(:mod:`.devring`); blocks copied in, run on the workers, their row results copied out,
several blocks in flight.

This kernel copies block ``i``'s input rows into a free slot (on several threads for big
blocks into shared memory; on the slot's stream into a device slot) and submits the block
to the slot's worker; as blocks finish (in any order) it copies
their row results out of the slot into the final NumPy arrays (made when the first block
says what a row of each result is) and refills the slot with the next block, so copies in,
the workers' work and copies out overlap. The blocks are the scatter path's blocks and the
results are joined by the same rules (:meth:`~.execute.ClusterExecutor._results`), so the
two paths agree, errors included.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..backend import Backend
from ..run import progress
from .failure import BlockCancelled
from .inputs import BlockInputs, row_bytes
from .ring import SlotRing, copy_rows
from .slots import ALIGN, align

__all__ = ["SlotRun", "check_done", "run_through_slots"]


@dataclass
class SlotRun:
    """What a run through the slots gives back.

    Attributes
    ----------
    infos
        Each block's ``names`` and ``stats`` (:func:`~.worker.block_info`), in block order.
    filled
        Row results joined in this kernel, by name (only those every block gave rows of one
        shape and dtype for; :meth:`~.execute.ClusterExecutor._results` refuses the rest as
        the scatter path does).
    copy_in_seconds, copy_out_seconds
        This kernel's copies of the blocks' inputs into the slots, and of their row results
        out of them (with the first touch of the result arrays' pages). Into a device slot:
        until the block's inputs are on the device (after that slot's last copy out); out of
        one: queueing the copies, and the wait for the last of them at the end.
    futures
        Each block's future, in block order (without ``place``, its results on the worker).
    sent_back
        Blocks whose row results came back over the socket instead: larger than the slot
        the block was given before the first block said how large a result row is.
    """

    infos: list[dict[str, Any]]
    filled: dict[str, np.ndarray] = field(default_factory=dict)
    copy_in_seconds: float = 0.0
    copy_out_seconds: float = 0.0
    futures: list[Any] = field(default_factory=list)
    sent_back: int = 0

    @property
    def copy_seconds(self) -> float:
        """This kernel's copies into and out of the slots."""
        return self.copy_in_seconds + self.copy_out_seconds


def _layout(local: dict[str, np.ndarray], rows: int) -> tuple[dict[str, Any], int]:
    """Where each batched input's ``rows`` rows lie in a slot (after its header page,
    :data:`~.slots.HEADER`), and where results start."""
    at, places = ALIGN, {}
    for name, arr in local.items():
        shape = (rows, *arr.shape[1:])
        places[name] = (at, shape, arr.dtype)
        at = align(at + math.prod(shape) * arr.dtype.itemsize)
    return places, at


def _row_bytes(names: dict[str, Any]) -> tuple[int, int]:
    """Bytes per row of a block's row results that go through a slot, and how many there
    are (each starts on a page of its own)."""
    rows = [math.prod(k[1][1:]) * k[2].itemsize for k in names.values()
            if k[0] == "rows" and not k[2].hasobject]
    return sum(rows), len(rows)


def check_done(future: Any) -> None:
    """Raise the error of a block's finished ``future``, or say that it was cancelled."""
    if future.status == "error":
        raise future.exception()
    if future.status == "cancelled":  # named with the workers that left: failure.explain
        raise BlockCancelled(str(future.key))


def run_through_slots(client: Any, ring: SlotRing, spec_f: Any, inputs: BlockInputs,
                      cell_id: str, held: list[Any], be: Backend, place: bool = True) -> SlotRun:
    """Run every block of the cell through ``ring``; ``held`` gets each task's future (the
    caller cancels them on a failure). ``place``: the blocks' row results come back through
    the slots; otherwise they stay on the workers (the futures' results, as
    :func:`~.worker.run_block` gives them) and only the inputs go through the slots.

    The joined row results are ``be``'s result arrays (:meth:`~.Backend.host_result`). On a
    failure or Ctrl-C the slots that blocks still use are left out of the ring (a late block
    may write there), the others are free."""
    from distributed import as_completed

    local, n = inputs.local, len(inputs.starts)
    total = sum(inputs.sizes)
    # a result row's bytes and results: as the inputs' until a block says
    out_row, outs = row_bytes(local, local), len(local)
    run = SlotRun([{} for _ in range(n)], futures=[None] * n)
    todo = deque(range(n))
    flying: dict[Any, tuple[Any, int]] = {}
    done = as_completed()
    per_block = inputs.input_bytes // max(n, 1)

    def send(i: int) -> bool:
        start, rows = inputs.starts[i], inputs.sizes[i]
        places, results_at = _layout(local, rows)
        slot = ring.take(results_at + rows * out_row + ALIGN * outs, results_at)
        if slot is None:
            return False
        t0 = time.perf_counter()
        slot.use += 1  # a run of a block from a slot's earlier use must not write there
        ring.fill(slot, places, local, start, rows)
        run.copy_in_seconds += time.perf_counter() - t0
        future = client.submit(ring.runner, spec_f, i, start,
                               ring.task(slot, places, results_at, place), inputs.shared,
                               key=f"cupy-magic-{cell_id}-block-{i}{ring.key_suffix}",
                               workers=[slot.worker],
                               allow_other_workers=True, pure=False)
        held.append(future)
        run.futures[i] = future
        flying[future] = (slot, i)
        done.add(future)
        return True

    def receive(slot: Any, i: int, result: dict[str, Any]) -> None:
        start, rows = inputs.starts[i], inputs.sizes[i]
        run.infos[i] = {"names": result["names"], "stats": result["stats"]}
        run.sent_back += bool(result["values"])
        t0 = time.perf_counter()
        for name, kind in result["names"].items():
            if kind[0] != "rows":
                continue
            dst = run.filled.get(name)
            if dst is None:
                dst = run.filled[name] = be.host_result((total, *kind[1][1:]), kind[2])
            elif dst.shape[1:] != kind[1][1:] or dst.dtype != kind[2]:
                continue  # the blocks disagree: refused afterwards, in block order
            if name in result["placed"]:
                ring.drain(slot, result["placed"][name], kind[1], kind[2],
                           dst[start:start + rows])
            else:
                copy_rows(dst[start:start + rows], result["values"][name], ring.pool)
        run.copy_out_seconds += time.perf_counter() - t0

    try:
        while todo and send(todo[0]):
            todo.popleft()
        for future in done:
            slot, i = flying.pop(future)
            if future.status == "error":
                ring.give_back(slot)  # its block ended: nothing writes there any more
            check_done(future)
            if place:
                result = future.result()
                receive(slot, i, result)
                got, count = _row_bytes(result["names"])
                out_row, outs = max(out_row, got), max(outs, count)
            ring.give_back(slot)
            progress.step(1, per_block)
            while todo and send(todo[0]):
                todo.popleft()
        t0 = time.perf_counter()
        ring.finish()  # the copies out still queued (device slots)
        if place:  # without, nothing was copied out
            run.copy_out_seconds += time.perf_counter() - t0
    except BaseException:  # the caller cancels the futures (``held``)
        with contextlib.suppress(Exception):  # the block's own error is the one to raise
            ring.finish()  # no copy is left to write into a result array that goes now
        ring.retire_busy()
        raise
    finally:
        ring.end()
    for arr in run.filled.values():
        be.host_result_done(arr)
    return run
