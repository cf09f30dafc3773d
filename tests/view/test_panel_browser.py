"""A real JupyterLab 4 in headless Chromium: the panel renders and changes while a cell runs,
and ``%%gpu`` cells show their value, report and panel (the same cells as in Notebook 7,
``test_notebook7_browser.py``; what both share is in ``tests/jupyter_pages.py``).
"""

from __future__ import annotations

import time
from pathlib import Path

import jupyter_pages as jp
import pytest

pytestmark = pytest.mark.browser

CELLS = [
    "from cupy_magic.view.panel import show_panel\npanel = show_panel(interval=0.25)",
    # A busy cell: allocate step by step and report progress, as a batched %%gpu cell does.
    "import time\nfrom cupy_magic import backend\nfrom cupy_magic.run import progress\n"
    "xp = backend.current().xp\n"
    "progress.start('In [2]: streamed sqrt', 20)\nkeep = []\nfor i in range(20):\n"
    "    keep.append(xp.ones(8_000_000) * i)\n    progress.step()\n    time.sleep(0.35)\n"
    "progress.finish()",
    "from cupy_magic.view.panel import cell_panel\nwith cell_panel(0.25):\n"
    "    progress.start('In [3]: %%gpu --panel', 20)\n    for i in range(20):\n"
    "        keep.append(xp.ones(8_000_000) * i)\n        progress.step()\n"
    "        time.sleep(0.35)\n    progress.finish()",
]


# A --lines table wider than the cell: each of its rows stays one line (UI review, helper-s16j).
LINES = "%%gpu --lines\ny2 = np.sqrt(x) * 2\nt2 = float(y2.sum())"

# A narrow window: the panel's title wraps, its Pause button keeps its width (90 px).
NARROW = """() => { const p = document.querySelector('.cupy-magic-panel');
  const b = [...p.querySelectorAll('button')].find(e => /Pause|Resume/.test(e.innerText));
  return [parseFloat(b.style.width) - b.getBoundingClientRect().width, b.innerText.trim()]; }"""

# Per line of the --lines table: its text's lines against the lines the page draws.
TABLE_LINES = """i => { const c = document.querySelectorAll('.jp-Notebook .jp-Cell')[i];
  const pre = c.querySelector('.cupy-magic-report pre');
  const step = parseFloat(getComputedStyle(pre).lineHeight);
  return [pre.innerText.split('\\n').length, Math.round(pre.clientHeight / step)]; }"""


def test_panel_renders_and_moves_while_a_cell_runs(tmp_path: Path) -> None:
    jp.needs_a_browser()
    out = jp.artifacts(tmp_path)
    with (jp.jupyter_server("lab", tmp_path, CELLS + jp.GPU_CELLS + [LINES]) as url,
          jp.notebook_page(url, tmp_path, out / "jupyterlab-final.png") as page):
        assert jp.app_name(page) == "JupyterLab"
        jp.run_next(page)
        panel = jp.cell(page, 0).locator(".cupy-magic-panel")
        panel.wait_for(state="visible", timeout=60_000)
        jp.run_next(page)  # the busy cell, while the panel above samples
        jp.wait_batch(page, 0, 2)
        first, busy = panel.inner_text(), jp.prompt(page, 1)
        time.sleep(1.5)
        second = panel.inner_text()
        panel.screenshot(path=str(out / "vram-panel.png"))
        page.screenshot(path=str(out / "jupyterlab-busy.png"))
        assert "*" in busy and "*" in jp.prompt(page, 1), "the cell ended before the check"
        jp.wait_done(page, 1)
        # The panel a cell displays itself while it stays busy (what %%gpu --panel does).
        jp.run_next(page)
        jp.wait_batch(page, 2, 2)
        own = jp.cell(page, 2).locator(".cupy-magic-panel")
        third = own.inner_text()
        time.sleep(1.5)
        fourth = own.inner_text()
        assert "*" in jp.prompt(page, 2), "the same-cell panel's cell ended before the check"
        jp.wait_done(page, 2)
        jp.run_gpu_cells(page, len(CELLS), out, "jupyterlab")
        lines = len(CELLS) + len(jp.GPU_CELLS)
        jp.run_next(page)
        jp.wait_ran_clean(page, lines)
        page.set_viewport_size({"width": 800, "height": 1000})
        page.wait_for_timeout(500)
        drawn = page.evaluate(TABLE_LINES, lines)
        jp.cell(page, lines).screenshot(path=str(out / "jupyterlab-lines-800.png"))
        jp.cell(page, 0).screenshot(path=str(out / "vram-panel-800.png"))
        squeezed, word = page.evaluate(NARROW)
    assert "VRAM panel" in first and "Release cached blocks" in first
    assert jp.batch(second) > jp.batch(first) >= 2, (first, second)
    assert jp.batch(fourth) > jp.batch(third) >= 2, (third, fourth)
    assert (out / "vram-panel.png").stat().st_size > 5_000
    assert drawn[0] > 4 and drawn[0] == drawn[1], drawn  # no row of the table wrapped
    assert squeezed < 1 and word in ("Pause", "Resume"), (squeezed, word)
