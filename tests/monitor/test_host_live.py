"""The panel's pool figures on the CPU fallback follow a running batched cell (issue 17, 8).

The host backend tracks a cell's memory with tracemalloc on the cell's thread; the sampler
reads it from its own thread while the cell runs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

import numpy as np
import pytest
from conftest import loaded

from cupy_magic.monitor.sampler import LiveSources, Sample, Sampler
from cupy_magic.view.figures import summary_lines

BUDGET = 64 << 20
ROWS, COLS, BATCH_ROWS = 100_000, 16, 5_000  # 12.8 MB of float64 input, 20 batches

CELL = """\
y = x * 2.0 + 1.0
time.sleep(0.05)
"""


@pytest.fixture
def host(shell: object, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    yield from loaded(shell, monkeypatch, "host")


def _sampling(sampler: Sampler) -> tuple[list[Sample], threading.Lock]:
    got: list[Sample] = []
    lock = threading.Lock()

    def collect(sample: Sample, history: Sequence[Sample]) -> None:
        with lock:
            got.append(sample)

    sampler.subscribe(collect)
    return got, lock


def test_samples_during_a_batched_host_cell_show_its_memory(host: object) -> None:
    import time

    from cupy_magic import backend

    ip = host
    ip.run_line_magic("vram_budget", f"{BUDGET // (1 << 20)}MiB")  # type: ignore[attr-defined]
    ip.user_ns.update(x=np.ones((ROWS, COLS)), time=time)  # type: ignore[attr-defined]
    be = backend.current()
    assert not be.is_gpu and be.limit == BUDGET
    sampler = Sampler(LiveSources(), interval=0.05)
    before = sampler.sample(0)
    got, lock = _sampling(sampler)
    try:
        ip.run_cell_magic(  # type: ignore[attr-defined]
            "gpu", f"--batch --batch-rows {BATCH_ROWS} --quiet", CELL)
    finally:
        sampler.stop()
    after = sampler.sample(0)
    assert ip.user_ns["y"].shape == (ROWS, COLS)  # type: ignore[attr-defined]
    with lock:
        samples = list(got)
    # Samples taken while the batches ran: the 2nd batch is done and the last one is not
    # (the first and the warm-up run outside the tracked loop).
    during = [s for s in samples if s.cell is not None and s.cell.batches_total
              and 2 <= s.cell.batches_done < s.cell.batches_total]
    assert len(during) >= 5, f"only {len(during)} samples while the batches ran"
    assert all(s.errors == () and s.backend == "host" for s in during)
    used = [s.pool.used for s in during]
    # Each batch holds at least its slice of x and its y: 2 x 640 KB.
    assert min(used) >= 2 * BATCH_ROWS * COLS * 8 // 2, used
    assert max(used) <= BUDGET, used
    assert all(s.pool.limit == BUDGET and 0 < s.pool.held <= BUDGET for s in during)
    budget_lines = [summary_lines(s)["budget"] for s in during]
    assert all("used)" in b and "(0% used)" not in b for b in budget_lines), budget_lines
    # Before and after the cell: no running cell's bytes, only arrays earlier cells left.
    assert before.pool.used == 0
    assert after.pool.used == be.resident_bytes() and be.cell_bytes() == 0
    assert after.cell is None
