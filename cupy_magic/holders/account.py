"""Who holds the memory: the holders, where they were made, and the rest of the memory.

:func:`note_cell` remembers which cell and line made each array a cell committed (the runner
knows: the report's outputs and the cell's source); :func:`vram_holders` walks the namespace
it is given and measures the rest of the device memory, part by part: the pool's memory in
use that no listed array accounts for, its cached blocks, and what no pool owns
(``cudaMemGetInfo``'s used bytes less the pools' held bytes). On the CPU fallback it lists
the arrays cells made, in host memory.
"""

from __future__ import annotations

import ast
import functools
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..backend import Backend
from ..units import format_bytes
from .records import Holder, HolderReport, MemoryPart, allocation, holders_from
from .walk import walk

__all__ = ["forget", "made_in", "note_cell", "top_hint", "vram_holders"]

_origins: dict[int, tuple[Any, str]] = {}  # id(array) -> (weakref to it, "In [3], line 2")


@functools.lru_cache(maxsize=256)
def _assigned_lines(source: str) -> dict[str, int]:
    """The last top-level line that binds each name in ``source`` (statement starts)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    lines: dict[str, int] = {}
    for stmt in tree.body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                lines[node.id] = stmt.lineno
    return lines


def _remember(array: Any, where: str) -> None:
    key = id(array)
    try:
        ref = weakref.ref(array, lambda _r: _origins.pop(key, None))
    except TypeError:  # an array type without weak references: not remembered
        return
    _origins[key] = (ref, where)


def note_cell(label: str, source: str, names: Iterable[str], namespace: dict[str, Any],
              value: Any, be: Backend, value_on_device: bool = True) -> None:
    """Remember the cell and line that made the device arrays a cell committed.

    Parameters
    ----------
    label
        What the cell is called (``In [3]``).
    source
        The cell's code, for the line that bound each name.
    names
        The names the cell committed (its report's outputs).
    namespace
        The user namespace after the commit.
    value
        The cell's last expression (it goes to ``Out``), made on the cell's last line.
    value_on_device
        The value stayed on the device (no ``--to-host``): on the CPU fallback it is then
        kept as one of the arrays cells made, as a device array in ``Out`` is on a GPU.
    """
    lines = _assigned_lines(source)
    for name in names:
        array = namespace.get(name)
        if be.is_device_array(array) and name in lines:
            _remember(array, f"{label}, line {lines[name]}")
    if value_on_device:
        be.keep_on_device(value)
    if be.is_device_array(value) and id(value) not in _origins:
        last = len(source.rstrip().splitlines())
        _remember(value, f"{label}, line {last} (its last expression)")


def listed(be: Backend) -> Callable[[Any], bool]:
    """Which objects are listed: the backend's device arrays; on the CPU fallback also
    views of the arrays cells made (a GPU's views are device arrays by themselves)."""
    if be.is_gpu:
        return be.is_device_array

    def made_by_cells(obj: Any) -> bool:
        if be.is_device_array(obj):
            return True
        if not isinstance(obj, np.ndarray):  # never probe other objects' attributes: a
            return False  # traitlets Config makes an entry for any name it is asked for
        base = obj.base
        while isinstance(base, np.ndarray) and not be.is_device_array(base):
            base = base.base
        return isinstance(base, np.ndarray)

    return made_by_cells


def made_in(array: Any) -> str:
    """The cell and line that made ``array``, or ``""`` when no cell committed it."""
    entry = _origins.get(id(array))
    return entry[1] if entry is not None and entry[0]() is array else ""


def forget() -> None:
    """Forget every origin (at unload)."""
    _origins.clear()


def _device_parts(be: Backend, holders: list[Holder], used: int,
                  others: int | None) -> list[MemoryPart]:
    """The rest of the device memory, each part measured."""
    pool = be.pool  # type: ignore[attr-defined]
    pool_used, pool_held = int(pool.used_bytes()), int(pool.total_bytes())
    listed = sum(h.nbytes for h in holders)
    parts = [
        MemoryPart("pool memory in use that no listed array accounts for", pool_used - listed,
                   "the pool's used bytes less the listed arrays: cuFFT plan work areas, "
                   "arrays inside libraries or awaiting garbage collection"),
        MemoryPart("the pool's cached blocks", pool_held - pool_used,
                   "held from the device, free for the next arrays; --free releases them"),
    ]
    held = pool_held
    default = be.cp.get_default_memory_pool()  # type: ignore[attr-defined]
    if default is not pool and default.total_bytes():
        held += int(default.total_bytes())
        parts.append(MemoryPart("CuPy's default pool", int(default.total_bytes()),
                                "arrays made while the extension was not loaded"))
    outside = used - held - (others or 0)
    parts.append(MemoryPart(
        "memory no pool owns", outside,
        "cudaMemGetInfo used less the pools' held bytes"
        + (" and other processes (NVML)" if others else "")
        + ": the CUDA context, cuBLAS/cuFFT workspaces and plan caches"))
    if others:
        parts.append(MemoryPart("other processes", others, "NVML's per-process figures"))
    pinned = be.cp.get_default_pinned_memory_pool()  # type: ignore[attr-defined]
    locked = be.host.stats()["locked_bytes"]  # type: ignore[attr-defined]
    parts.append(MemoryPart(
        f"host: page-locked memory (not VRAM); the pinned pool keeps {pinned.n_free_blocks()} "
        "free block(s), whose bytes CuPy does not report", int(locked),
        "inputs and result blocks the extension locked"))
    return parts


def vram_holders(namespace: dict[str, Any], be: Backend,
                 others: int | None = None) -> HolderReport:
    """Every array of ``be`` the user can reach from ``namespace``, largest first, and the
    rest of the memory, each part measured.

    Parameters
    ----------
    namespace
        The user namespace (roots: its names, IPython's ``Out`` and ``_``, the last
        traceback).
    be
        The live backend: its device arrays are listed (on the CPU fallback, the arrays
        cells made, in host memory).
    others
        Bytes other processes hold on the device (NVML), when known; left out of "memory
        no pool owns".
    """
    found = walk(namespace, listed(be))
    memory = "device" if be.is_gpu else "host"
    holders = holders_from(found, made_in, memory)
    used, total = be.device_memory()
    report = HolderReport(holders, memory="VRAM" if be.is_gpu else
                          "host memory (CPU fallback: the arrays cells made)",
                          used=used, total=total, notes=list(found.notes))
    if be.is_gpu:
        report.parts = _device_parts(be, holders, used, others)
    else:  # each allocation once: a listed view keeps its base (a cell's array) alive
        bases = be.resident_bases()  # type: ignore[attr-defined]
        reached = {allocation(f.array)[0][1] for f in found.found.values()} & bases.keys()
        report.parts = [MemoryPart(
            "arrays cells made that no listed path reaches",
            sum(int(b.nbytes) for k, b in bases.items() if k not in reached),
            "the host backend's account of cell results less the listed arrays: held "
            "where the walk does not look (inside libraries, or awaiting garbage collection)")]
    return report


def top_hint(namespace: dict[str, Any], be: Backend, n: int = 3) -> str:
    """The ``n`` largest holders and the commands that free them, for an out-of-memory
    message: "Out[12] holds 3.20 GiB (%vram_who --free Out; vram_free('Out') from Python)";
    "" when none."""
    holders = holders_from(walk(namespace, listed(be)), made_in)[:n]
    named = [f"{h.path} holds {format_bytes(h.nbytes)}" + (
        f" ({h.command}; {h.call} from Python)" if h.frees else "")
        for h in holders if h.nbytes]
    return f"Held now: {'; '.join(named)}" if named else ""
