"""A later batch of a batched cell that changes an input through another name than its own
(a function it is passed to, an alias), where the first batch did not, is refused: a plain
cell would leave the change in the user's array, which a batched run cannot write back. The
run checks each batch (``run/batchwatch.py``), not the first alone, so a change that depends
on the rows is not silently dropped. Through a real shell, on each backend."""

from __future__ import annotations

import numpy as np
import pytest

import cupy_magic

BATCHED = "--quiet --batch --batch-rows 60"


def refused_in(ip, cell: str, batch: int | None, name: str = "x") -> None:
    """The cell stops in one line naming ``name`` and the batch that changed it (``None``: a
    shared input, one copy for all batches), and where it failed
    the same batch; the user's arrays keep their values and objects, and nothing the cell
    binds is committed."""
    x = np.arange(1200.0).reshape(400, 3)
    w = np.ones(3)
    keep = x.copy(), w.copy()
    ip.user_ns.update(x=x, w=w)
    ip.user_ns.pop("s", None)
    where = f"in batch {batch}" if batch else r"\(one copy all batches share\)"
    with pytest.raises(Exception, match=rf"changes {name!r} {where} through another "
                                        r"name than its own") as caught:
        ip.run_cell_magic("gpu", BATCHED, cell)
    assert "\n" not in str(caught.value) and f"{name}[...] = ..." in str(caught.value)
    if batch:
        assert f"(batch {batch} of " in str(caught.value)
    assert ip.user_ns["x"] is x and ip.user_ns["w"] is w and "s" not in ip.user_ns
    np.testing.assert_array_equal(x, keep[0])
    np.testing.assert_array_equal(w, keep[1])


def test_a_function_that_changes_later_rows_is_refused_at_their_batch(ip, poisoned):
    # rows 300 and on (the sixth batch of 60) have a maximum over 900; the first has none
    ip.run_cell("def shift(a):\n    a[a.max(axis=1) > 900] -= 1\n")
    refused_in(ip, "shift(x)\ns = x.sum(axis=1)\n", 6)


def test_an_alias_that_changes_later_rows_is_refused(ip, poisoned):
    refused_in(ip, "y = x\ny[y.max(axis=1) > 900] = 0\ns = x.sum(axis=1)\n", 6)


def test_a_shared_input_changed_by_a_later_batch_is_refused(ip, poisoned):
    ip.run_cell("def grow(a, v):\n    if float(a.max()) > 900:\n        v += 1\n")
    refused_in(ip, "grow(x, w)\ns = x.sum(axis=1)\n", None, "w")


def test_a_later_batch_that_reshapes_an_input_through_an_alias_is_refused(ip, poisoned):
    refused_in(ip, "y = x\nif float(y.max()) > 900:\n    y.shape = (-1,)\ndel y\n", 6)


def test_a_cell_that_deletes_an_input_it_read_runs(ip, poisoned):
    """The batch's copy is gone after the cell (``del x``): not taken for a change."""
    ip.run_cell("def total(a):\n    return a.sum(axis=1)\n")
    x = np.arange(1200.0).reshape(400, 3)
    ip.user_ns["x"] = x
    ip.run_cell_magic("gpu", f"{BATCHED} --to-host", "s = total(x)\ndel x\n")
    assert "x" not in ip.user_ns and cupy_magic.last_report().batch.batches > 1
    np.testing.assert_array_equal(ip.user_ns["s"], np.arange(1200.0).reshape(400, 3).sum(axis=1))


def test_a_function_that_only_reads_runs_batched(ip, poisoned):
    ip.run_cell("def total(a):\n    return a.sum(axis=1)\n")
    x = np.arange(1200.0).reshape(400, 3)
    keep = x.copy()
    ip.user_ns["x"] = x
    ip.run_cell_magic("gpu", f"{BATCHED} --to-host", "s = total(x)\n")
    report = cupy_magic.last_report()
    assert report.batch.batches > 1 and ip.user_ns["x"] is x
    np.testing.assert_array_equal(x, keep)
    np.testing.assert_array_equal(ip.user_ns["s"], keep.sum(axis=1))


def test_batches_that_delete_an_input_and_batches_that_keep_it_are_refused(ip, poisoned):
    x = np.arange(1200.0).reshape(400, 3)
    ip.user_ns["x"] = x
    ip.user_ns.pop("s", None)
    with pytest.raises(Exception, match=r"batch 6 kept 'x' and the first batch deleted it"):
        ip.run_cell_magic("gpu", BATCHED, "s = x.sum(axis=1)\nif float(x.max()) < 900:\n"
                          "    del x\n")
    assert ip.user_ns["x"] is x and "s" not in ip.user_ns


def test_a_rebinding_input_a_later_batch_changes_through_a_function_is_refused(ip, poisoned):
    """The first batch leaves x as it got it (flag false); batch 6 changes it through shift:
    a plain cell leaves the change in the user's array."""
    ip.run_cell("def shift(a):\n    a[a.max(axis=1) > 900] -= 1\n")
    ip.user_ns["flag"] = False
    refused_in(ip, "shift(x)\nif flag:\n    x = x * 2\ns = x.sum(axis=1)\n", 6)
