"""What the tests of the device versions of NumPy functions share (``test_supplement.py``,
``test_complete.py``): random inputs, named cases, NumPy's own result, and moving a case's
arrays to the GPU and back."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

R = np.random.default_rng(20240611)


def real(*shape: int, dtype: Any = np.float64) -> np.ndarray:
    return R.standard_normal(shape).astype(dtype)


def cplx(*shape: int, dtype: Any = np.complex128) -> np.ndarray:
    return (R.standard_normal(shape) + 1j * R.standard_normal(shape)).astype(dtype)


def ints(*shape: int, dtype: Any = np.int64, low: int = -9, high: int = 10) -> np.ndarray:
    return R.integers(low, high, shape).astype(dtype)


def case(name: str, *args: Any, **kwargs: Any) -> Any:
    """A test case of ``name`` called with ``args`` and ``kwargs``, named by them."""
    shown = ", ".join([*(_short(a) for a in args), *(f"{k}={_short(v)}" for k, v in
                                                       kwargs.items())])
    return pytest.param(name, args, kwargs, id=f"{name}({shown})")


def _short(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype}{list(value.shape)}"
    if callable(value):
        return getattr(value, "__name__", "f")
    if isinstance(value, (list, tuple)):
        if len(repr(value)) > 30:
            return f"{type(value).__name__}[{len(value)}]"
        inner = ", ".join(_short(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    return repr(value)


def numpy_function(name: str) -> Any:
    """NumPy's function of that name below ``numpy`` ("linalg.trace", "gcd.reduce")."""
    function: Any = np
    for part in name.split("."):
        function = getattr(function, part)
    return function


def numpy_result(name: str, args: tuple, kwargs: dict) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return numpy_function(name)(*args, **kwargs)


def to_device(cupy: Any, value: Any) -> Any:
    """NumPy arrays in ``value`` (also inside lists and tuples) as CuPy's."""
    if isinstance(value, np.ndarray):
        return cupy.asarray(value)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(cupy, v) for v in value)
    return value


def to_host(cupy: Any, value: Any) -> Any:
    """A device result (also inside a tuple) as NumPy's; a list or int as it is."""
    if isinstance(value, tuple) and not isinstance(value, cupy.ndarray):
        return tuple(to_host(cupy, v) for v in value)
    if isinstance(value, (list, int)):  # trim_zeros of a list, size
        return value
    assert isinstance(value, cupy.ndarray), type(value)
    return cupy.asnumpy(value)


def assert_arrays_same(got: Any, want: Any, exact: bool, float32_rtol: float = 1e-5) -> None:
    """``got`` has ``want``'s dtype and shape, and its values (exactly, for integers and
    ``exact``; else to the rounding of the dtype, relative to the largest finite value)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    if exact or want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
        return
    rtol = {2: 2e-3, 4: float32_rtol}.get(np.finfo(want.dtype).dtype.itemsize, 1e-12)
    finite = np.abs(want[np.isfinite(want)])
    atol = rtol * (finite.max() if finite.size else 0.0)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
