"""A real Notebook 7 in headless Chromium: ``%%gpu`` cells show what a user expects.

The last expression's value under the cell's own number with the report, and a batched
cell's live panel moving while it runs (issue 17). The same cells run in JupyterLab in
``test_panel_browser.py``; what both share is in ``tests/jupyter_pages.py``.
"""

from __future__ import annotations

from pathlib import Path

import jupyter_pages as jp
import pytest

pytestmark = pytest.mark.browser


def test_gpu_cells_show_their_value_report_and_panel_in_notebook_7(tmp_path: Path) -> None:
    jp.needs_a_browser()
    notebook = pytest.importorskip("notebook", reason="needs the notebook package (>= 7)")
    assert int(notebook.__version__.split(".")[0]) >= 7, notebook.__version__
    out = jp.artifacts(tmp_path)
    with (jp.jupyter_server("notebook", tmp_path, jp.GPU_CELLS) as url,
          jp.notebook_page(url, tmp_path, out / "notebook7-final.png") as page):
        assert jp.app_name(page) == "Jupyter Notebook"
        jp.run_gpu_cells(page, 0, out, "notebook7")
