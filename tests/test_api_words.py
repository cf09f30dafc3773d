"""The Python API's words: a message shared with a magic names the fix in both forms (the
magic's option and the keyword), Python values NumPy users pass are read as they mean, and
the help says what the code does (walkthrough findings 3, 4, 6, 15, 19)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import cupy_magic as cm
from cupy_magic.backend.budget import suggest_size
from cupy_magic.run.errors import CellError
from cupy_magic.units import SizeError

README = Path(__file__).resolve().parents[1] / "README.md"


def run(cell: str = "y = x * 2\n", **options):
    return lambda ns: cm.run_cell(cell, ns, **options)


def forced(**options):
    return cm.BatchOptions(forced=True, **options)


# Each call a Python user makes, and the Python form of the fix its message must give.
BOTH_FORMS = [
    (run(to_host="yy"), CellError, "--to-host y (to_host=['y'] from Python)"),
    (run(to_host="y,1bad"), CellError, "(to_host='y,total' from Python)"),
    (run(dtype="float"), CellError, "(dtype='float32' or np.float32 from Python)"),
    (run(dtype=np.float64), CellError, "(dtype='float32' or np.float32 from Python)"),
    (run(syncs="warning"), CellError, "use --syncs warn, error or off (syncs='warn' from"),
    (lambda ns: cm.BatchOptions(nbytes=-5), CellError, "(BatchOptions(nbytes='512MB'))"),
    (lambda ns: cm.BatchOptions(nbytes="lots"), CellError, "(BatchOptions(nbytes='512MB'))"),
    (lambda ns: cm.BatchOptions(rows=0), CellError, "(BatchOptions(rows=100000))"),
    (lambda ns: cm.BatchOptions(rows=10, nbytes=100), CellError, "(BatchOptions(rows=10))"),
    (lambda ns: cm.BatchOptions(streams=0), CellError, "(BatchOptions(streams=3))"),
    (lambda ns: cm.BatchOptions(streams=10**6), CellError, "(BatchOptions(streams=3))"),
    (lambda ns: cm.BatchOptions(reduce={"t": "avg"}), CellError,
     "(BatchOptions(reduce={'t': 'sum'}))"),
    (run(batch=forced(names="q")), CellError,
     "--batch x (BatchOptions(names='x', forced=True) from Python)"),
    (run("y = x * 2\nt = y.sum()\n", batch=forced()), CellError,
     "--reduce t=sum (BatchOptions(reduce={'t': 'sum'}) from Python; rules:"),
    (run(batch=forced(reduce={"zz": "sum"})), CellError, "(from BatchOptions(reduce=...) in"),
    (run(devices="0,5"), CellError, "(devices='0' or 'all' from Python)"),
    (run(devices="0", lines=True), CellError, "(lines=True without devices= from Python)"),
    (run(warmup=True, cluster=True), CellError, "(warmup=False from Python)"),
    (run(batch=cm.BatchOptions(timeline=True), cluster=True), CellError,
     "--timeline is not available on a cluster run; drop it (BatchOptions(timeline=False) "),
    (run(batch=cm.BatchOptions(streams=4), cluster=True), CellError,
     "--streams is not available on a cluster run; drop it (BatchOptions() without streams="),
    (run("y = x * 2\nprint(y)\n", syncs="error"), RuntimeError,
     "use --syncs warn (syncs='warn' from Python)"),
    (lambda ns: cm.set_budget("1GB", device=3), ValueError,
     "%vram_budget 8GB --device 0 (set_budget('8GB', device=0) from Python)"),
    (lambda ns: cm.budget_status(device=4), ValueError,
     "%vram_budget --device 0 (budget_status(device=0) from Python)"),
    (lambda ns: cm.vram_free("nosuch", ns), ValueError, "(vram_holders() from Python)"),
    (lambda ns: cm.use_cluster("local", timeout=5), ValueError,
     "(use_cluster('tcp://HOST:8786', timeout=10))"),
    (lambda ns: cm.use_cluster("tcp://127.0.0.1:1", timeout=-1), ValueError,
     "(use_cluster('tcp://HOST:8786', timeout=10))"),
]


@pytest.mark.parametrize(("call", "errors", "fix"), BOTH_FORMS,
                         ids=[f[2][:40] for f in BOTH_FORMS])
def test_a_shared_message_names_the_fix_in_both_forms_in_one_line(ip, call, errors, fix):
    ns = {"np": np, "x": np.arange(10.0)}
    with pytest.raises(errors) as info:
        call(ns)
    msg = str(info.value)
    assert "\n" not in msg
    assert fix in msg, msg


def test_over_budget_names_the_keywords_too(ip):
    ns = {"np": np, "x": np.arange(10.0)}
    cm.set_budget("1MB")
    try:
        with pytest.raises(MemoryError) as info:
            cm.run_cell("big = x[:, None] * np.ones((10, 200000))", ns)
    finally:
        cm.set_budget(None)
    msg = str(info.value)
    assert "on that row; batch=BatchOptions(forced=True) from Python)" in msg
    assert "--dtype float32 (dtype='float32')" in msg
    assert "a larger %vram_budget (cupy_magic.set_budget)" in msg


def test_vram_free_outside_ipython_names_itself_in_its_fix(monkeypatch):
    from cupy_magic.session import memory

    monkeypatch.setattr(memory, "_shell", lambda: None)
    with pytest.raises(ValueError, match=re.escape("cupy_magic.vram_free('Out', globals())")):
        cm.vram_free("Out")
    with pytest.raises(ValueError, match=re.escape("cupy_magic.vram_holders(globals())")):
        cm.vram_holders()


# --- finding 4: BatchOptions(nbytes=...) takes --batch-bytes's text ------------------------
def test_batch_bytes_takes_a_size_as_the_magic_does(ip):
    assert cm.BatchOptions(nbytes="512MB").nbytes == 512 * 10**6
    assert cm.BatchOptions(nbytes="1.5GiB") == cm.BatchOptions(nbytes=3 * 2**29)
    ns = {"np": np, "x": np.arange(100.0)}
    report = cm.run_cell("y = x * 2", ns, batch=forced(nbytes="400B"))
    assert report.batch is not None and "--batch-bytes 400" in report.batch.reason
    np.testing.assert_array_equal(np.asarray(getattr(ns["y"], "get", lambda: ns["y"])()),
                                  np.arange(100.0) * 2)


# --- finding 6: dtype=np.float32 ---------------------------------------------------------
@pytest.mark.parametrize("dtype, name", [(np.float32, "float32"), (np.dtype("float32"), "float32"),
                                         (np.float16, "float16"), ("float16", "float16")])
def test_dtype_takes_numpy_types_of_the_names(ip, dtype, name):
    ns = {"np": np, "x": np.arange(10.0)}
    report = cm.run_cell("y = x * 2", ns, dtype=dtype)
    assert [m.dtype for m in report.inputs] == [name]


# --- finding 15: set_budget reads numbers as one rule -------------------------------------
def test_set_budget_reads_numpy_integers_as_python_ints(ip):
    try:
        assert cm.set_budget(np.int64(2**30)).budget.nbytes == 2**30
        assert cm.set_budget(2**20).budget.nbytes == 2**20
        assert cm.set_budget("8B").budget.nbytes == 8  # a unit: taken as written
    finally:
        cm.set_budget(None)


@pytest.mark.parametrize("value, fragment", [
    (8, "did you mean set_budget('8GB')?"),
    (np.int32(1), "did you mean set_budget('1GB')?"),
    (2**20 - 1, "'1048575B' for exactly"),
    (0, "set_budget(None) or set_budget('off') removes the budget"),
])
def test_set_budget_refuses_a_bare_number_under_a_mebibyte(ip, value, fragment):
    before = cm.budget_status().budget
    with pytest.raises(SizeError) as info:
        cm.set_budget(value)
    assert fragment in str(info.value) and "\n" not in str(info.value)
    assert cm.budget_status().budget == before


def test_a_bare_number_suggests_a_size_that_fits_the_device():
    assert suggest_size("2000", 24 * 10**9) == "2000MB"
    assert suggest_size("12", 24 * 10**9) == "12GB"
    assert suggest_size("12", 0) == "12GB"  # the device size unknown
    assert suggest_size("5000000", 24 * 10**9) == "5000000B"


# --- finding 19: the exception of a bad option, the help, the README ---------------------
@pytest.mark.parametrize("options", [
    {"fallback": "off"}, {"warmup": "yes"}, {"syncs": True}, {"dtype": np.int8},
    {"to_host": 3}, {"batch": True}, {"label": 3}, {"compiler": "x"},
])
def test_every_bad_option_value_is_a_cell_error(ip, options):
    with pytest.raises(CellError):
        cm.run_cell("y = x * 2", {"np": np, "x": np.arange(3.0)}, **options)


def test_gpu_help_writes_the_cell_magic_and_what_warmup_runs(ip):
    doc = ip.find_cell_magic("gpu").__doc__
    assert doc.startswith("::\n\n  %%gpu [--to-host")
    warmup = " ".join(doc.split("--warmup", 2)[2].split("--timeline")[0].split())
    assert "or all rows if fewer" in warmup and "at least" not in warmup


def test_package_docstring_names_every_magic_it_registers(ip):
    from cupy_magic.magics import GpuMagics

    registered = ["%%" + n for n in GpuMagics.magics["cell"]] + [
        "%" + n for n in GpuMagics.magics["line"]]
    assert len(registered) == 8
    for magic in registered:
        assert f"``{magic}``" in cm.__doc__, magic


def test_readme_from_python_example_runs_as_written(ip):
    text = README.read_text()
    block = text.split("### From Python", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    head = block.split("cupy_magic.set_budget", 1)[0]  # up to run_cell: the lines that need no GPU
    scope: dict = {}
    exec(compile(head, "README.md", "exec"), scope)
    np.testing.assert_allclose(scope["namespace"]["y"], np.sqrt(scope["x"]))


@pytest.mark.parametrize("flags", ["--timeline", "--streams 4"])
def test_a_cluster_cell_refuses_batch_options_it_cannot_honour(ip, capsys, flags):
    ip.user_ns["x"] = x = np.arange(10.0)
    result = ip.run_cell(f"%%gpu --cluster {flags}\ny = x * 2\n")
    assert type(result.error_in_exec).__name__ == "UsageError"  # the magic's one-line error
    assert f"{flags.split()[0]} is not available on a cluster run" in str(result.error_in_exec)
    assert "y" not in ip.user_ns and ip.user_ns["x"] is x
