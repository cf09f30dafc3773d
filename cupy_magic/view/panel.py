"""The live VRAM panel (``%vram_panel``): an ipywidgets view of the sampler's samples.

Widgets are created and displayed on the main thread; the sampler thread only sets their
traits, inside ``hold_sync()``, so updates reach the browser while a cell runs. The panel
never calls NVML or CuPy itself: figures come from :mod:`cupy_magic.monitor`, drawn by
:mod:`cupy_magic.view.figures`. A sample with failed sources draws N/A there, and the status
line says so; the panel never freezes on one sample. In a terminal (no widget frontend),
:func:`show_panel` prints a one-shot :func:`panel_summary` instead.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from html import escape
from typing import Any

from .. import backend as _backend
from ..holders.account import forget as _forget_origins
from ..holders.account import vram_holders
from ..lifecycle import on_unload
from ..monitor import sampler as monitor
from ..monitor.gather import WORKER_WAIT
from ..monitor.nvml import NA
from ..monitor.sampler import LiveSources, Sample, Sampler, Sources
from ..theme import DIM, EDGE
from ..units import format_bytes, short_repr, whole
from .figures import figures_html, history_svgs, summary_lines
from .rows import devices_html, rows_lines, workers_html

__all__ = ["VramPanel", "cell_panel", "close_all", "panel_summary", "panels", "pause",
           "resume", "show_held_by", "show_panel", "watch_cells"]

log = logging.getLogger(__name__)
log.addHandler(logging.NullHandler())  # never printed into a running cell (see sampler.py)

_live: list[VramPanel] = []
_logged: set[str] = set()
_held_by = [""]  # the last "held by" section, for panels shown after it was made

HISTORY_EVERY = 1.0  # seconds between redraws of the sparklines (panel_overhead.py: 3.7 ms each)


def panel_summary(device: int = 0, sampler: Sampler | None = None) -> str:
    """A one-shot text summary of what the panel shows (for terminals and logs); the
    cluster's workers, when one is in use, are asked and waited for at most
    :data:`~cupy_magic.monitor.gather.WORKER_WAIT` seconds."""
    sampler = sampler or Sampler()
    return _summary(_check_device(device, sampler.sources), sampler)


def _summary(device: int, sampler: Sampler) -> str:
    sample = sampler.sample(device, workers_wait=WORKER_WAIT)
    lines = {**summary_lines(sample), **rows_lines(sample)}
    return "\n".join(f"{key:>13}: {text}" for key, text in lines.items())


def _check_device(device: object, sources: Sources) -> int:
    """``device`` as an int; refused, naming the visible ones, when ``sources`` show no such
    device."""
    devices = sources.devices()
    number = whole(device)
    if number is None or not 0 <= number < len(devices):
        raise ValueError(f"device {short_repr(device)} is not visible; choose one of: "
                         f"{', '.join(devices)}")
    return number


def _title_html(sample: Sample) -> str:
    name = sample.reading.name if sample.reading.name is not NA else (
        "CPU (NumPy, no GPU)" if sample.backend == "host" else "device N/A")
    # The widget's own line height (28 px, a button's) would space a wrapped title apart.
    return (f'<div style="line-height:1.35"><b style="font-size:14px">VRAM panel</b> &nbsp;'
            f'<span style="color:{DIM}">{escape(str(name))} · '
            f"{escape(str(sample.backend))} backend</span></div>")


def _status_html(text: str) -> str:
    return f'<span style="color:{DIM};font-size:11px">{escape(text)}</span>'


class VramPanel:
    """One live panel; shows samples of one device from the shared sampler.

    With several devices a row per device sits above the detailed figures of the one the
    selector picks; with a cluster in use, a row per worker below them. Create it with
    :func:`show_panel`. ``close()`` stops its updates and removes it.
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
                                   layout=w.Layout(width="260px", flex="0 0 auto"))
        if len(devices) < 2:
            self.selector.layout.display = "none"
        self.pause_button = w.ToggleButton(value=sampler.paused, description="Pause",
                                           icon="pause",
                                           layout=w.Layout(width="90px", flex="0 0 auto"))
        self.release_button = w.Button(description="Release cached blocks", icon="recycle",
                                       layout=w.Layout(width="auto"),
                                       tooltip="free_all_blocks(): give the pool's cached "
                                               "blocks back to the device")
        self.released = w.HTML()
        self.device_rows = w.HTML()
        self.figures = w.HTML()
        self.history = w.HTML()
        self.worker_rows = w.HTML()
        self.status = w.HTML()
        self.held_by = w.HTML(value=_held_by[0])  # set on the main thread, after each cell
        # In a narrow notebook the title wraps; the buttons keep their width and words.
        head = w.HBox([self.title, self.selector, self.pause_button],
                      layout=w.Layout(align_items="center"))
        buttons = w.HBox([self.release_button, self.released])
        self.widget = w.VBox([head, self.device_rows, self.figures, self.history,
                              self.worker_rows, self.held_by, buttons, self.status],
                             layout=w.Layout(border=f"1px solid {EDGE}", padding="6px 10px"))
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
        """Draw one sample (called from the sampler thread; sets traits only); never raises.

        If drawing fails the status line says so and the next sample is drawn afresh.
        """
        state = "paused" if self.sampler.paused else f"every {self.sampler.interval:g} s"
        stamp = time.strftime("%H:%M:%S", time.localtime(sample.wall_time))
        # The history (most of a tick's drawing cost) is redrawn at most once a second;
        # the figures above it follow every sample.
        last = self._history_at
        redraw = last is None or not 0 <= sample.time - last < HISTORY_EVERY
        try:
            title, figures = _title_html(sample), figures_html(sample)
            rows = devices_html(sample), workers_html(sample)
            svgs = history_svgs(history, self.sampler.history_seconds) if redraw else None
        except Exception as exc:  # a drawing bug must not freeze the panel or reach the cell
            message = f"{type(exc).__name__}: {exc}".split("\n")[0]
            if message not in _logged:
                _logged.add(message)
                log.warning("VRAM panel could not draw a sample: %s (logged once)", message)
                log.debug("VRAM panel drawing failed", exc_info=exc)
            self.status.value = _status_html(f"could not draw the sample of {stamp} "
                                             f"({message}); {state}, retrying")
            return
        failed = (f"; N/A where a source failed ({len(sample.errors)}, see errors)"
                  if sample.errors else "")
        with self.figures.hold_sync(), self.history.hold_sync(), self.title.hold_sync(), \
                self.status.hold_sync(), self.device_rows.hold_sync(), \
                self.worker_rows.hold_sync():
            self.title.value = title
            self.device_rows.value, self.worker_rows.value = rows
            self.figures.value = figures
            if svgs is not None:
                self.history.value = svgs
                self._history_at = sample.time
            self.status.value = _status_html(f"updated {stamp}, {state}{failed}")
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
                      self.released, self.device_rows, self.figures, self.history,
                      self.worker_rows, self.held_by, self.status):
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
    if not isinstance(text, bool):
        raise ValueError(f"text={short_repr(text)} is not True or False; e.g. "
                         "cupy_magic.show_panel(text=True)")
    if interval is not None:  # refused before the shared sampler is made or changed
        Sampler.check_interval(interval)
    shared = monitor.shared_sampler()  # the device is checked before one is made
    sources = shared.sources if shared else LiveSources()  # the devices, asked once
    device = _check_device(device, sources)
    sampler = monitor.get_sampler(interval, sources)
    if text or not _widget_frontend():
        print(_summary(device, sampler))
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
    """Close every panel and stop the sampler (``%vram_panel --stop``, ``%unload_ext``).

    A pause ends with the panels, so the next :func:`show_panel` is live.
    """
    for panel in list(_live):
        panel.close()
    sampler = monitor.shared_sampler()
    if sampler is not None:
        sampler.stop()
        sampler.resume()


def show_held_by(section: str) -> None:
    """Put the "held by" section (HTML) in every live panel; main thread only."""
    _held_by[0] = section
    for panel in _live:
        panel.held_by.value = section


def watch_cells(shell: Any) -> None:
    """After each cell, refresh the panels' "held by" section: the top holders of
    :func:`cupy_magic.vram_holders`, walked here on the main thread (an IPython
    ``post_run_cell`` hook; never from the sampler thread). Removed at unload."""
    def after_cell(*_result: Any) -> None:
        if _live:
            show_held_by(vram_holders(shell.user_ns, _backend.current()).held_by_html())

    shell.events.register("post_run_cell", after_cell)

    def unwatch() -> None:
        shell.events.unregister("post_run_cell", after_cell)
        _held_by[0] = ""
        _forget_origins()

    on_unload(unwatch)
