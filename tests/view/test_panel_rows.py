"""The panel's rows: one per device when there are several (issue 16, point 2), one per cluster
worker (issue 15, point 4), drawn from given samples; and the text summary's lines."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from view.test_panel import GiB, Sources, sample

from cupy_magic.monitor import sampler as monitor
from cupy_magic.monitor.nvml import NA
from cupy_magic.monitor.rows import NOT_USED, DeviceRow, WorkerRow
from cupy_magic.monitor.sampler import Sampler
from cupy_magic.view import panel
from cupy_magic.view.rows import devices_html, rows_lines, workers_html


class HeldClock(monitor.Clock):
    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.wait()


class NoCluster:
    address = ""

    def last(self) -> None:
        return None

    def read(self, wait: float, stop: threading.Event | None = None) -> None:
        return None


def three_devices(shown: int) -> Iterator[panel.VramPanel]:
    """A panel over three fake devices showing device ``shown`` (closed afterwards)."""
    sampler = Sampler(Sources(devices=3), interval=0.5, clock=HeldClock(), workers=NoCluster())
    vp = panel.VramPanel(sampler, shown)
    yield vp
    vp.close()
    sampler.stop()


@pytest.fixture
def three() -> Iterator[panel.VramPanel]:
    yield from three_devices(0)


ROWS = (DeviceRow(0, "NVIDIA H200", 10 * GiB, 80 * GiB, 87, 21.5e9, 3.2e9, GiB, 2 * GiB,
                  "8.00 GiB"),
        DeviceRow(1, "NVIDIA H200", 1 * GiB, 80 * GiB, 0, 0.0, 0.0, budget="8.00 GiB",
                  pool_note=NOT_USED),
        DeviceRow(2))


def test_several_devices_show_a_row_each_and_mark_the_detailed_one() -> None:
    html = devices_html(sample(device=1, devices=ROWS))
    assert html.count("<tr") == 4 and "3 devices (details below: device 1)" in html
    for text in ("0: NVIDIA H200", "10.00 GiB / 80.00 GiB (12%)", "87%",
                 "21.5 GB/s / 3.2 GB/s", "1.00 GiB / 2.00 GiB", "8.00 GiB", NOT_USED,
                 "2: N/A", "N/A / N/A"):
        assert text in html, text
    marked = html.split("cm-selected")[1].split("</tr>")[0]
    assert "1: NVIDIA H200" in marked and html.count("cm-selected") == 1


def test_one_device_draws_no_rows() -> None:
    assert devices_html(sample(devices=())) == "" and devices_html(sample()) == ""


def test_the_panel_draws_the_rows_of_every_device(three: panel.VramPanel) -> None:
    three.refresh()
    html = three.device_rows.value
    assert html.count("<tr") == 4 and NOT_USED in html  # rows 1 and 2 from Sources.row
    assert "details below: device 0" in html and three.selector.layout.display != "none"
    three.selector.value = 2  # the selector picks the detailed device; the rows stay
    assert "details below: device 2" in three.device_rows.value
    assert three.device_rows.value.count("<tr") == 4
    assert three.worker_rows.value == ""  # no cluster


WORKERS = (WorkerRow("tcp://127.0.0.1:40001", "0", "host", "CPU (NumPy)", 300 << 20, 4 * GiB,
                     12.5, 64 << 20, "1.00 GiB", "host"),
           WorkerRow("tcp://127.0.0.1:40002", "1", "cupy", "GPU 1: NVIDIA H200", 9 * GiB,
                     80 * GiB, 93, 8 * GiB, "off", "VRAM"),
           WorkerRow("tcp://127.0.0.1:40003", "2", note="no answer for 2.5 s"))


def test_workers_show_their_own_figures_and_na_with_why() -> None:
    html = workers_html(sample(workers=WORKERS, cluster="tcp://127.0.0.1:8786"))
    assert "cluster at tcp://127.0.0.1:8786: 3 workers, figures read on each worker" in html
    for text in ("0 (tcp://127.0.0.1:40001)", "CPU (NumPy) [host]",
                 "300.00 MiB / 4.00 GiB (7%) host", "12% CPU", "64.00 MiB", "1.00 GiB",
                 "GPU 1: NVIDIA H200 [cupy]", "9.00 GiB / 80.00 GiB (11%)", "93% SM",
                 "N/A (no answer for 2.5 s)"):
        assert text in html, text
    assert html.count("<tr") == 4


def test_no_cluster_no_rows_and_an_empty_cluster_says_so() -> None:
    assert workers_html(sample()) == ""
    assert "0 workers" in workers_html(sample(workers=(), cluster="tcp://x:1"))


def test_a_worker_row_with_unread_figures_reads_na() -> None:
    html = workers_html(sample(workers=(WorkerRow("tcp://h:1", used=NA, total=4 * GiB),),
                               cluster="tcp://h:0"))
    assert "N/A / 4.00 GiB" in html and "N/A [N/A]" in html


def test_the_text_summary_lists_devices_and_workers() -> None:
    lines = rows_lines(sample(device=0, devices=ROWS, workers=WORKERS[:1],
                              cluster="tcp://127.0.0.1:8786"))
    assert lines["device 1"].startswith("1: NVIDIA H200; VRAM used / total 1.00 GiB")
    assert f"pool used / held {NOT_USED}" in lines["device 1"]
    assert lines["cluster"] == "tcp://127.0.0.1:8786, 1 worker(s)"
    assert "memory used / total 300.00 MiB / 4.00 GiB (7%) host" in lines["worker 0"]
    assert rows_lines(sample()) == {}


def test_panel_summary_has_the_rows() -> None:
    sampler = Sampler(Sources(devices=2), interval=0.5, clock=HeldClock(), workers=NoCluster())
    text = panel.panel_summary(1, sampler)
    assert "device 0: 0: NVIDIA H200; VRAM used / total 10.00 GiB" in text
    assert "device 1: 1: NVIDIA H200" in text and "cluster" not in text


def test_a_share_above_zero_never_reads_zero_percent() -> None:
    from cupy_magic.view.fmt import pct

    assert pct(0, 64 * 2**20) == "0%"
    assert pct(1, 64 * 2**20) == "<1%"  # memory is held: not "0%"
    assert pct(0.006, 1) == "1%"
    assert pct(32, 64) == "50%"
    assert pct(NA, 64) == "N/A" and pct(1, 0) == "N/A"
