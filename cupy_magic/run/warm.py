"""Building CuPy's kernel cache ahead of time for notebooks (issue 20: the cold first run).

The parts that know no IPython: which cells of a notebook are ``%%gpu`` cells, the small
slices of their inputs they run on, and the record of what CuPy compiled. The shell that
runs the notebooks' cells is :mod:`cupy_magic.session.warm` (``scripts/warm-cache``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..backend import Backend
from .plan import plan_cell
from .whole import warmup_rows

__all__ = ["CellWarm", "NotebookCell", "WarmReport", "read_cells", "slice_inputs"]

MAGIC = "%%gpu"
# Jupyter's tag for a cell meant to fail (nbclient runs on past it; so does warm-cache)
RAISES = "raises-exception"


@dataclass(frozen=True)
class NotebookCell:
    """One code cell of a notebook: its number among the notebook's cells, from 1."""

    number: int
    source: str
    fails: bool = False  # tagged raises-exception: the notebook means it to fail

    @property
    def first_line(self) -> str:
        return self.source.lstrip().partition("\n")[0].strip()

    @property
    def gpu(self) -> bool:
        """Whether the cell is a ``%%gpu`` cell."""
        head = self.first_line
        return head == MAGIC or head.startswith(MAGIC + " ")

    @property
    def body(self) -> str:
        """The cell's code below the ``%%gpu`` line (the whole source for other cells)."""
        return self.source.lstrip().partition("\n")[2] if self.gpu else self.source


def read_cells(path: str | Path) -> list[NotebookCell]:
    """The code cells of the notebook at ``path`` (nbformat 4 JSON), in order."""
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    out = []
    for k, cell in enumerate(nb.get("cells", []), start=1):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        fails = RAISES in cell.get("metadata", {}).get("tags", [])
        out.append(NotebookCell(k, "".join(source) if isinstance(source, list) else source,
                                fails))
    return out


def slice_inputs(source: str, namespace: dict[str, Any],
                 be: Backend) -> tuple[dict[str, np.ndarray], int]:
    """The small slices a ``%%gpu`` cell runs on to build its kernels, and their rows.

    The NumPy inputs with the largest leading length are cut to the rows ``--warmup`` uses
    (:func:`cupy_magic.run.whole.warmup_rows`: enough for the kernels the full-size run
    compiles); smaller inputs, such as weights, keep their shape so the cell's shapes agree.
    """
    plan = plan_cell(source, namespace, "<warm-cache>", False, None, be)
    longest = max((a.shape[0] for a in plan.inputs.values() if a.ndim), default=0)
    cut = {n: a for n, a in plan.inputs.items() if a.ndim and a.shape[0] == longest}
    rows = warmup_rows([cut[n] for n in sorted(cut)])
    return {n: a[:rows] for n, a in cut.items() if a.shape[0] > rows}, rows


@dataclass
class CellWarm:
    """What one ``%%gpu`` cell's warm-up run built."""

    notebook: str
    cell: int
    line: str  # the magic line as written
    rows: int  # rows of the slice (0: no input was cut)
    seconds: float
    compiled: int = 0
    loaded: int = 0
    compile_seconds: float = 0.0
    error: str = ""
    meant_to_fail: bool = False  # tagged raises-exception: its error is not a failure

    @property
    def failed(self) -> bool:
        """Whether the cell failed where the notebook did not mean it to."""
        return bool(self.error) and not self.meant_to_fail

    def text(self, host: bool = False) -> str:
        """One line; ``host``: run on the CPU fallback, where nothing is built."""
        where = f"{self.notebook} cell {self.cell} `{self.line}`"
        if self.error:
            meant = f"failed as the notebook means it to ({RAISES})" if self.meant_to_fail \
                else "failed"
            return f"{where}: {meant}, {self.error}"
        size = f"first {self.rows:,} rows" if self.rows else "as written (no input cut)"
        built = (f"{self.compiled} kernel{'s' * (self.compiled != 1)} compiled, "
                 f"{self.loaded} loaded from the cache, {self.compile_seconds * 1e3:,.1f} ms")
        return f"{where}: {size}, {self.seconds:.3f} s" + ("" if host else f"; {built}")


@dataclass
class WarmReport:
    """What ``scripts/warm-cache`` (:func:`cupy_magic.session.warm.warm_cache`) did."""

    backend: str  # "cupy" or "host"
    device: str
    cache: str  # where CuPy keeps compiled kernels, in words ("" on the CPU fallback)
    cells: list[CellWarm] = field(default_factory=list)
    notebooks: list[str] = field(default_factory=list)
    plain_errors: list[str] = field(default_factory=list)  # other cells that failed

    @property
    def on_host(self) -> bool:
        return self.backend != "cupy"

    @property
    def failed(self) -> list[CellWarm]:
        return [c for c in self.cells if c.failed]

    @property
    def ok(self) -> bool:
        """Every ``%%gpu`` cell ran (always true on the CPU fallback: nothing to build)."""
        return self.on_host or not self.failed

    def lines(self) -> list[str]:
        """The report as plain-text lines."""
        meant = sum(c.meant_to_fail for c in self.cells)
        ran = len(self.cells) - len(self.failed) - meant
        books = f"{len(self.notebooks)} notebook{'s' * (len(self.notebooks) != 1)}"
        out = [f"warm-cache on {self.device} [{self.backend}]: {ran} of {len(self.cells)} "
               f"%%gpu cells of {books} ran once on small slices"
               + (f" ({meant} meant to fail, tagged {RAISES})" if meant else "")]
        out += ["  " + c.text(self.on_host) for c in self.cells]
        out += ["  " + e for e in self.plain_errors]
        if self.on_host:
            out.append("nothing to compile on the CPU fallback (NumPy runs code compiled in "
                       "advance); run this on the GPU machine to build CuPy's kernel cache")
            return out
        compiled = sum(c.compiled for c in self.cells)
        seconds = sum(c.compile_seconds for c in self.cells if c.compiled)
        loaded = sum(c.loaded for c in self.cells)
        out.append(f"compiled {compiled} kernel{'s' * (compiled != 1)} in {seconds:.2f} s and "
                   f"found {loaded} in the cache already; CuPy's kernel cache is {self.cache}: "
                   "a later process loads them from there instead of compiling")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WarmReport:
        data = json.loads(text)
        data["cells"] = [CellWarm(**c) for c in data.get("cells", [])]
        return cls(**data)
