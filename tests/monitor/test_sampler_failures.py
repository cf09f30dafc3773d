"""The sampler with sources that fail: N/A (not zeros), recovery, logging once, a live thread.

Issue 17, point 9: one bad sample must not freeze the panel, nor reach the user's cell.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from cupy_magic.monitor.nvml import NA, DeviceReading
from cupy_magic.monitor.sampler import PoolFigures, Sample, Sampler
from cupy_magic.monitor.sources import POOL_UNAVAILABLE
from cupy_magic.run.progress import CellProgress

LOGGER = "cupy_magic.monitor.sampler"


class ScriptedSources:
    """Good figures, except where ``script[source]`` says what call ``n`` gives instead:
    a value (``None`` included) or an exception to raise."""

    def __init__(self, **script: dict[int, Any]) -> None:
        self.script = script
        self.calls: dict[str, int] = {}

    def _give(self, source: str, good: Callable[[], Any]) -> Any:
        n = self.calls.get(source, 0)
        self.calls[source] = n + 1
        plan = self.script.get(source, {})
        if n not in plan:
            return good()
        if isinstance(plan[n], BaseException):
            raise plan[n]
        return plan[n]

    def devices(self) -> list[str]:
        return ["0: Fake GPU"]

    def reading(self, device: int) -> DeviceReading:
        return self._give("reading", lambda: DeviceReading(name="Fake GPU", total=80 << 30))

    def pool(self, device: int) -> PoolFigures:
        return self._give("pool", lambda: PoolFigures(used=1 << 30, held=2 << 30,
                                                      limit=8 << 30))

    def host(self) -> tuple[int, int]:
        return self._give("host", lambda: (1 << 30, 16 << 30))

    def budget(self) -> str:
        return self._give("budget", lambda: "8.00 GiB")

    def cell(self) -> CellProgress | None:
        return self._give("cell", lambda: None)

    def status(self) -> tuple[str, str, str]:
        return self._give("status", lambda: ("cupy", "", ""))


def test_a_none_from_every_source_gives_na_figures_and_error_lines() -> None:
    sources = ScriptedSources(**{name: {0: None} for name in
                                 ("reading", "pool", "host", "budget", "status")},
                              cell={0: "In [3]"})
    s = Sampler(sources, interval=0.5).sample(0)
    assert s.pool is POOL_UNAVAILABLE and s.pool.used is NA and s.pool.held is NA
    assert s.pool.device_total is NA and s.pool.cached_free is NA
    assert s.host_used is NA and s.host_total is NA  # not "0 B used of 0 B"
    assert s.reading == DeviceReading() and s.budget is NA and s.backend is NA
    assert s.cell is None
    assert s.errors == ("status: the source returned None", "nvml: the source returned None",
                        "pool: the source returned None", "host memory: the source returned None",
                        "budget: the source returned None",
                        "cell: the source returned 'In [3]'")


def test_a_raising_source_gives_na_and_the_others_their_figures() -> None:
    s = Sampler(ScriptedSources(host={0: OSError("no /proc/meminfo\nsecond line")}),
                interval=0.5).sample(0)
    assert s.host_used is NA and s.host_total is NA
    assert s.errors == ("host memory: OSError: no /proc/meminfo",)
    assert s.pool.used == 1 << 30 and s.reading.name == "Fake GPU" and s.budget == "8.00 GiB"


@pytest.mark.parametrize("bad", [(1, 2, 3), (-1, 5), ("1", "2"), 7])
def test_malformed_host_figures_are_refused(bad: object) -> None:
    s = Sampler(ScriptedSources(host={0: bad}), interval=0.5).sample(0)
    assert s.host_used is NA and s.errors[0].startswith("host memory: the source returned")


def test_the_next_good_sample_is_whole_again() -> None:
    sampler = Sampler(ScriptedSources(pool={1: None}, host={1: RuntimeError("gone")}),
                      interval=0.5)
    first, bad, good = (sampler.sample(0) for _ in range(3))
    assert first.errors == () and good.errors == ()
    assert bad.pool.used is NA and bad.host_total is NA and len(bad.errors) == 2
    assert good.pool == first.pool and good.host_total == 16 << 30


def test_each_failure_is_logged_once_in_one_line(caplog: pytest.LogCaptureFixture) -> None:
    boom = {n: RuntimeError(f"boom {n}") for n in range(0, 6, 2)}  # messages differ per call
    sampler = Sampler(ScriptedSources(pool=boom, budget={1: None, 3: None}), interval=0.5)
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        samples = [sampler.sample(0) for _ in range(6)]
    assert [len(s.errors) for s in samples] == [1, 1, 1, 1, 1, 0]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage().split(" (")[0] for r in warnings] == [
        "sampler pool: RuntimeError: boom 0", "sampler budget: the source returned None"]
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in warnings)
    # The traceback is there for whoever asks for DEBUG, once.
    assert len([r for r in caplog.records if r.exc_info]) == 1


def test_the_thread_outlives_an_unexpected_error_in_a_tick() -> None:
    sampler = Sampler(ScriptedSources(), interval=0.05)
    real = sampler.sample
    calls = [0]

    def sample_once_broken(device: int = 0, workers_wait: float | None = None,
                           stop: threading.Event | None = None) -> Sample:
        calls[0] += 1
        if calls[0] == 2:
            raise AttributeError("'NoneType' object has no attribute 'limit'")
        return real(device, workers_wait, stop)

    sampler.sample = sample_once_broken  # type: ignore[method-assign]
    got: list[Sample] = []
    done = threading.Event()

    def collect(sample: Sample, history: Sequence[Sample]) -> None:
        got.append(sample)
        if len(got) >= 3:
            done.set()

    hooked: list[threading.ExceptHookArgs] = []
    old_hook, threading.excepthook = threading.excepthook, hooked.append
    try:
        sampler.subscribe(collect)
        assert done.wait(10), "the sampler stopped delivering after the failed tick"
        assert sampler.running and hooked == []
    finally:
        threading.excepthook = old_hook
        sampler.stop()
    assert calls[0] >= 4


SCRIPT = """
import threading, time
from cupy_magic.monitor.sampler import Sampler
from cupy_magic.monitor.nvml import DeviceReading

class Broken:
    def devices(self): return ["0: Fake"]
    def reading(self, device): raise RuntimeError("NVML went away")
    def pool(self, device): return None
    def host(self): raise OSError("no meminfo")
    def budget(self): return "off"
    def cell(self): return None
    def status(self): return ("cupy", "", "")

def broken_panel(sample, history):
    raise AttributeError("a panel bug")

sampler = Sampler(Broken(), interval=0.05)
sampler.subscribe(broken_panel)
time.sleep(0.5)
assert sampler.running and sampler.ticks >= 3, sampler.ticks
sampler.stop()
print("ok")
"""


def test_nothing_is_printed_to_stderr_of_a_plain_interpreter() -> None:
    # No logging configured, as in a fresh kernel: Python's last-resort handler would print
    # warnings (and a dying thread its traceback) to stderr, i.e. into the running cell.
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.stdout.strip() == "ok", done.stderr
    assert done.stderr == ""


def test_na_pool_figures_compute_nothing_from_missing_values() -> None:
    assert POOL_UNAVAILABLE.cached_free is NA and POOL_UNAVAILABLE.fragmentation is NA
    assert PoolFigures(used=1, held=5).cached_free == 4
