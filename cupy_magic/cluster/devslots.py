"""The worker's side of the CUDA IPC transport (the kernel's side is :mod:`.devring`): the
kernel's device slots this worker opened, and one block of a cell run from one.

A device slot is a buffer on the kernel's GPU (the worker's own GPU: the transport is chosen
only then). A block's task names the slot by its IPC handle, where each batched input lies
in it and where the result area starts; the worker opens the handle (once per run of a cell,
:func:`close_run` closes every opening of the run), copies the block's rows into its own pool
(so no result of the cell can be a view of the kernel's memory), runs the block as
:func:`~.worker.run_block` does and copies the block's row results into the result area, on
the device. Only the block's stats and small values go back over the socket.

CUDA's rule: the kernel may free a slot only once every worker closed it. A block still
running when the kernel closes the run (after a failure or Ctrl-C) keeps its opening until it
ends; :func:`close_run` says how many such openings are left, and the kernel asks again
before it frees their slots.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import backend as _backend
from ..backend.ipc import close_handle, device_view, open_handle
from .slots import HEADER, as_host, result_places
from .worker import BlockSpec, block_info, execute_block, run_block, worker_facts

__all__ = ["DeviceTask", "IpcUnavailable", "close_run", "device_facts", "open_runs",
           "run_device_block"]

CLOSED_KEPT = 4096  # closed runs remembered, against a late block of a closed run


class IpcUnavailable(RuntimeError):
    """A worker could not open the kernel's device slot: the kernel runs the cell through
    shared memory instead (and says so)."""


@dataclass(frozen=True)
class DeviceTask:
    """Where one block's data lies in its device slot.

    Attributes
    ----------
    run
        The run of the cell the slot belongs to (its openings close together).
    handle, size
        The slot's IPC handle and bytes.
    inputs
        Per batched input: ``(offset, shape, dtype)`` of the block's rows in the slot.
    results_at
        The first byte of the result area (row results go from there to the slot's end).
    place
        Write the row results into the slot; otherwise return the results as
        :func:`~.worker.run_block` does (they stay on the worker as the task's result).
    use
        The slot's use this block was given (the slot's header says the current one).
    """

    run: str
    handle: bytes
    size: int
    inputs: dict[str, tuple[int, tuple[int, ...], np.dtype]]
    results_at: int
    place: bool = True
    use: int = 0


@dataclass(eq=False)
class _Opened:
    """One opening of a kernel's slot: its address here and the blocks using it."""

    ptr: int
    users: int = 0


_lock = threading.Lock()
_runs: dict[str, dict[bytes, _Opened]] = {}  # run -> handle -> opening
_closed: set[str] = set()  # runs the kernel closed: a late block of one opens nothing


def _attach(run: str, handle: bytes) -> _Opened:
    """The opening of ``handle`` in ``run`` (opened now on first use), one user more. Opened
    under the lock: CUDA refuses a second opening of a handle open in this process."""
    with _lock:
        if run in _closed:
            raise RuntimeError(f"the kernel closed run {run} of its device slots; this "
                               "block's run is superseded")
        openings = _runs.setdefault(run, {})
        opened = openings.get(handle)
        if opened is None:
            try:
                ptr = open_handle(handle)
            except Exception as exc:  # the kernel runs the cell through shared memory instead
                if not openings:
                    _runs.pop(run, None)
                raise IpcUnavailable(f"opening the kernel's device slot failed on this worker "
                                     f"({type(exc).__name__}: {exc})".split("\n")[0]) from None
            opened = openings[handle] = _Opened(ptr)
        opened.users += 1
        return opened


def _leave(run: str, handle: bytes, opened: _Opened) -> None:
    """One user less; the last user of a closed run's opening closes it."""
    with _lock:
        opened.users -= 1
        last = run in _closed and opened.users == 0
        if last:
            _runs.get(run, {}).pop(handle, None)
            if not _runs.get(run):
                _runs.pop(run, None)
    if last:
        close_handle(opened.ptr)


def close_run(run: str, dask_worker: Any = None) -> int:
    """Close this worker's openings of the run's slots (the kernel is done with them); an
    opening a block still uses closes when that block ends. Returns how many are left open
    (the kernel frees their slots only once this says 0)."""
    with _lock:
        if len(_closed) > CLOSED_KEPT:
            _closed.clear()
        _closed.add(run)
        openings = _runs.get(run, {})
        idle = [(h, o) for h, o in openings.items() if o.users == 0]
        for handle, _ in idle:
            del openings[handle]
        left = len(openings)
        if not openings:
            _runs.pop(run, None)
    for _, opened in idle:
        close_handle(opened.ptr)
    return left


def open_runs(dask_worker: Any = None) -> dict[str, int]:
    """The runs with slots open on this worker now, and how many each (tests, checks)."""
    with _lock:
        return {run: len(openings) for run, openings in _runs.items() if openings}


def device_facts(handle: bytes, token: bytes, dask_worker: Any = None) -> dict[str, Any]:
    """What decides whether this worker can compute on the kernel's device memory: its host,
    backend and GPU (:func:`~.worker.worker_facts`), and whether it opened the kernel's probe
    buffer by ``handle`` and read ``token`` there."""
    facts = worker_facts(dask_worker)
    fact = {k: facts[k] for k in ("host", "backend", "uuid")}
    fact.update(opened=False, why="")
    if facts["backend"] != "cupy":
        fact["why"] = "it runs on the CPU fallback"
        return fact
    try:
        ptr = open_handle(handle)
    except Exception as exc:
        fact["why"] = f"{type(exc).__name__}: {exc}".split("\n")[0]
        return fact
    try:
        got = device_view(ptr, len(token), 0, (len(token),), np.uint8, None).get()
        fact["opened"] = got.tobytes() == token
        fact["why"] = "" if fact["opened"] else "the buffer holds other bytes"
    finally:
        close_handle(ptr)
    return fact


def run_device_block(spec: BlockSpec, index: int, start: int, task: DeviceTask,
                     shared: dict[str, Any]) -> dict[str, Any]:
    """Run the cell over the block whose inputs lie in the device slot ``task`` names.

    Returns the block's :func:`~.worker.block_info` (``names``, ``stats``), ``placed``: the
    offset in the slot of each row result written there, and ``values``: row results that
    did not fit the result area (or hold Python objects), as host arrays; without
    ``task.place``, what :func:`~.worker.run_block` returns. A failure raises
    :class:`~.worker.BlockFailed` as :func:`~.worker.run_block` does;
    :class:`IpcUnavailable` where the slot cannot be opened here.
    """
    be = _backend.current()
    if not be.is_gpu:
        raise IpcUnavailable("this worker runs on the CPU fallback, not on the kernel's GPU")
    opened = _attach(task.run, task.handle)
    ptr, size = opened.ptr, task.size
    batched = {n: device_view(ptr, size, off, shape, dt, opened)
               for n, (off, shape, dt) in task.inputs.items()}
    try:
        if not task.place:  # execute_block copies the rows: no result views the slot
            return run_block(spec, index, start, batched, shared)
        out, stats = execute_block(spec, index, start, batched, shared)
        batched.clear()
        info = block_info({"values": out, "stats": stats})
        placed: dict[str, int] = {}
        values: dict[str, Any] = {}
        rows = result_places(info["names"], task.results_at, size)
        if rows and int(device_view(ptr, size, 0, (1,), HEADER, opened).get()[0]) != task.use:
            # a run the scheduler gave up on (the block ran again elsewhere) and the kernel
            # has given the slot to another block since: write nothing there
            raise RuntimeError(f"device slot of run {task.run} was given to another block; "
                               f"this run of block {index} is superseded")
        for name, at, shape, dtype in rows:
            if at is not None:
                dst, value = device_view(ptr, size, at, shape, dtype, opened), out[name]
                if be.is_device_array(value):
                    be.xp.copyto(dst, value)
                else:  # a NumPy result of a GPU cell (np.asarray of a list, say)
                    dst.set(np.ascontiguousarray(value))
                placed[name] = at
            else:
                values[name] = as_host(be, out[name])
        be.synchronize()  # the results are in the kernel's slot before the kernel is told
        return {**info, "placed": placed, "values": values}
    finally:
        batched.clear()  # the views go before the opening may close
        with contextlib.suppress(Exception):  # a failed block may still have copies of the
            be.synchronize()  # slot queued: done before the kernel may free or refill it
        _leave(task.run, task.handle, opened)
