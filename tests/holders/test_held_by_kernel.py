"""A real kernel: the panel's "held by" section follows the cells (issue 14, point 4).

After each cell a ``post_run_cell`` hook walks the user namespace on the main thread and sets
the section's widget; the update must reach the frontend as a widget message of that cell,
naming an array a cell made, and drop it after ``del``. CPU fallback here (the same walk
lists the host backend's arrays); on a GPU the same messages carry device arrays.
"""

from __future__ import annotations

from typing import Any

import pytest
from host_kernel import run_timed

pytestmark = pytest.mark.kernel

SHOW = """\
%load_ext cupy_magic
import numpy as np
from cupy_magic.view.panel import show_panel
panel = show_panel(interval=5)  # slow samples: the section comes from the hook, not them
"""


def run(kc: Any, code: str, timeout: float = 60) -> list[dict[str, Any]]:
    """Execute ``code``; return the iopub messages of that request until it is idle."""
    got = run_timed(kc, code, timeout)
    request = got[-1][1]["parent_header"].get("msg_id")
    return [msg for _, msg in got if msg["parent_header"].get("msg_id") == request]


def held_by_updates(msgs: list[dict[str, Any]]) -> list[str]:
    """The values the "held by" widget was set to by these messages."""
    values = []
    for msg in msgs:
        data = msg["content"].get("data", {}) if msg["msg_type"] == "comm_msg" else {}
        value = data.get("state", {}).get("value") if data.get("method") == "update" else None
        if isinstance(value, str) and "<b>held by</b>" in value:
            values.append(value)
    return values


def test_held_by_names_an_array_after_the_cell_that_made_it_and_drops_it_after_del(
        kernel: Any) -> None:
    shown = run(kernel, SHOW)
    assert any(m["msg_type"] == "display_data" for m in shown), "no panel was displayed"

    made = held_by_updates(run(kernel, "%%gpu --quiet\nbig = np.ones(2**20)"))
    assert made, "the cell that made `big` sent no 'held by' update"
    assert "<code>big</code>" in made[-1] and "8.00 MiB" in made[-1]
    assert "host memory" in made[-1]  # the CPU fallback labels what it lists

    dropped = held_by_updates(run(kernel, "del big"))
    assert dropped, "`del big` sent no 'held by' update"
    assert "<code>big</code>" not in dropped[-1]
    assert "no array reachable" in dropped[-1]

    # a plain cell that changes nothing the walk lists sends no new section
    assert held_by_updates(run(kernel, "n = 1")) == []
