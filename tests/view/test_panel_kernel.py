"""A real kernel: panel updates (widget comm messages) arrive while another cell is busy."""

from __future__ import annotations

import re
from typing import Any

import pytest
from host_kernel import run_timed

pytestmark = pytest.mark.kernel

SHOW = """\
from cupy_magic import session
session.use_backend("host")  # the same figures path with or without a GPU
from cupy_magic.view.panel import show_panel
panel = show_panel(interval=0.1)
"""

BUSY = """\
import time
import numpy as np
from cupy_magic.run import progress
progress.start("busy cell", 10)
blocks = []
for i in range(10):
    blocks.append(np.ones(4_000_000))  # 32 MB more host memory each step
    progress.step()
    time.sleep(0.2)
progress.finish()
"""


run = run_timed


def _updates(msgs: list[tuple[float, dict[str, Any]]]) -> list[tuple[float, str]]:
    out = []
    for t, msg in msgs:
        data = msg["content"].get("data", {}) if msg["msg_type"] == "comm_msg" else {}
        value = data.get("state", {}).get("value") if data.get("method") == "update" else None
        if isinstance(value, str) and "cupy-magic" not in value and "batch" in value:
            out.append((t, value))
    return out


def test_panel_updates_arrive_while_another_cell_is_busy(kernel: Any) -> None:
    shown = run(kernel, SHOW)
    opens = [m for _, m in shown if m["msg_type"] == "comm_open"]
    assert any(m["content"]["data"]["state"].get("_model_name") == "VBoxModel" for m in opens)
    assert any(m["msg_type"] == "display_data" for _, m in shown)

    busy = run(kernel, BUSY)
    start = next(t for t, m in busy if m["msg_type"] == "execute_input")
    end = busy[-1][0]
    updates = _updates(busy)
    during = [(t, v) for t, v in updates if start < t < end]
    # 2 s of busy cell at 0.1 s per sample: expect ~20; demand a clear majority of them.
    assert len(during) >= 8, f"only {len(during)} panel updates reached iopub while busy"
    batches = {int(b) for _, v in during for b in re.findall(r"batch (\d+)/10", v)}
    assert len(batches) >= 5, f"the running cell's progress did not move: {sorted(batches)}"
    assert len({v for _, v in during}) >= 5  # each update carries new figures
    spread = during[-1][0] - during[0][0]
    assert spread > 1.0, "updates came in a burst at the end, not while the cell ran"

    stop = run(kernel, "panel.close()\nfrom cupy_magic.monitor import sampler as monitor\n"
                       "print(monitor.get_sampler().running)")
    out = "".join(m["content"].get("text", "") for _, m in stop if m["msg_type"] == "stream")
    assert out.strip() == "False"


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _displays(msgs: list[tuple[float, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The data of every display the executed cell itself sent."""
    return [m["content"]["data"] for _, m in msgs if m["msg_type"] == "display_data"]


def test_gpu_panel_option_shows_a_widget_panel_with_the_cell(kernel: Any) -> None:
    run(kernel, "%load_ext cupy_magic\nimport numpy as np\nx = np.arange(1000.0)")

    plain = _displays(run(kernel, "%%gpu\ny = x * 2"))
    assert plain and not any(WIDGET_VIEW in d for d in plain)  # the report only

    shown = run(kernel, "%%gpu --panel\ny = x * 3")
    views = [d for d in _displays(shown) if WIDGET_VIEW in d]
    assert len(views) == 1, "the --panel cell showed no live panel (or more than one)"
    opened = {m["content"]["comm_id"]: m["content"]["data"]["state"].get("_model_name")
              for _, m in shown if m["msg_type"] == "comm_open"}
    assert opened.get(views[0][WIDGET_VIEW]["model_id"]) == "VBoxModel"
    order = ["panel" if WIDGET_VIEW in d else "report" for d in _displays(shown)
             if WIDGET_VIEW in d or "cupy-magic-report" in d.get("text/html", "")]
    assert order == ["panel", "report"]  # the panel above the cell's output, then the report

    done = run(kernel, "import cupy_magic\nprint(cupy_magic.last_report().outputs[0].name,\n"
                       "      float(y[-1]))")
    out = "".join(m["content"].get("text", "") for _, m in done if m["msg_type"] == "stream")
    assert out.split() == ["y", "2997.0"]
