"""Options CuPy's reductions lack (``where=``, ``initial=``, ``count_nonzero(keepdims=)``),
done with the backend's own functions (``cupy_magic.compat.emulate``): the same values and
dtypes as NumPy's, through a real shell on both backends (on the CPU fallback the calls are
checked against CuPy's names, so CuPy must be importable)."""

from __future__ import annotations

import numpy as np
import pytest

CALLS = [
    "np.sum([[0, 1], [np.nan, 5]], where=[False, True], axis=1)",
    "np.sum(x, where=m)",
    "np.sum(x, axis=0, where=m, keepdims=True)",
    "np.sum(np.array([1, 2], dtype=np.int8), where=[True, True], initial=5)",
    "np.sum(x, where=m, dtype=np.float32)",
    "np.prod([1., np.nan, 3.], where=[True, False, True])",
    "np.all([[True, True], [False, True]], where=[[True], [False]])",
    "np.any([[True, False], [False, False]], where=[[False], [True]])",
    "np.max(np.array([[-50], [10]]), axis=-1, initial=0, where=[[False], [True]])",
    "np.min(x, where=m, initial=100.0, axis=1)",
    "np.sum([10], initial=5)",
    "np.sum([1, 2], initial=-0.5)",
    "np.prod([2, 3], initial=1.5)",
    "np.prod([1, 2], initial=5)",
    "np.sum(x, axis=1, initial=0.5)",
    "np.max([[-50], [10]], axis=-1, initial=0)",
    "np.max(np.array([1, 2]), initial=3.7)",
    "np.min(x, axis=0, initial=3.5, keepdims=True)",
    "np.min(np.array([1.5, 2.0], dtype=np.float32), initial=1.25)",
    "np.count_nonzero(c, axis=1, keepdims=True)",
    "np.count_nonzero(c, keepdims=True)",
    "np.count_nonzero(c, axis=(0, 1), keepdims=True)",
    "np.mean(x, where=m)",
    "np.mean(c, axis=1, where=[[True, False, True, True]], keepdims=True)",
    "np.var(x, where=m, axis=0)",
    "np.var(c, where=c > 1, ddof=1)",
    "np.std(x, where=[[True], [True], [False]])",
    "np.std(x.astype(np.float32), where=m, axis=(0, 1))",
    "np.std(x + 1j * x[::-1], where=m, axis=1, keepdims=True)",
    "np.std(x, axis=1, mean=np.mean(x, axis=1, keepdims=True))",
    "np.var(x, axis=0, mean=np.mean(x, axis=0, keepdims=True), ddof=1)",
    "np.var(c, correction=1)",
    "np.std(x, where=m, mean=np.mean(x, where=m, keepdims=True), correction=0.5)",
]


@pytest.mark.parametrize("call", CALLS)
def test_masked_reductions_equal_numpy(ip, xp, cupy_names, call):
    inputs = {"x": np.arange(12.0).reshape(3, 4), "m": np.arange(12).reshape(3, 4) % 3 > 0,
              "c": np.array([[0, 1, 7, 0], [3, 0, 2, 19]])}
    ip.user_ns.update(inputs)
    ip.run_cell_magic("gpu", "--quiet --to-host", f"got = {call}\n")
    want = eval(call, {"np": np, **inputs})
    got = ip.user_ns["got"]
    assert np.asarray(got).dtype == np.asarray(want).dtype
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-6 if "float32" in call else 1e-13)
    assert not _fell_back(ip)


def _fell_back(ip) -> bool:
    import cupy_magic

    return bool(cupy_magic.last_report().fallbacks)


@pytest.mark.parametrize("call", ["np.indices((2, 3), sparse=True)",
                                  "np.indices((4, 1, 2), dtype=np.int32, sparse=True)",
                                  "np.indices((3,), int, True)"])
def test_sparse_indices_equal_numpy(ip, xp, cupy_names, call):
    ip.run_cell_magic("gpu", "--quiet --to-host", f"got = {call}\n")
    want = eval(call, {"np": np})
    got = ip.user_ns["got"]
    assert isinstance(got, tuple) and len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    assert not _fell_back(ip)


def test_max_with_where_but_no_initial_is_still_refused(ip, xp, cupy_names):
    ip.user_ns["x"] = np.arange(4.0)
    result = ip.run_cell("%%gpu --quiet\ny = np.max(x, where=x > 1)\n")
    assert str(result.error_in_exec).startswith(
        "np.max at line 1 `y = np.max(x, where=x > 1)`: CuPy's max has no where= option")


def test_max_of_an_empty_array_with_initial_is_refused_then_falls_back(ip, xp, cupy_names):
    ip.user_ns["x"] = np.zeros((0,))
    result = ip.run_cell("%%gpu --quiet\ny = np.max(x, initial=3)\n")
    assert str(result.error_in_exec).startswith(
        "np.max at line 1 `y = np.max(x, initial=3)`: CuPy's max has no initial= option")
    ip.run_cell_magic("gpu", "--quiet --fallback --to-host", "y = np.max(x, initial=3)\n")
    assert ip.user_ns["y"] == 3.0 and _fell_back(ip)


def test_ddof_and_correction_together_is_numpys_error(ip, xp, cupy_names):
    ip.user_ns["x"] = np.arange(6.0)
    result = ip.run_cell("%%gpu --quiet\ns = np.std(x, ddof=1, correction=1)\n")
    assert isinstance(result.error_in_exec, ValueError)
    assert "ddof and correction can't be provided simultaneously" in str(result.error_in_exec)
