"""lifecycle.py: the one teardown registry, alone and through a real shell's %unload_ext."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from cupy_magic import lifecycle
from cupy_magic.monitor import sampler as monitor


@pytest.fixture
def registry() -> Iterator[list[str]]:
    """An empty registry for the test (steps other tests left are put back after), and a
    log of the steps that ran."""
    before = lifecycle.registered()
    for step in before:
        lifecycle.forget(step)
    ran: list[str] = []
    yield ran
    lifecycle.teardown()
    for step in before:
        lifecycle.on_unload(step)


def _step(ran: list[str], name: str) -> Callable[[], None]:
    def step() -> None:
        ran.append(name)

    return step


def test_teardown_runs_newest_first_once_each(registry: list[str]) -> None:
    a, b, c = (_step(registry, n) for n in "abc")
    for step in (a, b, c, a, b):  # registering again does not add a second run
        lifecycle.on_unload(step)
    assert lifecycle.registered() == (a, b, c)
    lifecycle.teardown()
    assert registry == ["c", "b", "a"]
    assert lifecycle.registered() == ()


def test_teardown_twice_is_safe(registry: list[str]) -> None:
    lifecycle.on_unload(_step(registry, "a"))
    lifecycle.teardown()
    lifecycle.teardown()
    assert registry == ["a"]


def test_a_failing_step_is_logged_and_the_others_still_run(
        registry: list[str], caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> None:
        registry.append("broken")
        raise RuntimeError("stuck hook")

    lifecycle.on_unload(_step(registry, "first"))
    lifecycle.on_unload(broken)
    lifecycle.on_unload(_step(registry, "last"))
    with caplog.at_level(logging.ERROR, logger="cupy_magic.lifecycle"):
        lifecycle.teardown()
    assert registry == ["last", "broken", "first"]
    failed = [r for r in caplog.records if "unload step failed" in r.getMessage()]
    assert len(failed) == 1 and "stuck hook" in str(failed[0].exc_info[1])
    assert lifecycle.registered() == ()


def test_forget_drops_a_step_without_running_it(registry: list[str]) -> None:
    a, b = _step(registry, "a"), _step(registry, "b")
    lifecycle.on_unload(a)
    lifecycle.on_unload(b)
    lifecycle.forget(a)
    lifecycle.forget(a)  # forgetting twice (or a step never registered) is a no-op
    assert lifecycle.registered() == (b,)
    lifecycle.teardown()
    assert registry == ["b"]


def test_a_step_registered_during_teardown_runs_too(registry: list[str]) -> None:
    late = _step(registry, "late")

    def registers() -> None:
        registry.append("registers")
        lifecycle.on_unload(late)

    lifecycle.on_unload(registers)
    lifecycle.teardown()
    assert registry == ["registers", "late"]
    assert lifecycle.registered() == ()


def _samplers() -> list[threading.Thread]:
    return monitor.sampler_threads()


@pytest.fixture
def fresh(shell: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The shared shell with nothing of cupy_magic loaded or registered before the test."""
    monkeypatch.setenv("CUPY_MAGIC_BACKEND", "host")
    assert "cupy_magic" not in shell.extension_manager.loaded
    lifecycle.teardown()  # what an earlier test left without loading the extension
    # a sampler thread an earlier test left is that test's failure, not this one's
    assert _samplers() == [], "a sampler thread of an earlier test still runs"
    keep = set(shell.user_ns)
    yield shell
    if "cupy_magic" in shell.extension_manager.loaded:
        shell.run_line_magic("unload_ext", "cupy_magic")
    for name in set(shell.user_ns) - keep:
        del shell.user_ns[name]


def test_unload_leaves_nothing_registered_and_no_sampler_thread(
        fresh: Any, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    ip = fresh
    ip.run_line_magic("load_ext", "cupy_magic")
    assert lifecycle.registered()  # the session's own undo step at least
    ip.run_line_magic("vram_panel", "--text")
    assert "memory" in capsys.readouterr().out
    sampler = monitor.shared_sampler()
    assert sampler is not None and monitor.shutdown in lifecycle.registered()
    ticked = threading.Event()
    # as a widget panel would (a terminal shows text only): the thread ticks on the live
    # sources while the cell runs, and may be in a tick at unload
    sampler.subscribe(lambda sample, history: ticked.set())
    assert _samplers()
    ip.user_ns.update(np=np, x=np.arange(8.0))
    ip.run_cell_magic("gpu", "--quiet --batch", "y = x * 2")
    assert ip.user_ns["y"][-1] == 14.0
    assert ticked.wait(10), "the sampler thread never ticked"

    with caplog.at_level(logging.WARNING, logger="cupy_magic.monitor.sampler"):
        ip.run_line_magic("unload_ext", "cupy_magic")
    assert lifecycle.registered() == ()
    assert _samplers() == []
    assert not [r for r in caplog.records if "still runs" in r.getMessage()]
    assert monitor.shared_sampler() is None
    assert "gpu" not in ip.magics_manager.magics["cell"]
    ip.run_line_magic("unload_ext", "cupy_magic")  # a second unload only says so
    assert lifecycle.registered() == ()
