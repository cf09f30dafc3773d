"""A function or class a ``%%gpu`` cell defines pickles by name in that same cell, as in a
plain cell (``pickle``, ``multiprocessing`` and ``copy`` look it up as ``__main__.f``): while
the cell runs, ``__main__`` is its namespace. Through a real shell (both backends) and a real
kernel (nbclient)."""

from __future__ import annotations

import sys

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

DEFINES_AND_PICKLES = """\
import pickle
def scale(v):
    return v * 2
class Point:
    def __init__(self, x):
        self.x = x
same = pickle.loads(pickle.dumps(scale)) is scale
point = pickle.loads(pickle.dumps(Point(3)))
kind_is_point = type(point) is Point
y = scale(x)
"""


def cell(ip, body: str, line: str = "--quiet"):
    return ip.run_cell(f"%%gpu {line}\n{body}", store_history=True)


@pytest.fixture
def user_main(ip, monkeypatch: pytest.MonkeyPatch) -> None:
    """``__main__`` is the user namespace, as IPython's terminal and kernel make it (the
    test shell leaves pytest's)."""
    assert ip.user_module.__dict__ is ip.user_ns
    monkeypatch.setitem(sys.modules, "__main__", ip.user_module)


def test_a_function_and_a_class_the_cell_defines_pickle_in_that_cell(ip, user_main):
    ip.user_ns["x"] = np.arange(6.0)
    main = sys.modules["__main__"]
    result = cell(ip, DEFINES_AND_PICKLES)
    assert result.success, result.error_in_exec
    ns = ip.user_ns
    assert ns["same"] is True and ns["kind_is_point"] is True and ns["point"].x == 3
    assert sys.modules["__main__"] is main  # put back after the cell
    # committed: a later plain cell pickles them too, and they are the same objects
    check = ip.run_cell("import pickle\nafter = pickle.loads(pickle.dumps(scale)) is scale")
    assert check.success and ns["after"] is True


def test_a_name_bound_through_main_is_committed_and_a_failure_commits_none(ip, user_main):
    ok = cell(ip, "import __main__\n__main__.via_main = 5\nalso = via_main + 1\n")
    assert ok.success, ok.error_in_exec
    assert ip.user_ns["via_main"] == 5 and ip.user_ns["also"] == 6
    main = sys.modules["__main__"]
    failed = cell(ip, "import __main__\n__main__.not_kept = 1\nboom = 1 / 0\n")
    assert isinstance(failed.error_in_exec, ZeroDivisionError)
    assert "not_kept" not in ip.user_ns and "boom" not in ip.user_ns
    assert sys.modules["__main__"] is main


def test_the_warmup_run_pickles_what_the_cell_defines(ip, user_main):
    ip.user_ns["x"] = np.arange(6.0)
    result = cell(ip, DEFINES_AND_PICKLES, "--warmup --quiet")
    assert result.success, result.error_in_exec
    assert ip.user_ns["same"] is True


def test_import_main_in_the_cell_binds_the_real_main(ip, user_main):
    assert cell(ip, "import __main__\nk = 1\n").success
    assert ip.user_ns["__main__"] is sys.modules["__main__"] is ip.user_module
    assert ip.run_cell("__main__.k = 99").success and ip.user_ns["k"] == 99


def test_a_batched_cell_pickles_what_it_defines(ip, user_main):
    ip.user_ns["x"] = np.arange(40.0).reshape(20, 2)
    body = ("import pickle\ndef scale(v):\n    return v * 2\n"
            "same = pickle.loads(pickle.dumps(scale)) is scale\ny = scale(x)\n")
    result = cell(ip, body, "--batch --batch-rows 5 --quiet")
    assert result.success, result.error_in_exec
    np.testing.assert_array_equal(np.asarray(ip.user_ns["y"]), np.arange(40.0).reshape(20, 2) * 2)
    assert ip.user_ns["same"] is True


def test_where_main_is_not_the_user_namespace_nothing_changes(ip, monkeypatch):
    """A shell whose ``__main__`` is another module: a plain cell pickles nothing by name
    there, and a ``%%gpu`` cell leaves ``__main__`` alone too."""
    other = type(sys)("__main__")
    monkeypatch.setitem(sys.modules, "__main__", other)
    result = cell(ip, "import sys\nseen = sys.modules['__main__']\n")
    assert result.success and ip.user_ns["seen"] is other


@pytest.mark.kernel
def test_in_a_kernel_a_cell_pickles_what_it_defines(monkeypatch):
    monkeypatch.setenv("CUPY_MAGIC_BACKEND", "host")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in [
        "%load_ext cupy_magic\nimport numpy as np\nx = np.arange(6.0)",
        "%%gpu --quiet\n" + DEFINES_AND_PICKLES,
        "import sys\nprint(same, kind_is_point, sys.modules['__main__'].__dict__ is globals())",
    ]]
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    errors = [o for c in nb.cells for o in c.outputs if o["output_type"] == "error"]
    assert not errors, errors
    assert nb.cells[2].outputs[0]["text"].strip() == "True True True"
