"""%%gpu, %vram_budget and %gpu_backend through a real IPython shell, on each backend."""

from __future__ import annotations

import re
import sys
import threading
import warnings

import numpy as np
import pytest
from IPython.core.error import UsageError

import cupy_magic
from cupy_magic import backend
from cupy_magic.backend import BudgetExceeded


def gpu(ip, cell: str, line: str = "--quiet"):
    return ip.run_cell_magic("gpu", line, cell)


# --- load / unload -------------------------------------------------------------------------


def test_load_prints_one_line_about_the_device(shell, capsys, monkeypatch):
    from conftest import HAS_GPU

    monkeypatch.delenv("CUPY_MAGIC_BACKEND", raising=False)
    shell.run_line_magic("load_ext", "cupy_magic")
    try:
        out = capsys.readouterr().out.strip().splitlines()
        assert len(out) == 1
        if HAS_GPU:
            for word in ("VRAM", "driver", "CUDA runtime", "CuPy", "budget"):
                assert word in out[0]
        else:  # without a GPU, or without CuPy at all (the IPython 8 venv of CI)
            import importlib.util

            assert ("no NVIDIA GPU visible (" if importlib.util.find_spec("cupy")
                    else "CuPy is not installed") in out[0]
            assert "cells run on NumPy (CPU fallback)" in out[0]
    finally:
        shell.run_line_magic("unload_ext", "cupy_magic")


def test_load_unload_twenty_times_leaves_nothing(shell, monkeypatch):
    monkeypatch.setenv("CUPY_MAGIC_BACKEND", "host")
    magics = shell.magics_manager.magics
    before = (set(magics["line"]), set(magics["cell"]), set(shell.magics_manager.registry),
              threading.active_count(), {k: len(v) for k, v in shell.events.callbacks.items()})
    for _ in range(20):
        shell.run_line_magic("load_ext", "cupy_magic")
        assert "gpu" in magics["cell"] and "vram_budget" in magics["line"]
        shell.run_line_magic("vram_budget", "1GB")
        shell.run_line_magic("unload_ext", "cupy_magic")
        assert "gpu" not in magics["cell"]
    after = (set(magics["line"]), set(magics["cell"]), set(shell.magics_manager.registry),
             threading.active_count(), {k: len(v) for k, v in shell.events.callbacks.items()})
    assert after == before
    assert backend._live is None
    cupy_magic.unload_ipython_extension(shell)  # a second unload is harmless


def test_env_var_with_unknown_backend_is_named_and_left_out(shell, monkeypatch, capsys):
    monkeypatch.setenv("CUPY_MAGIC_BACKEND", "tpu")
    shell.run_line_magic("load_ext", "cupy_magic")
    try:
        problem = capsys.readouterr().out.splitlines()[0]
        assert "CUPY_MAGIC_BACKEND='tpu' is not a backend" in problem
        assert "gpu" in shell.magics_manager.magics["cell"]
    finally:
        shell.run_line_magic("unload_ext", "cupy_magic")


# --- the cell runs on the backend ---------------------------------------------------------


def test_numpy_names_mean_the_backend_module_inside_only(ip, xp):
    import numpy

    ip.user_ns["numpy"] = numpy
    gpu(ip, "same = np is numpy is cp\nname = np.__name__\nnd = np.ndarray\nmod_np = np\n")
    # inside: one module in front of the backend's (cupy_magic.compat): its names, checked calls
    assert ip.user_ns["same"] is True
    assert ip.user_ns["name"] == xp.__name__
    assert ip.user_ns["nd"] is xp.ndarray
    # outside: a module the cell leaves behind is NumPy's own again (compat.scope.host_value)
    assert ip.user_ns["mod_np"] is numpy
    assert ip.user_ns["np"] is numpy and ip.user_ns["numpy"] is numpy


def test_inputs_move_to_the_device_and_stay_numpy_outside(ip, xp):
    x = np.arange(12.0).reshape(3, 4)
    ip.user_ns["x"] = x
    gpu(ip, "kind = type(x)\ny = x * 2\nx[0, 0] = 99  # a device copy: the user's x is safe\n")
    assert ip.user_ns["kind"] is xp.ndarray
    assert isinstance(ip.user_ns["y"], xp.ndarray)
    # x was mutated in the cell, so the device copy is committed (and the original untouched)
    assert x[0, 0] == 0
    assert float(ip.user_ns["x"][0, 0]) == 99


def test_a_name_overwritten_before_it_is_read_is_not_moved(ip):
    ip.user_ns.update(x=np.arange(4.0), y=np.ones(10**6))
    gpu(ip, "y = x * 2\nz = y + 1\n")
    assert [m.name for m in cupy_magic.last_report().inputs] == ["x"]


def test_unmutated_input_stays_the_users_numpy_array(ip):
    x = np.ones(5)
    ip.user_ns["x"] = x
    gpu(ip, "s = x.sum()\n")
    assert ip.user_ns["x"] is x
    assert float(ip.user_ns["s"]) == 5.0


def test_results_stay_on_device_by_default_and_to_host_brings_them_back(ip, xp):
    ip.user_ns["x"] = np.arange(4.0)
    gpu(ip, "a = x + 1\nb = x * 2\n")
    assert isinstance(ip.user_ns["a"], xp.ndarray)
    gpu(ip, "a = x + 1\nb = x * 2\n", "--quiet --to-host")
    assert type(ip.user_ns["a"]) is np.ndarray and type(ip.user_ns["b"]) is np.ndarray
    gpu(ip, "a = x + 1\nb = x * 2\n", "--quiet --to-host b")
    assert isinstance(ip.user_ns["a"], xp.ndarray) and type(ip.user_ns["b"]) is np.ndarray
    np.testing.assert_array_equal(ip.user_ns["b"], [0, 2, 4, 6])
    report = cupy_magic.last_report()
    assert report.outputs_by_name["b"].where.startswith("host")


def test_failing_cell_changes_no_variable(ip):
    ip.user_ns["keep"] = 1
    ip.user_ns["x"] = np.arange(3.0)
    with pytest.raises(ZeroDivisionError):
        gpu(ip, "keep = 2\nnew = x * 3\ndel x\n1 / 0\n")
    assert ip.user_ns["keep"] == 1
    assert "new" not in ip.user_ns
    assert type(ip.user_ns["x"]) is np.ndarray


def test_keyboard_interrupt_is_transactional_too(ip):
    ip.user_ns["keep"] = "before"
    with pytest.raises(KeyboardInterrupt):
        gpu(ip, "keep = 'after'\nraise KeyboardInterrupt\n")
    assert ip.user_ns["keep"] == "before"


def test_traceback_shows_the_cells_own_line_numbers(ip):
    cell = "a = 1\nb = 2\nc = undefined_name\n"
    with pytest.raises(NameError) as info:
        gpu(ip, cell)
    frames = [(tb.tb_frame.f_code.co_filename, tb.tb_lineno) for tb in _walk(info.tb)]
    cell_frames = [f for f in frames if "ipython-input" in f[0] or f[0].startswith("<")]
    assert cell_frames and cell_frames[-1][1] == 3


def _walk(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def test_deleting_and_defining_names_is_committed(ip):
    ip.user_ns["gone"] = 1
    gpu(ip, "del gone\ndef twice(v):\n    return v * 2\nr = twice(np.arange(3))\n")
    assert "gone" not in ip.user_ns
    assert callable(ip.user_ns["twice"])
    assert [int(v) for v in ip.user_ns["r"]] == [0, 2, 4]
    assert cupy_magic.last_report().outputs_by_name["gone"].where == "deleted"


def test_dtype_float32_downcasts_and_reports_saved_bytes(ip, xp):
    ip.user_ns["x"] = np.ones(1000, dtype=np.float64)
    ip.user_ns["i"] = np.ones(10, dtype=np.int64)
    gpu(ip, "dt = x.dtype\nit = i.dtype\n", "--quiet --dtype float32")
    assert ip.user_ns["dt"] == np.float32
    assert ip.user_ns["it"] == np.int64
    report = cupy_magic.last_report()
    assert report.saved_bytes == 4000
    assert "saved 3.91 KiB" in str(report)


def test_warmup_runs_first_on_a_slice_and_times_the_real_run(ip):
    ip.user_ns["x"] = np.arange(10_000.0)
    ip.user_ns["calls"] = []
    gpu(ip, "calls.append(len(x))\ny = x * 2\n", "--quiet --warmup")
    # 4,096 elements: CuPy's reductions compile the same kernels as for the full length
    assert ip.user_ns["calls"] == [4096, 10_000]
    report = cupy_magic.last_report()
    assert report.warmup_seconds is not None and report.warmup_rows == 4096
    assert "warm-up run on the first 4,096 rows" in str(report)
    assert float(ip.user_ns["y"][-1]) == 19_998.0


def test_warmup_prints_nothing_of_its_own_and_its_help_says_what_happens_twice(ip, capsys):
    ip.user_ns.update(x=np.arange(10.0), log=[])
    cell = "import sys\nprint('hi')\nprint('err', file=sys.stderr)\nlog.append(len(x))\ny = x * 2"
    assert ip.run_cell(f"%%gpu --quiet --warmup\n{cell}").success
    out, err = capsys.readouterr()
    assert out == "hi\n" and err.count("err\n") == 1
    assert ip.user_ns["log"] == [10, 10]  # what it does outside the cell, it does twice
    assert not ip.run_cell("%%gpu --quiet --warmup\nprint('before')\nassert len(x) > 99").success
    assert capsys.readouterr().out == "before\n"  # a failed warm-up's print shows
    result = ip.run_cell("%%gpu --quiet --warmup\nprint('so far')\nraise KeyboardInterrupt")
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert capsys.readouterr().out.startswith("so far\n")  # and an interrupted one's
    doc = " ".join(ip.find_cell_magic("gpu").__doc__.split())
    assert "warm-up's prints are not shown" in doc and "appends to" in doc and "twice" in doc


def test_a_librarys_warning_the_warmup_meets_shows_once(ip, capsys, tmp_path, monkeypatch):
    """A library warns once per place (its module's registry): the warm-up met it first, so the
    real run did not show it, and the warm-up's was dropped with its prints; it showed nowhere.
    The cell's own warnings show once, from the real run."""
    (tmp_path / "warns_once_lib.py").write_text(
        "import warnings\ndef f(x):\n    warnings.warn('from the library')\n    return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ip.user_ns.update(x=np.arange(10.0), warns_once_lib=__import__("warns_once_lib"))
    cell = "import warnings\nwarnings.warn('from the cell')\ny = warns_once_lib.f(x) * 2"

    def to_stderr(message, category, filename, lineno, file=None, line=None):
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    with warnings.catch_warnings():  # as in a kernel: shown on stderr, once per place
        warnings.simplefilter("default")
        monkeypatch.setattr(warnings, "showwarning", to_stderr)  # not pytest's recorder
        assert ip.run_cell(f"%%gpu --quiet --warmup\n{cell}").success
    err = capsys.readouterr().err
    assert err.count("UserWarning: from the library") == 1, err
    assert err.count("UserWarning: from the cell") == 1, err


def test_warmup_slice_has_enough_elements_and_at_least_two_rows(ip):
    ip.user_ns["m"] = np.ones((1000, 1500))
    ip.user_ns["calls"] = []
    gpu(ip, "calls.append(m.shape)\ns = m.sum(axis=1)\n", "--quiet --warmup")
    assert ip.user_ns["calls"] == [(3, 1500), (1000, 1500)]  # 3 x 1,500 >= 4,096
    ip.user_ns["w"] = np.ones((10, 5000))
    ip.user_ns["calls"] = []
    gpu(ip, "calls.append(w.shape)\n", "--quiet --warmup")
    assert ip.user_ns["calls"] == [(2, 5000), (10, 5000)]
    ip.user_ns["small"] = np.arange(10.0)
    ip.user_ns["calls"] = []
    gpu(ip, "calls.append(len(small))\n", "--quiet --warmup")
    assert ip.user_ns["calls"] == [10, 10]  # shorter than the slice: the warm-up is whole


def test_warmup_failure_names_the_fix(ip):
    ip.user_ns["x"] = np.arange(10_000.0)
    with pytest.raises(UsageError, match="--warmup run on the first 4,096 rows of x failed"):
        gpu(ip, "assert len(x) == 10_000\n", "--quiet --warmup")


def test_report_is_an_object_and_printed_unless_quiet(ip, capsys):
    ip.user_ns["x"] = np.arange(1000.0)
    ip.run_cell_magic("gpu", "", "y = x + 1\n")
    text = capsys.readouterr().out
    report = cupy_magic.last_report()
    assert report.inputs[0].name == "x" and report.inputs[0].nbytes == 8000
    assert report.outputs_by_name["y"].nbytes == 8000
    assert report.peak_pool_bytes >= 8000
    assert "in   x: 7.81 KiB" in text and "out  y:" in text
    assert "<table" in report._repr_html_()
    ip.run_cell_magic("gpu", "--quiet", "y = x + 1\n")
    assert capsys.readouterr().out == ""


def test_peak_counts_a_temporary_the_cell_freed(ip, xp):
    gpu(ip, "t = np.ones(1 << 20)\ndel t\ny = np.ones(10)\n", "--quiet")
    report = cupy_magic.last_report()
    assert report.peak_pool_bytes - report.start_pool_bytes >= 8 << 20
    if xp.__name__ == "cupy":  # read by the allocator: no MemoryHook slows every operation
        gpu(ip, "import cupy\nhooks = len(cupy.cuda.memory_hook.get_memory_hooks())\n",
            "--quiet")
        assert ip.user_ns["hooks"] == 0


def test_odd_inputs_work(ip):
    f = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    ip.user_ns.update(f=f, s=np.arange(20.0)[::3], z=np.zeros((0, 4)), b=np.array([True, False]))
    gpu(ip, "fs = f.sum(axis=0)\nss = s * 1\nzs = z.sum()\nbn = (~b)\n", "--quiet --to-host")
    np.testing.assert_array_equal(ip.user_ns["fs"], f.sum(axis=0))
    np.testing.assert_array_equal(ip.user_ns["ss"], np.arange(20.0)[::3])
    assert float(ip.user_ns["zs"]) == 0.0
    np.testing.assert_array_equal(ip.user_ns["bn"], [False, True])


# --- budget ---------------------------------------------------------------------------------


def test_budget_set_show_off_and_enforced_by_the_pool(ip):
    status = ip.run_line_magic("vram_budget", "64MB")
    assert status.budget_bytes == 64_000_000
    assert backend.current().limit == 64_000_000
    assert ip.run_line_magic("vram_budget", "").budget_bytes == 64_000_000
    assert "budget: 64MB = 61.04 MiB" in str(ip.run_line_magic("vram_budget", ""))
    half = ip.run_line_magic("vram_budget", "50%")
    assert half.budget_bytes == backend.current().info().total_bytes // 2
    assert ip.run_line_magic("vram_budget", "off").budget_bytes is None
    assert backend.current().limit is None


def test_cell_over_the_budget_stops_explains_and_changes_nothing(ip):
    ip.run_line_magic("vram_budget", "16MB")
    ip.user_ns["keep"] = 1
    used = backend.current().pool_used()
    with pytest.raises(BudgetExceeded) as info:
        gpu(ip, "keep = 2\nbig = np.ones((4000, 4000))\nmore = big + 1\n")
    msg = str(info.value)
    assert "budget" in msg and "15.26 MiB" in msg
    assert "Try batching" in msg and "--dtype float32" in msg
    assert ip.user_ns["keep"] == 1 and "big" not in ip.user_ns
    assert backend.current().pool_used() == used


def test_inputs_that_fit_with_temporaries_that_do_not_are_told_to_use_batch(ip):
    """Issue 20: the inputs fit the budget, so the cell runs whole, and its temporaries do not;
    the error names ``%%gpu --batch``, and that runs it, equal to NumPy."""
    ip.run_line_magic("vram_budget", "64MiB")
    x = np.arange(4_000_000, dtype=np.float64).reshape(1_000_000, 4)  # 30.52 MiB
    ip.user_ns["x"] = x
    cell = "y = x * 2\nz = y + x\nw = z * y + x * 3\n"
    with pytest.raises(BudgetExceeded) as info:
        gpu(ip, cell)
    msg = str(info.value)
    assert "\n" not in msg and "Try %%gpu --batch (batches sized to the budget" in msg, msg
    assert "w" not in ip.user_ns and "y" not in ip.user_ns
    gpu(ip, cell, "--batch --quiet")
    y = x * 2
    np.testing.assert_array_equal(backend.current().to_host(ip.user_ns["w"]), (y + x) * y + x * 3)


def test_a_pool_out_of_memory_error_is_rewritten_to_name_the_line_and_sizes(ip):
    # CuPy's own message, as its pool raises it when a limit is set (a MemoryError subclass)
    ip.run_line_magic("vram_budget", "16MB")
    ip.user_ns["keep"] = 1
    cupy_text = ("Out of memory allocating 2,000,000,000 bytes (allocated so far: 800,000,000 "
                 "bytes, limit set to: 1,000,000,000 bytes).")
    ip.user_ns["oom"] = MemoryError(cupy_text)
    with pytest.raises(BudgetExceeded) as info:
        gpu(ip, "keep = 2\nraise oom\n")
    msg = str(info.value)
    assert msg.startswith("line 2 `raise oom` asked the pool for 1.86 GiB")
    assert "asked the pool for 1.86 GiB (2,000,000,000 bytes) while it held 762.94 MiB: over " \
           "the VRAM budget of 15.26 MiB (set with %vram_budget)" in msg
    assert ".;" not in msg and "Out of memory allocating" not in msg and "Try batching" in msg
    assert ip.user_ns["keep"] == 1


def test_inputs_over_the_budget_are_refused_before_moving(ip):
    ip.run_line_magic("vram_budget", "1MB")
    ip.user_ns["x"] = np.ones((1, 1_000_000))  # one row: nothing to batch over (issue 3)
    with pytest.raises(BudgetExceeded, match=r"inputs x \(7.63 MiB\) need 7.63 MiB"):
        gpu(ip, "y = x + 1\n")
    assert "y" not in ip.user_ns


def test_budget_larger_than_the_device_is_refused(ip):
    with pytest.raises(UsageError, match="larger than the device"):
        ip.run_line_magic("vram_budget", "900TB")


def test_estimate_shape_and_variable(ip):
    est = ip.run_line_magic("vram_budget", "--estimate 20000x20000 float32")
    assert round(est.gib, 2) == 1.49 and est.nbytes == 1_600_000_000
    assert "1.49 GiB" in str(est) and "1.60 GB" in str(est) and "/ 1024^3" in str(est)
    ip.user_ns["x"] = np.zeros((1000, 1000), dtype=np.float32)
    assert ip.run_line_magic("vram_budget", "--estimate x").nbytes == 4_000_000
    assert ip.run_line_magic("vram_budget", "--estimate 10x10").dtype == "float64"


def test_gpu_backend_switch(ip, capsys):
    ip.run_line_magic("gpu_backend", "host")
    assert backend.current().name == "host"
    assert "host backend chosen" in capsys.readouterr().out
    ip.user_ns["x"] = np.arange(3)
    gpu(ip, "k = type(x)\n")
    assert ip.user_ns["k"] is np.ndarray


# --- bad input: one-line UsageErrors naming the value and the fix ------------------------

# The table of bad input to every magic is tests/test_bad_inputs.py.


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (np.array([object(), 1], dtype=object), "dtype object"),
        (np.array(["a", "b"]), "dtype <U1"),
        (np.array([b"a"]), "dtype |S1"),
        (np.array(["2020-01-01"], dtype="datetime64[D]"), "datetime64"),
        (np.ma.masked_array([1.0, 2.0], mask=[0, 1]), "masked array"),
        (np.ones(3, dtype=np.longdouble), "bad = bad.astype(np.float64)"),
        (np.ones(3, dtype=np.clongdouble), "bad = bad.astype(np.complex128)"),
        (np.zeros(3, dtype=[("a", "f4"), ("b", "i4")]), "bad_a = bad['a']"),
        (np.array(["2020-01-01"], dtype="datetime64[D]"), "count of days since 1970-01-01"),
        (np.array([5], dtype="timedelta64[ns]"), "a count of nanoseconds"),
    ],
)
def test_inputs_cupy_cannot_hold_are_refused(ip, value, expected):
    ip.user_ns["bad"] = value
    with pytest.raises(UsageError, match="input 'bad'") as info:
        gpu(ip, "y = bad\n")
    assert expected in str(info.value)


@pytest.mark.parametrize("value", [
    np.zeros(3, dtype=[("a", "f4"), ("b", "i4")]),
    np.array(["2020-01-01", "2020-01-03"], dtype="datetime64[D]"),
    np.array([5, 7], dtype="timedelta64[ns]"),
    np.ones(3, dtype=np.longdouble),
])
def test_the_fix_a_refusal_names_runs(ip, value):
    """The fix in the message, run as written, gives an input the cell takes."""
    ip.user_ns["bad"] = value
    with pytest.raises(UsageError) as info:
        gpu(ip, "y = bad\n")
    fix = re.search(r"e\.g\. (\w+ = \S+)", str(info.value)).group(1).rstrip(",;")
    exec(fix, {"np": np}, ip.user_ns)
    name = fix.partition(" = ")[0]
    gpu(ip, f"y = {name} * 1\n", "--quiet --to-host")
    assert ip.user_ns["y"].dtype.kind in "fiu"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("--estimate 10xqq float32", "'10xqq'"),
        ("--estimate 10x10 float99", "'float99'"),
        ("--estimate 10x10 object", "'object'"),
        ("--estimate nosuchvar", "'nosuchvar'"),
        ("--estimate 1 2 3", "SHAPE [DTYPE]"),
        ("8GB --estimate 10x10", "not both"),
        ("--estimate -5x3 float32", "negative"),
    ],
)
def test_bad_estimates(ip, line, expected):
    with pytest.raises(UsageError, match=None) as info:
        ip.run_line_magic("vram_budget", line)
    assert expected in str(info.value)


def test_syntax_error_in_cell_is_one_line(ip):
    ip.user_ns["keep"] = 1
    with pytest.raises(UsageError, match=r"syntax error in the %%gpu cell, line 2"):
        gpu(ip, "keep = 2\nx = = 1\n")
    assert ip.user_ns["keep"] == 1


def test_a_syntax_error_the_cell_raises_as_it_runs_is_its_own_not_a_typo(ip):
    """``eval('1 +')`` raises SyntaxError while the cell runs: a plain cell shows it with
    its traceback, and so does a ``%%gpu`` cell (not "syntax error in the %%gpu cell")."""
    ip.user_ns["keep"] = 1
    with pytest.raises(SyntaxError) as info:
        gpu(ip, "keep = 2\nz = eval('1 +')\n")
    assert not isinstance(info.value, UsageError) and info.value.filename == "<string>"
    assert ip.user_ns["keep"] == 1


def test_a_typo_is_one_line_also_once_dask_is_imported(ip):
    pytest.importorskip("dask")  # the cell is first searched for Dask arrays, then compiled
    with pytest.raises(UsageError, match=r"syntax error in the %%gpu cell, line 2"):
        gpu(ip, "keep = 2\nx = = 1\n")


def test_empty_cell_and_unknown_backend(ip, capsys):
    ip.user_ns["kept"] = 1
    result = ip.run_cell("%%gpu\n   \n")  # as a plain empty cell: no error, Run All goes on
    assert result.success and result.result is None and ip.user_ns["kept"] == 1
    assert "the %%gpu cell is empty; nothing ran" in capsys.readouterr().out
    with pytest.raises(UsageError, match="unknown backend 'tpu'"):
        ip.run_line_magic("gpu_backend", "tpu")


def test_estimate_of_a_variable_in_another_dtype(ip):
    """Notebook 00's exercise: how much would x take as float32? (read as a shape before)"""
    ip.user_ns["x"] = np.zeros((1000, 3))
    est = ip.run_line_magic("vram_budget", "--estimate x float32")
    assert (est.shape, est.dtype, est.nbytes) == ((1000, 3), "float32", 12_000)
    assert str(est).startswith("x as float32: 1,000 x 3 = 3,000 elements x 4 bytes")
    assert ip.run_line_magic("vram_budget", "--estimate x").nbytes == 24_000
    with pytest.raises(UsageError, match="cannot read the shape 'nothere'"):
        ip.run_line_magic("vram_budget", "--estimate nothere float32")  # no variable: a shape
    with pytest.raises(UsageError, match="word is a str, not an array"):
        ip.user_ns["word"] = "text"
        ip.run_line_magic("vram_budget", "--estimate word float32")


def test_estimate_of_a_non_array_variable(ip):
    ip.user_ns["word"] = "text"
    with pytest.raises(UsageError, match="word is a str, not an array"):
        ip.run_line_magic("vram_budget", "--estimate word")


def test_results_of_an_earlier_cell_are_not_moved_again(ip):
    ip.user_ns["x"] = np.arange(10.0)
    gpu(ip, "y = x * 2\n")
    gpu(ip, "z = y + 1\n")
    assert [m.name for m in cupy_magic.last_report().inputs] == []
    gpu(ip, "w = x + 1\n", "--quiet --to-host")
    gpu(ip, "v = w + 1\n")
    assert [m.name for m in cupy_magic.last_report().inputs] == ["w"]


# --- host syncs -------------------------------------------------------------------------

SYNC_CELL = ("y = np.sqrt(x)\nfor i in range(3):\n    if y.max() > 0:\n        z = y * 2\n"
             "n = len(y)\n")


def test_sync_report_names_lines_and_counts_on_the_gpu(ip):
    ip.user_ns["x"] = np.arange(10.0)
    gpu(ip, SYNC_CELL)
    rows = cupy_magic.last_report().syncs
    assert [r.line for r in rows] == [3]
    assert rows[0].in_loop
    assert "inside a loop" in rows[0].describe() and "cp.any" in rows[0].describe()
    if backend.current().is_gpu:
        assert rows[0].count == 3  # the runtime record saw every iteration
    else:
        assert rows[0].count is None  # no runtime record on the CPU fallback


def test_syncs_error_stops_at_the_first_and_commits_nothing(ip):
    from cupy_magic.syncs.record import HostSyncError

    ip.user_ns["x"] = np.arange(10.0)
    with pytest.raises(HostSyncError, match=r"line 3: `if y.max\(\) > 0:`") as info:
        gpu(ip, SYNC_CELL, "--quiet --syncs error")
    assert "y" not in ip.user_ns and "n" not in ip.user_ns
    if backend.current().is_gpu:  # raised while the cell runs: the traceback ends at its line
        last = list(_walk(info.tb))[-1]
        assert last.tb_lineno == 3 and "cupy_magic" not in last.tb_frame.f_code.co_filename


def test_syncs_off_and_session_default(ip):
    ip.user_ns["x"] = np.arange(10.0)
    gpu(ip, SYNC_CELL, "--quiet --syncs off")
    assert cupy_magic.last_report().syncs == []
    assert ip.run_line_magic("gpu_syncs", "off") == "off"
    gpu(ip, SYNC_CELL)
    assert cupy_magic.last_report().syncs == []
    assert ip.run_line_magic("gpu_syncs", "") == "off"
    ip.run_line_magic("gpu_syncs", "warn")
    with pytest.raises(UsageError, match="unknown sync mode 'loud'"):
        ip.run_line_magic("gpu_syncs", "loud")
    with pytest.raises(UsageError, match="--syncs loud is not a mode"):
        gpu(ip, SYNC_CELL, "--syncs loud")


def test_gpu_panel_option_runs_the_cell_under_a_panel(ip, capsys):
    from cupy_magic.monitor import sampler as monitor
    from cupy_magic.run import progress

    seen = []
    ip.user_ns["seen"] = seen
    ip.user_ns["progress"] = progress
    try:
        gpu(ip, "seen.append(progress.current())\ny = 2\n", "--quiet --panel")
    finally:
        monitor.shutdown()
    assert ip.user_ns["y"] == 2
    assert seen[0] is not None and seen[0].cell_label.startswith("In [")
    assert progress.current() is None
    # a terminal has no widgets: the report says so instead of showing nothing
    assert any("--panel: a live panel needs a notebook's widgets" in n
               for n in cupy_magic.last_report().notes)


def test_pausing_or_stopping_panels_when_none_is_open_says_so(ip, capsys):
    for action in ("pause", "resume", "stop"):
        ip.run_line_magic("vram_panel", f"--{action}")
        assert f"no panel is open to {action}; %vram_panel opens one" in capsys.readouterr().out


def test_batched_cells_report_syncs(ip):
    ip.user_ns["x"] = np.random.rand(1000, 4)
    gpu(ip, "y = x * 2\nif y.max() > 0:\n    z = y + 1\n", "--quiet --batch-rows 100")
    report = cupy_magic.last_report()
    assert report.batch is not None
    assert [r.line for r in report.syncs] == [2]
    np.testing.assert_allclose(ip.user_ns["z"], ip.user_ns["x"] * 2 + 1)


def test_batched_warmup_runs_a_slice_whole_then_the_batches(ip):
    x = np.random.rand(20_000)
    ip.user_ns.update(x=x, calls=[])
    gpu(ip, "calls.append(len(x))\ny = x * 2\ns = y.sum()\nm = y.mean()\n",
        "--quiet --batch-rows 5000 --warmup --reduce s=sum,m=mean")
    calls = ip.user_ns["calls"]
    assert calls[0] == 4096 and sum(calls[1:]) == 20_000 and len(calls) >= 5
    report = cupy_magic.last_report()
    assert report.batch is not None and report.warmup_rows == 4096
    assert report.warmup_seconds is not None
    # calls.append ran once per batch, which the report says, and it took a batched value
    # where the row check cannot see (batched on the user's word, also said)
    word, effect = report.notes
    assert "calls calls.append on an object from outside the cell" in effect
    assert word.startswith("batched on your word (--batch) at line 1 `calls.append(len(x))`")
    assert float(ip.user_ns["s"]) == pytest.approx(2 * x.sum())
    assert float(ip.user_ns["m"]) == pytest.approx(2 * x.mean())
    np.testing.assert_array_equal(ip.user_ns["y"], 2 * x)


@pytest.mark.parametrize("options", ["--quiet --warmup", "--quiet --warmup --batch-rows 5000"])
def test_the_wall_time_counts_the_warmup_in_whole_and_batched_runs_as_the_report_says(
        ip, options):
    ip.user_ns.update(x=np.arange(10_000.0), time=__import__("time"))
    gpu(ip, "time.sleep(0.05)\ny = x * 2\n", options)
    report = cupy_magic.last_report()
    assert report.warmup_seconds >= 0.05
    runs = 2 if report.batch is not None else 1  # 2 batches of 5,000 rows, or one whole run
    assert report.wall_seconds >= report.warmup_seconds + runs * 0.05
    unit = "CPU" if report.backend == "host" else "GPU"
    assert f"(not in the {unit} time below; the wall time includes it)" in str(report)


def test_batched_warmup_cuts_the_inputs_named_by_batch(ip):
    ip.user_ns.update(a=np.ones((3000, 2)), b=np.ones((8000,)), calls=[])
    gpu(ip, "calls.append((len(a), len(b)))\nc = a * 2\n", "--quiet --batch a --batch-rows 1000 "
        "--warmup")
    assert ip.user_ns["calls"][0] == (2048, 8000)  # a cut to 2,048 rows of 2; b whole


def test_batch_options_on_a_cell_that_ran_whole_are_named_in_a_note(ip):
    ip.user_ns["x"] = np.arange(10.0)
    gpu(ip, "y = x * 2\n", "--quiet --to-host y --streams 2 --reduce t=sum --timeline")
    report = cupy_magic.last_report()
    assert report.batch is None
    assert report.notes == ["--streams 2 --reduce t=sum --timeline: for batched runs only, and "
                            "this cell ran whole (its inputs fit the budget); add --batch to "
                            "batch it"]
    np.testing.assert_array_equal(ip.user_ns["y"], np.arange(10.0) * 2)


def test_arrays_left_by_earlier_cells_count_against_the_budget(ip):
    ip.run_line_magic("vram_budget", "16MB")
    gpu(ip, "y = np.ones(1_500_000)\n")  # 12 MB stays on the device
    assert backend.current().pool_used() >= 12_000_000
    with pytest.raises(BudgetExceeded):
        gpu(ip, "z = np.ones(1_000_000)\n")  # 8 MB more does not fit
    assert "z" not in ip.user_ns
    del ip.user_ns["y"]
    gpu(ip, "z = np.ones(1_000_000)\n")  # now it does
    assert "z" in ip.user_ns


def test_memory_pool_is_the_pool_cells_use(ip, xp):
    pool = cupy_magic.memory_pool()
    if backend.current().is_gpu:
        before = pool.used_bytes()
        gpu(ip, "y = np.ones(1_000_000)\n")
        assert pool.used_bytes() - before >= 8_000_000
    else:
        assert pool is None


def test_a_parameter_or_comprehension_variable_named_like_an_array_is_not_moved(ip):
    ip.user_ns["x"] = np.ones(10**6)
    gpu(ip, "def f(x):\n    return x + 1\nz = f(np.ones(3))\nzz = [x * 2 for x in range(3)]\n")
    assert cupy_magic.last_report().inputs == []
    assert ip.user_ns["zz"] == [0, 2, 4]


def test_inputs_changed_by_in_place_methods_come_back(ip, xp):
    x = np.array([3.0, 1.0, 2.0])
    ip.user_ns.update(x=x, b=np.zeros(3))
    gpu(ip, "x.sort()\nnp.add(x, 1, out=b)\n")
    assert [float(v) for v in ip.user_ns["x"]] == [1.0, 2.0, 3.0]
    assert [float(v) for v in ip.user_ns["b"]] == [2.0, 3.0, 4.0]
    assert list(x) == [3.0, 1.0, 2.0]  # the original NumPy array is not touched


def test_functions_and_classes_from_a_cell_live_in_the_user_namespace(ip):
    import numpy

    ip.user_ns["counter"] = 1
    gpu(ip, "def f():\n    return counter\n"
            "def g():\n    global gv\n    gv = 5\n"
            "def which():\n    return np\n"
            "class C:\n    def m(self):\n        return counter\n"
            "    @staticmethod\n    def s():\n        return counter\n")
    ip.user_ns["counter"] = 99
    f, g, C = ip.user_ns["f"], ip.user_ns["g"], ip.user_ns["C"]
    assert f() == 99 and C().m() == 99 and C.s() == 99
    assert f.__globals__ is ip.user_ns
    g()
    assert ip.user_ns["gv"] == 5
    assert ip.user_ns["which"]() is numpy  # outside the cell np is NumPy again


def test_warmup_cuts_only_the_longest_inputs(ip):
    ip.user_ns.update(A=np.ones((100, 3)), W=np.eye(3))
    gpu(ip, "z = A @ W\n", "--quiet --warmup")
    assert ip.user_ns["z"].shape == (100, 3)
