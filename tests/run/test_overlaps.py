"""Inputs that share memory (a view made in an earlier cell, ``a = x``): inside a ``%%gpu``
cell a change through one shows through the other, as in a plain cell, or the cell is
refused before anything moves (run/overlap.py). Before, each was copied apart and a cell that
normalised ``X`` in place read the old values through ``Xtr = X[:8]``."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import cell_error

import cupy_magic
from cupy_magic import backend


def _host(value):
    return backend.current().to_host(value) if backend.current().is_device_array(value) \
        else np.asarray(value)


def _setups():
    x = np.arange(40.0).reshape(10, 4)
    return {
        "prefix view": ("X = x.copy()\nXtr = X[:8]", "X -= X.mean(axis=0)\nm = Xtr.mean()"),
        "same array": ("X = x.copy()\nXtr = X", "X[0] = 100\nXtr[1] = 200\nm = X.sum()"),
        "reversed view": ("X = x.copy()\nXtr = X[::-1, ::2]", "Xtr *= -1\nm = X.sum()"),
        "column view": ("X = x.copy()\nXtr = X[:, 1]", "X[:, 1] = 7\nm = Xtr.sum()"),
        "two slices": ("X = x.copy()\nA = X[2:8]\nXtr = X[4:]", "A += 1\nm = Xtr.sum()"),
        "function": ("X = x.copy()\nXtr = X[1:3]\ndef bump(a):\n    a += 1",
                     "bump(X)\nm = Xtr.sum()"),
        "fortran": ("X = np.asfortranarray(x)\nXtr = X[:, 2:]", "X[:, 3] = 0\nm = Xtr.sum()"),
        "odd offset": ("X = np.zeros(36, np.uint8)\nXtr = X[4:].view(np.uint32)",
                       "X[5] = 9\nm = Xtr.sum()"),
        "one array": ("X = x.copy()\nXtr = X", "same = X is Xtr\nXtr.shape = (5, 8)\n"
                      "m = float(same) + X.shape[0]"),
    }, x


@pytest.mark.parametrize("case", list(_setups()[0]))
def test_a_change_through_one_input_shows_through_another_sharing_its_memory(ip, case):
    (setup, cell), x = _setups()[0][case], _setups()[1]
    plain = {"np": np, "x": x}
    exec(setup, plain)
    exec(cell, plain)
    ip.user_ns.update(np=np, x=x)
    ip.run_cell(setup)
    named = [n for n in ("X", "Xtr", "A") if re.search(rf"\b{n}\b", cell)]  # the others stay
    before = {n: ip.user_ns[n].copy() for n in named}
    ip.run_cell_magic("gpu", "--quiet", cell)
    assert float(_host(ip.user_ns["m"])) == pytest.approx(float(plain["m"]))
    for name in named:
        np.testing.assert_array_equal(_host(ip.user_ns[name]), plain[name], err_msg=name)
    # the transaction: the user's NumPy arrays themselves are left as they were
    assert any(not np.array_equal(before[n], plain[n]) for n in before)


def test_inputs_sharing_memory_move_once_and_the_report_says_so(ip):
    ip.user_ns["X"] = X = np.ones((1000, 8))
    ip.user_ns["Xtr"] = X[:800]
    ip.run_cell_magic("gpu", "--quiet", "s = X.sum() + Xtr.sum()")
    rows = {m.name: m for m in cupy_magic.last_report().inputs}
    assert rows["X"].nbytes == X.nbytes and rows["Xtr"].nbytes == 0
    assert rows["Xtr"].view_of == "X"
    assert "a view into the copy of X" in str(cupy_magic.last_report())
    assert float(_host(ip.user_ns["s"])) == 8000 + 6400


def test_a_failing_cell_leaves_inputs_sharing_memory_as_they_were(ip):
    X = np.arange(12.0)
    ip.user_ns.update(X=X, Xtr=X[:6])
    msg = cell_error(ip, "X *= 2\nXtr[0] = -1\nraise ValueError('boom')\n")
    assert "boom" in msg
    assert ip.user_ns["X"] is X and list(X) == list(np.arange(12.0))
    assert ip.user_ns["Xtr"].base is X


MISALIGNED = np.zeros(52, np.uint8)  # a view a GPU cannot read in place: a copy of its own


@pytest.mark.parametrize("line, run, X, Xb", [
    ("--batch --batch-rows 4", "a batched run", np.arange(24.0).reshape(12, 2), None),
    ("--dtype float32", "the cell's copies", np.arange(24.0).reshape(12, 2), None),
    ("", "the cell's copies", MISALIGNED[:48].view(np.float64).reshape(3, 2),
     MISALIGNED[1:49].view(np.float64).reshape(3, 2))])
def test_where_they_cannot_share_a_copy_a_cell_that_changes_one_is_refused(ip, line, run, X,
                                                                           Xb):
    Xb = X[::-1] if Xb is None else Xb
    ip.user_ns.update(X=X, Xb=Xb)
    msg = cell_error(ip, "X += 1\ny = Xb * 2\n", line)
    assert msg.startswith("the inputs 'X' and 'Xb' share memory") and run in msg
    assert "Xb = Xb.copy()" in msg
    assert "y" not in ip.user_ns and ip.user_ns["X"] is X


def test_where_they_cannot_share_a_copy_a_cell_that_only_reads_them_runs(ip):
    X = np.arange(24.0).reshape(12, 2)
    ip.user_ns.update(X=X, Xb=X[::-1])
    ip.run_cell_magic("gpu", "--quiet --to-host --batch --batch-rows 4", "y = X + Xb\n")
    np.testing.assert_array_equal(ip.user_ns["y"], X + X[::-1])


def test_inputs_sharing_memory_count_once_against_the_budget(ip):
    """``X`` and ``Xtr = X[:800]`` need ``X``'s bytes, not both: a cell that changes one
    runs whole under a budget that holds ``X`` once (summed, it would be batched, where
    such a cell is refused)."""
    X = np.ones((1000, 128))  # 1 MB
    ip.user_ns.update(X=X, Xtr=X[:800])
    ip.run_line_magic("vram_budget", "1.6MB")
    ip.run_cell_magic("gpu", "--quiet", "X -= 1\nm = float(Xtr.sum())")
    assert ip.user_ns["m"] == 0.0 and cupy_magic.last_report().batch is None


def test_a_read_only_array_changed_through_a_writeable_view_as_numpy_lets_it(ip):
    X = np.arange(6.0)
    V = X[1:]
    X.flags.writeable = False
    ip.user_ns.update(X=X, V=V)
    ip.run_cell_magic("gpu", "--quiet", "V += 1\ns = float(X.sum())\n")
    assert ip.user_ns["s"] == 20.0  # X shows the change, as after a plain cell
    assert list(_host(ip.user_ns["V"])) == [2.0, 3.0, 4.0, 5.0, 6.0]


def test_views_of_one_array_are_committed_together_and_stay_views(ip):
    """After the cell, a change through one in a later plain cell shows through the others,
    as after a plain cell (on the CPU fallback; a GPU's are views of one device array)."""
    X = np.arange(12.0).reshape(6, 2)
    ip.user_ns.update(X=X, Xtr=X[:2])
    ip.run_cell_magic("gpu", "--quiet", "X[5] = 0\nm = Xtr.sum()\n")
    ip.run_cell("X[0, 0] = 99")
    assert float(_host(ip.user_ns["Xtr"])[0, 0]) == 99.0


def test_a_row_and_a_column_only_read_are_copied_apart_not_as_the_whole_matrix(ip):
    X = np.ones((300, 300))
    ip.user_ns.update(c=X[:, 0], r=X[0])
    ip.run_cell_magic("gpu", "--quiet", "s = float(c.sum() + r.sum())\n")
    assert ip.user_ns["s"] == 600.0
    rows = {m.name: m for m in cupy_magic.last_report().inputs}
    assert rows["c"].nbytes == rows["r"].nbytes == 300 * 8  # not the 720 KB between them


def test_a_row_and_a_column_changed_need_the_stretch_between_them_and_are_refused_first(ip):
    """Changed, a row and a column of a matrix move as the one stretch that holds them
    (nearly the whole matrix): a budget that holds the two but not the stretch refuses the
    cell before anything moves, naming the stretch, and the names keep their values."""
    X = np.ones((1000, 1000))  # 8 MB; the row and the column 8 KB each
    ip.user_ns.update(r=X[0], c=X[:, 0])
    ip.run_line_magic("vram_budget", "1MB")
    result = ip.run_cell("%%gpu --quiet\nr *= 2\nc += 1\n")
    assert type(result.error_in_exec).__name__ == "BudgetExceeded"
    msg = str(result.error_in_exec)
    assert "'c' and 'r' share memory and move as the one stretch of 7.62 MiB" in msg, msg
    assert "try copying one in a plain cell first (r = r.copy())" in msg, msg
    assert "line 1" not in msg and "--batch" not in msg, msg  # refused before, not batched
    assert ip.user_ns["r"][1] == 1.0 and ip.user_ns["c"][1] == 1.0
    assert np.shares_memory(ip.user_ns["r"], X)  # still views of the user's matrix


def test_under_to_host_views_of_one_array_come_back_as_views_of_one_host_array(ip):
    """``--to-host`` brings views of one device array (the inputs ``X``, ``Xtr = X[:2]``,
    both named in the cell; views the cell makes) back as views of one host copy, as a plain
    cell leaves them: a change through one in a later cell shows through the others. Before,
    each came back as its own copy on a GPU."""
    body = "X -= 1\nm = Xtr.sum()\ny = X[::-1, ::2]\nz = X.T\nw = X[3:, 2]\nv = X\n"
    X = np.arange(40.0).reshape(10, 4)
    plain = {"X": X.copy()}
    plain["Xtr"] = plain["X"][:2]
    exec(body, plain)
    ip.user_ns.update(X=X, Xtr=X[:2])
    ip.run_cell_magic("gpu", "--quiet --to-host", body)
    ns = ip.user_ns
    for n in ("X", "Xtr", "y", "z", "w", "v"):
        assert type(ns[n]) is np.ndarray and ns[n].strides == plain[n].strides, n
        np.testing.assert_array_equal(ns[n], plain[n])
        assert np.shares_memory(ns[n], ns["X"]), n
    assert ns["v"] is ns["X"]
    ip.run_cell("X[9, 2] = -5")
    assert ns["y"][0, 1] == ns["z"][2, 9] == ns["w"][-1] == -5



def test_host_together_brings_views_of_one_allocation_as_views_of_one_host_copy(ip, xp):
    """``overlap.host_together``, which ``--to-host`` uses on a GPU: views of one allocation
    come back as views of one copy of their stretch, with NumPy's values and strides; a row
    and a column of a large matrix (a stretch larger than they are) are left out."""
    from cupy_magic.run.overlap import host_together

    be = backend.current()
    X = xp.arange(40.0).reshape(10, 4)
    views = {"X": X, "y": X[::-1, ::2], "w": X[3:, 2], "v": X}
    got = host_together(views, be)
    want = np.arange(40.0).reshape(10, 4)
    for name, expect in {"X": want, "y": want[::-1, ::2], "w": want[3:, 2], "v": want}.items():
        np.testing.assert_array_equal(got[name], expect)
        assert got[name].strides == expect.strides and np.shares_memory(got[name], got["X"])
    assert got["v"] is got["X"]
    M = xp.zeros((300, 300))
    assert host_together({"r": M[0], "c": M[:, 0]}, be) == {}
