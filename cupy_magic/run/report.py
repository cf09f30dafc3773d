"""What a ``%%gpu`` cell did, as an object, as plain text and as HTML."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from ..theme import TRACK, WARN
from ..units import format_bytes
from .linetable import table_lines

__all__ = ["IN_PLACE", "IN_PLACE_ROWS", "DeviceStat", "InputMove", "OutputInfo", "RunReport"]

# where an input a batched or cluster run changed in place lives after it (its output row),
# and how its rows were joined (the batch or cluster results line)
IN_PLACE = "host (the user's array, changed in place, as in a plain cell)"
IN_PLACE_ROWS = "rows gathered into the user's array, changed in place as in a plain cell"


def _scrolled_pre(text: str) -> str:
    """``text`` (escaped) as a column table in a report's row: never wrapped, scrolled sideways.

    JupyterLab and Notebook 7 wrap a ``<pre>`` in an output (``white-space: pre-wrap``),
    which breaks each row of a table wider than the cell over several lines. The box takes
    no width of its own (``width:0``) and fills its cell, so a wide table scrolls inside it
    instead of widening the report past the output area.
    """
    return ("<div style='width:0;min-width:100%;overflow-x:auto'>"
            f"<pre style='margin:0;white-space:pre'>{text}</pre></div>")


def _builds(builds: list[Any]) -> str:
    """"3 kernels compiled in 4,210.3 ms" (or built, when some came from the cache)."""
    if not builds:
        return ""
    n = len(builds)
    verb = "compiled" if all(b.compiled for b in builds) else "built"
    return (f"{n} kernel{'s' * (n != 1)} {verb} in "
            f"{sum(b.seconds for b in builds) * 1e3:,.1f} ms")


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
    view_of: str = ""  # it shares memory with this input: a view into its copy, no bytes moved
    own_bytes: int = 0  # a strided view moved as the stretch of its base that holds it: its own

    @property
    def how(self) -> str:
        """Pinned or pageable, and whether the time is the upload or the whole stream."""
        kind = "pinned" if self.pinned else "pageable"
        return f"{kind}, streamed: upload + compute + results" if self.streamed else kind

    @property
    def gbps(self) -> float:
        return self.nbytes / self.seconds / 1e9 if self.seconds > 0 else float("inf")


@dataclass(frozen=True)
class DeviceStat:
    """What one device did in a ``%%gpu --devices`` run (``report.devices``).

    ``seconds`` is the time the device had a batch in flight (host clock, from a batch's
    first upload to when its end was seen), ``peak_pool_bytes`` its pool's peak.
    """

    device: int
    name: str
    batches: int
    rows: int
    nbytes: int
    seconds: float
    peak_pool_bytes: int
    budget_bytes: int | None = None

    @property
    def gbps(self) -> float:
        """Input GB/s while the device was busy."""
        return self.nbytes / self.seconds / 1e9 if self.seconds > 0 else 0.0


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
    # times a batched run ran the cell: its batches, and those run again on fewer rows over
    # the budget (run.firstbatch, run.inflight); 0: not counted (not batched, a cluster's)
    batch_runs: int = 0
    compiles: Any = None  # the kernels built (cupy_magic.backend.compiles.CompileRecord)
    compat: Any = None  # lists moved, calls run with NumPy (cupy_magic.compat.CompatRecord)
    devices: list[DeviceStat] = field(default_factory=list)  # %%gpu --devices: one per device

    @property
    def fallbacks(self) -> list[Any]:
        """The calls that ran with NumPy under ``--fallback``, one row per function and line."""
        return self.compat.fallbacks if self.compat is not None else []

    @property
    def conversions(self) -> list[Any]:
        """The Python lists and numbers moved to the device, one row per cell line."""
        return self.compat.conversions if self.compat is not None else []
    lines: list[Any] = field(default_factory=list)  # --lines: LineStat per line that ran

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
    @property
    def on_host(self) -> bool:
        """The CPU fallback ran the cell: copies in host RAM, CPU time, host memory."""
        return self.backend != "cupy"

    def _warmup_slice(self) -> str:
        return (f"the first {self.warmup_rows:,} rows" if self.warmup_rows
                else "the whole cell (no input to slice)")

    def _warmup_text(self) -> str:
        """"12.5 ms", or "4.312 s, of it 3 kernels compiled in 4,210.3 ms"."""
        built = _builds(self.compiles.warmup if self.compiles is not None else [])
        seconds = self.warmup_seconds or 0.0
        return f"{seconds:.3f} s, of it {built}" if built else f"{seconds * 1e3:.1f} ms"

    def _warmup_note(self) -> str:
        """Which of the report's times count the warm-up (the text and HTML forms say so)."""
        return (f"(not in the {'CPU' if self.on_host else 'GPU'} time below; the wall time "
                "includes it)")

    def _timing_label(self) -> str:
        if self.on_host:
            return "CPU time (NumPy on the CPU fallback)"
        left_out = self.compiles.timed_seconds if self.compiles is not None else 0.0
        return (f"GPU time (CUDA events, less {left_out * 1e3:,.1f} ms of kernel compiling on "
                "the host between launches)" if left_out else "GPU time (CUDA events)")

    def _move_text(self, m: InputMove) -> str:
        """One input's row: a transfer over PCIe on the GPU, a copy in host RAM on the host."""
        if m.view_of:
            return (f"a view into the copy of {m.view_of}, with which it shares memory (as "
                    "in NumPy: a change through one shows through the other); nothing moved")
        cast = (f", cast {m.cast_from}->{m.dtype} saved {format_bytes(m.saved_bytes)}"
                if m.cast_from else "")
        if m.own_bytes:  # the bytes between its items moved too
            cast += (f"; a strided view of {format_bytes(m.own_bytes)}, moved as the stretch "
                     "of its base that holds it, so that views and reshapes of it share "
                     "memory as in NumPy")
        if not self.on_host:
            return (f"{format_bytes(m.nbytes)} in {m.seconds * 1e3:.1f} ms "
                    f"({m.gbps:.1f} GB/s, {m.how}){cast}")
        if m.streamed:
            return (f"{format_bytes(m.nbytes)} in batches, {m.seconds * 1e3:.1f} ms (streamed: "
                    f"upload + compute + results, here copies in host RAM and NumPy on the "
                    f"CPU; no PCIe){cast}")
        return (f"{format_bytes(m.nbytes)} copied in host RAM in {m.seconds * 1e3:.1f} ms "
                f"(stands in for the upload; no PCIe on the CPU fallback){cast}")

    def _memory_text(self) -> tuple[str, str]:
        """``(label, figures)`` of the peak: the GPU's pool and VRAM budget, or host memory."""
        label = "peak memory (host)" if self.on_host else "peak pool"
        budget = "memory budget (host)" if self.on_host else "VRAM budget"
        if not self.budget_bytes:
            unset = "no memory budget set" if self.on_host else "no VRAM budget set"
            return label, f"{format_bytes(self.peak_pool_bytes)} ({unset})"
        return label, (f"{format_bytes(self.peak_pool_bytes)} of {budget} "
                       f"{format_bytes(self.budget_bytes)} "
                       f"({self.peak_pool_bytes / self.budget_bytes:.0%})")

    @staticmethod
    def _output_text(o: OutputInfo) -> str:
        size = f", {format_bytes(o.nbytes)}" if o.nbytes else ""
        if o.where == "python" and o.kind.startswith("numpy."):
            return f"{o.kind} on the host (a NumPy scalar, where CuPy gives a 0-d device array)"
        if o.where == "python":
            return f"{o.kind} on the host (a Python object, not an array){size}"
        if o.where == "deleted":
            return "deleted"
        return f"{o.kind} on {o.where}{size}"

    def compile_lines(self) -> list[str]:
        """What CuPy compiled for the cell (nothing on the CPU fallback)."""
        rec = self.compiles
        if rec is None or not rec.applies:
            return []
        if not rec.available:
            return [f"time not measured ({rec.reason}); the GPU time may include "
                    "kernel compiling"]
        out = []
        if rec.compiled:
            out.append(f"{_builds(rec.compiled)} on the host, cached for next time "
                       f"{rec.cache}; not counted in the GPU time")
            for line, code, kernels, seconds, warm in rec.by_line():
                where = f"line {line} `{code}`" if line else "outside the cell's lines"
                phase = " (in the warm-up run)" if warm else ""
                out.append(f"  {where}: {kernels} kernel{'s' * (kernels != 1)}, "
                           f"{seconds * 1e3:,.1f} ms{phase}")
        if rec.loaded:
            out.append(f"{len(rec.loaded)} kernel{'s' * (len(rec.loaded) != 1)} loaded from "
                       f"the kernel cache {rec.cache} in "
                       f"{sum(b.seconds for b in rec.loaded) * 1e3:,.1f} ms (compiled before)")
        if any(b.timed for b in rec.builds) or (rec.builds and self.warmup_seconds is None):
            out.append("first use of these kernels in this process: the GPU time also counts "
                       "loading them onto the GPU at their first launch; run the cell again "
                       "for the steady figure")
        elif rec.builds:  # every one built in the warm-up, which launched it first
            out.append("first use of these kernels in this process: the warm-up run launched "
                       "them first, so the GPU time below does not count loading them")
        return out

    def device_lines(self) -> list[str]:
        """A row per device of a ``--devices`` run, and the total (none otherwise)."""
        if not self.devices:
            return []
        busy = "CPU time" if self.on_host else "busy"

        def row(label: str, batches: int, rows: int, nbytes: int, seconds: float,
                peak: str) -> str:
            rate = "" if self.on_host or seconds <= 0 else f", {nbytes / seconds / 1e9:.1f} GB/s"
            return (f"{label}: {batches} batch{'es' * (batches != 1)}, {rows:,} rows, "
                    f"{format_bytes(nbytes)} in"
                    f"{rate}, {busy} {seconds * 1e3:.1f} ms{peak}")

        out = []
        for d in self.devices:
            budget = f" of {format_bytes(d.budget_bytes)}" if d.budget_bytes else ""
            out.append(row(f"device {d.device} {d.name}", d.batches, d.rows, d.nbytes,
                           d.seconds, f", peak {format_bytes(d.peak_pool_bytes)}{budget}"))
        n = len(self.devices)
        out.append(row(f"all {n} device{'s' * (n != 1)}", sum(d.batches for d in self.devices),
                       sum(d.rows for d in self.devices), sum(d.nbytes for d in self.devices),
                       self.gpu_seconds, " (time: the run's, first batch to drain)"))
        return out

    def text_lines(self) -> list[str]:
        """The report as plain-text lines."""
        out = [f"%%gpu on {self.device} [{self.backend}]"]
        for m in self.inputs:
            out.append(f"  in   {m.name}: {self._move_text(m)}")
        if not self.inputs:
            out.append("  in   no NumPy inputs moved")
        if self.warmup_seconds is not None:
            out.append(f"  warm-up run on {self._warmup_slice()}: {self._warmup_text()} "
                       f"{self._warmup_note()}")
        out.extend(f"  compile {line}" for line in self.compile_lines())
        out.append(f"  run  {self._timing_label()}: {self.gpu_seconds * 1e3:.2f} ms; "
                   f"wall {self.wall_seconds * 1e3:.1f} ms")
        label, figures = self._memory_text()
        out.append(f"  mem  {label} {figures}")
        out.extend(f"  dev  {line}" for line in self.device_lines())
        for s in self.syncs:
            out.append(f"  sync {s.describe()}")
        out.extend(f"  {line}" for line in (self.compat.lines() if self.compat else ()))
        if self.lines:
            table = table_lines(self.lines, self.syncs, self.on_host)
            out.extend(("  lines " if k == 0 else "        ") + t for k, t in enumerate(table))
        for o in self.outputs:
            out.append(f"  out  {o.name}: {self._output_text(o)}")
        out.extend(f"  note {n}" for n in self.notes)
        if self.batch is not None:
            out.extend(self.batch.lines(host=self.on_host))
        return out

    def __str__(self) -> str:
        return "\n".join(self.text_lines())

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
            row(f"in {m.name}", esc(self._move_text(m)))
        if not self.inputs:
            row("in", "no NumPy inputs moved")
        if self.warmup_seconds is not None:
            row("warm-up", esc(f"{self._warmup_text()} on {self._warmup_slice()} "
                               f"{self._warmup_note()}"))
        for line in self.compile_lines():
            row("compile", esc(line.strip()))
        row(self._timing_label(), f"<b>{self.gpu_seconds * 1e3:.2f} ms</b> "
            f"(wall {self.wall_seconds * 1e3:.1f} ms)")
        label, figures = self._memory_text()
        if self.budget_bytes:
            share = self.peak_pool_bytes / self.budget_bytes
            colour = "#c33" if share > 0.9 else "#4a4"
            bar = (f"<span style='display:inline-block;width:120px;height:8px;"
                   f"background:{TRACK};vertical-align:middle'><span style='display:block;"
                   f"height:8px;width:{min(share, 1) * 100:.0f}%;background:{colour}'>"
                   f"</span></span> ")
            row(label, f"{bar}{esc(figures)}")
        else:
            row(label, esc(figures))
        for line in self.device_lines():
            row("device", esc(line))
        for s in self.syncs:
            row("host sync", f"<span style='color:{WARN}'>{esc(s.describe())}</span>")
        for line in self.compat.lines() if self.compat else ():
            label, _, text = line.partition(" ")
            row(label, f"<span style='color:{WARN}'>{esc(text)}</span>"
                if label == "fallback" else esc(text))
        if self.lines:
            table = "\n".join(table_lines(self.lines, self.syncs, self.on_host))
            row("lines", _scrolled_pre(esc(table)))
        for o in self.outputs:
            row(f"out {o.name}", esc(self._output_text(o)))
        for n in self.notes:
            row("note", esc(n))
        for line in self.batch.lines(host=self.on_host) if self.batch is not None else ():
            row("batch", esc(line.strip().removeprefix("batch ")))
        title = f"%%gpu on {esc(self.device)} [{esc(self.backend)}]"
        return (f"<details open class='cupy-magic-report'><summary style='font-family:monospace'>"
                f"{title}</summary><table style='font-family:monospace;font-size:90%'>"
                f"{''.join(rows)}</table></details>")
