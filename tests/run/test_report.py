"""The report on the CPU fallback says what its figures are (issue 17, point 12): host copies
without GB/s or PCIe, CPU time, host memory against a "memory budget (host)", Python objects
on the host. Through a real shell with the extension loaded on the host backend."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import loaded

import cupy_magic

GPU_WORDS = ("GB/s", "PCIe)", "GPU time", "VRAM", "peak pool", "on python", "N/A", "pinned",
             "CUDA")


@pytest.fixture
def hip(shell, monkeypatch):
    yield from loaded(shell, monkeypatch, "host")


def _html_text(report) -> str:
    return re.sub(r"<[^>]+>", " ", report._repr_html_())


def _no_gpu_words(text: str) -> None:
    found = [w for w in GPU_WORDS if w in text]
    assert not found, f"GPU words on the CPU fallback: {found}\n{text}"


def test_a_whole_cell_speaks_of_host_copies_cpu_time_and_host_memory(hip):
    hip.user_ns["x"] = np.arange(100_000.0)
    hip.run_cell_magic("gpu", "--quiet --warmup", "y = np.sqrt(x)\ns = y.sum()\nn = 3\n")
    report = cupy_magic.last_report()
    text = str(report)
    assert "  in   x: 781.25 KiB copied in host RAM in " in text
    assert "(stands in for the upload; no PCIe on the CPU fallback)" in text
    assert "  warm-up run on the first 4,096 rows: " in text
    assert "  run  CPU time (NumPy on the CPU fallback): " in text
    assert re.search(r"  mem  peak memory \(host\) [\d.]+ [KM]iB \(no memory budget set\)", text)
    # NumPy's reduction gives a NumPy scalar here, CuPy's a 0-d device array: the line says so
    assert "  out  s: numpy.float64 on the host (a NumPy scalar, where CuPy gives a 0-d device " \
           "array)" in text
    assert "  out  n: int on the host (a Python object, not an array)" in text
    assert "compile" not in text  # NumPy compiles nothing
    _no_gpu_words(text)
    _no_gpu_words(_html_text(report))
    assert "CPU time (NumPy on the CPU fallback)" in _html_text(report)


def test_a_budget_on_the_host_is_a_memory_budget(hip):
    hip.run_line_magic("vram_budget", "64MB")
    hip.user_ns["x"] = np.ones(1000)
    hip.run_cell_magic("gpu", "--quiet", "y = x * 2\n")
    report = cupy_magic.last_report()
    assert re.search(r"peak memory \(host\) [\d.]+ KiB of memory budget \(host\) 61\.04 MiB "
                     r"\(\d+%\)", str(report))
    assert "memory budget (host) 61.04 MiB" in _html_text(report)
    _no_gpu_words(str(report))
    _no_gpu_words(_html_text(report))


def test_a_batched_cell_runs_its_batches_in_order_on_the_host(hip):
    hip.run_line_magic("vram_budget", "1MB")
    hip.user_ns["x"] = np.ones((20_000, 8))
    hip.run_cell_magic("gpu", "--quiet --reduce t=sum", "y = x * 2\nt = y.sum()\n")
    report = cupy_magic.last_report()
    text = str(report)
    assert report.batch is not None
    assert "the memory budget (host; the VRAM budget on a GPU) of 976.56 KiB leaves" in text
    assert "in batches, " in text and "copies in host RAM and NumPy on the CPU; no PCIe" in text
    assert "batches one after another (no CUDA streams on the CPU; sized as if 3 were in " \
           "flight" in text
    assert "/row peak in memory" in text and "in the pool" not in text
    assert "GB/s" not in text and "GPU time" not in text and "N/A" not in text
    assert "float64 on python" not in text and "t: numpy.float64 on the host" in text


def test_the_gpu_report_keeps_its_words():
    """The same fields on the GPU backend: transfers in GB/s, GPU time, the VRAM budget."""
    from cupy_magic.run.report import InputMove, OutputInfo, RunReport

    report = RunReport(backend="cupy", device="NVIDIA H200", gpu_seconds=0.002,
                       peak_pool_bytes=2**20, budget_bytes=2**30,
                       inputs=[InputMove("x", 4 * 10**9, 0.1, True, "float32")],
                       outputs=[OutputInfo("m", "float", "python")])
    text = str(report)
    assert "  in   x: 3.73 GiB in 100.0 ms (40.0 GB/s, pinned)" in text
    assert "  run  GPU time (CUDA events): 2.00 ms" in text
    assert "  mem  peak pool 1.00 MiB of VRAM budget 1.00 GiB (0%)" in text
    assert "  out  m: float on the host (a Python object, not an array)" in text


def test_the_html_report_says_what_the_text_says_of_the_warm_up(hip):
    """Jupyter shows the HTML form: its warm-up row says which times leave the warm-up out,
    as the text form does (UI review, helper-s16j: only the text said so)."""
    hip.user_ns["x"] = np.arange(100_000.0)
    hip.run_cell_magic("gpu", "--quiet --warmup", "y = np.sqrt(x)\n")
    report = cupy_magic.last_report()
    note = "(not in the CPU time below; the wall time includes it)"
    assert note in str(report)
    assert re.search(r"warm-up\s+[\d.]+ ms on the first 4,096 rows " + re.escape(note),
                     _html_text(report))


def test_the_html_line_table_scrolls_sideways_instead_of_wrapping(hip):
    """JupyterLab and Notebook 7 wrap an output's ``<pre>``: the ``--lines`` table keeps one
    row a line and scrolls in a box that takes no width of its own (the browser tests check
    the rendered page)."""
    hip.user_ns["x"] = np.arange(100_000.0)
    hip.run_cell_magic("gpu", "--quiet --lines", "y = np.sqrt(x)\nz = y * 2\n")
    page = cupy_magic.last_report()._repr_html_()
    box = re.search(r"<div style='([^']*)'><pre style='([^']*)'>", page)
    assert box, page
    assert "overflow-x:auto" in box[1] and "width:0" in box[1] and "min-width:100%" in box[1]
    assert "white-space:pre" in box[2] and "white-space:pre-wrap" not in box[2]
