"""A cluster run that failed, as the kernel reports it: a block's own error (at the cell's
line), a worker process that died while the cell ran (which worker, which block, the fix), a
cluster closed meanwhile, or Ctrl-C; and letting go of what the workers hold for the cell,
also when the client can no longer reach them.

A worker that dies mid-cell is something Dask survives: its tasks run again on the other
workers (and the cell then simply finishes). When Dask gives up instead (the block's input
was only on the dead worker, or every worker that ran a block died), its error names a key
and a state, not the cell: :func:`explain` turns it into one line that says which worker
left, while running which block, and what to do; ``distributed``'s own log lines of that
death, in a cluster the kernel started, are then left out (:mod:`.deathlog`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import logging
import re
from dataclasses import dataclass
from typing import Any

from ..backend import Backend
from ..run import progress
from ..run.errors import CellError, at_cell_line, fail
from . import abandoned, connect, deathlog
from .inputs import scheduler_workers
from .worker import BlockFailed

__all__ = ["BlockCancelled", "CellBlocks", "cancel", "died", "explain", "hold_log",
           "interrupted", "release_log", "unstick"]

_log = logging.getLogger(__name__)
# a block run through device slots ends in "-ipc" (:attr:`.devring.DeviceRing.key_suffix`)
_BLOCK_KEY = re.compile(r"^cupy-magic-(?P<cell>[0-9a-f]+)-block-(?P<index>\d+)(?:-ipc)?$")
TAIL = "its futures cancelled, nothing committed"
AGAIN = ("run the cell again (a local cluster's nanny restarts a dead worker; %gpu_cluster "
         "show lists the workers)")


class BlockCancelled(CellError):
    """A block's future was cancelled on the cluster (a worker left, or another client
    cancelled it); :func:`explain` says which."""

    def __init__(self, key: str) -> None:
        super().__init__(f"{key} was cancelled on the cluster")
        self.key = key

    def __reduce__(self) -> tuple[Any, ...]:  # pickled as made: BlockCancelled(key)
        return type(self), (self.key,), self.__dict__


@dataclass
class CellBlocks:
    """What a failure message names: the cell's blocks and the workers it started with;
    ``told`` and ``deaths``: the workers its line named as dead (:data:`.deathlog.EVERY` for
    every one that left) and how many processes it says ended."""

    cell_id: str
    workers: tuple[str, ...] = ()
    starts: tuple[int, ...] = ()
    sizes: tuple[int, ...] = ()
    told: frozenset[str] = frozenset()
    deaths: int = 0

    def index(self, key: Any) -> int | None:
        """The block a task key runs (from 0), or ``None`` for another key."""
        m = _BLOCK_KEY.match(str(key))
        return int(m["index"]) if m is not None and m["cell"] == self.cell_id else None

    def blocks(self, keys: Any) -> str:
        """``block 6 of 10 (rows 500:600)``, or ``blocks 2, 4, 6 of 10``, for the task keys
        ``keys`` (those of other tasks left out); ``""`` for none of the cell's blocks."""
        return self.named({i for i in map(self.index, keys) if i is not None})

    def named(self, indices: set[int]) -> str:
        """:meth:`blocks` for the blocks ``indices`` (from 0)."""
        found = sorted(indices)
        of = f" of {len(self.starts)}" if self.starts else ""
        if len(found) != 1:
            return f"blocks {', '.join(str(i + 1) for i in found)}{of}" if found else ""
        i = found[0]
        rows = (f" (rows {self.starts[i]:,}:{self.starts[i] + self.sizes[i]:,})"
                if i < len(self.starts) else "")
        return f"block {i + 1}{of}{rows}"


def hold_log(cell: CellBlocks) -> None:
    """As the cell starts: hold ``distributed``'s log records of workers dying
    (:func:`.deathlog.hold`; only on the cluster the kernel started)."""
    deathlog.hold(cell.cell_id)


def release_log(cell: CellBlocks) -> None:
    """As the cell ends: drop the held records its line told, show the others."""
    deathlog.release(cell.cell_id, cell.told, cell.deaths)


def cancel(client: Any, held: list[Any]) -> None:
    """Cancel the cell's futures (blocks, scattered inputs), so the workers keep nothing of
    it; nothing to cancel where the client is closed (the scheduler dropped them)."""
    futures, held[:] = list(held), []
    if futures and client.status == "running":
        try:
            client.cancel(futures)
        except Exception as exc:  # closed meanwhile: the scheduler forgets them itself
            _log.debug("cupy_magic: cancelling the cell's futures failed: %s", exc)


def unstick(client: Any) -> None:
    """Undo what a Ctrl-C can leave in ``distributed``'s client: a gather cancelled before
    it started stays the client's pending gather (``Client._gather_future``), and every
    later gather waits on it and fails (``UnboundLocalError`` from ``distributed.utils.sync``)
    until the kernel restarts. A pending gather is never done, so a done one is dropped; in
    the client's own event loop."""
    if getattr(client, "status", "") != "running" or not hasattr(client, "_gather_future"):
        return

    async def drop() -> None:
        pending = client._gather_future
        if pending is not None and pending.done():
            client._gather_future = client._gather_keys = None

    with contextlib.suppress(Exception):  # the client's internals changed: nothing to undo
        client.sync(drop)


def _is_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says a block or the cell's data went with a worker."""
    from distributed.scheduler import KilledWorker

    return isinstance(exc, (BlockCancelled, KilledWorker, cf.CancelledError,
                            asyncio.CancelledError))


def _left(client: Any, cell: CellBlocks) -> dict[str, set[int]]:
    """The workers the cell started with that are gone now, with the blocks each had when
    the scheduler removed it (its events: running or queued there)."""
    try:
        now = set(scheduler_workers(client))
    except Exception:  # the scheduler does not answer either: say nothing of workers
        return {}
    left: dict[str, set[int]] = {}
    for address in (w for w in cell.workers if w not in now):
        left[address] = set()
        with contextlib.suppress(Exception):  # no events kept: the worker alone is named
            for _, msg in client.get_events(address):
                if isinstance(msg, dict) and msg.get("action") == "remove-worker":
                    left[address] = {i for i in map(cell.index, msg.get("processing-tasks",
                                                                         ())) if i is not None}
    return left


def _lost(exc: BaseException, client: Any, cell: CellBlocks) -> str:
    """The one line for a block or input lost with its worker."""
    from distributed.scheduler import KilledWorker

    if isinstance(exc, KilledWorker):
        last = getattr(exc.last_worker, "address", exc.last_worker)
        what = cell.blocks([exc.task]) or f"the task {exc.task}"
        cell.told, cell.deaths = frozenset({deathlog.EVERY}), exc.allowed_failures + 1
        return (f"{what} ended the process of every worker that ran it ({exc.allowed_failures + 1}"
                f", the last {last}): out of memory, or a crash in native code?; {TAIL}; run it "
                "in this kernel to see the error (%gpu_cluster off), or give smaller blocks "
                "(--batch-rows)")
    left = _left(client, cell)
    key = getattr(exc, "key", None)
    if not left:
        what = cell.blocks([key]) if key is not None else ""
        return (f"{what or 'a block of the cell'} was cancelled on the cluster (a worker left, "
                f"or another client cancelled it); {TAIL}; {AGAIN}")
    cell.told, cell.deaths = frozenset(left), len(left)
    return died(left, cell)


def died(left: dict[str, set[int]], cell: CellBlocks) -> str:
    """The one line for workers that left during the cell: ``left`` maps each to the blocks
    (from 0) it had; a block every one of them had may have ended them itself.

    Which of several such blocks did is not known: the scheduler records the tasks a worker
    was given (its ``processing``, what ``remove-worker`` events and ``suspicious`` counts
    are made of), not which one it was running, so a block queued behind the one that ended
    the first worker moves with it to the next and is counted alike; the line says "one of".
    (Where Dask itself gives up on one task, :class:`~distributed.scheduler.KilledWorker`
    names it, and :func:`_lost` names that block alone.)
    """
    parts = [address + (f" (with {cell.named(ix)})" if ix else "") for address, ix in left.items()]
    many = len(parts) > 1
    gone = f"worker{'s' * many} {' and '.join(parts)} died during the cell"
    common = set.intersection(*left.values()) if many else set()
    if common:  # the same block on every worker that died: the block may end them itself
        ended = ("was on each, and may have ended their processes itself" if len(common) == 1
                 else "were on each, and one of them may have ended their processes (Dask "
                 "does not record which one was running)")
        return (f"{gone}: {cell.named(common)} {ended} (out of memory? a crash in native "
                f"code?); {TAIL}; run the cell in this kernel to see (%gpu_cluster off), or "
                "give smaller blocks (--batch-rows)")
    return (f"{gone} (killed, out of memory, or {'their' if many else 'its'} host went "
            f"away?); {TAIL}; {AGAIN}")


def interrupted(client: Any, cell: CellBlocks) -> KeyboardInterrupt:
    """The ``KeyboardInterrupt`` of a cluster cell stopped by Ctrl-C, after its futures were
    cancelled: one line that says what the kernel was waiting for and which blocks still run
    on the workers (:mod:`.abandoned`: the next cluster cell waits for them). No cell line
    is blamed: the kernel ran none of the cell's code; IPython shows the line alone
    (its ``_render_traceback_``)."""
    earlier = abandoned.pending(client)
    if not cell.starts:
        where = (f"while waiting for {earlier.describe()}, which an earlier interrupted cell "
                 "left running (the next cluster cell waits for them again)"
                 if earlier is not None else "before the cell's blocks were sent")
        line = f"interrupted {where}; nothing of this cell ran on the cluster, nothing committed"
        return _one_line(KeyboardInterrupt(line))
    shown = progress.current()
    done = shown.batches_done if shown is not None and shown.unit == "block" else None
    total = len(cell.starts)
    if done == total:
        where = f"while the results of the cell's {total} blocks were gathered"
    else:
        where = "while waiting for the cell's blocks on the cluster" + (
            f" ({done} of {total} done)" if done is not None else "")
    prefix = f"cupy-magic-{cell.cell_id}-block-"
    on = abandoned.running(client, prefix)
    line = f"interrupted {where}; the cell's futures on the cluster cancelled, nothing committed"
    if on:
        label = shown.cell_label if shown is not None and shown.cell_label else "that cell"
        left = abandoned.Abandoned(client, label, prefix,
                                   cell.blocks(k for keys in on.values() for k in keys), on)
        abandoned.leave(left)
        one = sum(map(len, on.values())) == 1
        line += (f"; {left.blocks} still {'runs' if one else 'run'} on {', '.join(on)}: a "
                 f"running block cannot be stopped, so {'it finishes' if one else 'they finish'}"
                 " in the background, and the next cluster cell waits for "
                 f"{'it' if one else 'them'} first")
    return _one_line(KeyboardInterrupt(line))


def _one_line(exc: KeyboardInterrupt) -> KeyboardInterrupt:
    """``exc`` as IPython shows it: its line alone (``_render_traceback_``, IPython's hook for
    an exception that renders itself), no traceback pointing at a cell line."""
    exc._render_traceback_ = lambda: [f"{type(exc).__name__}: {exc}"]  # type: ignore[attr-defined]
    return exc


def explain(exc: BaseException, be: Backend, filename: str, namespace: dict[str, Any],
            client: Any, cell: CellBlocks) -> BaseException:
    """The error the cell raises for ``exc`` (the caller raises it): a block's own error at
    its cell line with the block and worker as a note; one line for a worker that died, or
    a cluster closed meanwhile; Ctrl-C and the rest as a run in the kernel reports them."""
    if isinstance(exc, BlockFailed):
        new = exc.original
        note = f"{exc.where}; {TAIL}"
        if isinstance(new, CellError):
            new.args = (f"{new.args[0]} ({note})",)
        elif hasattr(new, "add_note"):
            new.add_note(note)
        for link, _, _, _, line in exc.links[1:]:  # what it was raised from: at its line
            if link.__traceback__ is None and line is not None:
                at_cell_line(link, filename, line)
        return at_cell_line(new, filename, exc.line)
    if isinstance(exc, KeyboardInterrupt):
        return interrupted(client, cell)
    if client.status != "running" and not isinstance(exc, CellError):
        return at_cell_line(CellError(f"{connect.leave_unreachable()}; the cell committed nothing"),
                            filename, 1)
    if _is_lost(exc):
        return at_cell_line(CellError(_lost(exc, client, cell)), filename, 1)
    if isinstance(exc, CellError) and not cell.starts:  # refused before any block: its line
        return fail(exc, be, 0, filename, namespace=namespace)  # says what and the fix
    return fail(exc, be, 0, filename, f"the cluster run failed; {TAIL}", namespace=namespace)
