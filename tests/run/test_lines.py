"""``%%gpu --lines`` and ``--nvtx``: per-line rows through a real shell, on both backends."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import last_entry
from IPython.core.error import UsageError

import cupy_magic
from cupy_magic.run.lines import MANY_EVENTS, LineTracer, tracer_note


def _rows(report) -> dict[int, cupy_magic.run.lines.LineStat]:
    return {r.line: r for r in report.lines}


def test_loop_line_counts_its_runs_and_sums_them(ip) -> None:
    ip.user_ns["x"] = np.arange(1000.0)
    ip.run_cell_magic("gpu", "--lines --quiet",
                      "y = x * 2\nfor i in range(7):\n    y = y + 1\ntotal = y.sum()\n")
    rows = _rows(cupy_magic.last_report())
    assert rows[3].count == 7 and rows[2].count == 8 and rows[1].count == 1
    assert rows[3].code == "y = y + 1"
    assert rows[3].host_s > 0
    assert sum(r.share for r in rows.values()) == pytest.approx(1.0)
    assert float(ip.user_ns["total"]) == float((np.arange(1000.0) * 2 + 7).sum())


def test_sleeping_line_is_the_hottest_and_marked(ip) -> None:
    ip.user_ns["x"] = np.ones(100)
    ip.run_cell_magic("gpu", "--lines --quiet",
                      "import time\ny = x + 1\ntime.sleep(0.2)\nz = y * 3\n")
    report = cupy_magic.last_report()
    hot = max(report.lines, key=lambda r: r.seconds)
    assert hot.line == 3 and hot.share > 0.8
    assert hot.host_s >= 0.19
    text = str(report)
    assert "* hottest: line 3 `time.sleep(0.2)`" in text
    marked = [t for t in text.splitlines() if t.lstrip(" lines").startswith("*     3")]
    assert marked, text


def test_host_rows_say_there_is_no_gpu_time(shell, monkeypatch) -> None:
    from conftest import loaded

    for _ in loaded(shell, monkeypatch, "host"):
        shell.user_ns["x"] = np.ones(10)
        shell.run_cell_magic("gpu", "--lines --quiet", "y = x + 1\ns = float(y.sum())\n")
        report = cupy_magic.last_report()
        assert all(r.gpu_s is None and r.bytes_moved == 0 and r.syncs is None
                   for r in report.lines)
        assert "CPU fallback: no GPU time, no PCIe, no sync record" in str(report)
        assert "<pre" in report._repr_html_()


def test_function_lines_are_charged_to_the_function(ip) -> None:
    ip.run_cell_magic("gpu", "--lines --quiet",
                      "import time\ndef f():\n    time.sleep(0.1)\n    return 1\n"
                      "a = f()\nb = f()\n")
    rows = _rows(cupy_magic.last_report())
    assert rows[3].count == 2 and rows[3].host_s >= 0.19
    assert rows[5].host_s < 0.05 and rows[6].host_s < 0.05


def test_batched_cell_sums_lines_over_batches(ip) -> None:
    ip.user_ns["x"] = np.arange(4000.0)
    ip.run_cell_magic("gpu", "--lines --quiet --batch --batch-rows 1000", "y = x * 2 + 1\n")
    report = cupy_magic.last_report()
    assert report.batch is not None
    rows = _rows(report)
    assert rows[1].count == report.batch.batches
    np.testing.assert_array_equal(ip.user_ns["y"], np.arange(4000.0) * 2 + 1)


def test_nothing_changes_without_the_option(ip) -> None:
    import sys

    ip.user_ns["x"] = np.ones(10)
    before = sys.gettrace()
    ip.run_cell_magic("gpu", "--quiet", "y = x + 1\n")
    report = cupy_magic.last_report()
    assert report.lines == []
    assert "lines" not in str(report) and "NVTX" not in str(report)
    assert sys.gettrace() is before


def test_tracer_is_removed_after_a_failing_cell(ip) -> None:
    import sys

    ip.user_ns["x"] = np.ones(10)
    before = sys.gettrace()
    ip.user_ns.pop("y", None)
    with pytest.raises(ZeroDivisionError):
        ip.run_cell_magic("gpu", "--lines --quiet", "y = x + 1\n1 / 0\n")
    assert sys.gettrace() is before
    assert "y" not in ip.user_ns


def test_ctrl_c_in_a_lines_cell_ends_at_the_cells_line(ip) -> None:
    """Ctrl-C lands wherever the cell runs: with ``--lines`` mostly in the tracer, which runs
    at every line. The traceback ends at the cell's line, as a plain cell's, never in the
    tracer (IPython shows a traceback's last frame even when it is hidden). Three Ctrl-C,
    each sent by a timer to a loop that runs until it lands."""
    body = ("import os, signal, threading\n"
            "threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()\n"
            "for i in range(10**9):\n"
            "    a = i + 1\n"
            "    b = a * 2\n")
    for _ in range(3):
        result = ip.run_cell("%%gpu --lines --quiet\n" + body, store_history=True)
        assert isinstance(result.error_in_exec, KeyboardInterrupt)
        last = last_entry(result.error_in_exec.__traceback__)
        assert last.tb_frame.f_code.co_filename in ip.compile._filename_map, \
            f"ends in {last.tb_frame.f_code.co_filename}:{last.tb_lineno}"
        assert last.tb_lineno in (3, 4, 5)
        assert "a" not in ip.user_ns  # the cell committed nothing


@pytest.mark.parametrize("line, words", [
    ("--lines=yes", "--lines takes no value"),
    ("--lines all", "--lines takes no value, got --lines all"),
    ("--nvtx=1", "--nvtx takes no value"),
    ("--line", None),  # an unambiguous prefix is argparse's: it means --lines
])
def test_option_bad_values(ip, line: str, words: str | None) -> None:
    ip.user_ns["x"] = np.ones(3)
    if words is None:
        ip.run_cell_magic("gpu", f"{line} --quiet", "y = x + 1\n")
        assert cupy_magic.last_report().lines
        return
    with pytest.raises(UsageError, match=words):
        ip.run_cell_magic("gpu", line, "y = x + 1\n")


def test_run_cell_refuses_a_value_that_is_no_flag(ip) -> None:
    with pytest.raises(cupy_magic.run.errors.CellError, match=r"lines='yes' is not True or "
                       r"False; e\.g\. cupy_magic\.run_cell\(source, namespace, lines=True\)"):
        cupy_magic.run_cell("y = 1", {}, lines="yes")


def test_run_cell_from_python(ip) -> None:
    ns = {"x": np.arange(5.0)}
    report = cupy_magic.run_cell("y = x + 1\nz = y * 2", ns, lines=True)
    assert [r.line for r in report.lines] == [1, 2]
    assert report.lines[0].code == "y = x + 1"


def test_nvtx_on_the_host_says_so_once(shell, monkeypatch) -> None:
    from conftest import loaded

    from cupy_magic.run import lines

    monkeypatch.setattr(lines, "_SAID", set())
    for _ in loaded(shell, monkeypatch, "host"):
        shell.user_ns["x"] = np.ones(3)
        shell.run_cell_magic("gpu", "--nvtx --quiet", "y = x + 1\n")
        first = cupy_magic.last_report()
        shell.run_cell_magic("gpu", "--nvtx --quiet", "y = x + 1\n")
        second = cupy_magic.last_report()
    assert any("no NVTX ranges on the CPU fallback" in n for n in first.notes)
    assert not any("NVTX" in n for n in second.notes)
    assert first.lines == []  # --nvtx alone makes no table


def test_tracer_note_when_many_events() -> None:
    code = compile("for i in range(12000):\n    j = i\n", "<lines-note>", "exec")
    with LineTracer("<lines-note>", [code]) as tracer:
        exec(code, {})
    assert tracer.events > MANY_EVENTS
    note = tracer_note(tracer)
    assert f"{tracer.events:,} line events" in note and "us each" in note
    quiet = compile("a = 1\n", "<lines-quiet>", "exec")
    with LineTracer("<lines-quiet>", [quiet]) as few:
        exec(quiet, {})
    assert few.events == 2


# --- on the GPU -----------------------------------------------------------------------------
@pytest.mark.gpu
def test_transfer_line_bytes_on_the_gpu(shell, monkeypatch) -> None:
    from conftest import loaded

    for _ in loaded(shell, monkeypatch, "cupy"):
        shell.user_ns["h"] = np.ones(1 << 20, dtype=np.float32)
        shell.run_cell_magic("gpu", "--lines --quiet",
                             "import math\nd = cp.zeros(1 << 20, dtype=cp.float32)\n"
                             "back = d.get()\nup = cp.asarray(back[: 1 << 18])\n")
        rows = _rows(cupy_magic.last_report())
    assert rows[3].bytes_moved == 4 << 20 and rows[3].transfer_s > 0
    assert rows[4].bytes_moved == 4 << 18  # a host array made in the cell (line 3) moves
    assert rows[2].bytes_moved == 0
    assert rows[2].gpu_s is not None


@pytest.mark.gpu
def test_sync_line_wait_on_the_gpu(shell, monkeypatch) -> None:
    from conftest import loaded

    for _ in loaded(shell, monkeypatch, "cupy"):
        shell.run_cell_magic(
            "gpu", "--lines --quiet",
            "a = cp.random.rand(4096, 4096, dtype=cp.float32)\n"
            "for _ in range(20):\n    a = a @ a / 4096\n"
            "s = float(a.sum())\n")
        report = cupy_magic.last_report()
    rows = _rows(report)
    # lines count from the cell's first line: 1 a = ..., 2 for, 3 a = a @ a, 4 s = float(...)
    assert rows[4].syncs == 1 and rows[4].wait_s is not None and rows[4].wait_s > 0
    assert rows[3].count == 20 and rows[3].gpu_s > rows[4].gpu_s
    sync = next(s for s in report.syncs if s.line == 4)
    assert rows[4].wait_s == sync.wait_seconds  # the sync record's figure, not a new one


@pytest.mark.gpu
def test_nvtx_ranges_name_the_lines(shell, monkeypatch) -> None:
    from conftest import loaded
    from cupy.cuda import nvtx

    calls: list[tuple[str, ...]] = []
    push, pop = nvtx.RangePush, nvtx.RangePop
    monkeypatch.setattr(nvtx, "RangePush", lambda m, *a: (calls.append(("push", m)),
                                                          push(m, *a))[1])
    monkeypatch.setattr(nvtx, "RangePop", lambda: (calls.append(("pop",)), pop())[1])
    for _ in loaded(shell, monkeypatch, "cupy"):
        shell.run_cell_magic("gpu", "--nvtx --quiet",
                             "a = cp.ones(10)\nfor i in range(3):\n    a = a + 1\n")
        number = shell.execution_count
    pushes = [c[1] for c in calls if c[0] == "push"]
    assert pushes[0].startswith("In[") and pushes[0].endswith(":L1 a = cp.ones(10)")
    assert sum(p.endswith(":L3 a = a + 1") for p in pushes) == 3
    assert len(pushes) == sum(c[0] == "pop" for c in calls)
    assert pushes[0].startswith(f"In[{number}]:") or pushes[0].startswith(f"In[{number - 1}]:")


def test_host_budget_is_still_checked_at_every_line(shell, monkeypatch) -> None:
    from conftest import loaded

    for _ in loaded(shell, monkeypatch, "host"):
        shell.run_line_magic("vram_budget", "1MB")
        shell.user_ns.pop("big", None)
        with pytest.raises(MemoryError, match=r"line 2 `big = np.ones\(1_000_000\)`"):
            shell.run_cell_magic("gpu", "--lines --quiet",
                                 "small = np.ones(10)\nbig = np.ones(1_000_000)\nz = 1\n")
        assert "big" not in shell.user_ns


def test_a_value_shown_mid_cell_is_not_its_lines_time(ip, monkeypatch) -> None:
    """Under ``ast_node_interactivity = "all"`` IPython formats the values a line shows for
    the user, as it does a plain cell's: that is no line's time, nor a run of the lines of
    a ``__repr__`` the cell defines."""
    monkeypatch.setattr(ip, "ast_node_interactivity", "all")
    ip.run_cell("import time\nclass Slow:\n    def __repr__(self):\n"
                "        time.sleep(0.3)\n        return 'slow'")
    result = ip.run_cell("%%gpu --lines --quiet\nimport time\nclass Own:\n"
                         "    def __repr__(self):\n        time.sleep(0.3)\n"
                         "        return 'own'\na = 1\nSlow()\nOwn()\nb = 2\n")
    assert result.success, result.error_in_exec
    rows = _rows(cupy_magic.last_report())
    assert rows[7].count == 1 and rows[8].count == 1 and rows[9].count == 1
    assert rows[7].host_s < 0.1 and rows[8].host_s < 0.1, (rows[7], rows[8])
    # on the GPU the device sits idle while the host formats: no line's device time either
    assert all(rows[n].gpu_s is None or rows[n].gpu_s < 0.1 for n in (7, 8)), rows
    assert 4 not in rows and 5 not in rows  # Own.__repr__ ran for the display only
