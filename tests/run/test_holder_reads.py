"""A %%gpu cell that changes an input's device copy and then reads the input through an
object from outside that holds it (``X += 1`` then ``Z = L[0] * 2`` with ``L = [X]`` from an
earlier cell): ``L[0]`` is the user's array, which the change of the copy does not reach, so
``Z`` had the old values where a plain cell's has the new ones, silently, in both modes (the
whole-cell fuzz, session 34: ``if c: X += 1; Y = L[0]; X = Y; X = X * 2; X[0] = 5``).
Refused before the run where a top-level statement surely made the change first, after it
(before the commit) where the change may happen and did; reads before the change run."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import cell_error

SETUP = ("X = np.arange(6.0).reshape(3, 2)\nZ0 = np.ones(2)\nL = [X]\narrs = [X, Z0]\n"
         "c = False\nD = {'x': X}\n"
         "class Box:\n    def __init__(self, x):\n        self.x = x\n"
         "b = Box(X)\ndef dec(a):\n    a -= 1\n")
MODES = ["--quiet", "--quiet --to-host"]


@pytest.fixture
def held(ip):
    ip.run_cell("import numpy as np\n" + SETUP)
    return ip


def plain(cell: str, c: bool = False) -> dict:
    ns = {"np": np}
    exec(SETUP + f"c = {c}\n" + cell, ns)
    return ns


def refused(held, cell: str, mode: str, via: str, line: int) -> str:
    before = held.user_ns["X"].copy()
    x = held.user_ns["X"]
    message = cell_error(held, cell, mode)
    assert message.startswith(f"the cell changes the input 'X' (or a view of it) in its device "
                              f"copy and then reads it through {via}, which holds it (line "
                              f"{line}): %%gpu copies X to the device before the cell runs, and "
                              f"{via}'s item is the user's array, which that change does not "
                              "reach (a plain cell's would)"), message
    assert message.endswith(f"read X through its name in the cell, not through {via}")
    assert held.user_ns["X"] is x and "Z" not in held.user_ns and "Y" not in held.user_ns
    np.testing.assert_array_equal(x, before)
    assert held.user_ns["L"][0] is x
    return message


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("cell", "via", "line"), [
    ("X += 1\nZ = L[0] * 2\n", "L", 2),
    ("X[0] = 5\nZ = D['x'] + 0\n", "D", 2),
    ("X.sort(axis=0)\nfor a in arrs:\n    Z = a + 0\n", "arrs", 2),
    ("X += 1\nZ = b.x + 0\n", "b", 2),
    # a name bound to the holder's item before the change, read after it
    ("Y = L[0]\nX -= 1\nZ = Y * 2\n", "L", 3),
    ("Y = L[0]\nW = Y\nnp.copyto(X, 0)\nZ = W + 0\n", "L", 4),
    ("Q = [L[0]]\nX += 1\nZ = Q[0] + 0\n", "L", 3),  # in a list the cell binds
    # the fuzz's cell: the input's name then bound to the item it read
    ("X += 1\nY = L[0]\nX = Y\nX = X * 2\nX[0] = 5\n", "L", 4)])
def test_a_read_through_a_holder_after_a_sure_change_is_refused_before_the_run(
        held, mode, cell, via, line):
    message = refused(held, cell, mode, via, line)
    assert "not committed" not in message


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("cell", "via", "line"), [
    ("if c:\n    X += 1\nZ = L[0] * 2\n", "L", 3),
    ("if c:\n    X += 1\nY = L[0]\nX = Y\nX = X * 2\nX[0] = 5\n", "L", 5),
    ("dec(X)\nZ = L[0] + 0\n", "L", 2),
    ("Y = X\nY += 1\nZ = D['x'] * 1\n", "D", 3),
    ("for i in range(2):\n    Z = L[0] * 2\n    X += 1\n", "L", 2)])
def test_a_read_through_a_holder_after_a_change_the_run_made_is_refused_after_it(
        held, mode, cell, via, line):
    held.run_cell("c = True")
    message = refused(held, cell, mode, via, line)
    assert "; the cell is not committed; read X" in message


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cell", [
    "Z = L[0] * 2\nX += 1\n",  # read before the change
    "s = X.sum()\nn = X.shape[0]\nprint(len(X))\nZ = L[0] * 2\nX += 1\n",  # mere uses
    "X = X * 2\nX += 1\nZ = L[0] * 2\n",  # X holds new memory by then
    "if c:\n    X += 1\nZ = L[0] * 2\n",  # the change was not made (c is False)
    "Y = X * 2\nZ = float(np.sum(X)) + L[0]\n",  # X only read
    "Y = X.T\nZ = L[0] * 2\nY += 1\n",  # read before the change through another name
    "X += 1\nL.append(5)\nn = len(L)\n",  # the holder, none of its items
    "X += 1\nY = L[0]\nW = Y\n",  # bound, not read: the user's array, as a plain cell's
    "X += 1\nY = L[0]\nV = Y[1:].T\nQ = [Y, L[0]]\n",  # views of it, and it in a list
    "Y = L[0]\nY = Z0\nX += 1\nZ = Y * 2\n"])  # Y holds another array by the read
def test_a_cell_that_reads_no_changed_copy_through_a_holder_runs_as_a_plain_cell(
        held, mode, cell):
    assert held.run_cell(f"%%gpu {mode}\n{cell}").success
    want = plain(cell)
    for name in ("X", "Z", "n"):
        if name in want:
            np.testing.assert_array_equal(_host(held.user_ns[name]), want[name])
    assert len(held.user_ns["L"]) == len(want["L"])


def test_a_batched_cell_that_reads_through_a_holder_after_a_change_is_refused(ip):
    ip.run_cell("import numpy as np\nx = np.arange(20.0).reshape(10, 2)\nL = [x]\nc = False")
    before = ip.user_ns["x"].copy()
    message = cell_error(ip, "if c:\n    x += 1\ny = L[0] * 2\n", "--batch --batch-rows 3")
    assert message.startswith("the cell changes the input 'x' (or a view of it) in its device "
                              "copy and then reads it through L, which holds it (line 3)")
    np.testing.assert_array_equal(ip.user_ns["x"], before)
    assert "y" not in ip.user_ns


def _host(value):
    return value.get() if hasattr(value, "get") and not isinstance(value, np.ndarray) \
        else value
