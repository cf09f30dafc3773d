"""The records ``%vram_who`` shows: who holds each array, and the rest of the memory.

:func:`holders_from` turns a :class:`~cupy_magic.holders.walk.Walk` into :class:`Holder`
records, largest first, each allocation's bytes counted once (a view of a listed array
counts 0 and names it). :class:`HolderReport` adds the rest of the memory, each part
measured, and reads as text and HTML.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from ..backend.host import host_base
from ..theme import DIM
from ..units import format_bytes
from .walk import Walk

__all__ = ["TOP", "Holder", "HolderReport", "MemoryPart", "allocation", "holders_from"]

TOP = 5  # holders the panel's "held by" section shows


@dataclass(frozen=True)
class Holder:
    """One array the user can reach, and what it keeps alive.

    Attributes
    ----------
    path
        The preferred path that holds it: ``y``, ``Out[12]``, ``results[3]``,
        ``model.weights``, ``f.__closure__ (w)``, or the last traceback's frame and local.
    nbytes
        Bytes it keeps alive, counted once: 0 for a view of another listed array, the
        whole allocation for a view of an array nothing lists.
    array_bytes, shape, dtype
        The array's own size, shape and dtype.
    view_of
        The path of the listed array whose memory it shares ("" when none).
    made_in
        The cell and line that made it (``In [3], line 2``), where the runner knows it.
    also
        The other paths that reach the same array.
    frees
        The ``%vram_who --free`` arguments that drop every path to it.
    memory
        ``"device"`` or ``"host"`` (the CPU fallback's arrays, in host RAM).
    """

    path: str
    nbytes: int
    array_bytes: int
    shape: tuple[int, ...]
    dtype: str
    view_of: str = ""
    made_in: str = ""
    also: tuple[str, ...] = ()
    frees: tuple[str, ...] = ()
    memory: str = "device"

    @property
    def command(self) -> str:
        """The command that frees it, e.g. ``%vram_who --free Out``."""
        return f"%vram_who --free {','.join(self.frees)}" if self.frees else ""

    @property
    def call(self) -> str:
        """The same from Python, e.g. ``vram_free('Out')``."""
        return f"vram_free({','.join(self.frees)!r})" if self.frees else ""

    def line(self) -> str:
        """One line of text: path, bytes, array, view, origin, other paths."""
        parts = [f"{self.path}: {format_bytes(self.nbytes)}",
                 f"{self.dtype} {self.shape}"]
        if self.view_of:
            parts.append(f"view of {self.view_of} (counted there)")
        elif self.nbytes > self.array_bytes:
            parts.append(f"a view: keeps its whole base of {format_bytes(self.nbytes)} alive")
        if self.made_in:
            parts.append(f"made in {self.made_in}")
        if self.also:
            parts.append(f"also held by {', '.join(self.also)}")
        return ", ".join(parts)


@dataclass(frozen=True)
class MemoryPart:
    """One measured part of the rest of the memory: label, bytes (``None``: not measurable
    here), and how it was measured."""

    label: str
    nbytes: int | None
    how: str


@dataclass
class HolderReport:
    """``%vram_who``: the holders, largest first, then the rest of the memory."""

    holders: list[Holder] = field(default_factory=list)
    parts: list[MemoryPart] = field(default_factory=list)
    memory: str = "device"  # or "host memory (CPU fallback)"
    used: int | None = None  # the device's used bytes (cudaMemGetInfo), or host RAM used
    total: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def held_bytes(self) -> int:
        """Bytes the listed holders keep alive, each allocation once."""
        return sum(h.nbytes for h in self.holders)

    def top(self, n: int = TOP) -> list[Holder]:
        """The ``n`` largest holders."""
        return self.holders[:n]

    def __str__(self) -> str:
        head = (f"{self.memory}: {format_bytes(self.held_bytes)} held by "
                f"{len(self.holders)} array(s) you can reach")
        if self.used is not None and self.total:
            head += f"; {format_bytes(self.used)} used of {format_bytes(self.total)}"
        lines = [head, *(f"  {h.line()}" for h in self.holders)]
        if not self.holders:
            lines.append("  (no array is reachable from your names, Out or the last traceback)")
        lines += [f"  {p.label}: {format_bytes(p.nbytes) if p.nbytes is not None else 'N/A'} "
                  f"({p.how})" for p in self.parts]
        commands = list(dict.fromkeys(h.command for h in self.holders if h.command))
        if commands:
            lines.append(f"free: {'; '.join(commands[:3])}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))

    def held_by_html(self, n: int = TOP) -> str:
        """The panel's "held by" section: the ``n`` largest holders, one row each."""
        if not self.holders:
            return ("<div style='font-size:12px;line-height:1.35'><b>held by</b>: no array "
                    "reachable from your names, Out or the last traceback "
                    f"({html.escape(self.memory)})</div>")
        rows = "".join(
            f"<tr><td style='padding:0 8px 0 0'><code>{html.escape(h.path)}</code></td>"
            f"<td style='text-align:right;padding:0 8px'>{format_bytes(h.nbytes)}</td>"
            f"<td style='color:{DIM}'>{html.escape(h.dtype)} {h.shape}"
            f"{' · ' + html.escape(h.made_in) if h.made_in else ''}</td></tr>"
            for h in self.top(n))
        more = len(self.holders) - n
        tail = f"<div style='color:{DIM}'>and {more} more: %vram_who</div>" if more > 0 else ""
        return (f"<div style='font-size:12px;line-height:1.35'><b>held by</b> "
                f"<span style='color:{DIM}'>"
                f"({html.escape(self.memory)}, after the last cell)</span>"
                f"<table style='border-collapse:collapse'>{rows}</table>{tail}</div>")


def allocation(array: Any) -> tuple[Any, int]:
    """The allocation an array lives in, as ``(key, bytes)``; views share their base's.

    A CuPy array's memory is ``array.data.mem`` (its pooled chunk, whose size the pool
    rounded up); a NumPy array's is its last ``.base`` that is an array.
    """
    mem = getattr(getattr(array, "data", None), "mem", None)
    if mem is not None and hasattr(mem, "size"):
        return ("device", int(mem.ptr)), int(mem.size)
    root = host_base(array)
    return ("host", id(root)), int(root.nbytes)


def holders_from(found: Walk, origin: Any, memory: str = "device") -> list[Holder]:
    """Records for every array of ``found``, largest first, each allocation counted once.

    ``origin(array)`` gives the cell and line that made an array ("" when unknown).
    """
    groups: dict[Any, list[Any]] = {}
    sizes: dict[Any, int] = {}
    for item in found.found.values():
        key, size = allocation(item.array)
        groups.setdefault(key, []).append(item)
        sizes[key] = size
    records: list[Holder] = []
    for key, items in groups.items():
        items.sort(key=lambda f: -int(f.array.nbytes))
        owner = items[0]
        for i, item in enumerate(items):
            arr = item.array
            records.append(Holder(
                path=item.paths[0], nbytes=sizes[key] if i == 0 else 0,
                array_bytes=int(arr.nbytes), shape=tuple(int(n) for n in arr.shape),
                dtype=str(arr.dtype), view_of=owner.paths[0] if i else "",
                made_in=origin(arr), also=tuple(item.paths[1:]),
                frees=tuple(dict.fromkeys(r for f in items for r in f.roots)),
                memory=memory))
    records.sort(key=lambda h: (-h.nbytes, h.view_of != "", -h.array_bytes))
    return records
