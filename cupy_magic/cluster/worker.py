"""What runs on a worker: one block of a cell, and the facts ``%gpu_cluster show`` lists.

A block runs the cell's code as the kernel would (``np`` means the worker's array module,
CuPy on a GPU worker), over its rows of the batched inputs and the whole of the shared ones.
An error becomes :class:`BlockFailed`, which names the block, its rows, the worker and the
cell's line, and carries the original exception back to the kernel, with the exceptions it
was raised from or while handling.
"""

from __future__ import annotations

import ast
import pickle
import socket
import threading
import time
import types
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import backend as _backend
from ..compat.proxy import array_module
from ..compat.record import CompatRecord
from ..compat.scope import cell_builtins
from ..run.aliases import MODULE_NAMES, only_read
from ..run.errors import fail, unawaited_quiet
from ..run.inputwrites import InputWatch
from ..run.plan import register_source
from ..run.rewrite import device_semantics
from ..syncs.record import SyncRecorder

__all__ = ["BlockFailed", "BlockSpec", "BlockStats", "block_info", "drop_shared",
           "execute_block", "run_block", "shared_copies", "worker_facts"]

# One device copy per worker of each shared input of a running cell, keyed by its scattered
# key (unique per cell: scattered with hash=False); the kernel drops them when the cell ends.
# A key once dropped is never cached again, so a block still running after a cancel does not
# leave a copy behind.
_shared_lock = threading.Lock()
_shared: dict[str, Any] = {}
_dropped: set[str] = set()
SMALL_VALUE = 64 * 2**10  # an array without rows sent back with a block's facts (mu, w)
DROPPED_KEPT = 4096  # dropped keys remembered, against a late block of a cancelled cell


def worker_facts(dask_worker: Any = None) -> dict[str, Any]:
    """What a worker runs cells on: backend, device (and its ``uuid``), memory, budget,
    threads (``show``), and the ``host`` it runs on."""
    be = _backend.current()
    info = be.info()
    return {"backend": be.name, "device": info.name, "uuid": info.uuid,
            "host": socket.gethostname(), "total_bytes": info.total_bytes,
            "budget": be.budget.describe() if be.budget else "off", "limit": be.limit,
            "pool_used": be.pool_used(),
            "memory_limit": getattr(getattr(dask_worker, "memory_manager", None),
                                    "memory_limit", None),  # distributed >= 2022.6
            "nthreads": getattr(dask_worker, "state", None) and dask_worker.state.nthreads}


@dataclass(frozen=True)
class BlockSpec:
    """The cell as every block runs it; scattered once to every worker, not sent per task."""

    source: str
    filename: str
    numpy_names: tuple[str, ...]
    values: dict[str, Any]
    stored: tuple[str, ...]
    nblocks: int
    fallback: bool = False
    syncs: str = "warn"
    shared_keys: dict[str, str] | None = None  # shared input -> scattered key, to cache by
    # results the kernel gathers to the host: each block copies them to host memory at
    # once, so a worker's device holds one block's results, not every block's, under its
    # budget (True: every result)
    to_host: bool | tuple[str, ...] = False
    # the ``from __future__`` flags the kernel compiled the cell under: the block compiles
    # under these and no others (this module's own would otherwise leak into the cell)
    flags: int = 0


@dataclass
class BlockStats:
    """One block as its worker saw it (the report's per-worker rows sum these)."""

    index: int
    worker: str
    rows: int
    nbytes: int
    seconds: float
    peak_bytes: int
    syncs: int = 0
    device: str = ""
    backend: str = "host"
    uploads: int = 0  # shared inputs this block copied to the device (0: the worker's copy)
    # the batched inputs the cell left on the block's copy of their rows (changed in place)
    kept: tuple[str, ...] = ()


class BlockFailed(Exception):
    """A block of a cell failed on a worker: which block, rows, worker and cell line.

    Pickling an exception keeps its type, arguments and notes but not its ``__cause__``,
    ``__context__`` and ``__suppress_context__``: ``links`` carries them over, so that the
    kernel raises the cell's error chained as the cell raised it (as a run in the kernel
    does). Each link: an exception of the chain (the first is ``original``), the positions
    of its cause and context in ``links`` (``None``: none), whether its context is
    suppressed, and the cell line it was raised at (``None``: not in the cell).
    """

    def __init__(self, where: str, line: int | None, original: BaseException,
                 links: list[tuple[BaseException, int | None, int | None, bool, int | None]]
                 | None = None) -> None:
        links = [(original, None, None, original.__suppress_context__, line)] \
            if links is None else links
        super().__init__(where, line, original, links)
        self.where, self.line, self.original, self.links = where, line, original, links
        for exc, cause, context, suppress, _ in links:  # unpickled: the chain again
            if cause is not None:
                exc.__cause__ = links[cause][0]
            if context is not None:
                exc.__context__ = links[context][0]
            exc.__suppress_context__ = suppress

    def __str__(self) -> str:
        return f"{self.where}: {type(self.original).__name__}: {self.original}"


def _chain_links(exc: BaseException, filename: str
                ) -> list[tuple[BaseException, int | None, int | None, bool, int | None]]:
    """:attr:`BlockFailed.links` of ``exc``: it and the exceptions it was raised from or
    while handling, each once (a chain can loop); one that cannot be pickled ends its branch
    (the error itself then still reaches the kernel)."""
    order: list[BaseException] = []
    places: dict[int, int] = {}

    def place(link: BaseException | None) -> int | None:
        if link is None:
            return None
        if id(link) in places:
            return places[id(link)]
        if order and not _picklable(link):
            return None
        places[id(link)] = len(order)
        order.append(link)
        return places[id(link)]

    place(exc)
    links = []
    for link in order:  # grows while it is walked
        cause, context = place(link.__cause__), place(link.__context__)
        links.append((link, cause, context, link.__suppress_context__,
                      _cell_lineno(link, filename)))
    return links


def _picklable(exc: BaseException) -> bool:
    try:
        pickle.dumps(exc)
    except Exception:
        return False
    return True


def _worker_address() -> str:
    try:
        from distributed import get_worker
        return str(get_worker().address)
    except (ImportError, ValueError):
        return "this process"


def _cell_lineno(exc: BaseException, filename: str) -> int | None:
    tb, line = exc.__traceback__, getattr(exc, "line", None)
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line if isinstance(line, int) else None


def _device_copy(be: Any, key: str | None, value: Any) -> tuple[Any, bool]:
    """The worker's device copy of a shared input (made now if it has none); whether this
    call uploaded it. ``key`` ``None``: a copy of this block's own."""
    if key is None:
        return be.to_device(np.asarray(value)).array, True
    with _shared_lock:
        if key in _shared:
            return _shared[key], False
        copy = be.to_device(np.asarray(value)).array
        if key not in _dropped:
            _shared[key] = copy
        return copy, True


def drop_shared(keys: list[str], dask_worker: Any = None) -> int:
    """Drop this worker's device copies of a cell's shared inputs; return how many."""
    with _shared_lock:
        if len(_dropped) > DROPPED_KEPT:
            _dropped.clear()
        _dropped.update(keys)
        return sum(_shared.pop(k, None) is not None for k in keys)


def shared_copies(dask_worker: Any = None) -> int:
    """How many shared device copies this worker holds now (tests, ``show``)."""
    with _shared_lock:
        return len(_shared)


def run_block(spec: BlockSpec, index: int, start: int, batched: dict[str, Any],
              shared: dict[str, Any]) -> dict[str, Any]:
    """Run the cell over one block; return the names it bound and the block's stats.

    ``batched`` holds this block's rows of the batched inputs, ``shared`` the inputs every
    block reads whole. Raises :class:`BlockFailed` naming the block, worker and line.
    """
    be = _backend.current()
    out, stats = execute_block(spec, index, start, batched, shared)
    for name in out if spec.to_host is True else spec.to_host:
        if name in out and be.is_device_array(out[name]):
            out[name] = be.to_host(out[name])
    return {"values": out, "stats": stats}


def execute_block(spec: BlockSpec, index: int, start: int, batched: dict[str, Any],
                  shared: dict[str, Any]) -> tuple[dict[str, Any], BlockStats]:
    """:func:`run_block` before its results move: the names the block bound, where the
    cell left them (on the device), and the block's stats."""
    be, worker = _backend.current(), _worker_address()
    rows = next((len(a) for a in batched.values()), 0)
    register_source(spec.source, spec.filename)
    record = CompatRecord(spec.filename, spec.source, fallback=spec.fallback,
                          host=not be.is_gpu)
    module = array_module(be.xp, record, be.uncounted)
    work: dict[str, Any] = {"__builtins__": cell_builtins(module), **spec.values}
    work.update({n: module for n in spec.numpy_names})
    recorder = (SyncRecorder(spec.filename, spec.source, spec.syncs) if be.is_gpu
                and spec.syncs != "off" else None)
    t0, peak, uploads = time.perf_counter(), 0, 0
    keys = spec.shared_keys or {}
    try:
        with be.track_memory(spec.filename) as mem:
            for name, arr in shared.items():
                work[name], uploaded = _device_copy(be, keys.get(name), arr)
                uploads += uploaded
            for name, arr in batched.items():  # a device slot's rows: a copy of the block's own
                work[name] = arr.copy() if be.is_device_array(arr) \
                    else be.to_device(np.asarray(arr)).array
            copies = {n: weakref.ref(work[n]) for n in batched if n in spec.stored}
            given = {**shared, **batched}  # (the host's arrays, or a device slot's rows)
            watch = InputWatch(given, set(spec.stored), {n: work[n] for n in given}, be,
                               only_read(spec.source, frozenset(given),
                                         frozenset({*spec.numpy_names, *MODULE_NAMES})))
            tree = device_semantics(ast.parse(spec.source, spec.filename), spec.source)
            code = compile(tree, spec.filename, "exec", spec.flags, dont_inherit=True)
            if recorder is not None:
                with recorder:
                    exec(code, work)
            else:
                exec(code, work)
            be.synchronize()
            watch.refuse_unseen("a run on a cluster")
        peak = mem.peak_bytes
    except BaseException as exc:
        watch = None  # the copies it watched go with the block's names
        with unawaited_quiet():
            work.clear()
        new = fail(exc, be, peak, spec.filename)
        where = (f"block {index + 1} of {spec.nblocks} (rows {start:,}:{start + rows:,}) "
                 f"failed on worker {worker}")
        # the cell's own error goes with its chain; one of ours (out of memory) without
        raise BlockFailed(where, _cell_lineno(new, spec.filename), new,
                          _chain_links(new, spec.filename) if new is exc else None) from None
    syncs = sum(c.count for c in recorder.counts) if recorder is not None \
        and recorder.available else 0
    stats = BlockStats(index, worker, rows, sum(int(a.nbytes) for a in batched.values()),
                       time.perf_counter() - t0, peak, syncs, be.info().name, be.name,
                       uploads, tuple(n for n, c in copies.items()
                                      if c() is not None and work.get(n) is c()))
    return {n: work[n] for n in spec.stored if n in work}, stats


def block_info(result: dict[str, Any]) -> dict[str, Any]:
    """What the kernel needs to know of a block's result, without its arrays: per name
    ``("rows"|"array", shape, dtype)``, ``("array", (), dtype, value)`` for a NumPy scalar or
    a 0-d array (its value on the host), ``("array", shape, dtype, value)`` for another
    array of at most ``SMALL_VALUE`` bytes without the block's rows (kept where the check
    reads it as row-free and every block agrees),
    ``("python", value)`` or ``("skip", kind)``."""
    rows = result["stats"].rows
    info: dict[str, Any] = {}
    for name, value in result["values"].items():
        shape = getattr(value, "shape", None)
        if isinstance(value, (types.FunctionType, type, types.ModuleType)) or callable(value):
            info[name] = ("skip", type(value).__name__)
        elif isinstance(value, np.generic) or shape == ():  # kept where the check allows
            host = value.get() if hasattr(value, "get") else value  # a CuPy 0-d array's value
            info[name] = ("array", (), np.dtype(value.dtype), host)
        elif shape is not None and hasattr(value, "dtype"):
            kind = "rows" if len(shape) >= 1 and shape[0] == rows else "array"
            info[name] = (kind, tuple(shape), np.dtype(value.dtype))
            if kind == "array" and int(value.nbytes) <= SMALL_VALUE:  # mu = np.array([..])
                info[name] += (value.get() if hasattr(value, "get") else np.asarray(value),)
        else:
            info[name] = ("python", value)
    return {"names": info, "stats": result["stats"]}
