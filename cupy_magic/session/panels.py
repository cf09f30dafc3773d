"""The live VRAM panel: ``%vram_panel`` as functions."""

from __future__ import annotations

from typing import Any

from ..config import settings
from ..monitor.sampler import shared_sampler
from ..view import panel as _panel

__all__ = ["act_on_panels", "panel_summary", "pause_panels", "resume_panels",
           "show_panel", "stop_panels"]


def show_panel(interval: float | None = None, device: int = 0,
               text: bool = False) -> Any:
    """Display the live VRAM panel (``%vram_panel``); in a terminal print a summary.

    ``interval`` defaults to the period of the sampler the panels share, or, before the
    first panel, ``CupyMagic.panel_interval``.
    """
    if interval is None and shared_sampler() is None:
        interval = settings().panel_interval
    return _panel.show_panel(interval=interval, device=device, text=text)


def panel_summary(device: int = 0) -> str:
    """The panel's figures as text (``%vram_panel --text``)."""
    return _panel.panel_summary(device)


def act_on_panels(action: str) -> None:
    """``%vram_panel --pause`` (``resume``, ``stop``); with no panel open it says so."""
    if not _panel.panels():
        print(f"cupy_magic: no panel is open to {action}; %vram_panel opens one")
    {"pause": pause_panels, "resume": resume_panels, "stop": stop_panels}[action]()


def pause_panels() -> None:
    """Pause every panel's sampling (``%vram_panel --pause``)."""
    _panel.pause()


def resume_panels() -> None:
    """Resume every panel's sampling (``%vram_panel --resume``)."""
    _panel.resume()


def stop_panels() -> None:
    """Close every panel and stop sampling (``%vram_panel --stop``)."""
    _panel.close_all()
