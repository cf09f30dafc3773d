"""A batched cell that changes an input in place changes the user's array, as a plain cell
does: the name stays the same object, and an alias, a view or a list from an earlier cell
sees the change (the rows are gathered, then written into the user's array at the commit).
A cell that rebinds the input leaves the user's array as it was; a failing cell changes
nothing; an input cast by ``--dtype`` comes back a new array. Through a real shell, on each
backend."""

from __future__ import annotations

import numpy as np
import pytest

import cupy_magic

BATCHED = "--batch --batch-rows 60"


def gpu(ip, cell: str, line: str = BATCHED):
    ip.run_cell_magic("gpu", f"--quiet {line}", cell)
    return cupy_magic.last_report()


def earlier(ip, x: np.ndarray) -> None:
    """An earlier cell's names for ``x``: an alias, a view and a list holding it."""
    ip.user_ns.update(x=x, alias=x, view=x[:5], held=[x])


@pytest.mark.parametrize("line", [BATCHED, f"{BATCHED} --to-host"])
@pytest.mark.parametrize("cell", ["x *= 2\n", "x[:] = x * 2\n", "np.multiply(x, 2, out=x)\n",
                                  "x.sort(axis=1)\nx *= 2\n"])
def test_an_in_place_change_reaches_the_user_s_array_and_its_views(ip, poisoned, cell, line):
    x = np.random.default_rng(0).random((400, 3))
    want = x * 2 if "sort" not in cell else np.sort(x, axis=1) * 2
    earlier(ip, x)
    report = gpu(ip, cell, line)
    assert report.batch.batches > 1
    ns = ip.user_ns
    assert ns["x"] is x and ns["alias"] is x and ns["held"][0] is x
    np.testing.assert_array_equal(x, want)
    np.testing.assert_array_equal(ns["view"], want[:5])
    assert report.batch.in_place == ("x",)
    assert report.outputs_by_name["x"].where == \
        "host (the user's array, changed in place, as in a plain cell)"
    assert "x (rows gathered into the user's array, changed in place as in a plain cell)" \
        in "\n".join(report.batch.lines())


def test_a_rebound_input_leaves_the_user_s_array_as_it_was(ip, poisoned):
    x = np.random.default_rng(1).random((400, 3))
    keep = x.copy()
    earlier(ip, x)
    report = gpu(ip, "x = x * 2\n")
    ns = ip.user_ns
    assert ns["x"] is not x and ns["alias"] is x
    np.testing.assert_array_equal(x, keep)
    np.testing.assert_array_equal(ns["x"], keep * 2)
    assert report.batch.in_place == ()
    assert report.outputs_by_name["x"].where == "host (rows gathered)"


def refused(ip, x: np.ndarray, cell: str, error: type, match: str) -> str:
    """The cell over ``x`` (with the earlier names for it) stops with ``error`` matching
    ``match``, and leaves the user's ``x`` the same object with the same values."""
    keep = x.copy()
    earlier(ip, x)
    with pytest.raises(error, match=match) as caught:
        gpu(ip, cell)
    np.testing.assert_array_equal(x, keep)
    assert ip.user_ns["x"] is x
    return str(caught.value)


@pytest.mark.parametrize("cell", ["x += 1\nx = x * 2\n", "x += 1\ndel x\n",
                                  "x[:, 0] = 5\nx = 0\n"])
def test_a_change_then_a_rebinding_is_refused(ip, poisoned, cell):
    """A plain cell leaves x += 1 in the user's array before x = x * 2 rebinds the name (its
    earlier views see it); a batched run gathers only the new value, so it refuses the cell
    in one line naming x and the fix, and changes nothing."""
    message = refused(ip, np.arange(1200.0).reshape(400, 3), cell, Exception,
                      "may change 'x' in place and then")
    assert "\n" not in message and "x = x + 1" in message


def test_a_rebinding_then_a_change_runs(ip, poisoned):
    """x = x - x.mean(); x /= 2 changes a new array in place: the user's stays as it was."""
    x = np.arange(400.0)
    keep = x.copy()
    earlier(ip, x)
    gpu(ip, "x = x - 1\nx /= 2\n")
    np.testing.assert_array_equal(x, keep)
    np.testing.assert_array_equal(ip.user_ns["x"], (keep - 1) / 2)


def test_a_failing_cell_leaves_the_user_s_array_as_it_was(ip, poisoned):
    x = np.arange(400.0)
    x[350] = -1.0  # in the last batches: the first ones change their rows, then one fails
    refused(ip, x, "x *= 2\nif bool((x < 0).any()):\n    raise ValueError('negative row')\n",
            ValueError, "negative row")


def test_an_input_cast_by_dtype_comes_back_a_new_array(ip, poisoned):
    x = np.arange(400.0)
    keep = x.copy()
    earlier(ip, x)
    report = gpu(ip, "x *= 2\n", f"{BATCHED} --dtype float32")
    ns = ip.user_ns
    assert ns["x"] is not x and ns["x"].dtype == np.float32
    np.testing.assert_array_equal(x, keep)
    np.testing.assert_array_equal(ns["x"], (keep * 2).astype(np.float32))
    assert report.batch.in_place == ()


def test_batches_that_change_some_rows_and_rebind_others_are_refused(ip, poisoned):
    """Changed in place in the first batches, rebound in a later one: a plain cell does one
    or the other for the whole array; refused in one line, the user's array unchanged."""
    message = refused(ip, np.arange(400.0),
                      "if float(x[0]) < 100:\n    x += 1\nelse:\n    x = x + 1\n", Exception,
                      r"may change 'x' in place and then binds|the first batch changed 'x'")
    assert "\n" not in message
