"""What a ``%%gpu`` cell did, as an object, as plain text and as HTML."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from ..units import format_bytes

__all__ = ["InputMove", "OutputInfo", "RunReport"]


@dataclass(frozen=True)
class InputMove:
    """One NumPy input moved to the device for the cell."""

    name: str
    nbytes: int
    seconds: float
    pinned: bool
    dtype: str
    cast_from: str = ""
    saved_bytes: int = 0
    streamed: bool = False  # batched: ``seconds`` is the whole pipelined run, not the upload

    @property
    def how(self) -> str:
        """Pinned or pageable, and whether the time is the upload or the whole stream."""
        kind = "pinned" if self.pinned else "pageable"
        return f"{kind}, streamed: upload + compute + results" if self.streamed else kind

    @property
    def gbps(self) -> float:
        return self.nbytes / self.seconds / 1e9 if self.seconds > 0 else float("inf")


@dataclass(frozen=True)
class OutputInfo:
    """One name the cell committed to the user namespace."""

    name: str
    kind: str  # e.g. "cupy.ndarray float32 (1000, 1000)", "function", "int"
    where: str  # "device", "host", "python" or "deleted"
    nbytes: int = 0


@dataclass
class RunReport:
    """Everything measured about one ``%%gpu`` cell.

    Also returned by :func:`cupy_magic.run_cell` and kept as :func:`cupy_magic.last_report`.
    """

    backend: str
    device: str
    inputs: list[InputMove] = field(default_factory=list)
    outputs: list[OutputInfo] = field(default_factory=list)
    gpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    warmup_seconds: float | None = None
    warmup_rows: int = 0
    peak_pool_bytes: int = 0
    start_pool_bytes: int = 0
    budget_bytes: int | None = None
    syncs: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    batch: Any = None  # the BatchPlan of a batched run (cupy_magic.run.batching), else None

    @property
    def moved_bytes(self) -> int:
        return sum(m.nbytes for m in self.inputs)

    @property
    def saved_bytes(self) -> int:
        return sum(m.saved_bytes for m in self.inputs)

    @property
    def outputs_by_name(self) -> dict[str, OutputInfo]:
        return {o.name: o for o in self.outputs}

    # --- text ---------------------------------------------------------------------------
    def _warmup_slice(self) -> str:
        return (f"the first {self.warmup_rows:,} rows" if self.warmup_rows
                else "the whole cell (no input to slice)")

    def _timing_label(self) -> str:
        return "GPU time (CUDA events)" if self.backend == "cupy" else "CPU time (host fallback)"

    def lines(self) -> list[str]:
        """The report as plain-text lines."""
        out = [f"%%gpu on {self.device} [{self.backend}]"]
        if self.inputs:
            for m in self.inputs:
                cast = (f", cast {m.cast_from}->{m.dtype} saved {format_bytes(m.saved_bytes)}"
                        if m.cast_from else "")
                out.append(f"  in   {m.name}: {format_bytes(m.nbytes)} in {m.seconds * 1e3:.1f} ms "
                           f"({m.gbps:.1f} GB/s, {m.how}){cast}")
        else:
            out.append("  in   no NumPy inputs moved")
        if self.warmup_seconds is not None:
            out.append(f"  warm-up run on {self._warmup_slice()}: "
                       f"{self.warmup_seconds * 1e3:.1f} ms (not counted below)")
        out.append(f"  run  {self._timing_label()}: {self.gpu_seconds * 1e3:.2f} ms; "
                   f"wall {self.wall_seconds * 1e3:.1f} ms")
        budget = (f" of budget {format_bytes(self.budget_bytes)}"
                  f" ({self.peak_pool_bytes / self.budget_bytes:.0%})"
                  if self.budget_bytes else " (no budget set)")
        out.append(f"  mem  peak pool {format_bytes(self.peak_pool_bytes)}{budget}")
        for s in self.syncs:
            out.append(f"  sync {s.describe()}")
        for o in self.outputs:
            size = f", {format_bytes(o.nbytes)}" if o.nbytes else ""
            out.append(f"  out  {o.name}: {o.kind} on {o.where}{size}")
        out.extend(f"  note {n}" for n in self.notes)
        if self.batch is not None:
            out.extend(self.batch.lines())
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))

    # --- HTML ---------------------------------------------------------------------------
    def _repr_html_(self) -> str:
        esc = html.escape
        rows: list[str] = []

        def row(label: str, value: str) -> None:
            rows.append(f"<tr><th style='text-align:left;padding-right:1em'>{esc(label)}</th>"
                        f"<td style='text-align:left'>{value}</td></tr>")

        for m in self.inputs:
            cast = (f"; cast {esc(m.cast_from)}&rarr;{esc(m.dtype)} saved "
                    f"<b>{format_bytes(m.saved_bytes)}</b>" if m.cast_from else "")
            row(f"in {m.name}", f"{format_bytes(m.nbytes)} in {m.seconds * 1e3:.1f} ms "
                f"(<b>{m.gbps:.1f} GB/s</b>, {esc(m.how)}){cast}")
        if not self.inputs:
            row("in", "no NumPy inputs moved")
        if self.warmup_seconds is not None:
            row("warm-up", f"{self.warmup_seconds * 1e3:.1f} ms on {self._warmup_slice()}")
        row(self._timing_label(), f"<b>{self.gpu_seconds * 1e3:.2f} ms</b> "
            f"(wall {self.wall_seconds * 1e3:.1f} ms)")
        if self.budget_bytes:
            share = self.peak_pool_bytes / self.budget_bytes
            colour = "#c33" if share > 0.9 else "#4a4"
            bar = (f"<span style='display:inline-block;width:120px;height:8px;"
                   f"background:#ddd;vertical-align:middle'><span style='display:block;"
                   f"height:8px;width:{min(share, 1) * 100:.0f}%;background:{colour}'>"
                   f"</span></span> ")
            row("peak pool", f"{bar}{format_bytes(self.peak_pool_bytes)} of "
                f"{format_bytes(self.budget_bytes)} ({share:.0%})")
        else:
            row("peak pool", f"{format_bytes(self.peak_pool_bytes)} (no budget set)")
        for s in self.syncs:
            row("host sync", f"<span style='color:#b35900'>{esc(s.describe())}</span>")
        for o in self.outputs:
            size = f", {format_bytes(o.nbytes)}" if o.nbytes else ""
            row(f"out {o.name}", f"{esc(o.kind)} on <b>{esc(o.where)}</b>{size}")
        for n in self.notes:
            row("note", esc(n))
        for line in self.batch.lines() if self.batch is not None else ():
            row("batch", esc(line.strip().removeprefix("batch ")))
        title = f"%%gpu on {esc(self.device)} [{esc(self.backend)}]"
        return (f"<details open class='cupy-magic-report'><summary style='font-family:monospace'>"
                f"{title}</summary><table style='font-family:monospace;font-size:90%'>"
                f"{''.join(rows)}</table></details>")
