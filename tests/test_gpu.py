"""Behaviour that only the CuPy backend has: events, the pool, page-locked transfers."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from conftest import loaded

import cupy_magic
from cupy_magic import backend

pytestmark = pytest.mark.gpu


@pytest.fixture
def gip(shell, monkeypatch):
    yield from loaded(shell, monkeypatch, "cupy")


def test_cuda_events_time_the_cell(gip):
    import cupy

    gip.user_ns["a"] = np.random.rand(2048, 2048).astype(np.float32)
    # a @ a.T also works on --warmup's 2-row slice (a @ a would not: 2x2048 @ 2x2048)
    gip.run_cell_magic("gpu", "--quiet --warmup", "for _ in range(20):\n    b = a @ a.T\n")
    r = cupy_magic.last_report()
    assert isinstance(gip.user_ns["b"], cupy.ndarray)
    # 20 matmuls of 2048^3 are about 344 GFLOP: clearly above a millisecond and below wall time
    assert 0.0002 < r.gpu_seconds <= r.wall_seconds


def test_failing_cell_returns_the_pool_to_its_level(gip):
    be = backend.current()
    before = be.pool_used()
    with pytest.raises(RuntimeError, match="after allocating"):
        gip.run_cell_magic(
            "gpu", "--quiet",
            "big = np.ones((256, 1024, 1024), dtype=np.float32)\n"
            "def f(v):\n    tmp = v * 2\n    raise RuntimeError('after allocating')\n"
            "f(big)\n",
        )
    assert be.pool_used() == before
    assert "big" not in gip.user_ns


def test_pool_limit_raises_and_is_explained(gip):
    gip.run_line_magic("vram_budget", "256MB")
    with pytest.raises(backend.BudgetExceeded) as info:
        gip.run_cell_magic("gpu", "--quiet", "big = np.ones((512, 1024, 1024), dtype=np.float32)")
    msg = str(info.value)
    assert "Out of memory allocating 2,147,483,648 bytes" in msg
    assert "VRAM budget of 244.14 MiB" in msg and "Try batching" in msg


def test_large_inputs_are_page_locked_once_while_they_live(gip):
    x = np.random.rand(16 * 2**20 // 8 * 4)  # 64 MiB
    gip.user_ns["x"] = x
    gip.run_cell_magic("gpu", "--quiet", "s = x.sum()")
    first = cupy_magic.last_report().inputs[0]
    assert first.pinned
    be = backend.current()
    assert be.host.locked(x) and be.host.stats()["locked_bytes"] >= x.nbytes
    gip.run_cell_magic("gpu", "--quiet --to-host", "s = x.sum()")
    assert cupy_magic.last_report().inputs[0].pinned
    assert float(gip.user_ns["s"]) == pytest.approx(x.sum())
    del gip.user_ns["x"], x
    gc.collect()
    assert be.host.stats()["locked_bytes"] == 0


def test_unload_undoes_registrations_and_the_pool_limit(shell, monkeypatch):
    monkeypatch.setenv("CUPY_MAGIC_BACKEND", "cupy")
    shell.run_line_magic("load_ext", "cupy_magic")
    shell.run_line_magic("vram_budget", "1GB")
    be = backend.current()
    shell.user_ns["x"] = np.ones(8 * 2**20)
    shell.run_cell_magic("gpu", "--quiet", "y = x + 1")
    assert be.host.stats()["locked_bytes"] > 0 and be.pool.get_limit() == 10**9
    shell.run_line_magic("unload_ext", "cupy_magic")
    del shell.user_ns["x"], shell.user_ns["y"]
    assert be.host.stats()["locked_bytes"] == 0 and be.pool.get_limit() == 0


def test_the_report_says_how_long_the_host_waited_at_a_sync(gip):
    gip.user_ns["a"] = np.random.rand(4096, 4096).astype(np.float32)
    gip.run_cell_magic("gpu", "--quiet",
                       "b = a\nfor _ in range(30):\n    b = b @ a\ns = float(b.sum())\n")
    rows = cupy_magic.last_report().syncs
    assert [r.line for r in rows] == [4] and rows[0].count == 1
    # 30 matmuls of 4096^3 are queued when float() asks for the value: the host waits for them
    assert rows[0].wait_seconds is not None and rows[0].wait_seconds > 0.001
    assert "ms waiting" in rows[0].describe()
