"""The HTML a learner sees follows JupyterLab's theme: in a dark theme its text is light, so a
fixed grey reads poorly and a pale background under that text not at all (UI review,
helper-s16j: the panel's marked device row was light blue under white text, its labels,
legend and status and the bar's summary a dim grey, its plots white boxes). Text colours and
the backgrounds under text are the theme's variables (light-theme colours as fallbacks);
fixed colours are left to the marks that carry data (bar segments, the budget tick)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
import pytest
from conftest import loaded
from view.test_panel import sample
from view.test_panel_rows import ROWS, three_devices
from view.test_progressbar import Clock, Screen, snap

import cupy_magic
from cupy_magic.holders.records import Holder, HolderReport
from cupy_magic.view import panel
from cupy_magic.view.progressbar import BatchProgressBar

# The colours of data marks, the same in either theme: memory bar segments and budget tick,
# the report's budget bar fill.
DATA = {"#0969da", "#8c959f", "#cf222e", "#4a4", "#c33"}


def _unthemed(page: str) -> list[str]:
    """The colours in ``page`` that ignore the theme: text colours that are not a theme
    variable (a legend's coloured square aside), backgrounds that are neither a theme
    variable, a translucent tint nor a data mark, and SVG fills and strokes in attributes."""
    found = []
    for m in re.finditer(r"(?<![-\w])(color|background|fill|stroke):\s*([^;\"']+)", page):
        prop, value = m[1], m[2].strip()
        if value.startswith("var(--jp-"):
            continue
        if prop == "color" and page[m.end():].lstrip("\"'>").startswith("&#9632;"):
            continue  # a legend's square, in its series' colour
        if prop == "background" and (value in DATA or re.fullmatch(
                r"rgba\([^)]*,\s*0?\.[0-2]\d*\)", value)):
            continue
        found.append(f"{prop}:{value}")
    found += re.findall(r"<rect[^>]*\s(?:fill|stroke)=\"[^\"]*\"", page)
    return found


@pytest.fixture
def three() -> Iterator[panel.VramPanel]:
    yield from three_devices(1)


def test_the_panel_follows_the_theme(three: panel.VramPanel) -> None:
    history = [sample(t, device=1, devices=ROWS) for t in range(1, 6)]
    three.update(history[-1], history)
    held = HolderReport([Holder(f"a{i}", 80, 80, (10,), "float64", made_in="In [3], line 1")
                         for i in range(8)]).held_by_html()
    page = "".join([three.title.value, three.device_rows.value, three.figures.value,
                    three.history.value, three.status.value, held])
    assert "cm-selected" in page and "<svg" in page and "and 3 more" in held
    assert _unthemed(page) == []
    assert "var(--jp-" in three.widget.layout.border_top


def test_the_progress_summary_follows_the_theme() -> None:
    screen, clock = Screen(), Clock()
    bar = BatchProgressBar(screen.show, clock=clock)
    clock.t = 105.0
    bar(snap(3))
    bar.close(True)
    assert "10 batches" in screen.updates[-1]
    assert _unthemed(screen.updates[-1]) == []


@pytest.fixture
def hip(shell, monkeypatch):
    yield from loaded(shell, monkeypatch, "host")


def test_the_report_follows_the_theme(hip) -> None:
    hip.run_line_magic("vram_budget", "64MB")
    hip.user_ns["x"] = np.arange(100_000.0)
    hip.run_cell_magic("gpu", "--quiet --syncs warn",
                       "y = np.sqrt(x)\nif y.max() > 0:\n    y = y * 2\n")
    page = cupy_magic.last_report()._repr_html_()
    assert "host sync" in page and "width:120px" in page  # the warning and the budget bar
    assert _unthemed(page) == []
