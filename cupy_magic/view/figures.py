"""The panel's figures as text and HTML, from one :class:`~cupy_magic.monitor.sampler.Sample`.

Pure formatting, shared by the widget panel and the text summary. Every figure may be
:data:`~cupy_magic.monitor.nvml.NA` (a source that failed): it reads "N/A", never a zero, and
nothing here raises on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from ..monitor.nvml import NA
from ..monitor.sampler import Sample
from ..theme import DIM, TRACK
from ..units import format_bytes
from .fmt import known as _known
from .fmt import nbytes as _b
from .fmt import num as _num
from .fmt import pct as _pct
from .fmt import rate as _rate
from .sparkline import Line, sparkline_svg

__all__ = ["figures_html", "history_svgs", "memory_bar", "summary_lines"]


def _float(value: Any) -> float | None:
    return float(value) if _known(value) else None


def _device_line(s: Sample) -> str:
    r = s.reading
    if s.backend == "cupy" or r.total is not NA:
        slice_ = " (a MIG slice: its own memory)" if r.mig else ""
        pids = (" (NVML's process IDs do not include this process, as in a container: this "
                "kernel is its pool, other processes are not told apart)"
                if r.pids_match is False else "")
        return (f"{r.name if r.name is not NA else 'GPU'} (device {s.device}){slice_}: "
                f"this kernel {_b(r.this_process)}, other processes "
                f"{_b(r.other_processes)}, free {_b(r.free)} of {_b(r.total)}{pids}")
    if s.backend != "host":  # the status source failed: say so, do not guess "no GPU"
        return "device: N/A (the backend could not be read)"
    host = (f"{_b(s.host_used)} used of {_b(s.host_total)}" if _known(s.host_total)
            else "N/A")
    line = (f"no GPU: {s.why_no_gpu or 'host backend'}; cells run on NumPy. "
            f"Host memory {host}")
    return f"{line} ({s.nvml_note})" if s.nvml_note else line


def summary_lines(s: Sample) -> dict[str, str]:
    """The panel's figures as short labelled lines (shared by the widget and the text)."""
    r, p = s.reading, s.pool
    lines: dict[str, str] = {"device": _device_line(s)}
    if s.backend == "cupy" or r.total is not NA:
        util = (f"SM {_num(r.util_gpu, '%')}, memory {_num(r.util_memory, '%')}" if not r.mig
                else "utilisation not reported on MIG")
        lines["activity"] = (f"{util}; "
                             f"PCIe RX {_rate(r.pcie_rx)} / TX {_rate(r.pcie_tx)} of "
                             f"{_rate(r.pcie_max)} ({r.pcie_link}); {_num(r.temperature, ' °C')}, "
                             f"{_num(r.power, ' W')} of {_num(r.power_limit, ' W')}; clocks SM "
                             f"{_num(r.clock_sm, ' MHz')}, memory {_num(r.clock_memory, ' MHz')}")
    limit = f", limit {_b(p.limit)}" if p.limit else ""
    if s.backend == "host" and _known(p.used):
        # No pool of cached blocks, pinned pool or arenas exist here (also on a GPU machine
        # whose kernel chose the host backend): say so once, no N/As (a pool source that
        # failed keeps the N/A lines below: they show the failure).
        lines["pool"] = (f"used {_b(p.used)} (the cells' arrays, in host RAM){limit}; the CPU "
                         "fallback has no device pool: no cached blocks, no pinned pool and no "
                         "fragmentation")
        return _budget_and_cell(s, lines)
    lines["pool"] = (f"used {_b(p.used)}, cached {_b(p.cached_free)}, held {_b(p.held)}{limit}; "
                     f"pinned pool {_num(p.pinned_free_blocks, ' cached blocks')}")
    if _known(p.host_locked):
        lines["pool"] += (f"; page-locked host memory {_b(p.host_locked)} "
                          f"({_b(p.host_cached)} of result blocks kept for reuse)")
    if isinstance(p.fragmentation, float):
        lines["fragmentation"] = (f"{p.fragmentation:.0%}: largest free block "
                                  f"{_b(p.largest_free)} of {_b(p.arena_free)} free, "
                                  f"{_num(p.free_blocks, ' free blocks')} in {p.arenas} arena(s)")
    else:
        lines["fragmentation"] = (f"N/A ({p.fragmentation_note or 'unknown'}); "
                                  f"{_num(p.free_blocks, ' free blocks')}")
    return _budget_and_cell(s, lines)


def _budget_and_cell(s: Sample, lines: dict[str, str]) -> dict[str, str]:
    """``lines`` with the budget, the running cell and the sampler's errors added."""
    p = s.pool
    used_of_budget = f" ({_pct(p.used, p.limit)} used)" if p.limit else ""
    lines["budget"] = f"{p.budget_text or s.budget}{used_of_budget}"
    if s.cell is not None:
        done = (f", {s.cell.unit} {s.cell.batches_done}/{s.cell.batches_total}"
                if s.cell.batches_total else "")
        lines["running"] = f"{s.cell.cell_label}{done}, {s.cell.elapsed:.1f} s so far"
    if s.errors:
        lines["errors"] = "; ".join(s.errors)
    return lines


def _legend(lines: Sequence[Line]) -> str:
    return " ".join(f'<span style="color:{colour}">&#9632;</span>&#8239;{escape(label)}'
                    for label, colour, _ in lines)


def _memory_chart(history: Sequence[Sample], times: list[float], gpu: bool,
                  window: float) -> tuple[str, str, list[Line], str]:
    last = history[-1]
    mem_lines: list[Line] = [
        ("device used" if gpu else "host RAM used", "#8250df",
         [_float(h.reading.used if gpu else h.pool.device_used) for h in history]),
        ("pool held", "#0969da", [_float(h.pool.held) for h in history]),
        ("pool used", "#1a7f37", [_float(h.pool.used) for h in history])]
    # Scale to what was seen (and the budget), not the device size: 2 GiB of use on a
    # 141 GiB device would otherwise be a flat line on the floor.
    seen = [v for _, _, values in mem_lines for v in values if v is not None]
    limit = _float(last.pool.limit)
    top = max([*seen, limit or 0.0, 1.0]) * 1.15
    return ("memory", f"top {format_bytes(top)}", mem_lines,
            sparkline_svg(times, mem_lines, ymax=top, window=window,
                          title="memory; dashed red: budget", hline=limit))


def history_svgs(history: Sequence[Sample], window: float) -> str:
    """The sparklines of ``history`` (memory; on a GPU also utilisation and PCIe) as HTML."""
    if not history:
        return ""
    times = [h.time for h in history]
    last = history[-1]
    gpu = last.reading.total is not NA
    # Until the history fills the window, show what there is (at least 10 s), so a fresh
    # panel draws lines across its width instead of a sliver at the right edge.
    window = min(window, max(10.0, times[-1] - times[0]))
    charts = [_memory_chart(history, times, gpu, window)]
    if gpu:
        util: list[Line] = [("SM", "#bf3989", [_float(h.reading.util_gpu) for h in history]),
                            ("memory", "#9a6700",
                             [_float(h.reading.util_memory) for h in history])]
        charts.append(("utilisation", "top 100%", util,
                       sparkline_svg(times, util, ymax=100.0, window=window,
                                     title="utilisation, %")))
        rates = [v for h in history for v in (_float(h.reading.pcie_rx),
                                              _float(h.reading.pcie_tx)) if v is not None]
        pcie_max = _float(last.reading.pcie_max) or max(rates, default=1.0)
        pcie: list[Line] = [("RX", "#0969da", [_float(h.reading.pcie_rx) for h in history]),
                            ("TX", "#bc4c00", [_float(h.reading.pcie_tx) for h in history])]
        charts.append(("PCIe", f"top {_rate(pcie_max)} (link max)", pcie,
                       sparkline_svg(times, pcie, ymax=pcie_max, window=window,
                                     title="PCIe throughput against the link's ceiling")))
    cells = "".join(
        f'<div class="cm-spark-cell"><div style="font-size:12px"><b>{name}</b> '
        f'<span style="color:{DIM}">({scale}, last {window:.0f} s)</span></div>{svg}'
        f'<div style="font-size:11px;color:{DIM}">{_legend(lines)}</div></div>'
        for name, scale, lines, svg in charts)
    return f'<div style="display:flex;gap:16px;flex-wrap:wrap">{cells}</div>'


def _lead(text: str) -> str:
    """Bold up to the first colon (the device, or "no GPU"), the rest plain."""
    head, sep, rest = text.partition(": ")
    return f"<b>{escape(head)}</b>{sep}{escape(rest)}" if sep else escape(text)


_ROW = (f'<tr><th style="text-align:right;padding:1px 8px;color:{DIM};font-weight:600;'
        'vertical-align:top">{key}</th><td style="padding:1px 4px">{value}</td></tr>')


def memory_bar(s: Sample) -> str:
    """A stacked bar: this kernel, other processes, free; with the budget as a red tick.

    Empty when the sample lacks the figures the bar needs (no bar beats a wrong one).
    """
    r, p = s.reading, s.pool
    gpu = r.total is not NA
    total = r.total if gpu else p.device_total
    if not _known(total) or total <= 0:
        return ""
    if gpu:
        mine = r.this_process if _known(r.this_process) else p.held
        others = r.other_processes if _known(r.other_processes) else 0
        names = ("this kernel", "other processes")
    else:  # host backend: the "device" is host RAM
        mine = p.held
        others = max(0, p.device_used - p.held) if _known(p.device_used) and _known(mine) else 0
        names = ("cell allocations", "rest of host memory in use")
    seg = [(v, c, t) for v, c, t in ((mine, "#0969da", names[0]), (others, "#8c959f", names[1]))
           if _known(v) and v > 0]
    bars = "".join(f'<div title="{t}: {_b(v)}" style="width:{100 * v / total:.2f}%;'
                   f'background:{c}"></div>' for v, c, t in seg)
    tick = ""
    if _known(p.limit) and p.limit:
        tick = (f'<div title="budget {_b(p.limit)}" style="position:absolute;top:-2px;'
                f'bottom:-2px;left:{min(100.0, 100 * p.limit / total):.2f}%;width:2px;'
                'background:#cf222e"></div>')
    return (f'<div style="position:relative;display:flex;height:10px;background:{TRACK};'
            f'border-radius:3px;margin:4px 0 6px 0;max-width:740px">{bars}{tick}</div>')


def figures_html(s: Sample) -> str:
    """The figures block of the panel: the device line, the memory bar, the other lines."""
    lines = summary_lines(s)
    rows = "".join(_ROW.format(key=escape(k), value=escape(v)) for k, v in lines.items()
                   if k != "device")
    return (f'<div style="font-size:12.5px;line-height:1.35">'
            f"<div>{_lead(lines['device'])}</div>{memory_bar(s)}"
            f'<table style="border-collapse:collapse">{rows}</table></div>')
