"""Behaviour that only the CuPy backend has: events, the pool, page-locked transfers."""

from __future__ import annotations

import gc
import uuid

import numpy as np
import pytest

import cupy_magic
from cupy_magic import backend

pytestmark = pytest.mark.gpu


def test_cuda_events_time_the_cell(gip):
    import cupy

    gip.user_ns["a"] = np.random.rand(2048, 2048).astype(np.float32)
    # a @ a.T also works on --warmup's 2-row slice (a @ a would not: 2x2048 @ 2x2048; 2 rows
    # of 2,048 make the 4,096 elements a warm-up needs)
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
    assert msg.startswith("line 1 `big = np.ones((512, 1024, 1024), dtype=np.float32)` asked "
                          "the pool for 2.00 GiB (2,147,483,648 bytes) while it held ")
    assert ".;" not in msg and "Out of memory" not in msg
    assert "VRAM budget of 244.14 MiB" in msg and "Try batching" in msg


def test_cached_blocks_from_before_the_budget_do_not_let_arrays_exceed_it(gip):
    """CuPy checks its pool limit only when the pool grows: 1 GiB cached before a 256 MB
    budget would otherwise serve a 512 MiB array without a word (found on the H200)."""
    be = backend.current()
    gip.run_cell_magic("gpu", "--quiet", "tmp = np.ones(2**28, dtype=np.float32)\ndel tmp")
    assert be.stats().cached_free >= 1 << 30
    gip.run_line_magic("vram_budget", "256MB")
    with pytest.raises(backend.BudgetExceeded, match=r"over the VRAM budget of 244\.14 MiB"):
        gip.run_cell_magic("gpu", "--quiet", "big = np.ones(2**27, dtype=np.float32)")
    assert "big" not in gip.user_ns
    gip.run_cell_magic("gpu", "--quiet", "small = np.ones(2**20, dtype=np.float32)")
    assert gip.user_ns["small"].nbytes == 4 << 20  # under the budget, from the cache


def test_arrays_over_a_budget_set_lower_keep_each_request_checked(gip):
    """The pool's own limit only counts growth; while its arrays alone exceed a budget set
    lower, blocks they free would serve a request over it: every request is then checked."""
    import cupy

    be = backend.current()
    before = be.pool_used()
    gip.run_cell_magic("gpu", "--quiet", "keep = np.ones(2**28, dtype=np.float32)")
    assert be.pool_used() - before == 1 << 30  # 1 GiB alive when the budget comes
    gip.run_line_magic("vram_budget", "256MB")
    limit = be.limit
    with be.track_memory("<test>"):
        del gip.user_ns["keep"]  # its block stays cached in the pool
        gc.collect()
        assert be.pool_used() == before, f"{be.pool_used():,} bytes still in use"
        assert be.pool.total_bytes() >= 1 << 30
        with pytest.raises(cupy.cuda.memory.OutOfMemoryError):
            cupy.empty(2**27, dtype=cupy.float32)  # 512 MiB, which the cache could serve
        small = cupy.ones(2**20, dtype=cupy.float32)  # from the cache: under the budget
    assert be.pool_used() < limit
    with be.track_memory("<test>"):  # small holds part of the cached block: it stays
        assert be.pool.total_bytes() >= 1 << 30
        with pytest.raises(cupy.cuda.memory.OutOfMemoryError):
            cupy.empty(2**27, dtype=cupy.float32)
    assert float(small.sum()) == 2**20
    del small
    with be.track_memory("<test>"):  # nothing of it in use: a measurement releases it
        assert be.pool.total_bytes() <= limit
        with pytest.raises(cupy.cuda.memory.OutOfMemoryError):
            cupy.empty(2**27, dtype=cupy.float32)  # refused by the pool's own limit
        fits = cupy.ones(2**25, dtype=cupy.float32)  # 128 MiB, within the budget
    assert fits.nbytes == 128 << 20 and be.pool.total_bytes() <= limit


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


def test_warmup_compiles_the_reduction_kernels_the_full_run_uses(gip):
    # A reduction kernel of its own (a new name, so nothing is cached on disk or in memory),
    # over 4M elements. CuPy compiles a reduction for the block size it picks from the reduced
    # length: a warm-up over 2 elements compiled a different kernel, and the real one (seconds
    # through CUB) was then compiled inside the timed run.
    name = f"sq_sum_{uuid.uuid4().hex[:10]}"
    x = np.random.rand(2**22).astype(np.float32)
    gip.user_ns["x"] = x
    kernel = f"k = cp.ReductionKernel('T x', 'T y', 'x * x', 'a + b', 'y = a', '0', '{name}')\n"
    gip.run_cell_magic("gpu", "--quiet --warmup", kernel + "s = k(x)\n")
    r = cupy_magic.last_report()
    assert r.warmup_rows == 4096 and r.warmup_seconds > 0.05  # it compiled
    assert r.gpu_seconds < 0.5, f"the timed run compiled again: {r.gpu_seconds:.2f} s"
    assert float(gip.user_ns["s"]) == pytest.approx(float((x.astype(np.float64) ** 2).sum()),
                                                    rel=1e-4)
    # The same in a batched run: the warm-up is unbatched on the slice, then the rules join.
    name = f"sq_sum_{uuid.uuid4().hex[:10]}"
    kernel = f"k = cp.ReductionKernel('T x', 'T y', 'x * x', 'a + b', 'y = a', '0', '{name}')\n"
    gip.run_cell_magic("gpu", "--quiet --warmup --batch-rows 1048576 --reduce s=sum",
                       kernel + "s = k(x)\n")
    r = cupy_magic.last_report()
    assert r.batch is not None and r.batch.batches >= 4 and r.warmup_rows == 4096
    assert r.gpu_seconds < 0.5, f"the batched run compiled again: {r.gpu_seconds:.2f} s"
    assert float(gip.user_ns["s"]) == pytest.approx(float((x.astype(np.float64) ** 2).sum()),
                                                    rel=1e-4)


def test_the_background_first_launch_leaves_the_pool_and_no_thread(shell, monkeypatch, caplog):
    import logging
    import threading

    from cupy_magic.backend.cupy import CupyBackend

    callers: list[str] = []  # the threads that allocated from the cells' pool
    allocator = CupyBackend._allocator

    def spying(self):
        malloc = allocator(self)

        def spy(size):
            callers.append(threading.current_thread().name)
            return malloc(size)
        return spy

    monkeypatch.setattr(CupyBackend, "_allocator", spying)  # installed as CuPy's at load
    monkeypatch.setenv("CUPY_MAGIC_BACKEND", "cupy")
    shell.user_ns["np"] = np

    def preheaters() -> list:
        return [t for t in threading.enumerate() if t.name == "cupy_magic-preheat"]

    from cupy_magic.backend import preheat

    caplog.set_level(logging.WARNING)
    for _ in range(3):  # load, a first cell while it may still run, unload: nothing left
        preheat.DONE.clear()  # as in a new process: each load runs it
        shell.run_line_magic("load_ext", "cupy_magic")
        try:
            be = backend.current()
            before = be.pool_used()
            shell.run_cell_magic("gpu", "--quiet", "y = np.ones(1_000) * 2\n")
            report = cupy_magic.last_report()
            assert be.preheated.wait(30)
            # it measured a large page-locked upload (32 MiB) too, with memory from no pool
            assert be.upload_rate() is not None and be.upload_rate() > 1e9
            assert be.upload_rate(be.home + 1) is None  # measured on the home device only
            # its memory comes from no pool: only the cell's thread allocated there, the pool
            # gained the cell's y alone (8,000 bytes in 512-byte units), and the cell's peak
            # counts y and np.ones's temporary, no more
            assert callers and set(callers) == {threading.current_thread().name}
            assert 8_000 <= be.pool_used() - before <= 8_192
            assert 2 * 8_000 <= report.peak_pool_bytes - report.start_pool_bytes <= 2 * 8_192
            assert float(shell.user_ns.pop("y").sum()) == 2_000.0
            # it ran to its end (cuBLAS's first products included): nothing logged as failed
            assert not [r for r in caplog.records if "first launch" in r.getMessage()]
        finally:
            shell.run_line_magic("unload_ext", "cupy_magic")
        assert preheaters() == []


def test_a_backend_made_again_in_the_process_skips_the_first_launch(shell, monkeypatch):
    """The first launch is once per process: a second load (``%reload_ext``, each test's)
    starts no thread, and knows the upload rate the first one measured."""
    from cupy_magic.backend import preheat

    monkeypatch.setenv("CUPY_MAGIC_BACKEND", "cupy")
    preheat.DONE.clear()
    seen = []
    for _ in range(2):
        shell.run_line_magic("load_ext", "cupy_magic")
        try:
            be = backend.current()
            assert be.preheated.wait(30)
            seen.append((be._preheater is not None, be.upload_rate()))
        finally:
            shell.run_line_magic("unload_ext", "cupy_magic")
    assert seen[0][0] and seen[0][1] > 1e9  # the first load ran it and measured the rate
    assert seen[1] == (False, seen[0][1])  # the second: no thread, the same rate
    assert set(preheat.DONE) == {be.home}


def test_the_peak_read_at_each_allocation_is_the_pools_own_count(gip):
    # the peak the allocator records at each allocation is the pool's own count of the bytes
    # in use after it, for odd sizes too, and a smaller allocation later leaves it
    import cupy

    be = backend.current()
    keep = []
    for n in (0, 1, 511, 512, 513, 4_097, 1_000_003, 3 << 20):
        with be.track_memory("<test>") as m:
            keep.append(cupy.empty(n, dtype=cupy.uint8))
            seen = be.pool.used_bytes()
        assert m.peak_bytes == max(m.start_bytes, seen)
    with be.track_memory("<test>") as m:
        del keep[3:5]
        keep.append(cupy.empty(10, dtype=cupy.uint8))  # below the start: it stays
    assert m.peak_bytes == m.start_bytes


def test_measurements_open_together_each_see_their_own_window(gip):
    # nested (a batched run's batch inside the cell's) and crossing (two threads): each
    # measurement's peak is the highest bytes in use while it was open, and no other's
    import cupy

    be = backend.current()
    mib = 1 << 20
    with be.track_memory("<test>") as outer:
        big = cupy.empty(64 * mib, dtype=cupy.uint8)
        top = be.pool.used_bytes()
        del big
        with be.track_memory("<test>") as inner:
            small = cupy.empty(mib, dtype=cupy.uint8)
            inner_top = be.pool.used_bytes()
    assert (inner.peak_bytes, outer.peak_bytes) == (inner_top, top)
    first, second = be.track_memory("<test>"), be.track_memory("<test>")
    a = first.__enter__()
    big = cupy.empty(64 * mib, dtype=cupy.uint8)
    a_top = be.pool.used_bytes()
    del big
    b = second.__enter__()  # opened after the 64 MiB went: it never saw them
    more = cupy.empty(2 * mib, dtype=cupy.uint8)
    first.__exit__(None, None, None)
    again = cupy.empty(3 * mib, dtype=cupy.uint8)  # after the first closed: the second's only
    b_top = be.pool.used_bytes()
    second.__exit__(None, None, None)
    assert a.peak_bytes == a_top and b.peak_bytes == b_top < a_top
    del small, more, again
