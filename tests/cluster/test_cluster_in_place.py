"""A ``--cluster`` cell that changes a NumPy input in place, on a real LocalCluster of 2
worker processes: under ``--to-host`` the blocks' rows go into the user's array, which the
name stays (an alias, a view and a list from an earlier cell see the change, as after a
plain cell); without it the result is a Dask array and the user's array is left as it was
(as a whole run leaves its device copy); a change followed by a rebinding is refused, and so
are blocks that change the input and blocks that rebind it."""

from __future__ import annotations

import numpy as np
import pytest

import cupy_magic

CLUSTER = "--quiet --cluster --batch-rows 250"


def earlier(ip, x: np.ndarray) -> None:
    ip.user_ns.update(x=x, alias=x, view=x[:5], held=[x])


@pytest.mark.parametrize("cell", ["x *= 2\n", "x[:] = x * 2\n", "np.multiply(x, 2, out=x)\n"])
def test_to_host_writes_the_blocks_rows_into_the_user_s_array(ip, joined, cell):
    x = np.random.default_rng(0).random((1000, 3))
    want = x * 2
    earlier(ip, x)
    ip.run_cell_magic("gpu", f"{CLUSTER} --to-host", cell)
    report = cupy_magic.last_report()
    assert report.batch.blocks == 4 and report.batch.in_place == ("x",)
    ns = ip.user_ns
    assert ns["x"] is x and ns["alias"] is x and ns["held"][0] is x
    np.testing.assert_array_equal(x, want)
    np.testing.assert_array_equal(ns["view"], want[:5])
    assert report.outputs_by_name["x"].where == \
        "host (the user's array, changed in place, as in a plain cell)"
    assert "x (rows gathered into the user's array, changed in place as in a plain cell)" \
        in "\n".join(report.text_lines())


def test_without_to_host_the_result_stays_on_the_workers(ip, joined):
    import dask.array as da

    x = np.arange(1000.0)
    keep = x.copy()
    earlier(ip, x)
    ip.run_cell_magic("gpu", CLUSTER, "x *= 2\n")
    got = ip.user_ns["x"]
    assert isinstance(got, da.Array) and cupy_magic.last_report().batch.in_place == ()
    computed = got.compute()
    np.testing.assert_array_equal(getattr(computed, "get", lambda: computed)(), keep * 2)
    np.testing.assert_array_equal(x, keep)


@pytest.mark.parametrize("cell", ["x += 1\nx = x * 2\n", "x[:] = 0\ndel x\n",
                                  "if float(x[0]) < 100:\n    x += 1\nelse:\n    x = x + 1\n"])
def test_a_change_then_a_rebinding_or_mixed_blocks_are_refused(ip, joined, cell):
    x = np.arange(1000.0)
    keep = x.copy()
    earlier(ip, x)
    with pytest.raises(Exception, match=r"(may change 'x' in place and then|the first "
                                        r"block changed 'x' and block \d+ rebound it)") as caught:
        ip.run_cell_magic("gpu", f"{CLUSTER} --to-host", cell)
    assert "\n" not in str(caught.value) and "no --cluster" in str(caught.value)
    assert ip.user_ns["x"] is x
    np.testing.assert_array_equal(x, keep)


def test_a_rebinding_then_a_change_leaves_the_user_s_array(ip, joined):
    x = np.arange(1000.0)
    keep = x.copy()
    earlier(ip, x)
    ip.run_cell_magic("gpu", f"{CLUSTER} --to-host", "x = x - 1\nx /= 2\n")
    np.testing.assert_array_equal(x, keep)
    np.testing.assert_array_equal(ip.user_ns["x"], (keep - 1) / 2)
    assert cupy_magic.last_report().batch.in_place == ()
