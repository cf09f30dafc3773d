"""What the array module did for one cell: lists moved, calls that fell back to NumPy.

One :class:`CompatRecord` per cell, shared by every batch of a batched run. Rows are charged
to the innermost frame running the cell's code, as the sync record charges its syncs.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections import Counter
from dataclasses import dataclass, field
from types import FrameType

from ..units import format_bytes

__all__ = ["CompatRecord", "ConversionRow", "FallbackRow", "loop_lines"]


@dataclass(frozen=True)
class ConversionRow:
    """Python values moved to the device on one cell line, by kind, and the functions."""

    line: int | None
    code: str
    counts: dict[str, int]
    functions: tuple[str, ...]

    def describe(self, host: bool = False) -> str:
        """"3 lists moved to the device on line 4 `y = np.mean([1, 2, 3])` (np.mean)"."""
        what = ", ".join(f"{n:,} {k}{'s' * (n != 1)}" for k, n in sorted(self.counts.items()))
        where = f"on line {self.line} `{self.code}`" if self.line else "outside the cell's lines"
        place = "the device (CPU fallback: host RAM)" if host else "the device"
        return f"{what} moved to {place} {where} ({', '.join(self.functions)})"


@dataclass
class FallbackRow:
    """One function that ran with NumPy on one cell line."""

    function: str
    line: int | None
    code: str
    why: str
    fix: str
    calls: int = 0
    to_host_bytes: int = 0
    to_device_bytes: int = 0
    seconds: float = 0.0
    in_loop: bool = False

    @property
    def looped(self) -> bool:
        """Inside a loop of the cell, or called more than once: a host sync each time."""
        return self.in_loop or self.calls > 1

    def describe(self) -> str:
        where = f"line {self.line} `{self.code}`" if self.line else "a line outside the cell"
        loop = " (inside a loop: a host sync each call)" if self.looped else ""
        fix = f"; instead: {self.fix}" if self.fix else ""
        return (f"{self.function} on {where}: ran with NumPy ({self.why}), {self.calls:,} "
                f"call{'s' * (self.calls != 1)}, {format_bytes(self.to_host_bytes)} to the "
                f"host, {format_bytes(self.to_device_bytes)} back, "
                f"{self.seconds * 1e3:,.2f} ms{loop}{fix}")


@functools.lru_cache(maxsize=128)
def loop_lines(source: str) -> frozenset[int]:
    """Lines of ``source`` inside a ``for`` or ``while`` body (or a comprehension); a cell
    run again is not parsed again."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return frozenset()
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.While, ast.AsyncFor)):
            for stmt in node.body:
                lines.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return frozenset(lines)


@dataclass
class CompatRecord:
    """The array module's record for one cell.

    Parameters
    ----------
    filename
        The name the cell's code was compiled under (rows are charged to its frames).
    source
        The cell's source, for the code of each line and its loops.
    fallback
        Run with NumPy what CuPy cannot, instead of stopping the cell.
    host
        The CPU fallback runs the cell (the report words the copies as host RAM).
    """

    filename: str
    source: str = ""
    fallback: bool = False
    host: bool = False
    _moved: dict[int | None, Counter[str]] = field(default_factory=dict)
    _movers: dict[int | None, dict[str, None]] = field(default_factory=dict)
    _fallbacks: dict[tuple[str, int | None], FallbackRow] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._lines = self.source.splitlines()
        self._loops = loop_lines(self.source)

    def line(self, frame: FrameType | None = None, skip: int = 0) -> int | None:
        """The cell line running now: the innermost frame of the cell's code, or None.

        ``skip``: how many frames, the caller's first, are known not to be the cell's (the
        proxy's own), so the walk starts above them without making their frame objects."""
        if frame is None:
            try:
                frame = sys._getframe(1 + skip)
            except ValueError:
                frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename != self.filename:
            frame = frame.f_back
        return frame.f_lineno if frame is not None else None

    def code(self, line: int | None) -> str:
        return self._lines[line - 1].strip() if line and 0 < line <= len(self._lines) else ""

    def moved(self, kinds: dict[str, int], function: str) -> None:
        """Count Python values moved to the device for ``function`` at the current line."""
        line = self.line(skip=3)  # this, Calls.slow or .failed, the wrapper: not the cell
        self._moved.setdefault(line, Counter()).update(kinds)
        self._movers.setdefault(line, {})[function] = None

    def fell_back(self, function: str, why: str, fix: str) -> FallbackRow:
        """The row of ``function`` at the current line (made on its first call)."""
        line = self.line()
        row = self._fallbacks.get((function, line))
        if row is None:
            row = FallbackRow(function, line, self.code(line), why, fix,
                              in_loop=line in self._loops)
            self._fallbacks[(function, line)] = row
        return row

    @property
    def conversions(self) -> list[ConversionRow]:
        return [ConversionRow(line, self.code(line), dict(counts), tuple(self._movers[line]))
                for line, counts in sorted(self._moved.items(), key=lambda kv: kv[0] or 0)]

    @property
    def fallbacks(self) -> list[FallbackRow]:
        return sorted(self._fallbacks.values(), key=lambda r: (r.line or 0, r.function))

    def lines(self) -> list[str]:
        """The report's rows: ``moved ...`` and ``fallback ...``."""
        out = [f"list {row.describe(self.host)}" for row in self.conversions]
        out += [f"fallback {row.describe()}" for row in self.fallbacks]
        return out
