"""The same on the device: CuPy's refusals met at run time, and the fallback's copies."""

from __future__ import annotations

import numpy as np
import pytest

import cupy_magic

pytestmark = pytest.mark.gpu


@pytest.fixture
def gpu(shell, monkeypatch):
    from conftest import loaded

    yield from loaded(shell, monkeypatch, "cupy")


def test_scalars_and_lists_cupy_refuses_are_converted(gpu):
    gpu.run_cell_magic("gpu", "--to-host", "a = np.sqrt(4)\nh, e = np.histogram([1, 2, 2, 3], "
                       "bins=3)\nc = np.can_cast(np.int8, np.int16)\n")
    assert gpu.user_ns["a"] == 2.0 and gpu.user_ns["h"].tolist() == [1, 2, 1]
    assert cupy_magic.last_report().conversions


def test_device_array_in_numpy_only_code_is_one_line(gpu):
    # A name bound to the numpy module is fronted in cells like `np` (an `import numpy as
    # onp` keeps working); NumPy-only code is code outside the cell, here a helper function.
    gpu.run_cell("import numpy\ndef host_only(a):\n    return numpy.asarray(a).sum()\n")
    gpu.user_ns["x"] = np.arange(4.0)
    gpu.user_ns.pop("y", None)
    result = gpu.run_cell("%%gpu\ny = host_only(np.asarray(x))\n")
    text = str(result.error_in_exec)
    assert text.startswith("line 1 `y = host_only(np.asarray(x))`: NumPy-only code"), text
    assert "(__main__.host_only)" in text and "received a device array" in text
    assert "cp.asnumpy(x)" in text and "y" not in gpu.user_ns


def test_not_implemented_reduce_stops_then_falls_back(gpu):
    gpu.user_ns["x"] = np.array([[True, False], [True, True]])
    result = gpu.run_cell("%%gpu\nm = np.logical_and.reduce(x, axis=1)\n")
    if result.error_in_exec is None:
        pytest.skip("this CuPy implements logical_and.reduce")
    assert "np.logical_and.reduce at line 1" in str(result.error_in_exec)
    gpu.run_cell_magic("gpu", "--fallback --to-host", "m = np.logical_and.reduce(x, axis=1)")
    assert gpu.user_ns["m"].tolist() == [False, True]
    (row,) = cupy_magic.last_report().fallbacks
    assert row.to_host_bytes == 4 and row.to_device_bytes == 2


def test_fallback_in_a_loop_is_a_counted_sync(gpu):
    gpu.user_ns["x"] = np.arange(8.0)
    gpu.run_cell_magic("gpu", "--fallback", "for i in range(3):\n    n = np.emath.sqrt(x - 4)\n")
    report = cupy_magic.last_report()
    (row,) = report.fallbacks
    assert row.calls == 3 and row.looped and row.to_host_bytes == 3 * 64
    assert any(s.line == 2 and (s.count or 0) >= 3 for s in report.syncs)


def test_dtype_refused_on_the_device(gpu):
    result = gpu.run_cell("%%gpu\ns = np.array(['a', 'bc'])\n")
    assert "CuPy has no dtype <U2" in str(result.error_in_exec)


def test_a_list_of_device_scalars_and_numbers_is_stacked_on_the_device(gpu):
    """NumPy's isfinite example: np.log gives device scalars inside the cell, and the list
    that holds them is stacked on the device as NumPy's asarray would build it."""
    gpu.run_cell_magic("gpu", "--to-host --quiet",
                       "f = np.isfinite([np.log(-1.), 1., np.log(0)])\n"
                       "m = np.maximum([np.float32(2), 3], 2.5)\n")
    assert gpu.user_ns["f"].tolist() == [False, True, False]
    assert gpu.user_ns["m"].tolist() == [2.5, 3.0]
    assert cupy_magic.last_report().conversions


def test_python_values_cupy_calls_methods_on_are_converted(gpu):
    """CuPy calls array methods on what it gets ('int' object has no attribute 'dot'):
    Python numbers, lists and ranges given where NumPy takes arrays are moved instead."""
    gpu.run_cell_magic("gpu", "--to-host --quiet",
                       "d = np.dot(3, 4)\nc = np.choose([0, 1], [[1, 2], [3, 4]])\n"
                       "p = np.float_power(range(3), 2)\n")
    assert int(gpu.user_ns["d"]) == 12 and gpu.user_ns["c"].tolist() == [1, 4]
    assert gpu.user_ns["p"].tolist() == [0.0, 1.0, 4.0]


def test_unknown_cupy_error_is_named_and_falls_back_on_the_gpu(gpu):
    gpu.user_ns["x"] = np.arange(5.0)
    gpu.user_ns.pop("p", None)
    cell = "p = np.percentile(x, 40, method='hazen')\n"
    result = gpu.run_cell(f"%%gpu --quiet\n{cell}")
    text = str(result.error_in_exec)
    assert text.startswith("np.percentile at line 1 `p = np.percentile(x, 40, method='hazen')`: "
                           "CuPy has not implemented this use ('hazen' method is not yet "
                           "supported"), text
    assert "p" not in gpu.user_ns
    gpu.run_cell_magic("gpu", "--quiet --fallback --to-host", cell)
    assert float(gpu.user_ns["p"]) == np.percentile(np.arange(5.0), 40, method="hazen")


def test_pad_median_runs_on_the_gpu(gpu):
    gpu.user_ns["x"] = np.arange(5.0)
    gpu.run_cell_magic("gpu", "--quiet --to-host", "p = np.pad(x, 2, mode='median')\n")
    np.testing.assert_array_equal(gpu.user_ns["p"], np.pad(np.arange(5.0), 2, mode="median"))
    import cupy_magic

    assert not cupy_magic.last_report().fallbacks


def test_flat_with_an_array_index_is_numpys_on_the_gpu(gpu):
    gpu.user_ns["x"] = np.arange(6.0).reshape(2, 3)
    gpu.run_cell_magic("gpu", "--quiet --to-host",
                       "y = x.flat[np.array([0, 4])]\nz = x.T.flat[np.array([1])]\n")
    np.testing.assert_array_equal(gpu.user_ns["y"], [0.0, 4.0])
    np.testing.assert_array_equal(gpu.user_ns["z"], np.arange(6.0).reshape(2, 3).T.flat[[1]])


def test_lists_at_int_or_array_like_parameters_are_converted(gpu):
    # NumPy documents these as "int or array_like", "1-D array_like": a list there is an array
    gpu.run_cell_magic("gpu", "--quiet --to-host",
                       "p = np.random.permutation([1, 4, 9, 12, 15])\n"
                       "i = np.searchsorted([11, 12, 13, 14, 15], 13)\n")
    assert sorted(gpu.user_ns["p"].tolist()) == [1, 4, 9, 12, 15]
    assert int(gpu.user_ns["i"]) == 2


def test_device_ints_where_cupy_needs_python_ints_are_read_on_the_host(gpu):
    gpu.user_ns["x"] = np.arange(16.0).reshape(4, 4)
    gpu.run_cell_magic("gpu", "--quiet --to-host", "parts = np.hsplit(x, np.array([1, 3]))\n")
    want = np.hsplit(np.arange(16.0).reshape(4, 4), [1, 3])
    assert [p.shape for p in gpu.user_ns["parts"]] == [w.shape for w in want]
    for got, ref in zip(gpu.user_ns["parts"], want, strict=True):
        np.testing.assert_array_equal(got, ref)


def test_out_cupy_fails_on_is_written_as_numpy_writes_it(gpu):
    a = np.array([[10.0, 7.0, 4.0], [3.0, 2.0, 1.0]])
    gpu.user_ns["a"] = a
    gpu.run_cell_magic("gpu", "--quiet --to-host",
                       "out = np.zeros(3)\nr = np.percentile(a, 50, axis=0, out=out)\n"
                       "same = r is out\nq = np.nanquantile(a, 0.5, axis=0, out=np.zeros(3))\n")
    np.testing.assert_array_equal(gpu.user_ns["out"], np.percentile(a, 50, axis=0))
    np.testing.assert_array_equal(gpu.user_ns["q"], np.nanquantile(a, 0.5, axis=0))
    assert gpu.user_ns["same"] is True


def test_sorting_a_strided_view_in_place_is_refused_and_the_fix_runs(gpu):
    # CuPy's ndarray.sort sorts only contiguous arrays; NumPy sorts a reversed view in place
    x = np.array([[3.0, 1.0, 2.0], [9.0, 7.0, 8.0]])
    gpu.user_ns["x"] = x
    result = gpu.run_cell("%%gpu --quiet --to-host\nv = x[:, ::-1]\nv.sort(axis=1)\n")
    text = str(result.error_in_exec)
    assert text.startswith("line 2 `v.sort(axis=1)`: CuPy does not support sorting a "
                           "non-contiguous view in place"), text
    assert "x[...] = np.sort(x, axis=...)" in text and "\n" not in text
    assert gpu.user_ns["x"] is x and x.tolist() == [[3.0, 1.0, 2.0], [9.0, 7.0, 8.0]]
    assert "v" not in gpu.user_ns

    gpu.run_cell_magic("gpu", "--quiet --to-host", "v = x[:, ::-1]\nv[...] = np.sort(v, axis=1)\n")
    expected = np.array([[3.0, 1.0, 2.0], [9.0, 7.0, 8.0]])
    expected[:, ::-1].sort(axis=1)
    np.testing.assert_array_equal(gpu.user_ns["x"], expected)
    assert gpu.user_ns["x"] is x
