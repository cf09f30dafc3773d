"""How a ``%%gpu --cluster`` cell's blocks reach the workers: through device slots on this
kernel's GPU opened by CUDA IPC handles (:mod:`.devring`) when every worker computes on that
GPU, else through the ring of shared-memory slots (:mod:`.shm`) when every worker shares this
host's memory, else scattered and gathered over the network; the facts each choice rests on.

A worker computes on this kernel's GPU when it runs on the same host, on CuPy, on the GPU of
the same UUID (dask-cuda gives each worker its own ``CUDA_VISIBLE_DEVICES``, so device
numbers differ between processes) and opened a probe buffer this kernel made by its IPC
handle: asked once per cluster. The device slots come out of this kernel's VRAM budget.

A worker shares the kernel's memory when it runs on the same host (the same host name) and
opened a segment this kernel made and read back what it holds: asked once per cluster. A cell
whose results must stay on the workers as the blocks' futures (``--reduce`` rules, results
without ``--to-host``) still reads its inputs through the slots. Scatter remains for workers
elsewhere, an input the cell changes, arrays of Python objects, and a host without room
for the slots.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from ..backend import Backend
from ..backend.ipc import DeviceBuffer
from ..run.batching import BatchOptions
from ..run.plan import CellPlan
from ..units import format_bytes
from . import devring, shm
from .devslots import device_facts
from .inputs import block_sizes, cut_inputs, row_bytes
from .ring import SLOTS_PER_WORKER
from .slots import ALIGN, align, host_facts, new_segment, track_again, tracker_id

__all__ = ["Transport", "check_devices", "check_hosts", "choose", "device_room_reason",
           "forget", "futures_reason", "probe_room", "room_reason", "same_device", "same_host",
           "scatter_reason", "shm_or_scatter", "use_ipc"]

ROOM_SHARE = 0.5  # of the free shared memory the slots may take (the host needs the rest)


@dataclass(frozen=True)
class Transport:
    """How a cell's blocks reach the workers.

    Attributes
    ----------
    kind
        ``"ipc"`` (device slots on this kernel's GPU), ``"shm"`` (the ring of shared-memory
        slots), ``"scatter"`` (scatter and gather), or ``"dask"`` (the cell's Dask arrays
        are on the workers already).
    why
        Why scatter (a fallback's reason), or why the results of an ``"ipc"`` or ``"shm"``
        run stay on the workers as the blocks' futures.
    not_ipc
        Why not CUDA IPC, where it was asked about (a GPU kernel's NumPy inputs).
    """

    kind: str
    why: str = ""
    not_ipc: str = ""

    @property
    def place(self) -> bool:
        """Slots with no reason to keep results on the workers: the row results come back
        through the slots too (not as futures)."""
        return self.kind in ("ipc", "shm") and not self.why

    def describe(self) -> str:
        """One phrase for the report."""
        told = self._describe()
        return f"{told}; not CUDA IPC: {self.not_ipc}" if self.not_ipc else told

    def _describe(self) -> str:
        if self.kind == "ipc":
            ring = f"{SLOTS_PER_WORKER} device slots per worker, from this kernel's budget"
            if self.place:
                return (f"CUDA IPC on this kernel's GPU ({ring}; this kernel copies the inputs "
                        "in and the row results out, the workers compute on the slots)")
            return (f"CUDA IPC on this kernel's GPU for the inputs ({ring}); the blocks' "
                    f"results are joined on the workers from their futures ({self.why}), "
                    "then gathered where --to-host asks")
        ring = f"a ring of {SLOTS_PER_WORKER} slots per worker"
        if self.place:
            return (f"shared memory on this host ({ring}; inputs and row results copied "
                    "through it, no array sent)")
        if self.kind == "shm":
            return (f"shared memory on this host for the inputs ({ring}); the blocks' results "
                    f"are joined on the workers from their futures ({self.why}), then "
                    "gathered where --to-host asks")
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
        why = _elsewhere(address, fact, kernel_host) or _unopened(address, fact, "shared memory")
        if why:
            return why
    return ""


def _elsewhere(address: str, fact: Any, kernel_host: str) -> str:
    """Why the worker at ``address`` is not on this kernel's host, from what it answered
    (``""``: it is)."""
    if not isinstance(fact, dict):
        return f"worker {address} could not say where it runs ({fact!r})"
    if fact.get("host") != kernel_host:
        return f"worker {address} runs on {fact.get('host')!r}, this kernel on {kernel_host!r}"
    return ""


def _unopened(address: str, fact: dict[str, Any], what: str) -> str:
    """Why the worker at ``address`` could not open this kernel's probe of ``what``
    (``""``: it did)."""
    if fact.get("opened"):
        return ""
    return (f"worker {address} could not open this kernel's {what} "
            f"({fact.get('why') or 'no reason given'})")


_hosts: dict[tuple[int, tuple[str, ...]], str] = {}  # (client, workers) -> same_host's answer


def check_hosts(client: Any, workers: tuple[str, ...]) -> str:
    """:func:`same_host` for the cluster's workers, asked once per client and worker set
    (again when a worker's check raised)."""
    key = (id(client), workers)
    if key in _hosts:
        return _hosts[key]
    full = probe_room(shm.room(), len(workers))
    if full:  # not kept: asked again next cell
        return full
    token = secrets.token_bytes(16)
    # a probe per worker: workers sharing one resource tracker never open one name at once
    probes: dict[str, shared_memory.SharedMemory] = {}
    try:
        for w in workers:
            probes[w] = new_segment(ALIGN)
            probes[w].buf[:len(token)] = token
        facts = client.run(host_facts, {w: s.name for w, s in probes.items()}, token,
                           tracker_id(), workers=list(workers), on_error="return")
    except Exception as exc:  # not known to share memory: asked again next cell
        return f"asking the workers where they run failed ({type(exc).__name__}: {exc})"
    finally:
        track_again(list(probes.values()))
        for seg in probes.values():
            seg.close()
            seg.unlink()
    why = same_host(socket.gethostname(), facts)
    if all(isinstance(fact, dict) for fact in facts.values()):  # a worker's error: asked
        _hosts[key] = why  # again next cell, so one failed check does not stick
    return why


def probe_room(free: int | None, workers: int) -> str:
    """Why the host check cannot make its probe segments (``""``: it can): ``free`` bytes
    left in /dev/shm for ``workers`` probes of a page each. A write past a full tmpfs kills
    the writer (SIGBUS), so nothing is made without room."""
    if free is None or free >= 2 * ALIGN * workers:
        return ""
    return (f"{shm.SHM_DIR} has {format_bytes(free)} free, too little even to check whether "
            "the workers share this host's memory: give it more (docker run --shm-size=...)")


def _ring_guess(block_bytes: int, blocks: int, workers: int) -> tuple[int, int]:
    """The slots a cell's ring is first guessed to need and the bytes of each: one per
    block up to :data:`~.ring.SLOTS_PER_WORKER` per worker, each holding a block's
    ``block_bytes`` of input, as much again for its results, and the header."""
    return min(blocks, SLOTS_PER_WORKER * workers), 2 * align(block_bytes) + ALIGN


def room_reason(block_bytes: int, blocks: int, workers: int) -> str:
    """Why this host has no room for the ring a cell's blocks need (``""``: it has): the
    slots for ``blocks`` blocks of ``block_bytes`` of input each (and as much again for
    their results, as first guessed), beyond the ring's slots of now, which are reused."""
    free = shm.room()
    slots, each = _ring_guess(block_bytes, blocks, workers)
    need = slots * each - shm.slot_bytes()
    if free is None or need <= free * ROOM_SHARE:
        return ""
    return (f"{shm.SHM_DIR} has {format_bytes(free)} free, the slots need {format_bytes(need)}: "
            f"give it more (docker run --shm-size=...) or make blocks smaller (--batch-bytes)")


_devices: dict[tuple[int, tuple[str, ...]], str] = {}  # (client, workers) -> same_device's
_ipc = {"on": True}


def use_ipc(on: bool) -> bool:
    """Let ``%%gpu --cluster`` use CUDA IPC where it can (the default), or not: the
    benchmarks and tests compare it with shared memory. Returns the setting before."""
    before, _ipc["on"] = _ipc["on"], bool(on)
    return before


def same_device(kernel_host: str, kernel_uuid: str, facts: dict[str, Any]) -> str:
    """Why the workers cannot compute on this kernel's device memory (``""``: every one can).

    ``kernel_uuid``: this kernel's GPU (``""``: the CPU fallback). ``facts`` by worker
    address: what :func:`~.devslots.device_facts` answered there (``host``, ``backend``,
    ``uuid``, whether it ``opened`` this kernel's probe buffer and ``why`` not), or an
    error."""
    if not kernel_uuid:
        return "this kernel runs on the CPU fallback (no GPU to share)"
    if not facts:
        return "no workers to ask"
    for address, fact in sorted(facts.items()):
        why = _elsewhere(address, fact, kernel_host)
        if why:
            return why
        if fact.get("backend") != "cupy":
            return f"worker {address} runs on the CPU fallback"
        if fact.get("uuid") != kernel_uuid:
            return (f"worker {address} computes on GPU {fact.get('uuid')}, this kernel on "
                    f"{kernel_uuid}")
        why = _unopened(address, fact, "device memory")
        if why:
            return why
    return ""


PROBE = 16  # bytes of the token a worker reads back from the probe buffer


def check_devices(client: Any, workers: tuple[str, ...], be: Backend) -> str:
    """:func:`same_device` for the cluster's workers, asked once per client and worker set
    (again when a worker's check raised): each opens a small buffer this kernel made by its
    IPC handle and reads back what it holds."""
    if not _ipc["on"]:
        return "CUDA IPC is off (cupy_magic.cluster.transport.use_ipc(True) turns it on)"
    uuid = be.info().uuid if be.is_gpu else ""
    if not uuid:
        return same_device(socket.gethostname(), uuid, {})
    key = (id(client), workers)
    if key in _devices:
        return _devices[key]
    token = secrets.token_bytes(PROBE)
    try:
        probe = DeviceBuffer(devring.DEVICE_ROUND)
    except Exception as exc:  # not kept: asked again next cell
        return f"this kernel could not make a device buffer to share ({type(exc).__name__})"
    try:
        probe.view(0, (PROBE,), np.uint8).set(np.frombuffer(token, np.uint8),
                                              stream=probe.stream)
        probe.synchronize()  # the copy is asynchronous: on the device before a worker reads
        facts = client.run(device_facts, probe.handle, token, workers=list(workers),
                           on_error="return")
    except Exception as exc:  # a worker may hold it open: the probe is not freed
        return f"asking the workers for their GPU failed ({type(exc).__name__}: {exc})"
    probe.free()  # every worker closed it before it answered
    why = same_device(socket.gethostname(), uuid, facts)
    if all(isinstance(fact, dict) for fact in facts.values()):
        _devices[key] = why
    return why


def device_room_reason(block_bytes: int, blocks: int, workers: int, free: int | None) -> str:
    """Why this kernel's budget has no room for the device slots a cell's blocks need
    (``""``: it has): as many slots as :func:`room_reason` counts, of ``block_bytes`` of
    input each and as much again for results, against ``free``, the bytes the budget (or
    the GPU, without one) has left."""
    slots, each = _ring_guess(block_bytes, blocks, workers)
    size = devring.device_size(each)
    if free is None or slots * size <= free:
        return ""
    return (f"the device slots need {format_bytes(slots * size)} ({slots} of "
            f"{format_bytes(size)}) and this kernel's budget has {format_bytes(max(0, free))} "
            "left; give a larger budget (%vram_budget) or smaller blocks (--batch-bytes)")


def forget() -> None:
    """Forget what the workers' hosts and GPUs are (the cluster was left); free the device
    slots a late block kept open that can be freed now (:func:`~.devring.settle`)."""
    _hosts.clear()
    _devices.clear()
    with contextlib.suppress(Exception):  # nothing to free, or a cluster gone already
        devring.settle()


def choose(client: Any, darrs: dict[str, Any], plan: CellPlan, opts: BatchOptions,
           scatter_numpy: bool, to_host: Any, workers: tuple[str, ...],
           be: Backend) -> Transport:
    """How the cell's blocks' data moves: the Dask arrays' blocks where they are; through
    device slots when this kernel runs on a GPU every worker computes on, the cell allows
    it and the budget has room; through shared memory when every worker shares this host's
    memory, the cell allows it and the host has room; else scatter and gather. Nothing is
    sent to the workers but the checks of their GPU and host (once per cluster).
    ``workers``: the cluster's worker addresses."""
    if darrs:
        return Transport("dask")
    cut = cut_inputs(plan, opts, scatter_numpy)
    why = scatter_reason(cut, plan.inputs, plan.stored)
    kept = futures_reason(plan.stored, opts.reduce, to_host)
    if not why and cut:
        sizes = block_sizes(plan.inputs, cut, opts, max(1, len(workers)))
        block = max(sizes, default=0) * row_bytes(plan.inputs, cut)
        not_ipc = ""  # asked on a GPU only: the CPU fallback's report stays as it was
        if be.is_gpu:  # the budget first: the check of the workers' GPU makes a buffer
            devring.settle()
            left = be.budget_left()
            not_ipc = device_room_reason(block, len(sizes), len(workers), left) or \
                check_devices(client, workers, be)
            if not not_ipc:
                return Transport("ipc", kept)
        return shm_or_scatter(client, block, len(sizes), workers, kept, not_ipc)
    if why:
        return Transport("scatter", why)
    return shm_or_scatter(client, 0, 0, workers, kept, "")


def shm_or_scatter(client: Any, block_bytes: int, blocks: int, workers: tuple[str, ...],
                   kept: str, not_ipc: str) -> Transport:
    """Shared memory where this host has room for the slots of ``blocks`` blocks of
    ``block_bytes`` and every worker shares its memory, else scatter (CUDA IPC not chosen,
    ``not_ipc`` says why; ``kept``: :func:`futures_reason`)."""
    why = room_reason(block_bytes, blocks, len(workers)) or \
        check_hosts(client, workers)  # room first: the host check writes segments too
    return Transport("scatter", why, not_ipc) if why else Transport("shm", kept, not_ipc)
