"""A real kernel: the panel's "held by" section follows the cells (issue 14, point 4).

After each cell a ``post_run_cell`` hook walks the user namespace on the main thread and sets
the section's widget; the update must reach the frontend as a widget message of that cell,
naming an array a cell made, and drop it after ``del``. CPU fallback here (the same walk
lists the host backend's arrays); on a GPU the same messages carry device arrays.
"""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import start_new_kernel

pytestmark = pytest.mark.kernel

SHOW = """\
%load_ext cupy_magic
import numpy as np
from cupy_magic.view.panel import show_panel
panel = show_panel(interval=5)  # slow samples: the section comes from the hook, not them
"""


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Any]:
    env = dict(os.environ, HOME=str(tmp_path), IPYTHONDIR=str(tmp_path / ".ipython"),
               CUPY_CACHE_DIR=str(tmp_path / ".cupy"), JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"),
               CUPY_MAGIC_BACKEND="host")
    km, kc = start_new_kernel(kernel_name="python3", env=env, cwd=str(tmp_path))
    try:
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def run(kc: Any, code: str, timeout: float = 60) -> list[dict[str, Any]]:
    """Execute ``code``; return the iopub messages of that request until it is idle."""
    msg_id = kc.execute(code)
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        got.append(msg)
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            reply = kc.get_shell_msg(timeout=10)
            assert reply["content"]["status"] == "ok", reply["content"]
            return got
    raise AssertionError(f"the cell did not finish in {timeout} s: {code!r}")


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
