"""panel.py: widget state from given samples, controls, text mode, and the %vram_panel magic."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from IPython.core.error import UsageError

from cupy_magic.monitor import sampler as monitor
from cupy_magic.monitor.nvml import NA, DeviceReading
from cupy_magic.monitor.rows import DeviceRow
from cupy_magic.monitor.sampler import PoolFigures, Sample, Sampler
from cupy_magic.run.progress import CellProgress
from cupy_magic.view import panel

GiB, MiB = 1 << 30, 1 << 20


class HeldClock(monitor.Clock):
    """The sampler thread never ticks on its own: tests draw samples by hand."""

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.wait()


class Sources:
    def __init__(self, devices: int = 1) -> None:
        self.n = devices

    def devices(self) -> list[str]:
        return [f"{i}: Fake H200" for i in range(self.n)]

    def row(self, device: int) -> DeviceRow:
        return DeviceRow(device, name="NVIDIA H200", used=10 * GiB, total=80 * GiB,
                         util_gpu=87, pool_note="not used by this kernel")

    def reading(self, device: int) -> DeviceReading:
        return gpu_reading()

    def pool(self, device: int) -> PoolFigures:
        return gpu_pool()

    def host(self) -> tuple[int, int]:
        return GiB, 16 * GiB

    def budget(self) -> str:
        return "8.00 GiB"

    def cell(self) -> CellProgress | None:
        return None

    def status(self) -> tuple[str, str, str]:
        return "cupy", "", ""


def gpu_reading(**kw: object) -> DeviceReading:
    base = dict(name="NVIDIA H200", total=80 * GiB, used=10 * GiB, free=70 * GiB,
                this_process=3 * GiB, other_processes=5 * GiB, util_gpu=87, util_memory=40,
                pcie_rx=21.5e9, pcie_tx=3.2e9, pcie_max=63.0e9, pcie_link="Gen5 x16",
                temperature=54, power=312.5, power_limit=700.0, clock_sm=1980,
                clock_memory=2619)
    base.update(kw)
    return DeviceReading(**base)  # type: ignore[arg-type]


def gpu_pool(**kw: object) -> PoolFigures:
    base = dict(used=GiB, held=3 * GiB // 2, limit=8 * GiB, device_used=10 * GiB,
                device_total=80 * GiB, free_blocks=3, largest_free=8 * MiB,
                arena_free=13 * MiB, arenas=2, pinned_free_blocks=4)
    base.update(kw)
    return PoolFigures(**base)  # type: ignore[arg-type]


def sample(t: float = 1.0, device: int = 0, **kw: object) -> Sample:
    base = dict(time=t, wall_time=1_700_000_000.0 + t, device=device, backend="cupy",
                reading=gpu_reading(), pool=gpu_pool(), budget="8.00 GiB", host_used=GiB,
                host_total=16 * GiB, cell=None)
    base.update(kw)
    return Sample(**base)  # type: ignore[arg-type]


@pytest.fixture
def sampler() -> Iterator[Sampler]:
    s = Sampler(Sources(), interval=0.5, clock=HeldClock())
    yield s
    s.stop()


@pytest.fixture
def vp(sampler: Sampler) -> Iterator[panel.VramPanel]:
    p = panel.VramPanel(sampler, 0)
    yield p
    p.close()


def test_gpu_figures(vp: panel.VramPanel) -> None:
    cell = CellProgress("In [7]", 3, 10, time.monotonic() - 2.0)
    vp.update(sample(cell=cell), [sample()])
    html = vp.figures.value
    for text in ("this kernel 3.00 GiB", "other processes 5.00 GiB", "free 70.00 GiB of 80.00 GiB",
                 "SM 87%", "memory 40%", "PCIe RX 21.5 GB/s / TX 3.2 GB/s of 63.0 GB/s (Gen5 x16)",
                 "54 °C", "312 W of 700 W", "SM 1980 MHz", "used 1.00 GiB, cached 512.00 MiB",
                 "limit 8.00 GiB", "pinned pool 4 cached blocks",
                 "38%: largest free block 8.00 MiB of 13.00 MiB free, 3 free blocks in 2 arena",
                 "8.00 GiB (12% used)", "In [7], batch 3/10, 2."):
        assert text in html, text
    assert "NVIDIA H200" in vp.title.value and "cupy backend" in vp.title.value
    assert "every 0.5 s" in vp.status.value and vp.updates == 1
    assert 'title="budget 8.00 GiB"' in html and "left:10.00%" in html  # budget tick on the bar


def test_missing_figures_read_na(vp: panel.VramPanel) -> None:
    vp.update(sample(reading=gpu_reading(pcie_rx=NA, pcie_tx=NA, this_process=NA, power=NA),
                     pool=gpu_pool(largest_free=NA, arena_free=NA, arenas=0,
                                   fragmentation_note="CuPy's default pool hides its arenas")),
              [])
    html = vp.figures.value
    assert "PCIe RX N/A / TX N/A" in html and "this kernel N/A" in html and "N/A of 700 W" in html
    assert "fragmentation</th><td" in html and "N/A (CuPy&#x27;s default pool hides" in html


def test_history_sparklines(vp: panel.VramPanel) -> None:
    history = [sample(t, reading=gpu_reading(util_gpu=NA if t == 3 else 10 * t))
               for t in range(1, 6)]
    vp.update(history[-1], history)
    svg = vp.history.value
    assert svg.count("<svg") == 3 and "<b>memory</b>" in svg and "top 63.0 GB/s (link max)" in svg
    assert 'stroke-dasharray="4 3"' in svg  # the budget line on the memory sparkline
    # Utilisation has a gap where NVML failed: two polylines for SM %, one for memory %.
    util = svg.split("<b>utilisation</b>")[1].split("</svg>")[0]
    assert util.count("<title>SM</title>") == 2 and util.count("<title>memory</title>") == 1
    # Memory is scaled to what was seen (10 GiB device used, plus 15%), not to 80 GiB.
    assert "top 11.50 GiB" in svg


def test_no_gpu_mode_says_why_and_shows_host_memory(vp: panel.VramPanel) -> None:
    why = "CUDARuntimeError: cudaErrorInsufficientDriver"
    s = sample(backend="host", reading=DeviceReading(), why_no_gpu=why,
               nvml_note="NVML unavailable: NVML Shared Library Not Found",
               pool=PoolFigures(used=MiB, held=MiB, device_used=4 * GiB, device_total=16 * GiB,
                                fragmentation_note="no device pool on the host backend"),
               host_used=4 * GiB)
    vp.update(s, [s])
    html = vp.figures.value
    assert f"<b>no GPU</b>: {why}" in html and "Host memory 4.00 GiB used of 16.00 GiB" in html
    assert "NVML Shared Library Not Found" in html and "SM " not in html
    assert "CPU (NumPy, no GPU)" in vp.title.value
    assert vp.history.value.count("<svg") == 1  # memory only: no utilisation or PCIe


def test_sampler_errors_show_in_the_panel(vp: panel.VramPanel) -> None:
    vp.update(sample(errors=("pool: RuntimeError: boom",)), [])
    assert "errors</th>" in vp.figures.value and "pool: RuntimeError: boom" in vp.figures.value


def test_device_selector(sampler: Sampler) -> None:
    one = panel.VramPanel(sampler, 0)
    assert one.selector.layout.display == "none"
    one.close()
    sampler.sources = Sources(devices=2)
    two = panel.VramPanel(sampler, 0)
    assert two.selector.layout.display != "none"
    assert two.selector.options == (("0: Fake H200", 0), ("1: Fake H200", 1))
    two.selector.value = 1
    assert sampler.subscriptions[-1].device == 1 and two.device == 1
    assert "(device 1)" in two.figures.value
    two.close()


def test_pause_button_pauses_the_shared_sampler(monkeypatch: pytest.MonkeyPatch,
                                                sampler: Sampler) -> None:
    monkeypatch.setattr(monitor, "get_sampler", lambda interval=None: sampler)
    vp = panel.VramPanel(sampler, 0)
    monkeypatch.setattr(panel, "_live", [vp])
    vp.pause_button.value = True
    assert sampler.paused and vp.pause_button.description == "Resume"
    assert "paused" in vp.status.value
    panel.resume()
    assert not sampler.paused and not vp.pause_button.value
    assert vp.pause_button.description == "Pause" and "every 0.5 s" in vp.status.value
    vp.close()


def test_release_button_shows_what_it_released(monkeypatch: pytest.MonkeyPatch,
                                               vp: panel.VramPanel) -> None:
    calls: list[int] = []

    def release(device: int) -> tuple[int, int, int]:
        calls.append(device)
        return 2 * GiB, 3, 0

    monkeypatch.setattr(monitor, "release_cached", release)
    vp.release_button.click()
    assert calls == [0]
    assert vp.released.value == "released 2.00 GiB of cached device memory, 3 pinned block(s)"
    assert vp.updates == 1  # redrawn right away


def test_the_thread_only_sends_whole_widget_states(sampler: Sampler,
                                                   vp: panel.VramPanel) -> None:
    sent: list[tuple[str, object]] = []
    for name in ("figures", "history", "title", "status"):
        widget = getattr(vp, name)
        original = widget.send_state

        def spy(key: object = None, _name: str = name, _orig: object = original) -> None:
            sent.append((_name, key))
            _orig(key)  # type: ignore[operator]

        widget.send_state = spy
    thread = threading.Thread(target=vp.update, args=(sample(), [sample()]))
    thread.start()
    thread.join()
    # One message per widget (hold_sync batches each widget's changes into one).
    assert sorted(n for n, _ in sent) == ["figures", "history", "status", "title"]


def test_live_thread_updates_the_panel() -> None:
    counter = iter(range(10_000))

    class Moving(Sources):
        def pool(self, device: int) -> PoolFigures:
            return gpu_pool(used=next(counter) * MiB)

    sampler = Sampler(Moving(), interval=0.05)
    vp = panel.VramPanel(sampler, 0)
    deadline = time.monotonic() + 5
    first = vp.figures.value
    while vp.updates < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert vp.updates >= 3 and vp.figures.value != first
    vp.close()
    assert not sampler.running and vp.widget.comm is None


def test_close_all_stops_the_shared_sampler(monkeypatch: pytest.MonkeyPatch) -> None:
    monitor.shutdown()
    sampler = monitor.get_sampler(0.05)
    sampler.sources = Sources()
    monkeypatch.setattr(panel, "_widget_frontend", lambda: True)
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: None)
    a, b = panel.show_panel(0.05), panel.show_panel(0.05)
    assert panel.panels() == [a, b] and sampler.running
    panel.close_all()
    assert panel.panels() == [] and not sampler.running
    monitor.shutdown()


def test_cell_panel_freezes_after_the_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    monitor.shutdown()
    monitor.get_sampler(0.05).sources = Sources()
    monkeypatch.setattr(panel, "_widget_frontend", lambda: True)
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: None)
    with panel.cell_panel(0.05) as vp:
        assert vp is not None and vp in panel.panels()
    assert vp not in panel.panels() and "final figures" in vp.status.value
    assert not monitor.get_sampler().running
    monitor.shutdown()


def test_terminal_prints_a_summary(capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monitor.shutdown()
    monitor.get_sampler().sources = Sources()
    assert panel.show_panel() is None  # no kernel here: text, not widgets
    out = capsys.readouterr().out
    assert "device: NVIDIA H200 (device 0): this kernel 3.00 GiB" in out
    assert "fragmentation: 38%" in out and "budget: 8.00 GiB (12% used)" in out
    with pytest.raises(ValueError, match="device 4 is not visible; choose one of: 0: Fake"):
        panel.show_panel(device=4)
    monitor.shutdown()


def test_real_summary_without_a_gpu() -> None:
    from cupy_magic import backend

    if backend.current().is_gpu:
        pytest.skip("this machine has a GPU; the GPU summary is covered by the gpu tests")
    text = panel.panel_summary()
    assert "no GPU:" in text and "Host memory" in text and "budget: off" in text



def test_the_first_panel_asks_the_live_devices_once(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The first panel checks its device and samples with one LiveSources: the devices are
    probed once (the check made a LiveSources of its own before, and the new shared sampler
    another, each probing them)."""
    from cupy_magic.monitor.sources import LiveSources

    asked: list[LiveSources] = []  # kept alive: two objects never share an id here
    devices = LiveSources.devices

    def counted(self: LiveSources) -> list[str]:
        asked.append(self)
        return devices(self)

    monkeypatch.setattr(LiveSources, "devices", counted)
    monitor.shutdown()
    try:
        assert panel.show_panel(text=True) is None  # the live sources: this machine's
        assert "device:" in capsys.readouterr().out
        assert asked and len({id(s) for s in asked}) == 1
        assert monitor.shared_sampler().sources.devices() == devices(LiveSources())
    finally:
        monitor.shutdown()

@pytest.fixture
def magic_shell(shell: object, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """The real extension's %vram_panel, with the shared sampler fed by fake sources."""
    monkeypatch.setenv("CUPY_MAGIC_BACKEND", "host")
    shell.run_line_magic("load_ext", "cupy_magic")  # type: ignore[attr-defined]
    monitor.shutdown()
    monitor.get_sampler().sources = Sources()
    yield shell
    monitor.shutdown()
    shell.run_line_magic("unload_ext", "cupy_magic")  # type: ignore[attr-defined]


def test_magic_text_and_usage_errors(magic_shell: object,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    run = magic_shell.run_line_magic  # type: ignore[attr-defined]
    run("vram_panel", "--text")
    assert "this kernel 3.00 GiB" in capsys.readouterr().out
    for line, message in (("--interval 0", r"--interval 0\b"),
                          ("--pause --stop", "give one of --pause, --resume, --stop"),
                          ("3", "device 3 is not visible")):
        with pytest.raises(UsageError, match=message):
            run("vram_panel", line)


def test_magic_pause_resume_interval(magic_shell: object) -> None:
    run = magic_shell.run_line_magic  # type: ignore[attr-defined]
    run("vram_panel", "--pause")
    assert monitor.get_sampler().paused
    run("vram_panel", "--resume")
    assert not monitor.get_sampler().paused
    run("vram_panel", "--interval 2 --text")
    assert monitor.get_sampler().interval == 2.0


def test_the_history_is_redrawn_at_most_once_a_second(vp: panel.VramPanel) -> None:
    history = [sample(float(t)) for t in range(10)]
    vp.update(history[-1], history)
    drawn = vp.history.value
    later = [*history[1:], sample(9.5, pool=gpu_pool(used=7 * GiB))]
    vp.update(later[-1], later)
    assert vp.history.value == drawn  # half a second later: the figures only
    assert "7.00 GiB" in vp.figures.value
    later = [*later[1:], sample(10.0, pool=gpu_pool(used=7 * GiB))]
    vp.update(later[-1], later)
    assert vp.history.value != drawn


def test_a_young_history_fills_the_sparkline_then_scrolls(vp: panel.VramPanel) -> None:
    young = [sample(float(t)) for t in range(4)]
    vp.update(young[-1], young)
    assert "last 10 s" in vp.history.value
    old = [sample(float(t)) for t in range(0, 300, 5)]
    vp.update(old[-1], old)
    assert f"last {vp.sampler.history_seconds:.0f} s" in vp.history.value


def test_a_cell_panel_keeps_the_interval_the_user_chose(magic_shell: object) -> None:
    run = magic_shell.run_line_magic  # type: ignore[attr-defined]
    run("vram_panel", "--interval 2 --text")
    with panel.cell_panel():
        pass
    assert monitor.get_sampler().interval == 2.0
    run("vram_panel", "--text")
    assert monitor.get_sampler().interval == 2.0
