"""Tiny inline-SVG sparklines: the panel draws its history without a plotting stack."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from ..theme import EDGE, PLOT

__all__ = ["Line", "sparkline_svg"]

Line = tuple[str, str, Sequence[float | None]]  # (label, colour, values; None is a gap)


def _points(times: Sequence[float], values: Sequence[float | None], t0: float, span: float,
            ymax: float, width: int, height: int) -> list[str]:
    """Polyline point lists, one per run of known values (unknown values break the line)."""
    runs: list[str] = []
    current: list[str] = []
    for t, v in zip(times, values, strict=True):
        if v is None:
            if current:
                runs.append(" ".join(current))
            current = []
            continue
        x = (t - t0) / span * width
        y = height - 1 - min(max(v / ymax, 0.0), 1.0) * (height - 2)
        current.append(f"{x:.1f},{y:.1f}")
    if current:
        runs.append(" ".join(current))
    return runs


def sparkline_svg(times: Sequence[float], lines: Sequence[Line], *, ymax: float,
                  window: float, title: str, hline: float | None = None,
                  width: int = 240, height: int = 44) -> str:
    """Draw ``lines`` over the last ``window`` seconds of ``times`` as an SVG string.

    Parameters
    ----------
    times
        Sample times (seconds, increasing); the newest is the right edge.
    lines
        ``(label, colour, values)`` per series, values aligned with ``times``.
    ymax
        The value at the top edge (values above are clipped).
    window
        Seconds shown across the width, so the plot scrolls at a constant speed.
    title
        Tooltip text of the whole sparkline.
    hline
        A dashed reference line (e.g. the budget), in the units of the values.
    """
    if ymax <= 0:
        ymax = 1.0
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" class="cm-spark" role="img">',
             f"<title>{escape(title)}</title>",
             f'<rect x="0" y="0" width="{width}" height="{height}" '
             f'style="fill:{PLOT};stroke:{EDGE}"/>']
    if hline is not None and 0 < hline <= ymax:
        y = height - 1 - hline / ymax * (height - 2)
        parts.append(f'<line x1="0" x2="{width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#cf222e" '
                     'stroke-dasharray="4 3" stroke-width="1"/>')
    if times:
        t_end = times[-1]
        t0 = t_end - window
        for label, colour, values in lines:
            for run in _points(times, values, t0, window, ymax, width, height):
                parts.append(f'<polyline points="{run}" fill="none" stroke="{colour}" '
                             f'stroke-width="1.5"><title>{escape(label)}</title></polyline>')
    parts.append("</svg>")
    return "".join(parts)
