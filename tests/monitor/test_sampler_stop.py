"""Stopping the sampler thread: it ends, or stop() says which thread still runs and where.

``%unload_ext`` stops the shared sampler (``monitor.shutdown``); a thread that outlives the
join must never go unnoticed (a "cupy_magic-sampler" thread left behind by an unload).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from monitor.test_sampler import FakeSources

from cupy_magic.monitor.gather import ClusterRows
from cupy_magic.monitor.sampler import PoolFigures, Sampler, sampler_threads

LOGGER = "cupy_magic.monitor.sampler"


class StuckPool(FakeSources):
    """Sources whose pool figures wait until the test releases them (a source call that
    hangs, e.g. a driver call): ``entered`` is set once a tick is inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def pool(self, device: int) -> PoolFigures:
        self.entered.set()
        self.release.wait(60)  # bounded: a broken test must not hang the session
        return super().pool(device)


def test_a_thread_that_outlives_the_join_is_named_with_where_it_is(
        caplog: pytest.LogCaptureFixture) -> None:
    sources = StuckPool()
    sampler = Sampler(sources, interval=0.05)
    sampler.subscribe(lambda s, h: None)
    thread = sampler._thread
    assert thread is not None and sources.entered.wait(10), "no tick reached the source"
    try:
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            sampler.stop(timeout=0.1)  # the tick is held in the source: the join times out
        assert thread.is_alive() and not sampler.running
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warned) == 1, warned
        assert "thread cupy_magic-sampler still runs 0.1 s after it was asked to stop" \
            in warned[0]
        assert "pool (test_sampler_stop.py:" in warned[0]  # where it is held
    finally:
        sources.release.set()
    thread.join(10)
    assert not thread.is_alive()  # its event was set: it ended when the source returned


def test_a_stop_that_ends_the_thread_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    sampler = Sampler(FakeSources(), interval=0.05)
    sampler.subscribe(lambda s, h: None)
    thread = sampler._thread
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        sampler.stop()
    assert thread is not None and not thread.is_alive()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_start_on_another_thread_during_a_stop_leaves_no_thread_orphaned() -> None:
    """A start() between stop()'s signal and its taking of the thread: once the old thread
    had ended, it started a new one, which stop() then took and waited for, though nothing
    had asked it to stop; that thread went on sampling with no sampler holding it. Now
    start() waits for stop() and its thread is the sampler's own."""
    sampler = Sampler(FakeSources(), interval=0.05)
    sampler.start()
    old = sampler._thread
    assert old is not None
    real_set = sampler._stop.set
    starter = threading.Thread(target=sampler.start)

    def set_then_start() -> None:
        real_set()
        old.join(5)  # the old thread has ended: the sampler is not running
        starter.start()
        starter.join(1)  # (with the fix it waits for stop(): the join times out)

    sampler._stop.set = set_then_start  # type: ignore[method-assign]
    sampler.stop(timeout=0.5)
    starter.join(5)
    try:
        alive = sampler_threads()
        assert alive == ([sampler._thread] if sampler._thread is not None else []), alive
        assert sampler.running
    finally:
        sampler.stop()
    assert not sampler_threads()


def test_a_subscribe_between_the_last_unsubscribe_and_its_stop_keeps_the_thread() -> None:
    """The last panel closes while another subscribes: the stop that follows the
    unsubscribe sees the new subscriber and leaves the thread running for it (it stopped
    the thread, and the new panel froze). The other thread's subscribe is made here at the
    moment the unsubscribe's stop begins, the order in which it froze."""
    sampler = Sampler(FakeSources(), interval=0.05)
    first = sampler.subscribe(lambda s, h: None)
    got = threading.Event()
    real_stop = sampler.stop

    def stop_after_a_subscribe(*args: Any, **kwargs: Any) -> None:
        sampler.stop = real_stop  # type: ignore[method-assign]
        sampler.subscribe(lambda s, h: got.set())
        real_stop(*args, **kwargs)

    sampler.stop = stop_after_a_subscribe  # type: ignore[method-assign]
    try:
        sampler.unsubscribe(first)
        assert sampler.running and len(sampler.subscriptions) == 1
        assert got.wait(5), "the new subscriber got no sample"
    finally:
        sampler.stop()


class SilentScheduler:
    """A client whose scheduler never answers until released (as a stopped one)."""

    address = ""  # its scheduler is itself: client.scheduler.address, .identity()

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.release = threading.Event()
        self.scheduler = self

    def sync(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    def identity(self, n_workers: int = -1) -> dict[str, Any]:
        self.asked.set()
        self.release.wait(60)
        return {"workers": {}}


@pytest.fixture
def silent() -> Iterator[SilentScheduler]:
    client = SilentScheduler()
    yield client
    client.release.set()  # let the asking thread go


def test_the_wait_for_the_workers_ends_when_the_sampler_stops(silent: SilentScheduler) -> None:
    """A tick's one wait (the workers' answers) watches the thread's stop event: a stopping
    sampler does not sit out a wait for a cluster that does not answer."""
    rows = ClusterRows(client_of=lambda: silent, every=0.0)
    stop = threading.Event()
    got: list[Any] = []
    reader = threading.Thread(target=lambda: got.append(rows.read(60.0, stop=stop)))
    reader.start()
    assert silent.asked.wait(10)
    stop.set()
    reader.join(30)  # without the stop event it would wait out its 60 s
    assert not reader.is_alive() and got == [()]  # no worker heard from: no rows yet
