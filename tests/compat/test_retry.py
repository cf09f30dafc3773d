"""The retries after CuPy refused a call (``compat/retry.py``), with NumPy's array type
standing in for the device's: which arguments are read as Python ints, and when an ``out=``
is written as NumPy writes it."""

from __future__ import annotations

import numpy as np

from cupy_magic.compat.retry import FAILED, HOST_INTS, into_out, with_host_ints
from cupy_magic.compat.spec import CallSpec


def _needs_ints(x, indices):
    if not isinstance(indices, (int, list)):
        raise TypeError("'ndarray' object cannot be interpreted as an integer")
    return np.split(x, indices)


def test_only_small_index_arguments_are_read_as_ints_never_the_data():
    x = np.arange(8, dtype=np.uint8)
    parts = with_host_ints(np.ndarray, CallSpec("np.split"), _needs_ints,
                           (x, np.array([2, 5])), {})
    assert [p.tolist() for p in parts] == [[0, 1], [2, 3, 4], [5, 6, 7]]
    assert all(p.dtype == np.uint8 and np.shares_memory(p, x) for p in parts)  # x untouched
    # an argument NumPy documents as array_like is data, as is a large or 2-D one
    assert with_host_ints(np.ndarray, CallSpec("np.split", positions=(1,)), _needs_ints,
                          (x, np.array([2, 5])), {}) is FAILED
    big = np.arange(HOST_INTS + 1)
    assert with_host_ints(np.ndarray, CallSpec("np.split"), _needs_ints, (x, big), {}) is FAILED
    assert with_host_ints(np.ndarray, CallSpec("np.split"), _needs_ints,
                          (x, np.array([[2]])), {}) is FAILED


def _no_out(a, axis=None, out=None):
    if out is not None:
        raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    return np.median(a, axis=axis)


def test_out_is_written_only_as_numpy_would_write_it():
    a = np.arange(6.0).reshape(2, 3)
    out = np.zeros(3)
    assert into_out(np.ndarray, _no_out, (a,), {"axis": 0, "out": out}) is out
    np.testing.assert_array_equal(out, np.median(a, axis=0))
    wrong_shape, wrong_kind = np.zeros(2), np.zeros(3, dtype=np.int64)
    assert into_out(np.ndarray, _no_out, (a,), {"axis": 0, "out": wrong_shape}) is FAILED
    assert into_out(np.ndarray, _no_out, (a,), {"axis": 0, "out": wrong_kind}) is FAILED
    assert not wrong_kind.any()
