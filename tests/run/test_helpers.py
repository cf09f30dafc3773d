"""Functions from earlier plain cells, called by a %%gpu cell, run over the cell's names."""

from __future__ import annotations

import numpy as np
import pytest

import cupy_magic
from cupy_magic import backend
from cupy_magic.run.helpers import global_names, helpers_of

SETUP = (
    "x = np.arange(4.0)\nX = np.ones((3, 2))\nc = 1\n"
    "def getx():\n    return x\n"
    "def bump():\n    global c\n    c += 1\n"
    "def loss(w):\n    return ((X @ w) ** 2).mean()\n"
    "def twice_loss(w):\n    return 2 * loss(w)\n"
)


def _host(value):
    be = backend.current()
    return be.to_host(value) if be.is_device_array(value) else value


def _plain(cell: str) -> dict:
    ns: dict = {"np": np}
    exec(SETUP, ns)
    exec(cell, ns)
    return ns


@pytest.fixture
def helpers(ip):
    ip.run_cell(SETUP)
    return ip


@pytest.mark.parametrize(("cell", "name"), [
    ("x = x * 2\ng = getx()", "g"),  # the helper reads the cell's x, not the user's
    ("newv = 7\ndef get_newv():\n    return newv\ng = get_newv()", "g"),
    ("l = twice_loss(np.ones(2))", "l"),  # through another helper, over the device X
    ("X = X * 3\nl = loss(np.ones(2))", "l"),
])
def test_a_helper_reads_the_cells_names_as_in_a_plain_cell(helpers, cell, name):
    helpers.run_cell_magic("gpu", "--quiet", cell)
    assert np.asarray(_host(helpers.user_ns[name])).tolist() == \
        np.asarray(_plain(cell)[name]).tolist()


def test_what_helpers_read_moves_to_the_device_with_the_cell(helpers):
    helpers.run_cell_magic("gpu", "--quiet", "l = twice_loss(np.ones(2))")
    assert [m.name for m in cupy_magic.last_report().inputs] == ["X"]


def test_a_helpers_global_write_is_committed_with_the_cell(helpers):
    helpers.run_cell_magic("gpu", "--quiet", "bump()\nk = c")
    assert helpers.user_ns["c"] == 2 and helpers.user_ns["k"] == 2


def test_a_helpers_global_write_is_undone_with_a_failing_cell(helpers):
    with pytest.raises(ZeroDivisionError):
        helpers.run_cell_magic("gpu", "--quiet", "bump()\n1 / 0")
    assert helpers.user_ns["c"] == 1


def test_a_helper_that_changes_a_global_array_in_place_changes_it_as_a_plain_cell(helpers):
    helpers.run_cell("def zero_first():\n    X[0] = 0\n")
    X = helpers.user_ns["X"]
    helpers.run_cell_magic("gpu", "--quiet", "zero_first()")
    assert np.asarray(_host(helpers.user_ns["X"])).tolist() == [[0, 0], [1, 1], [1, 1]]
    assert X.tolist() == [[1, 1], [1, 1], [1, 1]]  # the user's NumPy array itself


def test_the_users_functions_stay_the_users_after_the_cell(helpers):
    getx = helpers.user_ns["getx"]
    helpers.run_cell_magic("gpu", "--quiet", "h = getx\nfs = [getx, loss]\nd = {'f': bump}")
    ns = helpers.user_ns
    assert ns["getx"] is getx and ns["h"] is getx
    assert ns["fs"][0] is getx and ns["fs"][1] is ns["loss"] and ns["d"]["f"] is ns["bump"]
    assert getx.__globals__ is ns
    ns["x"] = np.ones(2)
    assert getx().tolist() == [1.0, 1.0]  # after the cell it reads the user namespace again


def test_a_helper_the_cell_redefines_is_the_cells_own(helpers):
    helpers.run_cell_magic("gpu", "--quiet", "def getx():\n    return 5\ng = getx()")
    assert helpers.user_ns["g"] == 5 and helpers.user_ns["getx"]() == 5


def test_a_batched_cell_calls_the_helper_over_each_batchs_rows(helpers):
    helpers.run_cell("def double(a):\n    return a * 2 + offset\noffset = 1.0\n"
                     "big = np.arange(16.0).reshape(8, 2)")
    helpers.run_cell_magic("gpu", "--quiet --batch-rows 2", "y = double(big)")
    assert np.asarray(_host(helpers.user_ns["y"])).tolist() == \
        (np.arange(16.0).reshape(8, 2) * 2 + 1).tolist()


def test_only_global_loads_and_stores_count_not_attribute_names() -> None:
    code = compile("def f(a):\n    global g\n    g = a.sum() + h\n    return np.mean(a)\n",
                   "<x>", "exec")
    reads, writes = global_names(code)
    assert reads == {"h", "np"} and writes == {"g"}
    ns: dict = {}
    exec("def a():\n    return b()\ndef b():\n    return z\nz = 1\nlam = lambda: 1\n", ns)
    found, read, written = helpers_of(compile("a()\nlam()", "<c>", "exec"), ns)
    assert set(found) == {"a", "b", "lam"} and read == {"b", "z"} and not written
