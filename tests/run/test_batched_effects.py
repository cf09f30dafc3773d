"""A batched cell runs once per batch; a plain cell once. What it prints is shown once (every
batch prints the same: the row check refuses a print of a batch's values), and what it does
outside itself (a list it appends to, a log, a figure) is named in the report with the count
(run/echo.py). Before, a print showed once per batch, silently."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import cell_error

import cupy_magic

BATCHED = "--batch --batch-rows 3"


@pytest.fixture
def rows(ip):
    ip.user_ns["x"] = np.arange(20.0).reshape(10, 2)  # 4 batches of 3 rows
    return ip


def _notes() -> list[str]:
    return cupy_magic.last_report().notes


def test_a_batched_cells_prints_are_shown_once(rows, capsys):
    capsys.readouterr()
    rows.run_cell_magic("gpu", f"--quiet {BATCHED}",
                        "y = x * 2\nprint('normalised')\nprint(f'{y.shape[1]} cols')\n")
    assert capsys.readouterr().out == "normalised\n2 cols\n"
    assert cupy_magic.last_report().batch.batches == 4
    assert any("shown once: 4 batches printed the same" in n for n in _notes())


def test_a_batched_cell_that_prints_nothing_has_no_note(rows, capsys):
    rows.run_cell_magic("gpu", f"--quiet {BATCHED}", "y = x * 2\n")
    assert capsys.readouterr().out == ""
    assert not any("printed" in n or "once per batch" in n for n in _notes())


@pytest.mark.parametrize("setup, cell, named", [
    ("hist = []", "hist.append('step')", "calls hist.append on an object from outside"),
    ("import logging", "logging.getLogger('cm').debug('batch')", "calls logging.getLogger"),
    ("log = {}", "log['last'] = 1", "changes log, an object from outside the cell"),
    ("hist = []", "hist += [1]", "changes hist, a list from outside the cell, in place"),
    ("from IPython.display import display as dp", "dp('batch')", "calls dp, which writes"),
])
def test_what_a_batched_cell_does_outside_itself_is_named_with_its_count(rows, setup, cell,
                                                                         named):
    rows.run_cell(setup)
    rows.run_cell_magic("gpu", f"--quiet {BATCHED}", f"y = x * 2\n{cell}\n")
    [note] = [n for n in _notes() if "once per batch" in n]
    assert named in note and "(4 times)" in note


def test_a_whole_run_prints_and_acts_as_a_plain_cell(rows, capsys):
    rows.run_cell("hist = []")
    capsys.readouterr()
    rows.run_cell_magic("gpu", "--quiet", "y = x * 2\nprint('once')\nhist.append(1)\n")
    assert capsys.readouterr().out == "once\n" and rows.user_ns["hist"] == [1]
    assert not any("once per batch" in n for n in _notes())


def test_a_failing_batch_shows_what_it_printed_before_the_error(rows, capsys):
    capsys.readouterr()
    cell = ("y = x * 2\nprint('start')\n"
            "if y.shape[0] < 3:\n    print('short batch')\n    raise ValueError('stop')\n")
    rows.run_cell(f"%%gpu --quiet {BATCHED}\n{cell}")
    printed = capsys.readouterr().out.split("-" * 20)[0]  # before the traceback
    assert printed == "start\nshort batch\n"


@pytest.mark.parametrize("cell, kind", [("info = {'rows': len(y)}", "dict"),
                                        ("t = [float(y[0, 0])]", "list")])
def test_a_result_no_rule_joins_is_refused_with_the_fix_that_works(rows, cell, kind):
    """A list or a dict made per batch: the fix is a cell of its own, not a --reduce rule
    (the rules join numbers and arrays)."""
    name = cell.split(" =")[0]
    msg = cell_error(rows, f"y = x * 2\n{cell}\n", BATCHED)
    assert f"compute it in a cell of its own, or run this one whole (a --reduce rule joins " \
           f"numbers and arrays, and {name!r} is a {kind})" in msg
    assert "--reduce " + name not in msg and name not in rows.user_ns


@pytest.mark.parametrize("write", ["np.save(path, y)", "y.tofile(path)"])
def test_a_batched_cell_that_writes_its_rows_to_a_file_is_refused(rows, tmp_path, write):
    """Each batch would write its own rows over the last's: a file of the last batch."""
    rows.user_ns["path"] = str(tmp_path / "y.npy")
    msg = cell_error(rows, f"y = x * 2\n{write}\n", BATCHED)
    assert "which writes a file, which a batched run would do once per batch" in msg
    assert "write the gathered result in a cell of its own" in msg
    assert not (tmp_path / "y.npy").exists() and "y" not in rows.user_ns


@pytest.mark.parametrize("cell", ["L[0][:] = -1", "L[0] += 1", "L[0].fill(0)", "d['x'][:, 0] = 0",
                                  "o.a[0] = 1", "L[i][:] = 0"])
def test_a_batched_cell_that_changes_its_input_through_a_holder_is_refused(rows, cell):
    """``L = [x]`` from an earlier cell, then ``y = x * 2; L[0][:] = -1`` batched: the first
    batch's change reached the rows the later batches uploaded, so ``y`` came back with
    those rows from -1, silently (a plain cell's ``y`` is ``x * 2`` of the old values).
    Refused before anything moves, naming the holder, the input and the fix; nothing
    changed."""
    rows.run_cell("import types\nL = [x, np.ones(3)]\nd = {'x': x}\n"
                  "o = types.SimpleNamespace(a=x[::2])\ni = 0")
    x = rows.user_ns["x"]
    before = x.copy()
    message = cell_error(rows, f"y = x * 2\n{cell}", f"--quiet {BATCHED}")
    holder = cell.split("[")[0].split(".")[0]
    assert message.startswith(f"the cell changes the batched input 'x' (or a view of it) in "
                              f"place through {holder}, which holds it")
    assert "change x through its name in the cell (x[...] = ..., or a function's argument: " \
           "f(x)), or run the cell whole" in message
    assert "y" not in rows.user_ns
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize(("define", "call", "via"), [
    ("def f():\n    x[:, 0] = -1\n", "f()", "f(), which changes it as its global x"),
    ("def f():\n    global x\n    x += 1\n", "f()", "f(), which changes it as its global x"),
    ("def f():\n    x.fill(0)\n", "z = f()", "f(), which changes it as its global x"),
    ("def g():\n    L[0][:] = -1\ndef f(v):\n    g()\n    return v\n", "y = f(y)",
     "g(), which changes it as its global L"),
    ("def f(k=1):\n    L[0][:, 0] = k\n", "f(k=2)", "f(), which changes it as its global L")])
def test_a_batched_cell_calling_a_function_that_changes_its_input_as_a_global_is_refused(
        rows, define, call, via):
    """``def f(): x[:, 0] = -1`` from an earlier cell, then ``f(); y = x * 2`` batched: the
    function writes the user's array itself (its globals), and each batch uploads its rows
    after the first batch's call, so ``y``'s first batch kept the old values and the rest
    the new, silently (a plain cell's ``y`` has -2 in every row). Refused before anything
    moves, naming the function and the input; nothing changed."""
    rows.run_cell(f"L = [x]\n{define}")
    x = rows.user_ns["x"]
    before = x.copy()
    message = cell_error(rows, f"y = x * 2\n{call}\n", f"--quiet {BATCHED}")
    assert message.startswith(f"the cell changes the batched input 'x' (or a view of it) in "
                              f"place through the function {via}: a batched run uploads")
    assert "y" not in rows.user_ns and "z" not in rows.user_ns
    np.testing.assert_array_equal(x, before)


def test_a_batched_cell_calling_a_method_that_changes_its_input_is_refused(rows):
    """``b = Box(x)`` of a class from an earlier cell whose ``reset`` writes ``self.x[:] =
    -1``, then ``y = x * 2; b.reset()`` batched: the method writes the user's array, which
    the later batches upload changed (a plain cell's ``y`` is the old values doubled).
    Refused before anything moves, naming the method; nothing changed."""
    rows.run_cell("class Box:\n    def __init__(self, a):\n        self.a = a\n"
                  "    def reset(self):\n        self.a[:, 0] = -1\nb = Box(x)\n")
    x = rows.user_ns["x"]
    before = x.copy()
    message = cell_error(rows, "y = x * 2\nb.reset()\n", f"--quiet {BATCHED}")
    assert message.startswith("the cell changes the batched input 'x' (or a view of it) in "
                              "place through the method reset(), which changes it as self.a: "
                              "a batched run uploads")
    assert "y" not in rows.user_ns
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize(("define", "call"), [
    ("def f(v):\n    v[:, 0] = -1\n", "f(y)"),  # its argument: the batch's own rows
    ("def f():\n    x = np.zeros(3)\n    x[:] = 1\n    return x\n", "f()"),  # a local
    ("def f():\n    w[:] = 1\n", "f()"),  # a global, but not the input
    ("def f():\n    return x.sum()\n", "y = y + 0 * f()")])  # reads only
def test_a_batched_cell_calling_a_function_that_leaves_its_input_alone_runs(rows, define, call):
    """A function that changes its argument, a local of its own or another global, or only
    reads the input, is no change of the batched input through the user's array: it runs."""
    rows.run_cell(f"w = np.ones(4)\n{define}")
    rows.run_cell_magic("gpu", f"--quiet {BATCHED}", f"y = x * 2\n{call}\n")
    assert "y" in rows.user_ns


@pytest.mark.parametrize("cell", ["L[0] = 5", "L[1][:] = 0", "o.b[:] = 0", "d['y'] = 1",
                                  "y = y + L[0].mean()"])
def test_a_batched_cell_that_changes_a_holder_but_not_its_input_runs(rows, cell):
    """Replacing a holder's item (``L[0] = 5``), changing another item (``L[1]``) or
    reading the input through it is no change of the batched input: the cell runs."""
    rows.run_cell("import types\nL = [x, np.ones(3)]\nd = {'x': x}\n"
                  "o = types.SimpleNamespace(a=x[::2], b=np.ones(2))")
    rows.run_cell_magic("gpu", f"--quiet {BATCHED}", f"y = x * 2\n{cell}")
    assert "y" in rows.user_ns
