"""The colours of the HTML the package shows (the report, the progress bar, the panel).

JupyterLab's and Notebook 7's theme variables, so that text and backgrounds follow the theme
(a dark theme's text is light: a fixed grey or a pale background under it reads poorly or not
at all), each with the light-theme colour as its fallback where a frontend defines none
(classic Notebook, nbviewer, an exported page). Plain strings for inline ``style``
attributes; SVG takes them in ``style``, not in presentation attributes, which know no
``var()``.
"""

from __future__ import annotations

__all__ = ["DIM", "EDGE", "PLOT", "SELECTED", "TRACK", "WARN"]

DIM = "var(--jp-content-font-color2, #57606a)"
"""Secondary text: labels, units, the status line, a finished progress bar's summary."""

EDGE = "var(--jp-border-color2, #d0d7de)"
"""Borders: the panel's frame, a plot's frame."""

PLOT = "var(--jp-layout-color1, #f6f8fa)"
"""The background of a plot."""

TRACK = "var(--jp-layout-color2, #eaeef2)"
"""The empty part of a bar (the memory bar, the report's budget bar)."""

WARN = "var(--jp-warn-color0, #b35900)"
"""Text that warns: a host sync, a call that fell back to NumPy."""

SELECTED = "rgba(9, 105, 218, 0.18)"
"""The background of a marked row: translucent, so the theme's text colour reads on it."""
