"""A real kernel on the CPU fallback: the panel shows a batched cell's memory while it runs.

Issue 17, point 8: the panel read ``pool used 0 B`` and ``budget 0% used`` during a batched
cell whose report said 86.80 MiB at the peak.
"""

from __future__ import annotations

import html as html_lib
import re
from typing import Any

import pytest
from host_kernel import run_timed

pytestmark = pytest.mark.kernel

SHOW = """\
%load_ext cupy_magic
%vram_budget 64MiB
import time
import numpy as np
x = np.ones((100_000, 16))  # 12.8 MB: 20 batches of 5,000 rows
from cupy_magic.view.panel import show_panel
panel = show_panel(interval=0.1)
"""

BATCHED = """\
%%gpu --batch --batch-rows 5000 --quiet
y = x * 2.0 + 1.0
time.sleep(0.1)
"""


run = run_timed


def _figures(msgs: list[tuple[float, dict[str, Any]]]) -> list[str]:
    """The panel's figures HTML of each widget update among ``msgs``."""
    out = []
    for _, msg in msgs:
        data = msg["content"].get("data", {}) if msg["msg_type"] == "comm_msg" else {}
        value = data.get("state", {}).get("value") if data.get("method") == "update" else None
        if isinstance(value, str) and "pool</th>" in value:
            out.append(value)
    return out


def _row(html: str, key: str) -> str:
    """The text of the figures' ``key`` row, unescaped (the HTML writes ``<1%`` as ``&lt;1%``)."""
    found = re.search(rf">{key}</th><td[^>]*>([^<]*)<", html)
    assert found, f"no {key} row in {html[:200]!r}"
    return html_lib.unescape(found.group(1))


def test_the_panel_shows_a_batched_host_cells_memory_while_it_runs(kernel: Any) -> None:
    shown = run(kernel, SHOW)
    errors = [m for _, m in shown if m["msg_type"] == "error"]
    assert not errors, errors
    during = []
    for html in _figures(run(kernel, BATCHED)):
        batch = re.search(r"batch (\d+)/(\d+)", html)
        if batch and 2 <= int(batch.group(1)) < int(batch.group(2)):
            during.append(html)  # taken while the batches ran
    assert len(during) >= 5, f"only {len(during)} panel updates while the batches ran"
    pools = [_row(h, "pool") for h in during]
    budgets = [_row(h, "budget") for h in during]
    assert not [p for p in pools if "N/A" in p.split(",")[0]], pools
    bad = [(k, b) for k, b in enumerate(budgets) if not re.search(r"\((<1|\d+)% used\)", b)]
    assert not bad, (f"{len(bad)} of {len(budgets)} updates: {bad}; "
                     f"the first: {during[bad[0][0]]}")  # evaluated only when it fails
    # memory is held while a batch runs (a share under 1% reads "<1%"); between two batches
    # the host backend holds nothing (its uploads are each batch's own copies), so an update
    # that lands in that gap reads 0, which a loaded machine makes likelier (it did once in
    # CI): most updates, not all, show the batch's memory (before issue 17's fix, none did)
    empty = [(k, p, b) for k, (p, b) in enumerate(zip(pools, budgets, strict=True))
             if p.startswith("used 0 B") or "(0% used)" in b]
    assert len(empty) <= len(during) // 5, f"{len(empty)} of {len(during)} updates: {empty}"
    after = run(kernel, "from cupy_magic import backend\n"
                        "print(panel.sampler.sample(0).pool.used == "
                        "backend.current().resident_bytes())")
    out = "".join(m["content"].get("text", "") for _, m in after if m["msg_type"] == "stream")
    assert out.strip() == "True"
    run(kernel, "panel.close()")
