"""The kernel's side of the same-host transport for ``%%gpu --cluster``: which transport a
cell's blocks take, and the ring of shared-memory slots they go through.

When every worker runs on this kernel's host (the same host name, and each worker opened a
segment this kernel made and read back what it holds), a block's input rows are copied into
a slot, the worker reads them there and writes the block's row results back into the slot
(:mod:`.slots`), so no array crosses a socket. A cell whose results must stay on the workers
as the blocks' futures (``--reduce`` rules, results without ``--to-host``) still reads its
inputs through the slots. Otherwise (workers elsewhere, an input the cell changes, object
arrays) the blocks are scattered and gathered as before.

The ring holds :data:`SLOTS_PER_WORKER` slots per worker, made on the first cell that uses
them, written once (so their pages exist), grown when a block needs more and reused across
blocks and cells. It is unlinked when the cluster is left (``%gpu_cluster off``, another
cluster, unload: :func:`release`, called by :func:`~.connect.close`) and at interpreter exit.
"""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import contextlib
import gc
import itertools
import logging
import os
import secrets
import socket
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from ..units import format_bytes
from .slots import ALIGN, align, detach, host_facts, track_again, tracker_id, view

__all__ = ["COPY_THREADS", "SLOTS_PER_WORKER", "Ring", "Transport", "check_hosts", "copy_rows",
           "futures_reason", "release", "ring", "same_host", "scatter_reason", "slot_names"]

SLOTS_PER_WORKER = 3  # one running, one queued on the worker, one being filled or drained
COPY_THREADS = max(1, min(16, os.cpu_count() or 1))  # 16 threads: 32-35 GB/s on the H200
COPY_PIECE = 8 << 20  # bytes a copying thread takes at least (fewer threads for less)
SLOT_ROUND = 1 << 20  # slot sizes in whole MiB, so blocks of nearly one size share slots

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Transport:
    """How a cell's blocks reach the workers.

    Attributes
    ----------
    kind
        ``"shm"`` (the ring of slots), ``"scatter"`` (scatter and gather), or ``"dask"``
        (the cell's Dask arrays are on the workers already).
    why
        Why scatter (a fallback's reason), or why the results of an ``"shm"`` run stay on
        the workers as the blocks' futures.
    place
        ``"shm"``: the row results come back through the slots too (not as futures).
    """

    kind: str
    why: str = ""
    place: bool = True

    def describe(self) -> str:
        """One phrase for the report."""
        ring = f"a ring of {SLOTS_PER_WORKER} slots per worker"
        if self.kind == "shm" and self.place:
            return (f"shared memory on this host ({ring}; inputs and row results copied "
                    "through it, no array sent)")
        if self.kind == "shm":
            return (f"shared memory on this host for the inputs ({ring}); the results stay "
                    f"on the workers as the blocks' futures ({self.why})")
        if self.kind == "dask":
            return "the Dask arrays' blocks, where the workers hold them"
        return "scatter and gather over the network" + (f" ({self.why})" if self.why else "")


def scatter_reason(cut: list[str], inputs: dict[str, np.ndarray], stored: set[str]) -> str:
    """Why the cell's batched inputs must be scattered even on one host (``""``: they can
    go through shared memory)."""
    changed = [n for n in cut if n in stored]
    if changed:
        return f"the cell changes its input {', '.join(changed)}"
    objects = [n for n in cut if inputs[n].dtype.hasobject]
    if objects:
        return f"{', '.join(objects)} hold{'s' * (len(objects) == 1)} Python objects"
    return ""


def futures_reason(stored: set[str], reduce: dict[str, str], to_host: Any) -> str:
    """Why the blocks' results must stay on the workers as their futures (``""``: every
    row result comes back to this kernel, so through the slots).

    ``to_host`` as ``run_cell`` takes it: ``True``, or the names gathered as NumPy."""
    if reduce:
        return (f"--reduce {', '.join(reduce)} is a Dask tree reduction of the blocks' "
                "results on the workers")
    kept = [] if to_host is True else sorted(set(stored) - set(to_host or ()))
    if kept:
        return f"{', '.join(kept)} stay{'s' * (len(kept) == 1)} on the workers (no --to-host)"
    return ""


def same_host(kernel_host: str, facts: dict[str, Any]) -> str:
    """Why the workers cannot share this kernel's memory (``""``: every one can).

    ``facts`` by worker address: what :func:`~.slots.host_facts` answered there (its
    ``host`` and whether it ``opened`` this kernel's probe segment), or an error."""
    if not facts:
        return "no workers to ask"
    for address, fact in sorted(facts.items()):
        if not isinstance(fact, dict):
            return f"worker {address} could not say where it runs ({fact!r})"
        if fact.get("host") != kernel_host:
            return f"worker {address} runs on {fact.get('host')!r}, this kernel on {kernel_host!r}"
        if not fact.get("opened"):
            return (f"worker {address} could not open this kernel's shared memory "
                    f"({fact.get('why') or 'no reason given'})")
    return ""


_hosts: dict[tuple[int, tuple[str, ...]], str] = {}  # (client, workers) -> same_host's answer


def check_hosts(client: Any, workers: tuple[str, ...]) -> str:
    """:func:`same_host` for the cluster's workers, asked once per client and worker set."""
    key = (id(client), workers)
    if key in _hosts:
        return _hosts[key]
    token = secrets.token_bytes(16)
    # a probe per worker: workers sharing one resource tracker never open one name at once
    probes = {w: shared_memory.SharedMemory(create=True, size=ALIGN) for w in workers}
    try:
        for seg in probes.values():
            seg.buf[:len(token)] = token
        facts = client.run(host_facts, {w: s.name for w, s in probes.items()}, token,
                           tracker_id(), workers=list(workers), on_error="return")
    except Exception as exc:  # not asked: not known to share memory, asked again next cell
        return f"asking the workers where they run failed ({type(exc).__name__}: {exc})"
    finally:
        track_again(list(probes.values()))
        for seg in probes.values():
            seg.close()
            seg.unlink()
    _hosts[key] = why = same_host(socket.gethostname(), facts)
    return why


def _pieces(rows: int, nbytes: int) -> list[tuple[int, int]]:
    n = max(1, min(COPY_THREADS, nbytes // COPY_PIECE, rows))
    bounds = [rows * k // n for k in range(n + 1)]
    return list(itertools.pairwise(bounds))


def _threaded(pool: cf.Executor, jobs: list[Callable[[], Any]]) -> None:
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
    _threaded(pool, [lambda a=a, b=b: np.copyto(dst[a:b], src[a:b])
                     for a, b in _pieces(len(dst), dst.nbytes)])


@dataclass(eq=False)
class Slot:
    """One segment of the ring, kept for one worker; ``busy`` while a block uses it."""

    worker: str
    seg: shared_memory.SharedMemory
    mem: np.ndarray | None  # this kernel's bytes of it
    busy: bool = False

    @property
    def name(self) -> str:
        return self.seg.name

    @property
    def capacity(self) -> int:
        return self.seg.size

    def view(self, offset: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        assert self.mem is not None, "a closed slot has no bytes"
        return view(self.mem, offset, shape, dtype)


class Ring:
    """The kernel's slots for one client's workers.

    Parameters
    ----------
    client
        The ``distributed.Client`` whose workers read the slots.
    workers
        Their addresses; a block goes to the least busy one with a slot free.
    """

    def __init__(self, client: Any, workers: tuple[str, ...]) -> None:
        self.client, self.workers = client, workers
        self.slots: list[Slot] = []
        self.retired: list[str] = []  # slots left behind that workers may still have open
        self._unclosed: list[shared_memory.SharedMemory] = []  # a view kept them mapped
        self.pool = cf.ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="cupy-magic-shm")
        self.tracker = tracker_id()  # the workers leave the segments to it if they share it

    def describe(self) -> str:
        """How many slots, of what size, for the report."""
        sizes = [s.capacity for s in self.slots]
        return (f"{len(sizes)} slots of {format_bytes(max(sizes))}" if sizes
                else "no slots")

    def take(self, need: int) -> Slot | None:
        """A free slot of at least ``need`` bytes for the least busy worker (made or grown
        now if needed), marked busy; None while every worker has all its slots busy."""
        busy = Counter(s.worker for s in self.slots if s.busy)
        open_ = [w for w in self.workers if busy[w] < SLOTS_PER_WORKER]
        if not open_:
            return None
        worker = min(open_, key=lambda w: busy[w])
        idle = [s for s in self.slots if s.worker == worker and not s.busy]
        fits = [s for s in idle if s.capacity >= need]
        if fits:  # the largest: the block's results, not known yet, most likely fit
            slot = max(fits, key=lambda s: s.capacity)
        else:
            if idle:  # too small for this block: a bigger one instead
                self._retire(idle[0])
            slot = self._make(worker, need)
        slot.busy = True
        return slot

    def give_back(self, slot: Slot) -> None:
        slot.busy = False

    def retire_busy(self) -> int:
        """Leave out every busy slot (after a failure a block may still write into it):
        unlinked now, made anew when needed. Returns how many."""
        busy = [s for s in self.slots if s.busy]
        for slot in busy:
            self._retire(slot)
        return len(busy)

    def settle(self) -> None:
        """Before a cell: close the workers' openings of retired slots."""
        if self.retired:
            names, self.retired = self.retired, []
            self.client.run(detach, names, on_error="return")
        self._close_unclosed()

    def track(self) -> None:
        """After a cell: keep this kernel's tracker knowing its slots
        (:func:`~.slots.track_again`)."""
        track_again([s.seg for s in self.slots])

    def _make(self, worker: str, need: int) -> Slot:
        size = max(SLOT_ROUND, -(-align(need) // SLOT_ROUND) * SLOT_ROUND)
        seg = shared_memory.SharedMemory(create=True, size=size)
        slot = Slot(worker, seg, np.frombuffer(seg.buf, np.uint8))
        self.slots.append(slot)
        mem = slot.mem
        # written once now, so its pages exist before the first copy into it
        _threaded(self.pool, [lambda a=a, b=b: mem[a:b].fill(0)
                              for a, b in _pieces(size, size)])
        return slot

    def _retire(self, slot: Slot) -> None:
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


def release(workers: bool = True) -> None:
    """Unlink the ring's slots and forget what the workers' hosts are (leaving a cluster,
    unload, interpreter exit); with ``workers``, the workers close theirs first."""
    current, _state["ring"] = _state["ring"], None
    _hosts.clear()
    if current is not None:
        current.close(workers=workers and getattr(current.client, "status", "") == "running")
