"""The worker's side of the shared-memory transport (the kernel's side is :mod:`.shm`): the
kernel's slots this worker process has open, and one block of a cell run from a slot.

A slot is a segment of shared memory the kernel made. A block's task names the slot, where
each batched input lies in it and where the result area starts; the worker reads its inputs
there (views, no copy of their own), runs the block as :func:`~.worker.run_block` does, and
writes the block's row results into the result area, so only the block's stats and small
values go back over the socket. A slot is opened once per worker process and kept open (and,
on a GPU worker, page-locked once) until the kernel detaches it (:func:`detach`).

Python 3.11 registers a segment a process opens with that process's resource tracker, which
unlinks it when the process ends: a worker with a tracker of its own unregisters it at once
(the kernel owns it). A worker the kernel started (a local cluster) reports to the kernel's
own tracker, where the segment is registered once for both, so it leaves it there: the
tracker then still unlinks the kernel's segments if the kernel is killed outright. The kernel
registers its segments again before it unlinks them (:func:`track_again`), in case a worker
took them out all the same.
"""

from __future__ import annotations

import gc
import math
import os
import secrets
import socket
import threading
from dataclasses import dataclass
from multiprocessing import resource_tracker, shared_memory
from typing import Any

import numpy as np

from .. import backend as _backend
from .worker import BlockSpec, block_info, execute_block, run_block

__all__ = ["ALIGN", "HEADER", "SEGMENT_PREFIX", "SlotTask", "align", "as_host", "detach",
           "host_facts", "locked_slots", "new_segment", "open_slots", "result_places",
           "run_slot_block", "segment_prefix", "track_again", "tracker_id", "view"]

ALIGN = 4096  # every area of a slot starts on a page: whole pages lock and copy fastest


def align(nbytes: int) -> int:
    """``nbytes`` rounded up to a whole number of :data:`ALIGN`."""
    return -(-nbytes // ALIGN) * ALIGN


HEADER = np.dtype(np.int64)  # a slot's first bytes: the use the kernel gave it last



def result_places(names: dict[str, Any], at: int, size: int
                  ) -> list[tuple[str, int | None, tuple[int, ...], np.dtype]]:
    """Where a block's row results go in its slot of ``size`` bytes, by name: from ``at``
    on, each at a page, while they fit and hold no Python objects (offset ``None``: back
    as a host array instead). ``names``: the block's result kinds
    (:func:`~.worker.block_info`); those without a row axis are left out (Python values
    ride in the info)."""
    places: list[tuple[str, int | None, tuple[int, ...], np.dtype]] = []
    for name, kind in sorted(names.items()):
        if kind[0] != "rows":
            continue
        shape, dtype = kind[1], kind[2]
        nbytes = math.prod(shape) * dtype.itemsize
        if not dtype.hasobject and at + nbytes <= size:
            places.append((name, at, shape, dtype))
            at = align(at + nbytes)
        else:
            places.append((name, None, shape, dtype))
    return places


def as_host(be: Any, value: Any) -> np.ndarray:
    """A row result that did not fit its slot, as the host array sent back instead."""
    return be.to_host(value) if be.is_device_array(value) else np.asarray(value)


SEGMENT_PREFIX = "cupy-magic-"  # what `ls /dev/shm` shows this package's segments by


def segment_prefix(pid: int | None = None) -> str:
    """The start of the names of the segments process ``pid`` (default: this one) makes:
    ``cupy-magic-<pid>-``, so a user (or a test) can tell whose segments are whose."""
    return f"{SEGMENT_PREFIX}{os.getpid() if pid is None else pid}-"


def new_segment(size: int) -> shared_memory.SharedMemory:
    """A new shared-memory segment of ``size`` bytes named :func:`segment_prefix` and a
    random part (another name is drawn if one is taken)."""
    while True:
        try:
            return shared_memory.SharedMemory(name=segment_prefix() + secrets.token_hex(6),
                                              create=True, size=size)
        except FileExistsError:
            continue


def view(mem: np.ndarray, offset: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """The C-ordered array of ``shape`` and ``dtype`` at ``offset`` of a slot's bytes."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    return mem[offset:offset + nbytes].view(dtype).reshape(shape)


def _tracker_name(seg: shared_memory.SharedMemory) -> str:
    """The name the resource tracker knows a segment by (POSIX: with its leading slash)."""
    return f"/{seg.name}" if os.name == "posix" else seg.name


def tracker_id() -> tuple[int, int]:
    """Which resource tracker this process reports to: the pipe it writes to (a process
    started by another one through ``multiprocessing`` writes to its parent's)."""
    if os.name != "posix":
        return (0, 0)
    st = os.fstat(resource_tracker.getfd())
    return st.st_dev, st.st_ino


def _open_segment(name: str, tracker: tuple[int, int]) -> shared_memory.SharedMemory:
    """Open the kernel's segment ``name`` (whose process reports to ``tracker``) without
    this process's own tracker taking it over."""
    try:
        return shared_memory.SharedMemory(name=name, track=False)  # Python >= 3.13
    except TypeError:
        seg = shared_memory.SharedMemory(name=name)
        if os.name == "posix" and tracker_id() != tracker:
            resource_tracker.unregister(_tracker_name(seg), "shared_memory")
        return seg


def track_again(segs: list[shared_memory.SharedMemory]) -> None:
    """Register the kernel's own segments with its resource tracker again (kernel side):
    a no-op for a tracker that has them; one a worker took them out of (it failed to see
    that it shares the kernel's tracker) gets them back, so ``unlink`` finds them there
    and a kernel killed outright still has them unlinked."""
    if os.name == "posix":
        for seg in segs:
            resource_tracker.register(_tracker_name(seg), "shared_memory")


@dataclass(frozen=True)
class SlotTask:
    """Where one block's data lies in its slot.

    Attributes
    ----------
    name
        The slot's segment.
    inputs
        Per batched input: ``(offset, shape, dtype)`` of the block's rows in the slot.
    results_at
        The first byte of the result area (row results go from there to the slot's end).
    tracker
        The kernel's resource tracker (:func:`tracker_id`).
    place
        Write the row results into the slot; otherwise return the results as
        :func:`~.worker.run_block` does (they stay on the worker as the task's result).
    """

    name: str
    inputs: dict[str, tuple[int, tuple[int, ...], np.dtype]]
    results_at: int
    tracker: tuple[int, int]
    place: bool = True
    use: int = 0  # the slot's use this block was given (its header says the current one)


@dataclass(eq=False)
class _Open:
    """A slot this worker process has open: the segment, its page-lock, who uses it."""

    seg: shared_memory.SharedMemory
    be: Any  # the backend that locked it (it unlocks it)
    pin: Any = None
    users: int = 0
    detached: bool = False


_lock = threading.Lock()
_open: dict[str, _Open] = {}
# slots the kernel detached: an _attach that was opening one meanwhile closes it after use
_detached: set[str] = set()
_unclosed: list[shared_memory.SharedMemory] = []  # mapped until their last view goes


def _base(seg: shared_memory.SharedMemory) -> int:
    return int(np.frombuffer(seg.buf, np.uint8).ctypes.data)


def _attach(name: str, tracker: tuple[int, int]) -> _Open:
    """The slot ``name``, opened (and page-locked on a GPU worker) on first use."""
    be = _backend.current()
    with _lock:
        slot = _open.get(name)
        if slot is not None:
            slot.users += 1
    if slot is None:
        seg = _open_segment(name, tracker)
        fresh = _Open(seg, be, be.pin_shared(_base(seg), seg.size), users=1)
        with _lock:
            if name in _detached:  # detached while this opened it: closed after this block
                fresh.detached = True
                slot = fresh
            else:
                slot = _open.setdefault(name, fresh)
            if slot is not fresh:
                slot.users += 1
        if slot is not fresh:  # another thread opened it meanwhile: keep one
            _close(fresh)
    if slot.be is not be:  # the worker's backend was replaced: lock the slot for the new one
        slot.be.unpin_shared(slot.pin)
        slot.be, slot.pin = be, be.pin_shared(_base(slot.seg), slot.seg.size)
    return slot


def _leave(slot: _Open) -> None:
    with _lock:
        slot.users -= 1
        last = slot.detached and slot.users == 0
    if last:
        _close(slot)


def _close(slot: _Open) -> None:
    """Unlock the slot, then unmap it (a view still alive keeps the mapping: collected)."""
    slot.be.unpin_shared(slot.pin)
    slot.pin = None
    try:
        slot.seg.close()
    except BufferError:  # a view kept by a traceback: collect it, else the view keeps it
        gc.collect()
        try:
            slot.seg.close()
        except BufferError:  # kept referenced: its __del__ would only fail the same way
            _unclosed.append(slot.seg)


def detach(names: list[str], dask_worker: Any = None) -> int:
    """Close this worker's openings of the slots ``names`` (the kernel is done with them);
    a slot a block still uses closes when that block ends. Returns how many were open."""
    found = []
    with _lock:
        _detached.update(names)
        for name in names:
            slot = _open.pop(name, None)
            if slot is not None:
                slot.detached = True
                found.append(slot)
        idle = [s for s in found if s.users == 0]
    for slot in idle:
        _close(slot)
    return len(found)


def open_slots(dask_worker: Any = None) -> list[str]:
    """The slots this worker process has open now (tests, and the kernel's checks)."""
    with _lock:
        return sorted(_open)


def locked_slots(dask_worker: Any = None) -> list[str]:
    """The open slots this worker's backend holds page-locked (none on the CPU fallback)."""
    with _lock:
        return sorted(n for n, s in _open.items()
                      if s.pin is not None and s.be is _backend.current())


def host_facts(names: dict[str, str], token: bytes, tracker: tuple[int, int],
               dask_worker: Any = None) -> dict[str, Any]:
    """What decides whether this worker shares the kernel's memory: its host name, and
    whether it opened the kernel's probe segment for it (``names`` by worker address) and
    read ``token`` there (``tracker``: the kernel's, :func:`tracker_id`)."""
    facts: dict[str, Any] = {"host": socket.gethostname(), "opened": False, "why": ""}
    name = names.get(str(getattr(dask_worker, "address", "")))
    if name is None:
        facts["why"] = "no probe segment named for this worker"
        return facts
    try:
        seg = _open_segment(name, tracker)
    except OSError as exc:
        facts["why"] = f"{type(exc).__name__}: {exc}"
        return facts
    try:
        facts["opened"] = bytes(seg.buf[:len(token)]) == token
        facts["why"] = "" if facts["opened"] else "a segment of that name holds other bytes"
    finally:
        seg.close()
    return facts


def run_slot_block(spec: BlockSpec, index: int, start: int, task: SlotTask,
                   shared: dict[str, Any]) -> dict[str, Any]:
    """Run the cell over the block whose inputs lie in the slot ``task`` names.

    Returns the block's :func:`~.worker.block_info` (``names``, ``stats``), ``placed``: the
    offset in the slot of each row result written there, and ``values``: row results that
    did not fit the result area (or hold Python objects), as host arrays; without
    ``task.place``, what :func:`~.worker.run_block` returns. A failure raises
    :class:`~.worker.BlockFailed` as :func:`~.worker.run_block` does.
    """
    slot = _attach(task.name, task.tracker)
    mem: np.ndarray | None = np.frombuffer(slot.seg.buf, np.uint8)
    batched = {n: view(mem, off, shape, dt) for n, (off, shape, dt) in task.inputs.items()}
    try:
        if not task.place:  # its results never view the slot: to_device copies the inputs
            return run_block(spec, index, start, batched, shared)
        out, stats = execute_block(spec, index, start, batched, shared)
        batched.clear()
        info = block_info({"values": out, "stats": stats})
        be = _backend.current()
        placed: dict[str, int] = {}
        values: dict[str, Any] = {}
        for name, at, shape, dtype in result_places(info["names"], task.results_at,
                                                    slot.seg.size):
            if int(view(mem, 0, (1,), HEADER)[0]) != task.use:
                # a run the scheduler gave up on (the block ran again elsewhere) and the
                # kernel has given the slot to another block since: write nothing there
                raise RuntimeError(f"slot {task.name} was given to another block; this run "
                                   f"of block {index} is superseded")
            if at is not None:
                be.to_host_into(out[name], view(mem, at, shape, dtype))
                placed[name] = at
            else:
                values[name] = as_host(be, out[name])
        return {**info, "placed": placed, "values": values}
    finally:
        batched.clear()  # the views go before the slot may close (a traceback keeps frames)
        mem = None
        _leave(slot)
