"""The panel's per-worker rows (issue 15, point 4) on a real ``distributed.LocalCluster`` of 2
worker processes: figures read on each worker (its own process memory on the CPU fallback,
its GPU's NVML on a GPU worker), a stopped worker N/A without holding the panel or a cell,
and a killed worker dropped from the rows."""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest

import cupy_magic
from cupy_magic import backend
from cupy_magic.cluster import connect
from cupy_magic.cluster.inputs import scheduler_workers
from cupy_magic.monitor import sampler as monitor
from cupy_magic.monitor.gather import WORKER_WAIT, ClusterRows
from cupy_magic.monitor.nvml import NA
from cupy_magic.monitor.sampler import Sampler
from cupy_magic.view import panel


class HeldClock(monitor.Clock):
    """The sampler thread never ticks on its own: the test calls ``tick()``."""

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.wait()


@pytest.fixture
def held(joined):
    """A panel on the real sources whose sampler ticks only when the test says, and asks the
    workers at every tick."""
    sampler = Sampler(interval=0.5, clock=HeldClock(), workers=ClusterRows(every=0.0))
    vp = panel.VramPanel(sampler, 0)
    yield vp
    vp.close()
    sampler.stop()


def _rows(vp: panel.VramPanel) -> dict:
    vp.sampler.tick()
    sample = vp.sampler.history(0)[-1]
    assert sample.workers is not None
    return {r.address: r for r in sample.workers}


def _asking_threads() -> int:
    return sum(t.name == "cupy_magic-worker-rows" for t in threading.enumerate())


def test_a_row_per_worker_read_on_that_worker(held, joined):
    pids = joined.run(os.getpid)
    limits = {a: w["memory_limit"] for a, w in scheduler_workers(joined).items()}
    rows = _rows(held)
    assert sorted(rows) == sorted(pids)
    for address, row in rows.items():
        assert row.note == "" and row.budget == "off" and isinstance(row.pool_used, int)
        assert address in held.worker_rows.value
        if row.backend == "host":  # the worker process's own memory, against its limit
            rss = psutil.Process(pids[address]).memory_info().rss
            assert 0.5 * rss < row.used < 1.5 * rss and row.total == limits[address]
            assert row.device == "CPU (NumPy)" and row.memory == "host"
        else:  # a GPU worker: its device's NVML, read there
            assert row.memory == "VRAM" and 0 < row.used <= row.total
    assert "cluster at tcp://127.0.0.1:" in held.worker_rows.value
    assert "2 workers, figures read on each worker" in held.worker_rows.value


def test_the_workers_budget_shows_once_in_force(held, joined):
    cupy_magic.set_budget("1GB")
    try:
        connect.ensure_budget(backend.current())
        rows = _rows(held)
        assert {r.budget for r in rows.values()} == {backend.current().budget.describe()}
    finally:
        cupy_magic.set_budget(None)
        connect.ensure_budget(backend.current())


def test_the_workers_are_asked_once_a_second(joined):
    rows = ClusterRows()
    first = rows.read(WORKER_WAIT)
    assert len(first) == 2 and rows.read(WORKER_WAIT) is first  # within the second: as it was
    time.sleep(rows.every)
    assert rows.read(WORKER_WAIT) is not first and rows.last() == rows.read(0.0)


def test_leaving_the_cluster_clears_the_rows(held, joined):
    assert len(_rows(held)) == 2
    cupy_magic.use_cluster("off")
    held.sampler.tick()
    assert held.sampler.history(0)[-1].workers is None and held.worker_rows.value == ""


def _wait_until(check, timeout: float = 40.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.2)
    return False


def test_a_stopped_worker_reads_na_and_a_killed_one_goes(ip, held, joined):
    joined.wait_for_workers(2, timeout=60)  # the nanny restarts the one an earlier run killed
    pids = joined.run(os.getpid)
    victim, other = sorted(pids)
    assert _rows(held)[victim].note == ""
    os.kill(pids[victim], signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        rows = _rows(held)
        first = time.monotonic() - t0
        assert rows[victim].note.startswith("no answer for") and rows[victim].used is NA
        assert rows[other].note == "" and rows[other].used > 0
        assert first < WORKER_WAIT + 1.5, f"a tick waited {first:.2f} s"
        # asked once: later ticks do not ask it again, nor wait for it
        for _ in range(4):
            t0 = time.monotonic()
            assert _rows(held)[victim].note.startswith("no answer for")
            assert time.monotonic() - t0 < WORKER_WAIT + 1.0
        assert _asking_threads() <= 2
        # the sampler thread runs on its own while a cell runs in the kernel
        live = Sampler(interval=0.1)
        got: list = []
        live.subscribe(lambda s, h: got.append(s))
        t0 = time.monotonic()
        ip.run_cell("%%gpu --quiet\ntotal = np.arange(1000).sum()")
        assert ip.user_ns["total"] == 499500 and time.monotonic() - t0 < 5
        assert _wait_until(lambda: len(got) >= 3, 10)
        live.stop()
    finally:
        os.kill(pids[victim], signal.SIGKILL)
    assert _wait_until(lambda: victim not in _rows(held)), "the killed worker stayed listed"
    assert other in _rows(held)

