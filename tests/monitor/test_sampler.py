"""monitor.py: the sampler with injected sources and a fake clock; pool arena figures."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

import pytest

from cupy_magic import lifecycle
from cupy_magic.monitor import sampler as monitor
from cupy_magic.monitor.nvml import NA, DeviceReading
from cupy_magic.monitor.rows import DeviceRow
from cupy_magic.monitor.sampler import PoolFigures, Sample, Sampler
from cupy_magic.monitor.sources import POOL_UNAVAILABLE
from cupy_magic.run.progress import CellProgress


class FakeClock(monitor.Clock):
    """Time that jumps: ``wait`` advances ``now`` by the timeout instead of sleeping."""

    def __init__(self) -> None:
        self.t = 0.0
        self.waits: list[float] = []

    def now(self) -> float:
        return self.t

    def wait(self, event: threading.Event, timeout: float) -> bool:
        self.waits.append(round(timeout, 9))
        self.t += timeout
        return event.is_set()


class HeldClock(FakeClock):
    """A fake clock whose thread never ticks on its own: the test calls ``tick()``."""

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.wait()


class FakeSources:
    """Sources with scripted figures; ``cost`` seconds of fake time per sample."""

    def __init__(self, clock: FakeClock | None = None, cost: float = 0.0) -> None:
        self.clock, self.cost = clock, cost
        self.used = 0
        self.fail_pool: Exception | None = None
        self.calls = 0

    def devices(self) -> list[str]:
        return ["0: Fake GPU", "1: Fake GPU"]

    def row(self, device: int) -> DeviceRow:
        return DeviceRow(device, name="Fake GPU", used=10 << 30, total=80 << 30)

    def reading(self, device: int) -> DeviceReading:
        return DeviceReading(name="Fake GPU", total=80 << 30, used=10 << 30, util_gpu=50)

    def pool(self, device: int) -> PoolFigures:
        self.calls += 1
        if self.clock is not None:
            self.clock.t += self.cost
        if self.fail_pool is not None:
            raise self.fail_pool
        self.used += 1 << 20
        return PoolFigures(used=self.used, held=2 * self.used, limit=8 << 30)

    def host(self) -> tuple[int, int]:
        return 1 << 30, 16 << 30

    def budget(self) -> str:
        return "8.00 GiB"

    def cell(self) -> CellProgress | None:
        return CellProgress("In [3]", 2, 10, time.monotonic())

    def status(self) -> tuple[str, str, str]:
        return "cupy", "", ""


def run_until(sampler: Sampler, n: int, device: int = 0) -> list[Sample]:
    """Run the real thread until ``n`` samples arrived; return them."""
    got: list[Sample] = []
    done = threading.Event()

    def collect(sample: Sample, history: Sequence[Sample]) -> None:
        if done.is_set():  # a tick already under way when it stopped: not asked for
            return
        got.append(sample)
        if len(got) >= n:
            sampler.stop()  # from the thread itself: sets the event, no join
            done.set()

    sampler.subscribe(collect, device)
    assert done.wait(10), "the sampler thread delivered too few samples"
    if sampler._thread is not None:
        sampler._thread.join(5)
    return got


def test_fixed_schedule_does_not_drift() -> None:
    clock = FakeClock()
    sampler = Sampler(FakeSources(clock, cost=0.1), interval=0.5, clock=clock)
    samples = run_until(sampler, 5)
    # Each sample costs 0.1 s; a naive "sleep(interval)" loop would drift to 0.6, 1.2, ...
    assert [s.time for s in samples] == pytest.approx([0.6, 1.1, 1.6, 2.1, 2.6])
    assert clock.waits[:3] == [0.5, 0.4, 0.4]


def test_a_slow_sample_skips_missed_ticks_instead_of_bursting() -> None:
    clock = FakeClock()
    sources = FakeSources(clock, cost=0.0)
    original = sources.pool

    def slow_second(device: int) -> PoolFigures:
        if sources.calls == 1:
            clock.t += 1.3  # the second sample takes 1.3 s
        return original(device)

    sources.pool = slow_second  # type: ignore[method-assign]
    sampler = Sampler(sources, interval=0.5, clock=clock)
    samples = run_until(sampler, 4)
    assert [round(s.time, 6) for s in samples] == [0.5, 2.3, 2.5, 3.0]
    assert all(w >= 0 for w in clock.waits)


def test_samples_are_immutable_and_carry_every_source() -> None:
    sampler = Sampler(FakeSources(), interval=0.5, clock=FakeClock())
    s = sampler.sample(1)
    assert s.device == 1 and s.backend == "cupy" and s.budget == "8.00 GiB"
    assert s.pool.used == 1 << 20 and s.host_total == 16 << 30 and s.cell.batches_done == 2
    assert s.errors == ()
    with pytest.raises(AttributeError):
        s.budget = "x"  # type: ignore[misc]


def test_source_errors_land_in_the_sample_and_the_log_once(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    sources = FakeSources(clock)
    sources.fail_pool = RuntimeError("cudaErrorLaunchFailure\nmore")
    sampler = Sampler(sources, interval=0.5, clock=clock)
    with caplog.at_level(logging.WARNING, logger="cupy_magic.monitor.sampler"):
        samples = run_until(sampler, 3)
    assert all(s.errors == ("pool: RuntimeError: cudaErrorLaunchFailure",) for s in samples)
    # The pool's figures read N/A, not invented zeros; the other sources still give theirs.
    assert all(s.pool is POOL_UNAVAILABLE and s.reading.util_gpu == 50 for s in samples)
    assert samples[0].pool.used is NA and samples[0].pool.cached_free is NA
    assert len([r for r in caplog.records if "cudaErrorLaunchFailure" in r.getMessage()]) == 1


def test_a_failing_panel_does_not_stop_the_others() -> None:
    clock = FakeClock()
    sampler = Sampler(FakeSources(clock), interval=0.5, clock=clock)

    def broken(sample: Sample, history: Sequence[Sample]) -> None:
        raise ValueError("widget gone")

    sampler.subscribe(broken)
    samples = run_until(sampler, 3)
    assert len(samples) == 3


def test_history_keeps_two_minutes_per_device() -> None:
    clock = HeldClock()
    sampler = Sampler(FakeSources(clock), interval=10.0, clock=clock)
    sampler.subscribe(lambda s, h: None, 1)
    for _ in range(20):
        clock.t += 10.0
        sampler.tick()
    history = sampler.history(1)
    assert [h.time for h in history] == [float(t) for t in range(80, 201, 10)]
    assert sampler.history(0) == ()
    sampler.stop()


def test_only_watched_devices_are_sampled_and_delivered() -> None:
    sampler = Sampler(FakeSources(), interval=1.0, clock=HeldClock())
    seen: dict[str, list[int]] = {"a": [], "b": []}
    sampler.subscribe(lambda s, h: seen["a"].append(s.device), 0)
    sub_b = sampler.subscribe(lambda s, h: seen["b"].append(s.device), 1)
    sampler.tick()
    sub_b.device = 0
    sampler.tick()
    assert seen == {"a": [0, 0], "b": [1, 0]}
    assert sampler.sources.calls == 3  # device 0 once per tick, device 1 once
    sampler.stop()


def test_pause_and_resume() -> None:
    sources = FakeSources()
    sampler = Sampler(sources, interval=0.05)
    sampler.pause()
    sub = sampler.subscribe(lambda s, h: None)
    time.sleep(0.15)
    assert sampler.running and sampler.ticks == 0 and sources.calls == 0
    sampler.resume()
    deadline = time.monotonic() + 5
    while sampler.ticks < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sampler.ticks >= 3
    sampler.unsubscribe(sub)


def test_thread_stops_when_the_last_panel_leaves() -> None:
    sampler = Sampler(FakeSources(), interval=0.05)
    a = sampler.subscribe(lambda s, h: None)
    b = sampler.subscribe(lambda s, h: None)
    thread = sampler._thread
    assert thread is not None and thread.is_alive() and thread.daemon
    sampler.unsubscribe(a)
    assert sampler.running
    sampler.unsubscribe(b)
    assert not sampler.running and not thread.is_alive()
    sampler.subscribe(lambda s, h: None)  # a new panel starts a new thread
    assert sampler.running
    sampler.stop()


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), 1e308, 1e-9, 0.049,
                                 3600.5, "0.5", None])
def test_interval_outside_the_range_is_refused_in_one_line(bad: object) -> None:
    with pytest.raises(ValueError) as info:
        Sampler(FakeSources(), interval=bad)  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message and repr(bad) in message
    assert "must be between 0.05 and 3600 seconds" in message and "e.g. 0.5" in message
    sampler = Sampler(FakeSources(), interval=1.0)
    with pytest.raises(ValueError, match=r"between 0\.05 and 3600"):
        sampler.interval = bad  # type: ignore[assignment]
    assert sampler.interval == 1.0  # a refused value changes nothing


@pytest.mark.parametrize("good", [0.05, 0.5, 1, 3600])
def test_interval_bounds_are_accepted(good: float) -> None:
    assert Sampler(FakeSources(), interval=good).interval == float(good)


def test_a_refused_interval_leaves_the_shared_sampler_running_as_it_was() -> None:
    monitor.shutdown()
    sampler = monitor.get_sampler(0.5)
    with pytest.raises(ValueError, match="got 1e-09"):
        monitor.get_sampler(1e-9)
    assert monitor.get_sampler() is sampler and sampler.interval == 0.5
    lifecycle.forget(monitor.shutdown)
    monitor.shutdown()


def test_shared_sampler_stops_at_unload() -> None:
    monitor.shutdown()
    sampler = monitor.get_sampler(0.05)
    assert monitor.get_sampler() is sampler and sampler.interval == 0.05
    assert monitor.shutdown in lifecycle.registered()
    sampler.sources = FakeSources()
    sampler.subscribe(lambda s, h: None)
    assert sampler.running
    lifecycle.forget(monitor.shutdown)
    monitor.shutdown()
    assert not sampler.running and monitor.get_sampler() is not sampler
    lifecycle.forget(monitor.shutdown)
    monitor.shutdown()


class FakeArenaPool:
    """A pool with CuPy's debug arena index: {stream: [chunk sizes]}."""

    def __init__(self, arenas: dict[int, list[int]]) -> None:
        self.arenas = arenas

    def _debug_arena_get_index(self, ident: int) -> list[tuple[tuple[int, int], object]]:
        return [((size, 0x1000 + i), object()) for i, size in
                enumerate(sorted(self.arenas.get(ident, [])))]


def test_arena_figures_largest_block_and_fragmentation() -> None:
    pool = FakeArenaPool({0: [4 << 20, 1 << 20], 77: [8 << 20], 99: [1 << 30]})
    largest, free, arenas, note = monitor.arena_figures(pool, [0, 77, 0])
    assert (largest, free, arenas, note) == (8 << 20, 13 << 20, 2, "")
    figures = PoolFigures(largest_free=largest, arena_free=free, arenas=arenas)
    assert figures.fragmentation == pytest.approx(1 - 8 / 13)
    assert PoolFigures(largest_free=0, arena_free=0).fragmentation == 0.0


def test_arena_figures_of_a_pool_that_hides_arenas() -> None:
    largest, free, arenas, note = monitor.arena_figures(object(), [0])
    assert largest is NA and free is NA and arenas == 0 and "hides its arenas" in note
    assert PoolFigures(fragmentation_note=note).fragmentation is NA


def test_host_backend_pool_figures() -> None:
    from cupy_magic.backend import HostBackend

    figures = monitor.pool_figures(HostBackend("no GPU here"), 0)
    assert figures.device_total > 0 and figures.device_used > 0
    assert figures.fragmentation is NA and "host backend" in figures.fragmentation_note


# --- on a real GPU (the H200): figures move, release returns bytes, fragmentation -----------
@pytest.fixture
def cupy_backend():
    from cupy_magic import backend, session

    session.use_backend("cupy")
    be = backend.current()
    be.free_cached()
    yield be
    be.free_cached()
    session.use_backend(None)


@pytest.mark.gpu
def test_real_figures_move_when_a_cell_allocates_and_frees(cupy_backend) -> None:
    cp = cupy_backend.cp
    sampler = Sampler(interval=0.5)
    size = 1 << 30
    before = sampler.sample(0)
    block = cp.ones(size // 8, dtype=cp.float64)
    cp.cuda.Device().synchronize()
    during = sampler.sample(0)
    del block
    freed = sampler.sample(0)
    released, _, _ = monitor.release_cached(0)
    after = sampler.sample(0)
    assert during.errors == () and during.backend == "cupy"
    assert during.pool.used - before.pool.used >= size
    assert freed.pool.used <= before.pool.used and freed.pool.cached_free >= size
    assert released >= size and after.pool.held <= before.pool.held
    # NVML sees the device memory come and go (other processes may add noise: 90%).
    assert during.reading.used - before.reading.used >= 0.9 * size
    assert during.reading.used - after.reading.used >= 0.9 * size
    assert isinstance(during.reading.util_gpu, int) and during.reading.pcie_max is not NA
    assert during.reading.this_process is NA or during.reading.this_process >= size
    assert isinstance(during.pool.free_blocks, int)
    assert isinstance(during.pool.pinned_free_blocks, int)


@pytest.mark.gpu
def test_release_button_returns_bytes(cupy_backend) -> None:
    from cupy_magic.view import panel

    cp = cupy_backend.cp
    vp = panel.VramPanel(Sampler(interval=0.5), 0)
    try:
        block = cp.empty(256 << 20, dtype=cp.uint8)
        del block
        released = vp._on_release()
        assert released >= 256 << 20
        assert vp.released.value.startswith("released ") and " 0 B" not in vp.released.value
    finally:
        vp.close()


@pytest.mark.gpu
def test_fragmentation_follows_a_scripted_allocate_free_pattern(cupy_backend) -> None:
    cp = cupy_backend.cp
    mib = 1 << 20
    pool = cp.cuda.memory.SingleDeviceMemoryPool()
    cp.cuda.set_allocator(pool.malloc)
    try:
        # One 256 MiB cudaMalloc, freed: one free chunk in the default stream's arena.
        whole = cp.empty(256 * mib, dtype=cp.uint8)
        del whole
        assert monitor.arena_figures(pool, [0])[:3] == (256 * mib, 256 * mib, 1)
        # Four 64 MiB arrays are carved out of it; nothing is free.
        parts = [cp.empty(64 * mib, dtype=cp.uint8) for _ in range(4)]
        assert monitor.arena_figures(pool, [0])[:2] == (0, 0)
        # Free the 1st and 3rd: two separate 64 MiB holes, half of the free bytes unusable
        # for a 128 MiB request.
        parts[0] = parts[2] = None
        largest, free, arenas, _ = monitor.arena_figures(pool, [0])
        figures = PoolFigures(largest_free=largest, arena_free=free, arenas=arenas)
        assert (largest, free) == (64 * mib, 128 * mib) and pool.n_free_blocks() == 2
        assert figures.fragmentation == pytest.approx(0.5)
        # Free the 2nd: holes 1-3 merge into one 192 MiB block; fragmentation 0.
        parts[1] = None
        largest, free, _, _ = monitor.arena_figures(pool, [0])
        assert (largest, free) == (192 * mib, 192 * mib) and pool.n_free_blocks() == 1
        parts.clear()
        assert monitor.arena_figures(pool, [0])[:2] == (256 * mib, 256 * mib)
        pool.free_all_blocks()
    finally:
        cp.cuda.set_allocator(cp.get_default_memory_pool().malloc)
