"""Device versions of NumPy functions CuPy lacks (``cupy_magic.compat.supplement``): run with
``xp=numpy`` here and ``xp=cupy`` on a GPU, each against NumPy's own function: the same
dtype, shape and values, views where NumPy's are views, NumPy's exception classes for bad
input, and :class:`NotSupplied` for what is not done exactly."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from cupy_magic.compat.supplement import SUPPLIED, NotSupplied

from .cases import (
    R,
    assert_arrays_same,
    case,
    cplx,
    ints,
    numpy_function,
    numpy_result,
    real,
    to_device,
    to_host,
)


def with_nans(x: np.ndarray, share: float = 0.3) -> np.ndarray:
    x = x.copy()
    x[R.random(x.shape) < share] = np.nan
    return x


NAN_ROWS = with_nans(real(4, 6))
NAN_ROWS[1] = np.nan
FIRST_NAN = real(3, 4, dtype=np.float16)  # NumPy's dtype follows an all-NaN first slice
FIRST_NAN[0] = np.nan
FLOAT16_ALL = np.arange(2**16, dtype=np.uint16).view(np.float16)
FLOAT_EDGES = [0.0, -0.0, 1.0, -1.0, 0.75, -3.5, 1e300, -1e-300, np.inf, -np.inf, np.nan]


def edges(dtype: Any) -> np.ndarray:
    info = np.finfo(dtype)
    tiny = [info.smallest_subnormal, info.smallest_normal, info.smallest_subnormal * 3,
            info.smallest_normal * 1.5, info.max, info.eps]
    with np.errstate(over="ignore"):
        values = np.array(FLOAT_EDGES + tiny, dtype=np.float64).astype(dtype)
    return np.concatenate([values, -values])


CASES = [
    case("linalg.trace", ints(3, 3)),
    case("linalg.trace", real(4, 5, dtype=np.float32)),
    case("linalg.trace", cplx(2, 3, 3)),
    case("linalg.trace", real(3, 4), offset=1),
    case("linalg.trace", real(2, 4, 3), offset=-2),
    case("linalg.trace", ints(3, 3), dtype=np.float32),
    case("linalg.trace", ints(3, 3, dtype=np.int8)),
    case("linalg.trace", ints(3, 3, dtype=np.uint16)),
    case("linalg.trace", np.eye(3, dtype=bool)),
    case("linalg.trace", np.zeros((0, 0))),
    case("linalg.trace", real(2, 0, 3)),
    case("linalg.trace", [[1, 2], [3, 4]]),
    case("linalg.diagonal", real(3, 4)),
    case("linalg.diagonal", real(3, 4), offset=1),
    case("linalg.diagonal", ints(2, 3, 4), offset=-1),
    case("linalg.diagonal", cplx(4, 4, dtype=np.complex64)),
    case("linalg.diagonal", real(0, 3)),
    case("linalg.diagonal", [[1.5, 2], [3, 4]]),
    case("linalg.outer", ints(3), ints(4)),
    case("linalg.outer", ints(3, dtype=np.int8), ints(2, dtype=np.int8)),
    case("linalg.outer", real(4), cplx(2)),
    case("linalg.outer", real(3, dtype=np.float32), real(3, dtype=np.float32)),
    case("linalg.outer", [1, 2], [0.5, 1.5, 3]),
    case("linalg.outer", real(0), real(3)),
    case("linalg.vecdot", real(5), real(5)),
    case("linalg.vecdot", cplx(4, 3), cplx(3)),
    case("linalg.vecdot", ints(2, 3, 4), ints(4)),
    case("linalg.vecdot", real(3, 2), real(3, 2), axis=0),
    case("linalg.vecdot", real(2, 3, 4, dtype=np.float32), real(3, 1), axis=-2),
    case("linalg.vecdot", ints(6, dtype=np.int8) * 9, ints(6, dtype=np.int8) * 9),
    case("linalg.vecdot", real(4, dtype=np.float32), real(4)),
    case("linalg.vecdot", cplx(3, dtype=np.complex64), real(2, 3, dtype=np.float32)),
    case("linalg.vecdot", real(2, 0), real(0)),
    case("linalg.vecdot", [1, 2, 3], [[1, 0, 1], [2, 2, 2]]),
    case("vecdot", real(5), real(5)),
    case("vecdot", cplx(2, 4), cplx(2, 4)),
    case("vecdot", ints(3, 4), ints(2, 1, 4)),
    case("vecdot", real(3, 2), real(3, 2), axis=0),
    case("vecdot", real(3), real(3), out=None, casting="same_kind"),
    case("vecdot", [1j, 2], [1j, 1]),
    case("matvec", real(3, 4), real(4)),
    case("matvec", cplx(2, 3, 4), cplx(4)),
    case("matvec", ints(2, 3, 4), ints(5, 1, 4)),
    case("matvec", real(3, 4, dtype=np.float32), real(2, 4, dtype=np.float32)),
    case("matvec", real(3, 0), real(0)),
    case("matvec", [[1, 2], [3, 4]], [1, 1]),
    case("vecmat", real(3), real(3, 4)),
    case("vecmat", cplx(2, 3), cplx(3, 4)),
    case("vecmat", ints(3), ints(2, 3, 4)),
    case("vecmat", real(5, 1, 3, dtype=np.float32), real(2, 3, 2, dtype=np.float32)),
    case("vecmat", [1j, 2], [[1, 2], [3, 4]]),
    case("linalg.vector_norm", real(5)),
    case("linalg.vector_norm", real(3, 4)),
    case("linalg.vector_norm", real(3, 4), axis=1),
    case("linalg.vector_norm", real(3, 4), axis=-2, keepdims=True),
    case("linalg.vector_norm", real(2, 3, 4), axis=(0, 2), keepdims=True),
    case("linalg.vector_norm", real(2, 3, 4), axis=(-1, 0)),
    case("linalg.vector_norm", real(2, 3, 4), keepdims=True),
    case("linalg.vector_norm", real(4, 3), ord=1),
    case("linalg.vector_norm", real(4, 3), axis=0, ord=np.inf),
    case("linalg.vector_norm", real(4, 3), axis=1, ord=-np.inf),
    case("linalg.vector_norm", real(4, 3), ord=0),
    case("linalg.vector_norm", real(4, 3), ord=3),
    case("linalg.vector_norm", real(4, 3), axis=1, ord=-1),
    case("linalg.vector_norm", ints(4, 3), axis=0),
    case("linalg.vector_norm", real(4, 3, dtype=np.float32), axis=0),
    case("linalg.vector_norm", cplx(4, 3, dtype=np.complex64), axis=0),
    case("linalg.vector_norm", cplx(5), ord=np.inf),
    case("linalg.vector_norm", real(0)),
    case("linalg.vector_norm", real(0), ord=np.inf),
    case("linalg.vector_norm", real(2, 0), axis=1, ord=np.inf, keepdims=True),
    case("linalg.vector_norm", np.float64(-3.0)),
    case("linalg.vector_norm", [3, 4]),
    case("linalg.matrix_norm", real(3, 4)),
    case("linalg.matrix_norm", real(3, 4), ord="nuc"),
    case("linalg.matrix_norm", real(3, 4), ord=1),
    case("linalg.matrix_norm", real(3, 4), ord=-1),
    case("linalg.matrix_norm", real(3, 4), ord=2),
    case("linalg.matrix_norm", real(4, 3), ord=-2),
    case("linalg.matrix_norm", real(3, 4), ord=np.inf),
    case("linalg.matrix_norm", real(3, 4), ord=-np.inf),
    case("linalg.matrix_norm", real(2, 3, 3), ord=2, keepdims=True),
    case("linalg.matrix_norm", real(2, 3, 3), keepdims=True),
    case("linalg.matrix_norm", ints(3, 3)),
    case("linalg.matrix_norm", cplx(2, 2, dtype=np.complex64), ord="nuc"),
    case("linalg.matrix_norm", real(3, 3, dtype=np.float32), ord=1),
    case("linalg.matrix_norm", real(0, 3)),
    case("linalg.matrix_norm", real(0, 3), ord=2),
    case("linalg.matrix_norm", real(3, 0), ord=1, keepdims=True),
    case("linalg.matrix_norm", real(2, 0, 3), ord=np.inf),
    case("linalg.matrix_norm", real(0, 3), ord=-1),
    case("linalg.matrix_norm", [[1, 2], [3, 4]], ord=2),
    case("linalg.svdvals", real(3, 4)),
    case("linalg.svdvals", real(4, 3, dtype=np.float32)),
    case("linalg.svdvals", cplx(2, 3, 3)),
    case("linalg.svdvals", cplx(3, 2, dtype=np.complex64)),
    case("linalg.svdvals", ints(3, 3)),
    case("linalg.svdvals", [[3.0, 0], [0, 4]]),
    case("linalg.svdvals", real(0, 3)),
    case("linalg.svdvals", real(2, 0, 3)),
    case("linalg.multi_dot", [real(3, 4), real(4, 5)]),
    case("linalg.multi_dot", [real(4), real(4, 5)]),
    case("linalg.multi_dot", [real(10, 100), real(100, 5), real(5, 50)]),
    case("linalg.multi_dot", [real(10, 2), real(2, 100), real(100, 5)]),
    case("linalg.multi_dot", [real(4), real(4, 5), real(5, 2), real(2)]),
    case("linalg.multi_dot", [real(4), real(4, 5), real(5, 2, dtype=np.float32)]),
    case("linalg.multi_dot", [real(3, 4), real(4, 6), real(6, 2), real(2)]),
    case("linalg.multi_dot", [ints(3, 4), ints(4, 2), ints(2, 6), ints(6, 3), ints(3, 1)]),
    case("linalg.multi_dot", [cplx(2, 3), cplx(3, 3), cplx(3, 2)]),
    case("linalg.multi_dot", [[[1, 2]], [[1], [2]], [[3.0]]]),
    case("geomspace", 1, 1000, 4),
    case("geomspace", 1, 1000, num=4, endpoint=False),
    case("geomspace", 1000, 1, 4),
    case("geomspace", -1000, -1, 4),
    case("geomspace", 1j, 1000j, 4),
    case("geomspace", -1 + 0j, 1 + 0j, 5),
    case("geomspace", 2 + 3j, -0.5j, 7, endpoint=False),
    case("geomspace", [1, 10], [1000, 1e5], 3),
    case("geomspace", [1, -10], [1000, -1e5], 3, axis=-1),
    case("geomspace", real(2, 1) + 3, [1.0, 5.0, 9.0], 6, axis=1),
    case("geomspace", np.float32(1), np.float32(100), 5),
    case("geomspace", 1, 100, 5, dtype=np.float32),
    case("geomspace", 1, 100, 5, dtype=complex),
    case("geomspace", np.array(2.0, dtype=np.float32), 20, 7, dtype=np.float32),
    case("geomspace", 1, 256, 0),
    case("geomspace", 3, 256, 1),
    case("geomspace", 3, 256, 1, endpoint=False),
    case("geomspace", 3, 256, 2, dtype=int),
    case("geomspace", -3, -256, 2, dtype=np.int16),
    case("geomspace", 1e-3, 1e3),
    case("geomspace", 2, 2, 3),
    case("polyder", [1, 1, 1, 1]),
    case("polyder", [1, 1, 1, 1], 2),
    case("polyder", [1, 1, 1, 1], 4),
    case("polyder", [3.5, 2, 1], 0),
    case("polyder", real(6, dtype=np.float32), 2),
    case("polyder", cplx(5), 1),
    case("polyder", ints(4, dtype=np.int8), 1),
    case("polyder", [5]),
    case("polyder", np.array([], dtype=np.float64)),
    case("polyder", [1, 2, 3], 2.0),
    case("polyint", [1, 1, 1]),
    case("polyint", [1, 1, 1], 3, k=[6, 5, 3]),
    case("polyint", [1, 1, 1], 2, k=2),
    case("polyint", [1, 1, 1], 2, k=[1, 2, 3]),
    case("polyint", ints(4), 2),
    case("polyint", real(4, dtype=np.float32)),
    case("polyint", real(3), 1, k=1j),
    case("polyint", real(3), 2, k=np.float32(1.5)),
    case("polyint", [1, 2], 0),
    case("polyint", []),
    case("spacing", edges(np.float64)),
    case("spacing", edges(np.float32)),
    case("spacing", edges(np.float16)),
    case("spacing", FLOAT16_ALL),
    case("spacing", np.ldexp(R.random(2000) + 0.5, R.integers(-1074, 1024, 2000))),
    case("spacing", np.ldexp(R.random(2000, np.float32) + 0.5, R.integers(-149, 128, 2000))),
    case("spacing", ints(3, 4, dtype=np.int8)),
    case("spacing", ints(5, dtype=np.int16)),
    case("spacing", ints(5, dtype=np.int32)),
    case("spacing", np.array([True, False])),
    case("spacing", 1.0),
    case("spacing", 3),
    case("spacing", [1, 2.5, -3]),
    case("spacing", np.array(-2.0, dtype=np.float32)),
    case("spacing", real(3, dtype=np.float32), out=None, where=True),
    case("unstack", real(3, 4)),
    case("unstack", real(3, 4), axis=1),
    case("unstack", ints(2, 3, 4), axis=-1),
    case("unstack", cplx(5)),
    case("unstack", real(0, 3)),
    case("unstack", real(3, 0)),
    case("insert", [1, 2, 3], 1, 9),
    case("insert", [1, 2, 3], -1, [7, 8]),
    case("insert", [1, 2, 3], 3, 5),
    case("insert", np.arange(6).reshape(2, 3), 1, [7, 8], axis=1),
    case("insert", np.arange(6).reshape(2, 3), [1], [[7], [8]], axis=1),
    case("insert", np.arange(6).reshape(2, 3), 1, [7, 8, 9], axis=0),
    case("insert", np.arange(6).reshape(2, 3), 1, 5),
    case("insert", np.arange(6).reshape(2, 3), -1, 2.7, axis=-1),
    case("insert", np.arange(5), [1, 1, 3], [10, 11, 12]),
    case("insert", np.arange(5.0), [-1, 0], 7.5),
    case("insert", np.arange(5.0), slice(1, 4), -1),
    case("insert", real(3, 4, dtype=np.float32), np.array([0, 2, 4]), 0.5, axis=1),
    case("insert", np.arange(5), [], 9),
    case("insert", real(2, 3), np.array([1]), real(2, 1), axis=1),
    case("insert", np.array([], dtype=np.int8), 0, [1, 2]),
    case("nanquantile", with_nans(real(10)), 0.5),
    case("nanquantile", with_nans(real(10)), [0.1, 0.5, 1.0]),
    case("nanquantile", with_nans(real(10, dtype=np.float32)), np.float32(0.3)),
    case("nanquantile", with_nans(real(10, dtype=np.float32)), 0.3),
    case("nanquantile", with_nans(real(10, dtype=np.float32)), [0.3, 0.75]),
    case("nanquantile", NAN_ROWS, 0.4, axis=1),
    case("nanquantile", NAN_ROWS, [0.0, 0.4, 0.99], axis=0),
    case("nanquantile", NAN_ROWS, 0.25, axis=-1, keepdims=True),
    case("nanquantile", NAN_ROWS, [0.25, 0.5], keepdims=True),
    case("nanquantile", with_nans(real(3, 4, 5)), np.array([[0.2, 0.6]]), axis=1),
    case("nanquantile", ints(12), 0.5),
    case("nanquantile", ints(3, 12, dtype=np.int8), 0.37, axis=1),
    case("nanquantile", ints(12, dtype=np.int8), np.float32(0.37)),
    case("nanquantile", ints(12), 1),
    case("nanquantile", ints(3, 5), [0, 1], axis=0),
    case("nanquantile", with_nans(real(8)), 1),
    case("nanquantile", [1.0, np.inf], 1.0),
    case("nanquantile", [1.0, np.inf, np.nan], 0.9),
    case("nanquantile", [np.nan, np.nan], 0.5),
    case("nanquantile", with_nans(real(9, dtype=np.float16)), 0.6),
    case("nanquantile", real(0, 3), 0.5, axis=0),
    case("nanquantile", real(0, 3, dtype=np.float16), [0.5, 0.6], axis=1, keepdims=True),
    case("nanquantile", ints(3, 0, dtype=np.int8), [0.5, 0.6]),
    case("nanpercentile", real(0, 3, dtype=np.float32), 50, keepdims=True),
    case("nanquantile", np.float64(3.5), 0.2),
    case("nanquantile", FIRST_NAN, np.array([0.3, 0.9], np.float32), axis=1),
    case("nanquantile", FIRST_NAN, [0.3], axis=1, keepdims=True),
    case("nanquantile", FIRST_NAN.T, [0.3], axis=0),
    case("nanquantile", FIRST_NAN[1:], [0.3], axis=1),
    case("nanquantile", np.full(4, np.nan, np.float32), [0.5, 0.7]),
    case("nanpercentile", with_nans(real(10)), 50),
    case("nanpercentile", with_nans(real(10, dtype=np.float32)), 37.5),
    case("nanpercentile", with_nans(real(10, dtype=np.float32)), [37.5, 100]),
    case("nanpercentile", NAN_ROWS, [10, 90], axis=1, keepdims=True),
    case("nanpercentile", ints(4, 5), 30, axis=0),
    case("nanpercentile", [[np.nan, 1, 2], [np.nan] * 3], 0, axis=1),
]

EXACT = {"linalg.diagonal", "unstack", "insert", "spacing", "polyder"}
VIEWS = {"linalg.diagonal", "unstack"}


def assert_same(name: str, got: Any, want: Any) -> None:
    """``got`` (host data) has ``want``'s type of container, dtype, shape and values."""
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_same(name, g, w)
        return
    assert_arrays_same(got, want, name in EXACT)


@pytest.mark.parametrize(("name", "args", "kwargs"), CASES)
def test_equals_numpy(name: str, args: tuple, kwargs: dict) -> None:
    want = numpy_result(name, args, kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # inf - inf, as NumPy's own
        got = SUPPLIED[name](np, *args, **kwargs)
    assert_same(name, got, want)
    if name in VIEWS:
        for g, w in zip(got if isinstance(got, tuple) else [got],
                        want if isinstance(want, tuple) else [want], strict=True):
            assert np.shares_memory(g, args[0]) == np.shares_memory(w, args[0])


@pytest.mark.parametrize("seed", range(4))
def test_nanquantile_random_inputs_equal_numpy_exactly(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(150):
        shape = tuple(int(n) for n in rng.integers(1, 5, rng.integers(1, 4)))
        a = (rng.standard_normal(shape) * 10).astype(rng.choice(["f8", "f4", "f2", "i8", "i1"]))
        if a.dtype.kind == "f":
            a[rng.random(shape) < rng.choice([0.1, 0.5, 0.9])] = rng.choice([np.nan, np.inf])
            a[rng.random(shape) < 0.3] = np.nan
        axis = [None, *range(-a.ndim, a.ndim)][rng.integers(0, 2 * a.ndim + 1)]
        q = [float(rng.random()), [0.0, 1.0, float(rng.random())], np.float32(rng.random()),
             rng.random(3).astype(np.float32), int(rng.integers(0, 2))][rng.integers(0, 5)]
        keepdims = bool(rng.random() < 0.3)
        want = numpy_result("nanquantile", (a, q), {"axis": axis, "keepdims": keepdims})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            got = SUPPLIED["nanquantile"](np, a, q, axis=axis, keepdims=keepdims)
        assert np.asarray(got).dtype == np.asarray(want).dtype, (a, q, axis)
        assert np.shape(got) == np.shape(want), (a, q, axis)
        np.testing.assert_array_equal(got, want, err_msg=f"{a!r} {q!r} {axis}", strict=False)


def test_views_are_views() -> None:
    x = real(3, 4)
    assert np.shares_memory(SUPPLIED["linalg.diagonal"](np, x, offset=1), x)
    assert all(np.shares_memory(part, x) for part in SUPPLIED["unstack"](np, x, axis=1))


def test_insert_copies() -> None:
    x = real(2, 2)
    assert not np.shares_memory(SUPPLIED["insert"](np, x, 0, 1.0, axis=0), x)
    assert not np.shares_memory(SUPPLIED["insert"](np, x, [], 1.0), x)


NOT_SUPPLIED = [
    case("nanquantile", real(4, 3), 0.5, None, None, True),  # NumPy's scratch: --fallback
    case("vecdot", real(3), real(3), out=np.empty(())),
    case("vecdot", real(3), real(3), dtype=np.float32),
    case("vecdot", real(3), real(3), keepdims=True),
    case("vecdot", real(2, 3), real(2, 3), axes=[0, 0, ()]),
    case("vecdot", np.ones(3, bool), np.ones(3, bool)),
    case("linalg.vecdot", np.ones(3, bool), np.ones(3, bool)),
    case("matvec", real(2, 3), real(3), out=np.empty(2)),
    case("matvec", real(2, 3), real(3), casting="unsafe"),
    case("vecmat", real(3), real(3, 2), order="C"),
    case("vecmat", real(3), real(3, 2), signature="dd->d"),
    case("linalg.multi_dot", [real(2, 3), real(3, 4), real(4, 2)], out=np.empty((2, 2))),
    case("geomspace", 1, 256, 9, dtype=int),
    case("geomspace", 1, 256, 2, endpoint=False, dtype=np.int32),
    case("spacing", real(3), where=np.array([True, False, True])),
    case("spacing", real(3), np.empty(3)),
    case("spacing", real(3), dtype=np.float32),
    case("spacing", np.ones(3, np.longdouble)),
    case("insert", [1, 2, 3], np.array([True, False, True]), 0),
    case("insert", [1, 2, 3], np.array([1.0]), 0),
    case("nanquantile", real(5), 0.5, method="nearest"),
    case("nanquantile", real(2, 5), 0.5, axis=(0, 1)),
    case("nanquantile", real(5), 0.5, out=np.empty((2,))),
    case("nanquantile", real(5), 0.5, out=np.empty((), dtype=np.int64)),
    case("nanquantile", real(5), 0.5, method="inverted_cdf", weights=np.ones(5)),
    case("nanquantile", real(5), True),
    case("nanquantile", real(5), np.full((1, 1, 1), 0.5)),
    case("nanpercentile", real(5), 50, method="midpoint"),
]


@pytest.mark.parametrize(("name", "args", "kwargs"), NOT_SUPPLIED)
def test_not_supplied(name: str, args: tuple, kwargs: dict) -> None:
    with pytest.raises(NotSupplied):
        SUPPLIED[name](np, *args, **kwargs)


BAD = [
    case("linalg.trace", real(3)),
    case("linalg.diagonal", real(3)),
    case("linalg.outer", real(3, 1), real(3)),
    case("linalg.vecdot", real(3), real(2, 4)),
    case("linalg.vecdot", real(3), real(3), axis=2),
    case("vecdot", np.float64(1.0), real(3)),
    case("matvec", real(3), real(3)),
    case("matvec", real(2, 3), real(4)),
    case("vecmat", real(3), real(3)),
    case("linalg.vector_norm", real(3), ord="fro"),
    case("linalg.vector_norm", real(0), ord=-np.inf),
    case("linalg.vector_norm", real(3, 2), axis=(0, 0)),
    case("linalg.vector_norm", real(3, 2), axis=2),
    case("linalg.matrix_norm", real(3)),
    case("linalg.matrix_norm", real(3, 3), ord=3),
    case("linalg.matrix_norm", real(0, 3), ord=-2),
    case("linalg.svdvals", real(3)),
    case("linalg.svdvals", real(3, 3, dtype=np.float16)),
    case("linalg.multi_dot", [real(3, 3)]),
    case("linalg.multi_dot", [real(3, 3), real(2, 3, 3), real(3, 3)]),
    case("linalg.multi_dot", [real(3, 3), real(2, 3), real(3, 3)]),
    case("geomspace", 0, 10),
    case("geomspace", [1, 2], [0, 3]),
    case("geomspace", 1, 10, -1),
    case("geomspace", 1, 10, 2.5),
    case("geomspace", 1, 10, 3, axis=2),
    case("polyder", [1, 2], -1),
    case("polyder", np.float64(3.0)),
    case("polyint", [1, 2], -1),
    case("polyint", [1, 2], 3, k=[1, 2]),
    case("spacing", cplx(3)),
    case("unstack", np.float64(1.0)),
    case("unstack", [1, 2]),
    case("unstack", real(3), axis=1),
    case("insert", [1, 2, 3], 4, 0),
    case("insert", [1, 2, 3], [0, 5], 0),
    case("insert", real(2, 2), 0, 1.0, axis=2),
    case("insert", [1, 2, 3], [[0, 1]], 0),
    case("nanquantile", real(5), 1.5),
    case("nanquantile", real(5), [0.5, np.nan]),
    case("nanquantile", cplx(5), 0.5),
    case("nanquantile", real(5), 0.5, axis=1),
    case("nanpercentile", real(5), 101),
    case("nanpercentile", real(5), [-1, 50]),
]


@pytest.mark.parametrize(("name", "args", "kwargs"), BAD)
def test_bad_input_raises_numpys_exception(name: str, args: tuple, kwargs: dict) -> None:
    with pytest.raises(Exception) as numpy_raised:  # any: NumPy's class is the one
        numpy_result(name, args, kwargs)
    with pytest.raises(type(numpy_raised.value)):
        SUPPLIED[name](np, *args, **kwargs)


def test_supplied_is_keyed_by_numpys_names() -> None:
    assert SUPPLIED["geomspace"].__name__ == "geomspace"
    assert SUPPLIED["linalg.trace"].__name__ == "linalg_trace" and "sum" not in SUPPLIED


def test_every_case_list_covers_every_name() -> None:
    assert {p.values[0] for p in CASES} == set(SUPPLIED)


def test_supplied_names_are_in_numpy_and_not_in_cupy() -> None:
    cupy = pytest.importorskip("cupy")
    for name in SUPPLIED:
        assert callable(numpy_function(name)), name
        module: Any = cupy
        for part in name.split(".")[:-1]:
            module = getattr(module, part)
        assert not hasattr(module, name.split(".")[-1]), f"CuPy has {name}: drop it"


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "args", "kwargs"), CASES)
def test_equals_numpy_on_the_gpu(name: str, args: tuple, kwargs: dict) -> None:
    import cupy

    want = numpy_result(name, args, kwargs)
    device_args = tuple(to_device(cupy, a) for a in args)
    got = SUPPLIED[name](cupy, *device_args, **kwargs)
    assert_same(name, to_host(cupy, got), want)
    if name in VIEWS and isinstance(device_args[0], cupy.ndarray):
        start, base = device_args[0].data.ptr, device_args[0]
        for part in got if isinstance(got, tuple) else [got]:  # inside the input's memory
            assert part.size == 0 or start <= part.data.ptr < start + base.nbytes


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "args", "kwargs"), BAD)
def test_bad_input_raises_numpys_exception_on_the_gpu(name: str, args: tuple,
                                                       kwargs: dict) -> None:
    import cupy

    with pytest.raises(Exception) as numpy_raised:  # any: NumPy's class is the one
        numpy_result(name, args, kwargs)
    device_args = tuple(to_device(cupy, a) for a in args)
    with pytest.raises(type(numpy_raised.value)):
        SUPPLIED[name](cupy, *device_args, **kwargs)


# --- through a real shell: the cell's np finds them where CuPy has none -------------------
CELL_CALLS = ["np.geomspace(1, 1000, num=4)", "np.linalg.trace(np.eye(3))",
              "np.polyder([1.0, 2.0, 3.0])", "np.vecdot([1.0, 2.0], [3.0, 4.0])",
              "np.linalg.svdvals([[1, 2], [3, 4]])", "np.insert(np.arange(5), 1, 6)",
              "np.nanpercentile(np.array([[10.0, np.nan, 4.0], [3.0, 2.0, 1.0]]), 50, axis=1)"]


@pytest.mark.parametrize("call", CELL_CALLS)
def test_a_cell_runs_them_on_the_array_module(ip, cupy_names, call):
    import cupy_magic

    ip.run_cell_magic("gpu", "--quiet --to-host", f"got = {call}\n")
    want = eval(call, {"np": np})
    got = np.asarray(ip.user_ns["got"])
    assert got.dtype == np.asarray(want).dtype and got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert cupy_magic.last_report().fallbacks == []


def test_a_use_not_supplied_is_one_line_then_falls_back(ip, cupy_names):
    import cupy_magic

    ip.user_ns.pop("g", None)
    result = ip.run_cell("%%gpu --quiet\ng = np.geomspace(1, 256, 9, dtype=int)\n")
    assert str(result.error_in_exec).startswith(
        "np.geomspace at line 1 `g = np.geomspace(1, 256, 9, dtype=int)`: CuPy has not "
        "implemented this use (geomspace: ") and "g" not in ip.user_ns
    ip.run_cell_magic("gpu", "--quiet --fallback --to-host",
                      "g = np.geomspace(1, 256, 9, dtype=int)\n")
    np.testing.assert_array_equal(ip.user_ns["g"], np.geomspace(1, 256, 9, dtype=int))
    [row] = cupy_magic.last_report().fallbacks
    assert row.function == "np.geomspace" and row.calls == 1


@pytest.mark.parametrize("name", ["polyder", "polyint"])
def test_a_poly1d_gives_a_poly1d_as_numpy_does(name):
    got = SUPPLIED[name](np, np.poly1d([1.0, 2.0, 3.0]), 2)
    want = getattr(np, name)(np.poly1d([1.0, 2.0, 3.0]), 2)
    assert isinstance(got, np.poly1d) and got == want


@pytest.mark.gpu
def test_a_host_poly1d_is_not_supplied_on_the_device():
    import cupy

    with pytest.raises(NotSupplied):
        SUPPLIED["polyder"](cupy, np.poly1d([1.0, 2.0, 3.0]))


def test_a_cells_poly1d_stays_a_poly1d(ip, cupy_names):
    ip.run_cell_magic("gpu", "--quiet --to-host",
                      "p = np.poly1d([1, 1, 1, 1])\np2 = np.polyder(p)\nv = p2(2.0)\n"
                      "same = type(p2) is type(p)\n")
    assert ip.user_ns["same"] is True and float(ip.user_ns["v"]) == 17.0


@pytest.mark.parametrize("name, q", [("nanquantile", 0.25), ("nanpercentile", [10, 90])])
def test_out_is_written_as_numpy_writes_it(name, q):
    a = np.array([[10.0, np.nan, 4.0], [3.0, 2.0, 1.0]])
    want_out = np.empty(np.shape(getattr(np, name)(a, q, axis=1)))
    got_out = np.empty_like(want_out)
    want = getattr(np, name)(a, q, axis=1, out=want_out)
    got = SUPPLIED[name](np, a, q, axis=1, out=got_out)
    assert got is got_out and want is want_out
    np.testing.assert_array_equal(got_out, want_out)


def test_the_cells_own_error_in_a_supplied_function_is_numpys(ip, cupy_names):
    result = ip.run_cell("%%gpu --quiet\nt = np.linalg.trace(np.arange(3.0))\n")
    assert type(result.error_in_exec) is ValueError  # NumPy's, not a CuPy limit
    assert "at least 2-dimensional" in str(result.error_in_exec)
