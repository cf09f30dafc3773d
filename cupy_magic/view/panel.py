"""The live VRAM panel (``%vram_panel``): an ipywidgets view of the sampler's samples.

Widgets are created and displayed on the main thread; the sampler thread only sets their
traits, inside ``hold_sync()``, so updates reach the browser while a cell runs. The panel
never calls NVML or CuPy itself: figures come from :mod:`cupy_magic.monitor`. In a terminal
(no widget frontend), :func:`show_panel` prints a one-shot :func:`panel_summary` instead.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from html import escape
from typing import Any

from ..lifecycle import on_unload
from ..monitor import sampler as monitor
from ..monitor.nvml import NA
from ..monitor.sampler import Sample, Sampler
from ..units import format_bytes
from .sparkline import sparkline_svg

__all__ = ["VramPanel", "cell_panel", "close_all", "panel_summary", "panels", "pause",
           "resume", "show_panel"]

_live: list[VramPanel] = []


def _b(value: Any) -> str:
    return format_bytes(value) if isinstance(value, (int, float)) else "N/A"


def _rate(value: Any) -> str:
    return f"{value / 1e9:.1f} GB/s" if isinstance(value, (int, float)) else "N/A"


def _num(value: Any, unit: str, fmt: str = ".0f") -> str:
    return f"{value:{fmt}}{unit}" if isinstance(value, (int, float)) else "N/A"


def _pct(part: Any, whole: Any) -> str:
    ok = isinstance(part, (int, float)) and isinstance(whole, (int, float)) and whole > 0
    return f"{part / whole:.0%}" if ok else "N/A"


def summary_lines(s: Sample) -> dict[str, str]:
    """The panel's figures as short labelled lines (shared by the widget and the text)."""
    r, p = s.reading, s.pool
    lines: dict[str, str] = {}
    if s.backend == "cupy" or r.total is not NA:
        lines["device"] = (f"{r.name if r.name is not NA else 'GPU'} (device {s.device}): "
                           f"this kernel {_b(r.this_process)}, other processes "
                           f"{_b(r.other_processes)}, free {_b(r.free)} of {_b(r.total)}")
        lines["activity"] = (f"SM {_num(r.util_gpu, '%')}, memory {_num(r.util_memory, '%')}; "
                             f"PCIe RX {_rate(r.pcie_rx)} / TX {_rate(r.pcie_tx)} of "
                             f"{_rate(r.pcie_max)} ({r.pcie_link}); {_num(r.temperature, ' °C')}, "
                             f"{_num(r.power, ' W')} of {_num(r.power_limit, ' W')}; clocks SM "
                             f"{_num(r.clock_sm, ' MHz')}, memory {_num(r.clock_memory, ' MHz')}")
    else:
        lines["device"] = (f"no GPU: {s.why_no_gpu or 'host backend'}; cells run on NumPy. "
                           f"Host memory {_b(s.host_used)} used of {_b(s.host_total)}")
        if s.nvml_note:
            lines["device"] += f" ({s.nvml_note})"
    limit = f", limit {_b(p.limit)}" if p.limit else ""
    lines["pool"] = (f"used {_b(p.used)}, cached {_b(p.cached_free)}, held {_b(p.held)}{limit}; "
                     f"pinned pool {_num(p.pinned_free_blocks, ' cached blocks')}")
    if isinstance(p.host_locked, int):
        lines["pool"] += (f"; page-locked host memory {_b(p.host_locked)} "
                          f"({_b(p.host_cached)} of result blocks kept for reuse)")
    if isinstance(p.fragmentation, float):
        lines["fragmentation"] = (f"{p.fragmentation:.0%}: largest free block "
                                  f"{_b(p.largest_free)} of {_b(p.arena_free)} free, "
                                  f"{_num(p.free_blocks, ' free blocks')} in {p.arenas} arena(s)")
    else:
        lines["fragmentation"] = (f"N/A ({p.fragmentation_note or 'unknown'}); "
                                  f"{_num(p.free_blocks, ' free blocks')}")
    used_of_budget = f" ({_pct(p.used, p.limit)} used)" if p.limit else ""
    lines["budget"] = f"{s.budget}{used_of_budget}"
    if s.cell is not None:
        done = (f", batch {s.cell.batches_done}/{s.cell.batches_total}"
                if s.cell.batches_total else "")
        lines["running"] = f"{s.cell.cell_label}{done}, {s.cell.elapsed:.1f} s so far"
    if s.errors:
        lines["errors"] = "; ".join(s.errors)
    return lines


def panel_summary(device: int = 0, sampler: Sampler | None = None) -> str:
    """A one-shot text summary of what the panel shows (for terminals and logs)."""
    sampler = sampler or Sampler()
    lines = summary_lines(sampler.sample(device))
    return "\n".join(f"{key:>13}: {text}" for key, text in lines.items())


def _legend(lines: Sequence[tuple[str, str, Any]]) -> str:
    return " ".join(f'<span style="color:{colour}">&#9632;</span>&#8239;{escape(label)}'
                    for label, colour, _ in lines)


HISTORY_EVERY = 1.0  # seconds between redraws of the sparklines (panel_overhead.py: 3.7 ms each)


def _history_svgs(history: Sequence[Sample], window: float) -> str:
    if not history:
        return ""
    times = [h.time for h in history]
    last = history[-1]
    gpu = last.reading.total is not NA
    # Until the history fills the window, show what there is (at least 10 s), so a fresh
    # panel draws lines across its width instead of a sliver at the right edge.
    window = min(window, max(10.0, times[-1] - times[0]))

    def num(v: Any) -> float | None:
        return float(v) if isinstance(v, (int, float)) else None

    mem_lines = [("device used" if gpu else "host RAM used", "#8250df",
                  [num(h.reading.used if gpu else h.pool.device_used) for h in history]),
                 ("pool held", "#0969da", [float(h.pool.held) for h in history]),
                 ("pool used", "#1a7f37", [float(h.pool.used) for h in history])]
    # Scale to what was seen (and the budget), not the device size: 2 GiB of use on a
    # 141 GiB device would otherwise be a flat line on the floor.
    seen = [v for _, _, values in mem_lines for v in values if v is not None]
    top = max([*seen, float(last.pool.limit or 0), 1.0]) * 1.15
    charts = [("memory", f"top {format_bytes(top)}", mem_lines,
               sparkline_svg(times, mem_lines, ymax=top, window=window,
                             title="memory; dashed red: budget", hline=last.pool.limit))]
    if gpu:
        util = [("SM", "#bf3989", [num(h.reading.util_gpu) for h in history]),
                ("memory", "#9a6700", [num(h.reading.util_memory) for h in history])]
        charts.append(("utilisation", "top 100%", util,
                       sparkline_svg(times, util, ymax=100.0, window=window,
                                     title="utilisation, %")))
        rates = [v for h in history for v in (num(h.reading.pcie_rx), num(h.reading.pcie_tx))
                 if v is not None]
        pcie_max = num(last.reading.pcie_max) or max(rates, default=1.0)
        pcie = [("RX", "#0969da", [num(h.reading.pcie_rx) for h in history]),
                ("TX", "#bc4c00", [num(h.reading.pcie_tx) for h in history])]
        charts.append(("PCIe", f"top {_rate(pcie_max)} (link max)", pcie,
                       sparkline_svg(times, pcie, ymax=pcie_max, window=window,
                                     title="PCIe throughput against the link's ceiling")))
    cells = "".join(
        f'<div class="cm-spark-cell"><div style="font-size:12px"><b>{name}</b> '
        f'<span style="color:#57606a">({scale}, last {window:.0f} s)</span></div>{svg}'
        f'<div style="font-size:11px;color:#57606a">{_legend(lines)}</div></div>'
        for name, scale, lines, svg in charts)
    return f'<div style="display:flex;gap:16px;flex-wrap:wrap">{cells}</div>'


def _lead(text: str) -> str:
    """Bold up to the first colon (the device, or "no GPU"), the rest plain."""
    head, sep, rest = text.partition(": ")
    return f"<b>{escape(head)}</b>{sep}{escape(rest)}" if sep else escape(text)


_ROW = ('<tr><th style="text-align:right;padding:1px 8px;color:#57606a;font-weight:600;'
        'vertical-align:top">{key}</th><td style="padding:1px 4px">{value}</td></tr>')


def _memory_bar(s: Sample) -> str:
    """A stacked bar: this kernel, other processes, free; with the budget as a red tick."""
    r, p = s.reading, s.pool
    total = r.total if r.total is not NA else p.device_total
    if not isinstance(total, int) or total <= 0:
        return ""
    mine = r.this_process if isinstance(r.this_process, int) else p.held
    others = r.other_processes if isinstance(r.other_processes, int) else 0
    if r.total is NA:  # host backend: the "device" is host RAM
        mine, others = p.held, max(0, p.device_used - p.held)
    names = ("this kernel", "other processes") if r.total is not NA else \
        ("cell allocations", "rest of host memory in use")
    seg = [(mine, "#0969da", names[0]), (others, "#8c959f", names[1])]
    bars = "".join(f'<div title="{t}: {_b(v)}" style="width:{100 * v / total:.2f}%;'
                   f'background:{c}"></div>' for v, c, t in seg if v > 0)
    tick = ""
    if p.limit:
        tick = (f'<div title="budget {_b(p.limit)}" style="position:absolute;top:-2px;'
                f'bottom:-2px;left:{min(100.0, 100 * p.limit / total):.2f}%;width:2px;'
                'background:#cf222e"></div>')
    return ('<div style="position:relative;display:flex;height:10px;background:#eaeef2;'
            f'border-radius:3px;margin:4px 0 6px 0;max-width:740px">{bars}{tick}</div>')


class VramPanel:
    """One live panel; shows samples of one device from the shared sampler.

    Create it with :func:`show_panel`. ``close()`` stops its updates and removes it.
    """

    def __init__(self, sampler: Sampler, device: int = 0) -> None:
        import ipywidgets as w

        self.sampler = sampler
        self.updates = 0
        self._history_at: float | None = None  # sample time of the history last drawn
        devices = sampler.sources.devices()
        self.title = w.HTML()
        self.selector = w.Dropdown(options=[(label, i) for i, label in enumerate(devices)],
                                   value=device if device < len(devices) else 0,
                                   layout=w.Layout(width="260px"))
        if len(devices) < 2:
            self.selector.layout.display = "none"
        self.pause_button = w.ToggleButton(value=sampler.paused, description="Pause",
                                           icon="pause", layout=w.Layout(width="90px"))
        self.release_button = w.Button(description="Release cached blocks", icon="recycle",
                                       layout=w.Layout(width="auto"),
                                       tooltip="free_all_blocks(): give the pool's cached "
                                               "blocks back to the device")
        self.released = w.HTML()
        self.figures = w.HTML()
        self.history = w.HTML()
        self.status = w.HTML()
        head = w.HBox([self.title, self.selector, self.pause_button])
        buttons = w.HBox([self.release_button, self.released])
        self.widget = w.VBox([head, self.figures, self.history, buttons, self.status],
                             layout=w.Layout(border="1px solid #d0d7de", padding="6px 10px"))
        self.widget.add_class("cupy-magic-panel")
        self.release_button.on_click(self._on_release)
        self.pause_button.observe(self._on_pause, names="value")
        self.selector.observe(self._on_device, names="value")
        self._sub = sampler.subscribe(self.update, self.selector.value)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    @property
    def device(self) -> int:
        return int(self.selector.value)

    def update(self, sample: Sample, history: Sequence[Sample]) -> None:
        """Draw one sample (called from the sampler thread; sets traits only)."""
        lines = summary_lines(sample)
        name = sample.reading.name if sample.reading.name is not NA else "CPU (NumPy, no GPU)"
        rows = "".join(_ROW.format(key=escape(k), value=escape(v)) for k, v in lines.items()
                       if k != "device")
        figures = (f'<div style="font-size:12.5px;line-height:1.35">'
                   f"<div>{_lead(lines['device'])}</div>{_memory_bar(sample)}"
                   f'<table style="border-collapse:collapse">{rows}</table></div>')
        state = "paused" if self.sampler.paused else f"every {self.sampler.interval:g} s"
        stamp = time.strftime("%H:%M:%S", time.localtime(sample.wall_time))
        with self.figures.hold_sync(), self.history.hold_sync(), self.title.hold_sync(), \
                self.status.hold_sync():
            self.title.value = (f'<b style="font-size:14px">VRAM panel</b> &nbsp;'
                                f'<span style="color:#57606a">{escape(str(name))} · '
                                f"{escape(sample.backend)} backend</span>")
            self.figures.value = figures
            # The history (most of a tick's drawing cost) is redrawn at most once a second;
            # the figures above it follow every sample.
            last = self._history_at
            if last is None or not 0 <= sample.time - last < HISTORY_EVERY:
                self.history.value = _history_svgs(history, self.sampler.history_seconds)
                self._history_at = sample.time
            self.status.value = (f'<span style="color:#57606a;font-size:11px">updated {stamp}, '
                                 f"{state}</span>")
        self.updates += 1

    def refresh(self) -> None:
        """Draw a fresh sample now (main thread), e.g. after a button."""
        self.update(self.sampler.sample(self.device), self.sampler.history(self.device))

    def _on_release(self, _button: Any = None) -> int:
        released, pinned, host = monitor.release_cached(self.device)
        self.released.value = (f"released {format_bytes(released)} of cached device memory"
                               f", {pinned} pinned block(s)"
                               + (f" and {format_bytes(host)} of page-locked result blocks"
                                  if host else ""))
        self.refresh()
        return released

    def _on_pause(self, change: dict[str, Any]) -> None:
        if bool(change["new"]) != self.sampler.paused:
            (pause if change["new"] else resume)()

    def _on_device(self, change: dict[str, Any]) -> None:
        self._sub.device = int(change["new"])
        self.refresh()

    def _show_paused(self, paused: bool) -> None:
        with self.pause_button.hold_sync():
            self.pause_button.value = paused
            self.pause_button.description = "Resume" if paused else "Pause"
            self.pause_button.icon = "play" if paused else "pause"
        self.refresh()

    def freeze(self) -> None:
        """Draw a last sample and stop updating; the panel stays on screen."""
        self.sampler.unsubscribe(self._sub)
        if self in _live:
            _live.remove(self)
        self.refresh()
        self.status.value = self.status.value.replace("updated", "final figures,", 1)
        self.pause_button.disabled = True

    def close(self) -> None:
        """Stop updating and remove the widgets; the sampler stops with the last panel."""
        self.sampler.unsubscribe(self._sub)
        if self in _live:
            _live.remove(self)
        self.widget.close()
        for child in (self.title, self.selector, self.pause_button, self.release_button,
                      self.released, self.figures, self.history, self.status):
            child.close()


def _widget_frontend() -> bool:
    """Whether a Jupyter kernel (with a frontend that can render widgets) runs us."""
    with contextlib.suppress(ImportError):
        from IPython import get_ipython

        return getattr(get_ipython(), "kernel", None) is not None
    return False


def show_panel(interval: float | None = None, device: int = 0,
               text: bool = False) -> VramPanel | None:
    """Display a live panel and return it; in a terminal (or with ``text``) print a summary.

    Parameters
    ----------
    interval
        Seconds between samples (shared by every panel); ``None`` keeps the running
        sampler's period (0.5 s for a new one).
    device
        The CuPy device index shown first.
    text
        Print the one-shot text summary even where widgets work.
    """
    sampler = monitor.get_sampler(interval)
    devices = sampler.sources.devices()
    if not 0 <= device < len(devices):
        raise ValueError(f"device {device} is not visible; choose one of: {', '.join(devices)}")
    if text or not _widget_frontend():
        print(panel_summary(device, sampler))
        return None
    from IPython.display import display

    panel = VramPanel(sampler, device)
    _live.append(panel)
    on_unload(close_all)
    panel.refresh()
    display(panel.widget)
    return panel


@contextlib.contextmanager
def cell_panel(interval: float | None = None) -> Iterator[VramPanel | None]:
    """Show a live panel above a cell's output while it runs (``%%gpu --panel``).

    After the cell the panel keeps its last figures and stops updating. In a terminal
    nothing is shown: the cell's report says what the panel would.
    """
    panel = show_panel(interval) if _widget_frontend() else None
    try:
        yield panel
    finally:
        if panel is not None:
            panel.freeze()


def panels() -> list[VramPanel]:
    """The panels still live in this kernel."""
    return list(_live)


def pause() -> None:
    """Pause sampling for every panel."""
    monitor.get_sampler().pause()
    for panel in _live:
        panel._show_paused(True)


def resume() -> None:
    """Resume sampling for every panel."""
    monitor.get_sampler().resume()
    for panel in _live:
        panel._show_paused(False)


def close_all() -> None:
    """Close every panel (and so stop the sampler); run at ``%unload_ext``."""
    for panel in list(_live):
        panel.close()
