"""The CPU fallback says what it has (issue 17, point 12): the panel's text summary names no
device pool, pinned pool or fragmentation (once, in plain words, no ``N/A``), and a budget
refusal speaks of the memory budget (host), as the report does. Through a real shell."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from conftest import loaded

from cupy_magic import backend
from cupy_magic.backend import BudgetExceeded


@pytest.fixture
def hip(shell, monkeypatch: pytest.MonkeyPatch) -> Iterator:
    """A shell with the extension loaded on the CPU fallback (on any machine)."""
    yield from loaded(shell, monkeypatch, "host")


def test_the_host_panel_summary_says_there_is_no_device_pool_once(hip, capsys):
    ip = hip
    ip.run_line_magic("vram_budget", "64MB")
    ip.run_cell_magic("gpu", "--quiet", "y = np.ones(10**6)\n")  # 7.63 MiB kept "on device"
    capsys.readouterr()
    ip.run_line_magic("vram_panel", "--text")
    text = capsys.readouterr().out
    rows = dict(line.strip().split(": ", 1) for line in text.strip().splitlines())
    # no fragmentation row; a GPU machine whose kernel chose the host backend still shows
    # what NVML says about its GPU
    gpu_seen = "activity" in rows
    assert list(rows) == ["device", *(["activity"] if gpu_seen else []), "pool", "budget"], text
    assert rows["pool"] == ("used 7.63 MiB (the cells' arrays, in host RAM), limit 61.04 MiB; "
                            "the CPU fallback has no device pool: no cached blocks, no pinned "
                            "pool and no fragmentation")
    assert rows["budget"] == "64MB = 61.04 MiB (12% used)"
    assert gpu_seen or "N/A" not in text
    assert text.count("pinned pool") == 1
    assert text.count("fragmentation") == 1


def _refusal(ip) -> str:
    ip.run_line_magic("vram_budget", "1MB")
    ip.user_ns["x"] = np.ones((1, 300_000))  # one row: nothing to batch, refused whole
    with pytest.raises(BudgetExceeded) as info:
        ip.run_cell_magic("gpu", "--quiet", "y = x * 2\n")
    assert "y" not in ip.user_ns
    return str(info.value)


def test_a_budget_refusal_names_the_budget_of_its_backend(ip):
    msg = _refusal(ip)
    assert msg.startswith("the cell's inputs x (2.29 MiB) need 2.29 MiB but the ")
    if backend.current().is_gpu:
        assert "but the VRAM budget 976.56 KiB leaves" in msg
        assert msg.endswith("a larger %vram_budget (cupy_magic.set_budget), or releasing "
                            "cached blocks (cupy_magic.free_cached())")
    else:
        assert msg.endswith("but the memory budget (host) 976.56 KiB leaves 976.56 KiB; try "
                            "batching the data, --dtype float32 (dtype='float32' from Python) "
                            "to halve float64 inputs or a larger %vram_budget "
                            "(cupy_magic.set_budget)")
        assert "VRAM" not in msg and "cached blocks" not in msg
