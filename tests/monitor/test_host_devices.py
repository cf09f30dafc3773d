"""The CPU fallback standing for several devices (``CUPY_MAGIC_HOST_DEVICES=2``, how
``%%gpu --devices 0,1`` is taught without a GPU): the panel and ``%vram_budget`` show each
device, as ``--devices`` and ``%vram_budget --device 1`` use them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import loaded

from cupy_magic.monitor import sampler as monitor


@pytest.fixture
def two(shell: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("CUPY_MAGIC_HOST_DEVICES", "2")
    monitor.shutdown()  # the shared sampler reads the devices of the backend it was made on
    yield from loaded(shell, monkeypatch, "host")
    monitor.shutdown()


def test_the_panel_shows_each_device_the_host_backend_stands_for(
        two: Any, capsys: pytest.CaptureFixture[str]) -> None:
    two.run_line_magic("vram_budget", "1GB --device 1")
    capsys.readouterr()
    two.run_line_magic("vram_panel", "1 --text")  # was: "device 1 is not visible"
    lines = capsys.readouterr().out.splitlines()
    budget = next(line for line in lines if line.strip().startswith("budget:"))
    assert "1GB" in budget  # device 1's own budget, not the home device's (off)
    rows = [line.strip() for line in lines if line.strip().startswith("device ")]
    assert rows[0].startswith("device 0: 0: CPU (NumPy) standing for device 0;")
    assert rows[0].endswith("budget off")
    assert rows[1].startswith("device 1: 1: CPU (NumPy) standing for device 1;")
    assert rows[1].endswith("budget 1GB = 953.67 MiB")


def test_a_budget_set_on_one_device_says_which(two: Any) -> None:
    shown = str(two.run_line_magic("vram_budget", "1GB --device 1"))
    assert shown.startswith("device 1:\nbudget: 1GB = 953.67 MiB\n")
    home = str(two.run_line_magic("vram_budget", "--device 0"))
    assert home.startswith("device 0:\nbudget: off (no limit)\n")
