"""The panel with failing sources: N/A, recovery, no exception at the user, pause/stop/show.

Issue 17, point 9: one bad sample froze the panel for the two minutes it stayed in the
history, and ``%vram_panel`` raised ``AttributeError``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from cupy_magic.monitor import sampler as monitor
from cupy_magic.monitor.nvml import DeviceReading
from cupy_magic.monitor.sampler import PoolFigures, Sampler
from cupy_magic.run.progress import CellProgress
from cupy_magic.view import figures, panel

GiB = 1 << 30


class HeldClock(monitor.Clock):
    """Time the test moves; the sampler thread never ticks on its own."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.wait()


class HostSources:
    """The CPU fallback's figures; ``bad`` makes the pool and host memory return ``None``
    (or raise, with ``raising``)."""

    def __init__(self) -> None:
        self.bad = False
        self.raising = False

    def _maybe(self, good: Any) -> Any:
        if self.raising:
            raise RuntimeError("source failed")
        return None if self.bad else good

    def devices(self) -> list[str]:
        return ["0: CPU (NumPy)"]

    def reading(self, device: int) -> DeviceReading:
        return DeviceReading()

    def pool(self, device: int) -> PoolFigures:
        return self._maybe(PoolFigures(used=3 << 20, held=3 << 20, limit=64 << 20,
                                       device_used=4 * GiB, device_total=16 * GiB,
                                       fragmentation_note="no device pool on the host backend"))

    def host(self) -> tuple[int, int]:
        return self._maybe((4 * GiB, 16 * GiB))

    def budget(self) -> str:
        return "64.00 MiB"

    def cell(self) -> CellProgress | None:
        return None

    def status(self) -> tuple[str, str, str]:
        return "host", "no GPU here", ""


@pytest.fixture
def rig() -> Iterator[tuple[Sampler, HostSources, HeldClock, panel.VramPanel]]:
    sources, clock = HostSources(), HeldClock()
    sampler = Sampler(sources, interval=0.5, clock=clock)
    vp = panel.VramPanel(sampler, 0)
    yield sampler, sources, clock, vp
    vp.close()


def _tick(sampler: Sampler, clock: HeldClock, seconds: float = 1.0) -> None:
    clock.t += seconds
    sampler.tick()


@pytest.mark.parametrize("raising", [False, True], ids=["None", "raises"])
def test_a_failed_source_shows_na_and_the_panel_recovers(rig: Any, raising: bool) -> None:
    sampler, sources, clock, vp = rig
    _tick(sampler, clock)
    assert "used 3.00 MiB" in vp.figures.value and "errors" not in vp.figures.value
    sources.bad, sources.raising = not raising, raising
    _tick(sampler, clock)
    html, status = vp.figures.value, vp.status.value
    assert vp.updates == 2, "the bad sample was not drawn"
    assert "used N/A, cached N/A, held N/A" in html and "Host memory N/A" in html
    assert " 0 B" not in html  # no invented zeros
    assert "errors</th>" in html and "pool: " in html and "host memory: " in html
    assert "updated " in status and "N/A where a source failed (2, see errors)" in status
    sources.bad = sources.raising = False
    _tick(sampler, clock)
    assert vp.updates == 3 and "used 3.00 MiB" in vp.figures.value
    assert "errors" not in vp.figures.value and "failed" not in vp.status.value
    # The bad sample is still in the history: the sparkline is drawn, with a gap.
    assert len(sampler.history(0)) == 3 and vp.history.value.count("<svg") == 1


def test_a_bad_sample_in_the_history_does_not_stop_redraws(rig: Any) -> None:
    sampler, sources, clock, vp = rig
    sources.bad = True
    _tick(sampler, clock)
    sources.bad = False
    drawn = []
    for _ in range(5):
        _tick(sampler, clock)
        drawn.append((vp.figures.value, vp.history.value, vp.status.value))
    assert vp.updates == 6 and len(set(drawn)) == 5  # every sample redrawn, status included


def test_figures_of_an_unreadable_status_do_not_guess_no_gpu() -> None:
    s = Sampler(HostSources(), interval=0.5).sample(0)
    unknown = monitor.Sample(**{**s.__dict__, "backend": monitor.NA})
    assert figures.summary_lines(unknown)["device"] == \
        "device: N/A (the backend could not be read)"


def test_a_drawing_error_shows_in_the_status_and_the_next_sample_draws(
        rig: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    sampler, _, clock, vp = rig
    real = panel.figures_html
    fail = [True]

    def flaky(sample: Any) -> str:
        if fail[0]:
            raise AttributeError("'NoneType' object has no attribute 'limit'")
        return real(sample)

    monkeypatch.setattr(panel, "figures_html", flaky)
    with caplog.at_level(logging.DEBUG, logger="cupy_magic.view.panel"):
        _tick(sampler, clock)
        vp.refresh()  # what %vram_panel calls on the main thread: must not raise either
    assert "could not draw the sample of" in vp.status.value and "retrying" in vp.status.value
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].exc_info is None
    fail[0] = False
    _tick(sampler, clock)
    assert "updated " in vp.status.value and "used 3.00 MiB" in vp.figures.value


# --- through a real shell's %vram_panel ------------------------------------------------------
@pytest.fixture
def live_shell(shell: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, HostSources]]:
    """The real extension's %vram_panel as in a notebook (widgets), on fake sources."""
    monkeypatch.setenv("CUPY_MAGIC_BACKEND", "host")
    shell.run_line_magic("load_ext", "cupy_magic")
    monitor.shutdown()
    sources = HostSources()
    monitor.get_sampler().sources = sources
    monkeypatch.setattr(panel, "_widget_frontend", lambda: True)
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: None)
    yield shell, sources
    panel.close_all()
    monitor.shutdown()
    shell.run_line_magic("unload_ext", "cupy_magic")


def _wait_updates(vp: panel.VramPanel, n: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while vp.updates < n and time.monotonic() < deadline:
        time.sleep(0.02)
    return vp.updates >= n


def test_magic_with_a_bad_sample_in_the_history_shows_a_panel(live_shell: Any) -> None:
    ip, sources = live_shell
    sampler = monitor.get_sampler()
    sampler.subscribe(lambda s, h: None)  # another panel's interest: the history fills
    sources.bad = True
    sampler.tick()
    sources.bad = False
    ip.run_line_magic("vram_panel", "--interval 0.05")  # raised AttributeError before
    (vp,) = panel.panels()
    assert _wait_updates(vp, 3) and "used 3.00 MiB" in vp.figures.value


def test_pause_stop_then_show_gives_a_live_panel(live_shell: Any) -> None:
    ip, _ = live_shell
    ip.run_line_magic("vram_panel", "--interval 0.05")
    (first,) = panel.panels()
    assert _wait_updates(first, 2)
    ip.run_line_magic("vram_panel", "--pause")
    sampler = monitor.get_sampler()
    assert sampler.paused and first.pause_button.value
    ip.run_line_magic("vram_panel", "--stop")
    assert panel.panels() == [] and not sampler.running and not sampler.paused
    ip.run_line_magic("vram_panel", "")
    (second,) = panel.panels()
    assert second is not first and sampler.running and not second.pause_button.value
    drawn = second.updates
    assert _wait_updates(second, drawn + 3), "the panel shown after --stop is not live"
    assert "paused" not in second.status.value and "every 0.05 s" in second.status.value
