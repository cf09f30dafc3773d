"""The Dask inputs of a cluster run, as a notebook user gives them, on a real LocalCluster of
2 worker processes: each one the blocks cannot use (0-d, chunked along another axis, of unknown
chunk sizes, of lengths that differ, of thousands of tiny chunks) is refused before any block
runs, in one line that names the input and the fix, which then runs and equals NumPy; chunks
of 0 rows (a mask's, after ``compute_chunk_sizes()``) are left out, so ``mean`` and ``min``
over the blocks are NumPy's."""

from __future__ import annotations

import numpy as np
import pytest
from IPython.core.error import UsageError

da = pytest.importorskip("dask.array")


@pytest.fixture
def x(ip, joined):
    x = np.random.default_rng(5).random((1000, 4))
    ip.user_ns["x"] = x
    return x


def refused(ip, cell: str) -> str:
    """The one line a ``%%gpu --to-host`` cell over Dask inputs is refused with."""
    with pytest.raises(UsageError) as err:
        ip.run_cell_magic("gpu", "--quiet --to-host", cell)
    msg = str(err.value)
    assert "\n" not in msg, msg
    # refused before any block: no word of a run that failed or of futures cancelled
    assert "cluster run failed" not in msg and "cancelled" not in msg, msg
    return msg


def fixed(ip, fix: str, cell: str) -> None:
    """Run the refusal's fix in a plain cell, then ``cell`` under ``%%gpu``."""
    ip.run_cell(fix).raise_error()
    ip.run_cell_magic("gpu", "--quiet --to-host", cell)


def test_unknown_chunk_sizes_are_named_with_a_question_mark_not_nan(ip, x):
    xd = da.from_array(x, chunks=(100, 4))
    ip.user_ns["xm"] = xd[xd[:, 0] > 0.5]
    msg = refused(ip, "y = xm + 1\n")
    assert "Dask input 'xm' has chunks of unknown size (shape (?, 4)" in msg, msg
    assert "nan" not in msg.lower() and "xm = xm.compute_chunk_sizes()" in msg, msg
    fixed(ip, "xm = xm.compute_chunk_sizes()", "y = xm + 1\n")
    np.testing.assert_array_equal(ip.user_ns["y"], x[x[:, 0] > 0.5] + 1)


@pytest.mark.parametrize(("shape", "chunks", "where", "fix"), [
    ((1000, 4), (100, 2), "along axis 1 too (chunks (100, 2) of (1000, 4))",
     "xd = xd.rechunk({1: -1})"),
    ((200, 4, 6), (50, 2, 3), "along axes 1, 2 too (chunks (50, 2, 3) of (200, 4, 6))",
     "xd = xd.rechunk({1: -1, 2: -1})"),
], ids=["2-d", "3-d"])
def test_chunks_along_another_axis_are_named_with_the_rechunk_that_fixes_them(
        ip, x, shape, chunks, where, fix):
    data = np.random.default_rng(6).random(shape)
    ip.user_ns["xd"] = da.from_array(data, chunks=chunks)
    msg = refused(ip, "y = xd * 2\n")
    assert f"Dask input 'xd' is chunked {where}" in msg and fix in msg, msg
    fixed(ip, fix, "y = xd * 2\n")
    np.testing.assert_array_equal(ip.user_ns["y"], data * 2)


def test_a_0d_dask_input_is_one_line_with_its_fix(ip, x):
    ip.user_ns["xd"] = da.from_array(np.float64(3.0))
    msg = refused(ip, "y = xd + 1\n")
    assert "Dask input 'xd' is 0-d" in msg and "xd = xd.compute()" in msg, msg


def test_dask_inputs_of_different_lengths_are_told_to_slice_before_the_cell(ip, x):
    """Slicing the rows in the cell itself is refused (a block's slice is not the input's):
    the fix is a plain cell before it."""
    ip.user_ns.update(xd=da.from_array(x, chunks=(100, 4)),
                      wd=da.from_array(x[:900], chunks=(100, 4)))
    msg = refused(ip, "y = xd + wd\n")
    assert "different leading lengths (wd (900, 4), xd (1000, 4))" in msg, msg
    assert "in a cell before this one, e.g. xd = xd[:900]" in msg, msg
    fixed(ip, "xd = xd[:900]", "y = xd + wd\n")
    np.testing.assert_array_equal(ip.user_ns["y"], x[:900] * 2)


def test_thousands_of_uneven_tiny_chunks_are_one_line_whose_rechunk_runs(ip, x):
    t = np.random.default_rng(7).random((3000, 2))
    ip.user_ns["xd"] = da.from_array(t, chunks=((1,) * 2000 + (1000,), 2))
    msg = refused(ip, "y = xd + 1\n")
    assert "xd would run as 2,001 blocks of 23 B on average" in msg, msg
    assert "give xd = xd.rechunk({0: 3000})" in msg, msg
    fixed(ip, "xd = xd.rechunk({0: 3000})", "y = xd + 1\n")
    np.testing.assert_array_equal(ip.user_ns["y"], t + 1)


@pytest.mark.parametrize("rule", ["mean", "min", "max", "sum"])
def test_chunks_of_0_rows_after_a_mask_give_numpys_totals(ip, x, rule):
    """A mask then ``compute_chunk_sizes()`` (the fix of an unknown chunk size) leaves chunks
    of 0 rows; a block of them gave ``--reduce s=mean`` NaN and ``s=min`` NumPy's
    "zero-size array" error, where NumPy on the whole array gives a value."""
    xd = da.from_array(x, chunks=(100, 4))
    xm = xd[xd[:, 0] > 0.985].compute_chunk_sizes()
    assert 0 in xm.chunks[0] and sum(xm.chunks[0]) > 0  # the case: some chunks are empty
    ip.user_ns["xm"] = xm
    ip.run_cell_magic("gpu", f"--quiet --to-host --reduce s={rule}",
                      f"s = xm.{rule}(axis=0)\ny = xm * 2\n")
    kept = x[x[:, 0] > 0.985]
    np.testing.assert_allclose(ip.user_ns["s"], getattr(kept, rule)(axis=0), rtol=1e-12)
    np.testing.assert_array_equal(ip.user_ns["y"], kept * 2)


def test_an_input_of_only_0_row_chunks_is_refused_naming_it(ip, x):
    ip.user_ns["xd"] = da.from_array(x[:0], chunks=(10, 4))
    msg = refused(ip, "y = xd + 1\n")
    assert "batched input xd has 0 rows" in msg and "xd = xd.compute()" in msg, msg
