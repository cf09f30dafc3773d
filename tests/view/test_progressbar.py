"""The notebook progress bar of batched cells: unit logic, and a real kernel."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from cupy_magic.run.progress import CellProgress
from cupy_magic.view.progressbar import BatchProgressBar


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Screen:
    """Records what the bar shows: one output, updated in place."""

    def __init__(self) -> None:
        self.shown: list[str] = []
        self.updates: list[str] = []

    def show(self, body: str) -> Screen:
        self.shown.append(body)
        return self

    def update(self, body: str) -> None:
        self.updates.append(body)


def snap(done: int, total: int = 10, started: float = 100.0, nbytes: int = 0) -> CellProgress:
    return CellProgress("In [3]", done, total, started, bytes_done=nbytes,
                        bytes_total=total * 10**9)


def test_short_runs_show_nothing_long_runs_one_bar_updated_in_place():
    clock, screen = Clock(), Screen()
    bar = BatchProgressBar(screen.show, clock)
    clock.t = 101.0
    bar(snap(1))
    assert screen.shown == []  # under two seconds: quiet
    clock.t = 102.5
    bar(snap(4, nbytes=4 * 10**9))
    assert len(screen.shown) == 1 and "batch 4/10" in screen.shown[0]
    assert "1.6 GB/s" in screen.shown[0]  # 4 GB in 2.5 s
    clock.t = 102.6
    bar(snap(5))
    assert screen.updates == []  # throttled: at most every 0.25 s
    clock.t = 103.0
    bar(snap(6))
    assert len(screen.updates) == 1 and "batch 6/10" in screen.updates[0]
    bar(snap(10))  # the last batch is always drawn
    assert "batch 10/10" in screen.updates[-1]
    clock.t = 104.0
    bar.close(ok=True)
    assert "10 batches, 2.5 GB/s of input, in 4.0 s" in screen.updates[-1]
    assert len(screen.shown) == 1


def test_a_failed_run_says_where_it_stopped_and_unbatched_cells_show_nothing():
    clock, screen = Clock(), Screen()
    bar = BatchProgressBar(screen.show, clock)
    clock.t = 103.0
    bar(snap(7))
    bar.close(ok=False)
    assert "stopped after batch 7 of 10" in screen.updates[-1]
    quiet = Screen()
    other = BatchProgressBar(quiet.show, clock)
    other(snap(0, total=0))
    other.close(ok=True)
    assert quiet.shown == [] and quiet.updates == []


@pytest.mark.kernel
def test_a_slow_batched_cell_in_a_kernel_ends_with_a_summary_line():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in (
        "%load_ext cupy_magic",
        "import time\nimport numpy as np\nx = np.ones((12, 4))\n"
        "def slow(v):\n    time.sleep(0.5)\n    return v",
        "%%gpu --quiet --batch-rows 2\ny = slow(x) * 2",
        "%%gpu --quiet --batch-rows 6\nz = x * 2",
    )]
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    slow_html = [o["data"]["text/html"] for o in nb.cells[2].outputs if "data" in o]
    assert len(slow_html) == 1  # one output, updated in place, now the summary
    assert "6 batches" in slow_html[0] and "of input, in" in slow_html[0]
    assert nb.cells[3].outputs == []  # a quick batched cell shows no bar


def test_a_small_input_reads_in_mb_per_second_not_zero_gb() -> None:
    from cupy_magic.view.progressbar import _rate

    assert _rate(320_000, 0.5) == "0.6 MB/s"
    assert _rate(4 * 10**9, 2.5) == "1.6 GB/s"
    assert _rate(0, 1.0) == "-"


def test_a_cluster_run_counts_blocks_in_the_bar_and_its_summary():
    from dataclasses import replace

    clock, screen = Clock(), Screen()
    bar = BatchProgressBar(screen.show, clock)
    clock.t = 103.0
    bar(replace(snap(4), unit="block"))
    assert "block 4/10" in screen.shown[0] and "batch" not in screen.shown[0]
    bar(replace(snap(10), unit="block"))
    clock.t = 104.0
    bar.close(ok=True)
    assert "10 blocks, " in screen.updates[-1]
