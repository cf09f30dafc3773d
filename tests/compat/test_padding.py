"""``np.pad`` with ``mode='median'`` and a dict ``pad_width`` (``cupy_magic.compat.padding``):
NumPy's values, dtypes and shapes, with ``xp=numpy`` here and CuPy on a GPU, and through a
real shell on both backends."""

from __future__ import annotations

import numpy as np
import pytest

from cupy_magic.compat.padding import PADS, pad
from cupy_magic.compat.supplement import NotSupplied

ARRAYS = [np.array([1, 2, 3, 4, 5]), np.arange(12).reshape(3, 4),
          np.arange(24.0).reshape(2, 3, 4) ** 1.5, np.array([[1, 2], [3, 4]], dtype=np.int8)]
CASES = [(a, w, sl) for a in ARRAYS for w in [(2,), 2, 0, ((1, 2),) * a.ndim]
         for sl in [None, 2, (1, 3)]]
DICTS = [{1: (1, 2)}, {-1: 2}, {0: (3, 0)}, {0: (3, 0), 1: 2}]


def _check(xp, to_device, to_host):
    for a, width, length in CASES:
        kwargs = {} if length is None else {"stat_length": length}
        want = np.pad(a, width, "median", **kwargs)
        got = to_host(pad(xp, to_device(a), width, "median", **kwargs))
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    a = np.arange(1, 7).reshape(2, 3)
    for width in DICTS:
        for mode in ("constant", "median", "edge"):
            np.testing.assert_array_equal(to_host(pad(xp, to_device(a), width, mode)),
                                          np.pad(a, width, mode))


def test_median_and_dict_widths_equal_numpy():
    _check(np, np.asarray, np.asarray)


@pytest.mark.gpu
def test_median_and_dict_widths_equal_numpy_on_the_gpu():
    cupy = pytest.importorskip("cupy")
    _check(cupy, cupy.asarray, cupy.asnumpy)


@pytest.mark.parametrize(("width", "kwargs", "error"), [
    ((1.5,), {}, TypeError), ((1,), {"end_values": 2}, ValueError), ({0: 1}, {"x": 1}, ValueError)])
def test_bad_input_is_numpys_error(width, kwargs, error):
    a = np.arange(5)
    with pytest.raises(error):
        np.pad(a, width, "median", **kwargs)
    with pytest.raises(error):
        pad(np, a, width, "median", **kwargs)


def test_other_modes_are_not_supplied():
    with pytest.raises(NotSupplied):
        pad(np, np.arange(3), 1, "mean")
    with pytest.raises(NotSupplied):
        pad(np, np.zeros((0, 2)), 1, "median")
    with pytest.raises(NotSupplied):
        pad(np, np.arange(3), 1, "median", stat_length=0)
    assert set(PADS) == {"pad"}


def test_a_cell_pads_with_the_median_and_a_dict(ip, xp, cupy_names):
    ip.run_cell_magic("gpu", "--quiet --to-host",
                      "a = [1, 2, 3, 4, 5]\nm = np.pad(a, (2,), 'median')\n"
                      "b = np.arange(1, 7).reshape(2, 3)\nd = np.pad(b, {0: (3, 0), 1: 2})\n")
    np.testing.assert_array_equal(ip.user_ns["m"], np.pad([1, 2, 3, 4, 5], (2,), "median"))
    np.testing.assert_array_equal(ip.user_ns["d"], np.pad(np.arange(1, 7).reshape(2, 3),
                                                          {0: (3, 0), 1: 2}))
