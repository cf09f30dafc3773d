"""Runtime sync record: attribution, modes, restoration, threads; real syncs on a GPU."""

from __future__ import annotations

import sys
import textwrap
import threading
from typing import Any

import pytest

syncdetect = pytest.importorskip("cupy._core.syncdetect")

from cupy_magic.syncs.lint import lint_cell  # noqa: E402
from cupy_magic.syncs.record import (  # noqa: E402
    HostSyncError,
    MergedSync,
    SyncCount,
    SyncRecorder,
    merge,
)

CELL = "<cell-7>"


def run_cell(source: str, namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run source as the cell file, with `declare` bound to CuPy's sync declaration."""
    ns: dict[str, Any] = {"declare": lambda: syncdetect._declare_synchronize()}
    ns.update(namespace or {})
    exec(compile(source, CELL, "exec"), ns)
    return ns


def dedent(source: str) -> str:
    return textwrap.dedent(source).strip("\n") + "\n"


def test_counts_by_line_and_loops() -> None:
    src = dedent(
        """
        declare()
        for i in range(1000):
            declare()
        y = 1
        declare()
        """
    )
    with SyncRecorder(CELL, src) as rec:
        run_cell(src)
    assert rec.available and rec.reason == ""
    assert rec.counts == [
        SyncCount(1, "declare()", 1, None),
        SyncCount(3, "declare()", 1000, None),
        SyncCount(5, "declare()", 1, None),
    ]
    assert rec.outside_cell == 0


def test_sync_inside_a_cell_function_counts_on_its_body_line() -> None:
    src = dedent(
        """
        def helper():
            declare()
        for i in range(3):
            helper()
        """
    )
    with SyncRecorder(CELL, src) as rec:
        run_cell(src)
    assert [(c.line, c.count) for c in rec.counts] == [(2, 3)]


def test_syncs_outside_the_cell_are_not_charged_to_a_line() -> None:
    src = "y = 1\n"
    with SyncRecorder(CELL, src) as rec:
        run_cell(src)
        syncdetect._declare_synchronize()
    assert rec.counts == []
    assert rec.outside_cell == 1


def test_error_mode_raises_at_first_sync_naming_the_line() -> None:
    src = dedent(
        """
        y = 1
        if True:
            declare()
        declare()
        """
    )
    original = syncdetect._declare_synchronize
    with pytest.raises(HostSyncError) as info, SyncRecorder(CELL, src, mode="error") as rec:
        run_cell(src)
    assert info.value.line == 3
    assert info.value.code == "declare()"
    assert "line 3" in str(info.value) and "`declare()`" in str(info.value)
    assert rec.counts == [SyncCount(3, "declare()", 1, None)]
    assert syncdetect._declare_synchronize is original


def test_restored_after_exit_and_after_an_exception() -> None:
    original = syncdetect._declare_synchronize
    with SyncRecorder(CELL, "") as rec:
        assert syncdetect._declare_synchronize is not original
    assert syncdetect._declare_synchronize is original
    with pytest.raises(ZeroDivisionError), SyncRecorder(CELL, ""):
        run_cell("declare()\n1 / 0\n")
    assert syncdetect._declare_synchronize is original
    assert rec.available


def test_nested_recorders_exit_in_any_order() -> None:
    original = syncdetect._declare_synchronize
    src = "declare()\n"
    outer = SyncRecorder(CELL, src)
    inner = SyncRecorder(CELL, src)
    outer.__enter__()
    inner.__enter__()
    run_cell(src)
    outer.__exit__(None, None, None)
    run_cell(src)
    assert syncdetect._declare_synchronize is not original
    inner.__exit__(None, None, None)
    assert syncdetect._declare_synchronize is original
    assert [c.count for c in outer.counts] == [1]
    assert [c.count for c in inner.counts] == [2]


def test_a_recorder_cannot_be_entered_twice() -> None:
    rec = SyncRecorder(CELL, "")
    with rec, pytest.raises(RuntimeError, match="twice"):
        rec.__enter__()


def test_original_declaration_still_runs() -> None:
    """CuPy's own (deprecated) allow_synchronize(False) must keep raising under the hook."""
    src = "declare()\n"
    with (
        pytest.warns(UserWarning),
        syncdetect.allow_synchronize(False),
        SyncRecorder(CELL, src) as rec,
        pytest.raises(syncdetect.DeviceSynchronized),
    ):
        run_cell(src)
    assert [c.count for c in rec.counts] == [1]


def test_other_threads_are_not_counted() -> None:
    src = dedent(
        """
        for i in range(50):
            declare()
        """
    )
    code = compile(src, CELL, "exec")
    done = threading.Event()

    def other() -> None:
        exec(code, {"declare": lambda: syncdetect._declare_synchronize()})
        done.set()

    with SyncRecorder(CELL, src) as rec:
        worker = threading.Thread(target=other)
        worker.start()
        worker.join()
        run_cell("declare()\n")
    assert done.is_set()
    assert [(c.line, c.count) for c in rec.counts] == [(1, 1)]


def test_missing_hook_records_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(syncdetect, "_declare_synchronize")
    with SyncRecorder(CELL, "y = 1\n") as rec:
        run_cell("y = 1\n")
    assert rec.available is False
    assert "_declare_synchronize" in rec.reason
    assert rec.counts == []
    assert not hasattr(syncdetect, "_declare_synchronize")


def test_missing_cupy_records_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy._core.syncdetect", None)
    with SyncRecorder(CELL, "") as rec:
        pass
    assert rec.available is False
    assert "not importable" in rec.reason


def test_bad_mode() -> None:
    with pytest.raises(ValueError, match="'warn' or 'error', got 'loud'"):
        SyncRecorder(CELL, "", mode="loud")


def test_measure_wait_without_a_gpu_leaves_wait_unknown() -> None:
    import cupy

    if cupy.cuda.is_available():
        pytest.skip("this checks the no-GPU path")
    with SyncRecorder(CELL, "declare()\n", measure_wait=True) as rec:
        run_cell("declare()\n")
    assert rec.counts == [SyncCount(1, "declare()", 1, None)]


def test_merge_rows() -> None:
    src = dedent(
        """
        for i in range(3):
            if x.max() > 0:
                pass
        print(x)
        declare()
        """
    )
    findings = lint_cell(src, ["x"])
    counts = [SyncCount(2, "if x.max() > 0:", 1000, 0.25), SyncCount(5, "declare()", 1, None)]
    rows = merge(findings, counts)
    assert [(r.line, r.count, len(r.findings)) for r in rows] == [
        (2, 1000, 1),
        (4, 0, 1),
        (5, 1, 0),
    ]
    assert rows[0].describe() == (
        "line 2 `if x.max() > 0:`: 1,000 host syncs, 250.0 ms waiting (inside a loop);"
        f" instead: {findings[0].fix}"
    )
    assert rows[2].describe() == "line 5 `declare()`: 1 possible host sync"
    assert "not seen while it ran" in rows[1].describe()
    static_only = merge(findings, None)
    assert [r.count for r in static_only] == [None, None]
    assert isinstance(static_only[0], MergedSync) and static_only[0].in_loop


# -- real syncs on the GPU -------------------------------------------------------------------


def _gpu() -> bool:
    import cupy

    return bool(cupy.cuda.is_available())


def _record_real(src: str, **ns: Any) -> SyncRecorder:
    import cupy as cp

    with SyncRecorder(CELL, src) as rec:
        exec(compile(src, CELL, "exec"), {"cp": cp, "np": cp, **ns})
    return rec


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu(), reason="needs a CUDA GPU")
def test_real_syncs_are_attributed_to_their_lines(capsys: pytest.CaptureFixture[str]) -> None:
    import cupy as cp

    x = cp.arange(-50, 50, dtype=cp.float32)
    one_nonzero = _record_real("i = cp.nonzero(x)\n", x=x).counts[0].count
    src = dedent(
        """
        y = x * 2
        a = float(y.max())
        b = bool(y.any())
        h = y.get()
        print(y)
        z = y[y > 0]
        for i in range(5):
            idx = cp.nonzero(y)
        m = y.sum()
        """
    )
    rec = _record_real(src, x=x)
    capsys.readouterr()
    counts = {c.line: c.count for c in rec.counts}
    assert rec.available
    assert counts[2] == 1 and counts[3] == 1 and counts[4] == 1 and counts[6] == 1
    assert counts[5] >= 1
    assert counts[8] == 5 * one_nonzero
    assert set(counts) == {2, 3, 4, 5, 6, 8}
    static = {f.line for f in lint_cell(src, ["x"], ("np", "cp"))}
    assert set(counts) <= static


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu(), reason="needs a CUDA GPU")
def test_real_error_mode_stops_before_the_copy() -> None:
    import cupy as cp

    src = "y = x + 1\nv = float(y.sum())\nw = 2\n"
    ns = {"x": cp.ones(10), "cp": cp}
    with pytest.raises(HostSyncError) as info, SyncRecorder(CELL, src, mode="error"):
        exec(compile(src, CELL, "exec"), ns)
    assert info.value.line == 2
    assert "v" not in ns and "w" not in ns


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu(), reason="needs a CUDA GPU")
def test_real_wait_is_measured_when_asked() -> None:
    import cupy as cp

    a = cp.random.rand(4096, 4096, dtype=cp.float32)
    cp.cuda.Device().synchronize()
    src = "for i in range(20):\n    a = a @ a * 1e-3\nv = float(a[0, 0])\n"
    with SyncRecorder(CELL, src, measure_wait=True) as rec:
        exec(compile(src, CELL, "exec"), {"a": a})
    (count,) = rec.counts
    assert count.line == 3 and count.count == 1
    assert count.wait_seconds is not None and count.wait_seconds > 1e-4
