"""The array module a cell's `np` means, kept by the cell as a value, is NumPy after it.

Inside a %%gpu cell ``np`` is the checked module in front of CuPy; kept in a container, a
default argument or a class attribute it would go on meaning CuPy in later plain cells (a
plain cell's ``mods["n"].zeros(3)`` would make device arrays). Before, only a name bound to it
directly (``f = np.sqrt``) was given NumPy's back (found by helper-70).
"""

from __future__ import annotations

import numpy as np
import pytest

from cupy_magic.run.names import module_escapes

MODULES = frozenset({"np", "numpy", "cp"})


@pytest.mark.parametrize(("cell", "check"), [
    ("mods = {'n': np}", "mods['n'] is np"),
    ("t = (np.sqrt, np.linalg)", "t[0] is np.sqrt and t[1] is np.linalg"),
    ("ops = [np.add, np.float32]", "ops[0] is np.add and ops[1] is np.float32"),
    ("f = lambda a, m=np: m.sqrt(a)", "f.__defaults__[0] is np and f(4.0) == 2.0"),
    ("class K:\n    mod = np\n    sq = staticmethod(np.sqrt)", "K.mod is np and K.sq is np.sqrt"),
    ("import numpy\nd = {'m': [numpy]}", "d['m'][0] is np"),
])
def test_the_module_kept_by_the_cell_is_numpy_after_it(ip, cell, check):
    ip.run_cell_magic("gpu", "--quiet", cell)
    assert eval(check, {"np": np, **ip.user_ns}), check


def test_the_users_own_list_gets_numpy_back_too(ip):
    held: list = []
    ip.user_ns["held"] = held
    ip.run_cell_magic("gpu", "--quiet", "held.append(np.mean)\nheld.append(np)")
    assert ip.user_ns["held"] is held and held == [np.mean, np]


@pytest.mark.parametrize(("source", "escapes"), [
    ("y = np.sqrt(x)", False),
    ("z = np.linalg.inv(a)", False),
    ("r = np.random.default_rng(0).random(3)", False),
    ("mods = {'n': np}", True),
    ("t = (np.sqrt,)", True),
    ("f = lambda a, m=np: m.sqrt(a)", True),
    ("y = x.astype(np.float32)", True),  # counted: a dtype is a value too (a cheap walk)
    ("y = cp.asnumpy(x)", False),
    ("nump = 1\ny = nump + 1", False),
])
def test_which_cells_may_keep_the_module(source, escapes):
    assert module_escapes(source, MODULES) is escapes


def test_the_cells_globals_kept_by_the_cell_are_the_user_namespace(ip):
    ip.run_cell_magic("gpu", "--quiet",
                      "g = globals()\ndef setg():\n    g['late'] = 1\n")
    assert ip.user_ns["g"] is ip.user_ns
    ip.user_ns["setg"]()
    assert ip.user_ns["late"] == 1
    ip.run_cell_magic("gpu", "--quiet", "kept = {'ns': [globals()]}")  # no function made
    assert ip.user_ns["kept"]["ns"][0] is ip.user_ns
