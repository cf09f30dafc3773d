"""The completions (``cupy_magic.compat.complete``): uses of NumPy functions that CuPy has but
refuses (an array ``base``, an ``axis=``, a tuple of choices, ``gcd.reduce``, ...), and
``block`` and ``polydiv``. Each case is checked against NumPy's own call for dtype, shape,
values, views and exception class, with NumPy as the array module on this machine and with
CuPy on a GPU; what a completion leaves out must raise :class:`NotSupplied`."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from cupy_magic.compat.complete import COMPLETED
from cupy_magic.compat.supplement import NotSupplied

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


def sparse(*shape: int, dtype: Any = np.int64) -> np.ndarray:
    """Integers, mostly zero, with zero rims to trim."""
    x = ints(*shape, dtype=dtype) * (R.random(shape) < 0.3)
    return np.pad(x, 1) if x.ndim else x


def square(v: Any) -> Any:
    return v * v


def total(v: Any) -> Any:  # not elementwise: NumPy gives it the selected values only
    return v.sum()


def shifted(v: Any, by: Any, scale: Any = 1) -> Any:
    return (v + by) * scale


X6 = np.arange(-3, 3)
XF = np.linspace(-2.5, 2.5, 7)
GRID = np.arange(12.0).reshape(3, 4)
DATA = np.arange(8).reshape((2, 2, 2))
BITS = np.array([[[1, 0, 1], [0, 1, 0]], [[1, 1, 0], [0, 0, 1]]], dtype=np.uint8)
BYTES = np.array([[2], [7], [23]], dtype=np.uint8)
A1 = np.array([[1, 2], [3, 4]])
BIG = np.array([2**40, 3**20, 5**15], dtype=np.int64)

CASES = [
    case("logspace", 2.0, 3.0, num=4),
    case("logspace", 2.0, 3.0, num=4, endpoint=False),
    case("logspace", 2.0, 3.0, num=4, base=2.0),
    case("logspace", 2.0, 3.0, num=4, base=[2.0, 3.0], axis=-1),
    case("logspace", 2.0, 3.0, num=4, base=[2.0, 3.0]),
    case("logspace", [1, 2], [3, 4], 3, axis=1),
    case("logspace", [1.0, 2.0], 3.0, 5, base=np.array([[2.0], [3.0], [10.0]]), axis=1),
    case("logspace", np.float32(2.0), 3.0, num=4),
    case("logspace", np.float32(2.0), 3.0, num=4, base=np.float32(2)),
    case("logspace", np.float32(2.0), 3.0, num=4, base=np.array([2], np.float32)),
    case("logspace", np.array([2.0, 1.0], np.float32), np.float32(3), 6, base=2),
    case("logspace", np.array([2.0, 1.0], np.float32), 3.0, 6, base=np.float64(2)),
    case("logspace", 2, 3, num=4, base=2),
    case("logspace", 0, 1, 3, base=-2.0),
    case("logspace", 0, 1, 3, base=2j),
    case("logspace", 1j, 2j, 3),
    case("logspace", [0.0, 1.0], [0.0, 2.0], 4),
    case("logspace", 0.0, 1.0, 0),
    case("logspace", 0.0, 1.0, 1),
    case("logspace", 0.0, 1.0, 1, endpoint=False),
    case("logspace", 0.0, 1.0, 5, dtype=np.float32),
    case("logspace", 0.0, 1.0, 5, dtype=complex),
    case("logspace", 0.0, 1.0, 5, dtype=bool),
    case("logspace", real(2, 3), real(3), 4, base=[[2.0], [3.0]], axis=-1),
    case("logspace", real(2, 3), real(3), 4, base=[[2.0], [3.0]], axis=1),
    case("trim_zeros", np.array([0, 0, 0, 1, 2, 3, 0, 2, 1, 0])),
    case("trim_zeros", np.array([0, 0, 0, 1, 2, 3, 0, 2, 1, 0]), trim="b"),
    case("trim_zeros", np.array([0, 0, 0, 1, 2, 3, 0, 2, 1, 0]), trim="f"),
    case("trim_zeros", np.array([0, 0, 0, 1, 2, 3, 0, 2, 1, 0]), trim="BF"),
    case("trim_zeros", np.array([[0, 0, 2], [0, 0, 0], [0, 1, 0], [0, 0, 0]])),
    case("trim_zeros", np.array([[0, 0, 2], [0, 0, 0], [0, 1, 0], [0, 0, 0]]), axis=-1),
    case("trim_zeros", np.array([[0, 0, 2], [0, 0, 0], [0, 1, 0], [0, 0, 0]]), axis=0),
    case("trim_zeros", np.array([[0, 0, 2], [0, 0, 0]]), trim="f", axis=(1, 0)),
    case("trim_zeros", np.array([[0, 0, 2], [0, 0, 0]]), "b", [0, 1]),
    case("trim_zeros", np.array([[0, 1]]), axis=()),
    case("trim_zeros", sparse(3, 4, 5)),
    case("trim_zeros", sparse(3, 4, 5, dtype=np.int8), "f", axis=1),
    case("trim_zeros", sparse(6, 5).astype(bool), axis=0),
    case("trim_zeros", np.array([0.0, -0.0, np.nan, 0.0, 1.5, 0.0])),
    case("trim_zeros", np.array([0, 1j, 0, 2, 0])),
    case("trim_zeros", np.zeros(5)),
    case("trim_zeros", np.zeros((2, 3))),
    case("trim_zeros", np.zeros((2, 3)), axis=0),
    case("trim_zeros", np.zeros((0, 3))),
    case("trim_zeros", np.zeros(0)),
    case("trim_zeros", np.array(0)),
    case("trim_zeros", np.array(5.0)),
    case("trim_zeros", [0, 1, 0, 2, 0]),
    case("trim_zeros", [0, 0], "f"),
    case("trim_zeros", (0, 1, 0)),
    case("trim_zeros", np.ones((2, 3))[:, ::2]),
    case("size", A1),
    case("size", A1, 0),
    case("size", A1, axis=-1),
    case("size", A1, axis=(0, 1)),
    case("size", np.zeros((2, 3, 4)), axis=(2, 0)),
    case("size", np.zeros((2, 3, 4)), axis=[1]),
    case("size", np.zeros((2, 3, 4)), axis=np.int64(1)),
    case("size", np.zeros((2, 3, 4)), axis=()),
    case("size", np.zeros((2, 0)), axis=0),
    case("size", [[1, 2, 3], [4, 5, 6]], axis=1),
    case("size", 5),
    case("size", 5, axis=()),
    case("size", np.float32(5)),
    case("choose", np.array([0, 1]).reshape((2, 1, 1)),
         (np.array([1, 2, 3]).reshape((1, 3, 1)), np.array([-1, -2, -3, -4, -5]).reshape(1, 1, 5))),
    case("choose", [2, 3, 1, 0], [[0, 1, 2, 3], [10, 11, 12, 13], [20, 21, 22, 23],
                                  [30, 31, 32, 33]]),
    case("choose", [2, 4, 1, 0], [[0, 1, 2, 3], [10, 11, 12, 13], [20, 21, 22, 23],
                                  [30, 31, 32, 33]], mode="clip"),
    case("choose", [2, 4, 1, 0], [[0, 1, 2, 3], [10, 11, 12, 13], [20, 21, 22, 23],
                                  [30, 31, 32, 33]], mode="wrap"),
    case("choose", [[1, 0, 1], [0, 1, 0], [1, 0, 1]], [-10, 10]),
    case("choose", np.array([0, -1, 5, 7]), [real(4), real(1), real(4)], mode="wrap"),
    case("choose", np.array([0, -1, 5, 7]), [real(4), real(1), real(4)], mode="clip"),
    case("choose", np.array([0, 3, 2]), [real(3), 1, 2.5, 4], mode=None),
    case("choose", np.array([0, 1, 1]), [np.array([1, 2, 3], np.int8), 1000]),
    case("choose", np.array([0, 1]), [np.array([1, 2], np.int8), 3.5]),
    case("choose", np.array([0, 1]), [np.array([1, 2], np.float32), 3.5]),
    case("choose", np.array([0, 1]), [np.array([1, 2], np.float32), np.float64(3.5)]),
    case("choose", np.array([0, 1]), [np.array([1, 2], np.uint64), -1]),
    case("choose", np.array([0, 1]), [np.array([1, 2], np.int8), np.array([1, 2], np.uint8)]),
    case("choose", np.array([0, 1]), [[True, False], [1, 2]]),
    case("choose", np.array([0, 1]), [[True, False], [False, True]]),
    case("choose", np.array([0, 1]), (cplx(2, 1), real(1, 2, dtype=np.float32))),
    case("choose", np.array([True, False]), [[1, 2], [3, 4]]),
    case("choose", np.array([0, 1], np.uint32), [[1, 2], [3, 4]]),
    case("choose", np.array([[0, 1]], np.int8), np.array([[1, 2], [3, 4]])),
    case("choose", 1, [[1, 2, 3], 7]),
    case("choose", 1, [5, 7]),
    case("choose", np.zeros((0, 2), int), [real(2), real(1)]),
    case("choose", ints(3, 4, low=0, high=5), [ints(4, dtype=np.int16)] * 2 + [ints(3, 1)] * 3),
    case("choose", np.array([0, 1, 1]), [[1, 2, 3], [3, 4, 5]], mode=0),
    case("choose", np.array([0, 5, 1]), [[1, 2, 3], [3, 4, 5]], mode=1),
    case("ediff1d", np.array([1, 2, 4, 7, 0])),
    case("ediff1d", np.array([1, 2, 4, 7, 0]), to_begin=-99, to_end=np.array([88, 99])),
    case("ediff1d", [[1, 2, 4], [1, 6, 24]]),
    case("ediff1d", [[1, 2], [4, 8]], to_end=[[1], [2]]),
    case("ediff1d", np.array([1, 2, 4], np.int8), to_begin=300),
    case("ediff1d", np.array([1, 2, 4], np.int8), to_begin=[3, 4], to_end=np.int64(-1)),
    case("ediff1d", np.array([100, -100, 100], np.int8)),
    case("ediff1d", np.array([1, 5, 2], np.uint8), to_end=np.uint16(7)),
    case("ediff1d", np.array([1.0, 2, 4], np.float32), to_begin=1.5, to_end=[1e40]),
    case("ediff1d", np.array([1.0, 2, 4], np.float32), to_begin=np.float64(0.1)),
    case("ediff1d", real(5), to_begin=np.array(2.5), to_end=[]),
    case("ediff1d", cplx(4), to_end=1j, to_begin=3),
    case("ediff1d", real(3, 2, dtype=np.float16), to_begin=np.array([1.5], np.float32)),
    case("ediff1d", np.array(5.0)),
    case("ediff1d", 5, to_begin=1),
    case("ediff1d", np.array([], np.int16), to_begin=[1], to_end=[2]),
    case("ediff1d", np.array([3]), to_end=2),
    case("piecewise", XF, [XF < 0, XF >= 0], [-1, 1]),
    case("piecewise", XF, [XF < 0, XF >= 0], [lambda v: -v, lambda v: v]),
    case("piecewise", XF, [XF < 0], [square]),
    case("piecewise", XF, [XF < -1, XF > 1], [total, 7.5]),
    case("piecewise", XF, [XF < -1, XF > 1], [total, 7.5, square]),
    case("piecewise", X6, [X6 < 0, X6 > 0], [lambda v: v * 10, 300, -1]),
    case("piecewise", X6, X6 > 0, [shifted], 5),
    case("piecewise", X6, X6 > 0, [shifted, 2], 5, scale=-1),
    case("piecewise", X6, (X6 > 0) | (X6 < -2), [2.7]),
    case("piecewise", X6, [[True, False, True, False, True, False]], [1]),
    case("piecewise", X6, [True, False, True, False, True, False], [square, 0]),
    case("piecewise", X6, [X6 > 99], [square, 4]),
    case("piecewise", X6, [X6 * 2], [9]),
    case("piecewise", X6, np.array([[True] * 6, [False] * 6]), [1, 2]),
    case("piecewise", X6, [X6 > 0], [np.array([7])]),
    case("piecewise", X6, [np.array(True)], [lambda v: v + 1]),
    case("piecewise", 3.0, [True], [lambda v: v + 1]),
    case("piecewise", 3.0, [False], [lambda v: v + 1, 9]),
    case("piecewise", 3.0, True, [lambda v: v + 1]),
    case("piecewise", np.int8(3), [np.False_, np.True_], [1, 2]),
    case("piecewise", GRID, [GRID < 3, GRID > 8], [0, lambda v: v / 2, lambda v: v]),
    case("piecewise", GRID, [np.array([True, False, True])], [square, 1]),
    case("piecewise", GRID, [np.array([True, False, True])], [[1, 2, 3, 4], 0]),
    case("piecewise", cplx(5), [np.array([True, False, True, True, False])], [2j, square]),
    case("piecewise", ints(5, dtype=np.int8), [np.array([1, 0, 1, 1, 0], bool)], [2.9]),
    case("piecewise", np.zeros((2, 0)), [np.zeros((2, 0), bool)], [square]),
    case("piecewise", np.zeros((2, 0)), [np.ones(2, bool)], [square, 1]),
    case("packbits", np.array([[[1, 0, 1], [0, 1, 0]], [[1, 1, 0], [0, 0, 1]]]), axis=-1),
    case("packbits", BITS),
    case("packbits", BITS, axis=0),
    case("packbits", BITS, axis=1, bitorder="little"),
    case("packbits", ints(3, 17, 2, dtype=np.int16), axis=1),
    case("packbits", ints(3, 17, 2, dtype=np.int16), axis=-2, bitorder="little"),
    case("packbits", ints(20, dtype=np.uint64)),
    case("packbits", R.random((4, 9)) < 0.5, axis=1),
    case("packbits", np.array([True]), bitorder="little"),
    case("packbits", np.array(1), axis=0),
    case("packbits", np.array(1)),
    case("packbits", np.array([], np.int8)),
    case("packbits", np.zeros((2, 0), int), axis=1),
    case("packbits", np.zeros((2, 0), int), axis=0),
    case("packbits", [1, 0, 1, 1]),
    case("packbits", [[1, 0, 1], [0, 0, 1]], axis=np.int64(0)),
    case("unpackbits", BYTES, axis=1),
    case("unpackbits", BYTES, axis=1, count=-3),
    case("unpackbits", BYTES, axis=1, count=2),
    case("unpackbits", BYTES, axis=1, count=11),
    case("unpackbits", BYTES, axis=1, count=-3, bitorder="little"),
    case("unpackbits", BYTES, axis=0),
    case("unpackbits", BYTES, axis=0, count=20, bitorder="little"),
    case("unpackbits", BYTES),
    case("unpackbits", BYTES, count=np.int64(-7)),
    case("unpackbits", BYTES, count=0),
    case("unpackbits", ints(2, 3, 4, dtype=np.uint8, low=0, high=256), axis=-2, count=17),
    case("unpackbits", np.array([3], np.uint8), count=10),
    case("unpackbits", np.array(3, np.uint8)),
    case("unpackbits", np.array(3, np.uint8), axis=-1),
    case("unpackbits", np.array([[3]], np.uint8), axis=-1, count=0),
    case("unpackbits", np.zeros((0, 2), np.uint8), axis=1, count=3),
    case("unpackbits", np.zeros((0, 2), np.uint8), axis=0),
    case("average", DATA, axis=(0, 1), weights=[[1.0 / 4, 3.0 / 4], [1.0, 1.0 / 2]]),
    case("average", DATA, axis=(1, 0), weights=[[1.0 / 4, 3.0 / 4], [1.0, 1.0 / 2]]),
    case("average", DATA, axis=(0, 2), weights=np.array([[1, 2], [3, 4]]), returned=True),
    case("average", DATA, axis=(-1, 0), weights=np.array([[1, 2], [3, 4]]), keepdims=True),
    case("average", np.arange(1, 11)),
    case("average", np.arange(1, 11), weights=np.arange(10, 0, -1)),
    case("average", np.arange(6).reshape((3, 2)), axis=1, weights=[1.0 / 4, 3.0 / 4]),
    case("average", np.arange(6).reshape((3, 2)), axis=1, keepdims=True),
    case("average", np.arange(6).reshape((3, 2)), axis=(0, 1), returned=True),
    case("average", np.arange(6).reshape((3, 2)), axis=0, returned=True, keepdims=True),
    case("average", real(3, 4, 5), axis=2, weights=real(5) + 3, returned=True),
    case("average", real(3, 4, 5), axis=(2, 0), weights=real(5, 3) + 3),
    case("average", real(3, 4), weights=real(3, 4) + 3, keepdims=True, returned=True),
    case("average", real(3, 4, dtype=np.float32), axis=0, weights=real(3, dtype=np.float32)),
    case("average", np.ones((2, 3), np.float32), axis=1, weights=np.ones(3, np.float16),
         returned=True),
    case("average", real(3, 4, dtype=np.float16), axis=1, returned=True),
    case("average", real(4, dtype=np.float16), weights=np.arange(4)),
    case("average", np.array([True, False, True]), weights=[1, 2, 3]),
    case("average", np.array([True, False, True])),
    case("average", ints(4, dtype=np.int8), weights=ints(4, dtype=np.int8, low=1)),
    case("average", [1 + 2j, 3], weights=[1, 2j]),
    case("average", cplx(3, 2), axis=0, returned=True),
    case("average", 5.0),
    case("average", 5, returned=True),
    case("average", np.ones((2, 0)), axis=1),
    case("average", real(2, 3), axis=-1, weights=[1, 2, 3], keepdims=False),
    case("gcd.reduce", np.array([12, 18, 30])),
    case("gcd.reduce", [12, 18, 30]),
    case("gcd.reduce", np.array([-4])),
    case("gcd.reduce", np.array([-4, 6])),
    case("gcd.reduce", ints(5, 6) * 6),
    case("gcd.reduce", ints(5, 6) * 6, axis=1),
    case("gcd.reduce", ints(5, 6) * 6, axis=-1, keepdims=True),
    case("gcd.reduce", ints(4, 5, 6) * 4, axis=None),
    case("gcd.reduce", ints(4, 5, 6) * 4, axis=(0, 2)),
    case("gcd.reduce", ints(4, 5, 6) * 4, axis=(2, 0), keepdims=True),
    case("gcd.reduce", ints(4, 5, 6) * 4, axis=()),
    case("gcd.reduce", ints(7, 3, dtype=np.int8) * 3),
    case("gcd.reduce", ints(7, 3, dtype=np.uint16, low=0, high=100) * 5, axis=1),
    case("gcd.reduce", ints(9, dtype=np.uint64, low=0, high=100) * 7),
    case("gcd.reduce", np.array([-128, 0], np.int8)),
    case("gcd.reduce", np.array([-128], np.int8), keepdims=True),
    case("gcd.reduce", np.zeros((0, 3), int)),
    case("gcd.reduce", np.zeros((0, 3), int), axis=1),
    case("gcd.reduce", np.array(5)),
    case("gcd.reduce", np.array(-5), axis=None),
    case("gcd.reduce", 5),
    case("gcd.reduce", np.array(-5), axis=-1, keepdims=True),
    case("gcd.reduce", np.array(-5), initial=3),
    case("lcm.reduce", np.array(-5)),
    case("gcd.reduce", np.array([4, 6], np.int8), dtype=np.int64),
    case("gcd.reduce", np.array([4, 6], np.int64), dtype=np.int8),
    case("gcd.reduce", np.array([4, 6], np.uint64), dtype=np.int8),
    case("gcd.reduce", np.array([True, True]), dtype=np.int8),
    case("gcd.reduce", np.array([4, 6], np.int8), initial=8),
    case("gcd.reduce", np.array([4, 6]), initial=True),
    case("gcd.reduce", np.array([-4]), initial=None),
    case("gcd.reduce", np.array([-3, 4]), axis=(), initial=6),
    case("gcd.reduce", np.array([-3, 4]), axis=(), initial=None),
    case("gcd.reduce", np.zeros(0, int), initial=-6),
    case("gcd.reduce", np.array([4, 6], np.int8), 0, "int8", None, False, 2, True),
    case("lcm.reduce", np.array([2, 3, 4, 5])),
    case("lcm.reduce", [2, 3, 4, 5]),
    case("lcm.reduce", np.array([-4])),
    case("lcm.reduce", np.array([-4, 6])),
    case("lcm.reduce", np.array([-4, 6, 0, 9])),
    case("lcm.reduce", ints(7, 5, low=1, high=12), axis=0),
    case("lcm.reduce", ints(7, 5, low=-12, high=12), axis=-1, keepdims=True),
    case("lcm.reduce", ints(2, 3, 4, dtype=np.int16, low=1, high=9), axis=(1,)),
    case("lcm.reduce", ints(6, dtype=np.int8, low=1, high=4)),
    case("lcm.reduce", ints(6, dtype=np.uint8, low=1, high=4)),
    case("lcm.reduce", ints(3, dtype=np.uint64, low=1, high=1000)),
    case("lcm.reduce", np.array([2**31 - 1, 1], np.int32)),
    case("lcm.reduce", np.array(-5), axis=None),
    case("lcm.reduce", np.array([-5, 3]), axis=()),
    case("lcm.reduce", np.zeros((2, 0), int), axis=0),
    case("lcm.reduce", np.zeros(0, int), initial=3),
    case("lcm.reduce", np.array([-4, 6]), initial=5),
    case("lcm.reduce", np.array([-4]), initial=-5),
    case("lcm.reduce", np.array([-4]), initial=None),
    case("lcm.reduce", np.array([-3, 4]), axis=(), initial=6),
    case("block", [[np.eye(2) * 2, np.zeros((2, 3))], [np.ones((3, 2)), np.eye(3) * 3]]),
    case("block", [np.array([1, 2, 3]), 10, np.array([4, 5])]),
    case("block", [[np.array([1, 2, 3])], [np.array([4, 5, 6])]]),
    case("block", [[np.array([1, 2])], [np.array([3, 4])]]),
    case("block", [[1, 2], [3, 4]]),
    case("block", [np.eye(2), np.ones((2, 1))]),
    case("block", [[np.eye(2)], [np.ones((1, 2))]]),
    case("block", np.eye(2)),
    case("block", 5),
    case("block", [5]),
    case("block", [[[1, 2]], [[3, 4]]]),
    case("block", [[[real(2, 1, 3), real(2, 1, 2)], [real(2, 4, 3), real(2, 4, 2)]]]),
    case("block", [[[real(2, 1, 3), real(2, 1, 2)]], [[real(2, 1, 3), real(2, 1, 2)]]]),
    case("block", [np.int8([1]), 1]),
    case("block", [np.int8([1]), 1.5]),
    case("block", [np.float32([1]), np.float32(2.5)]),
    case("block", [[np.int8([1])], [np.uint8([1])]]),
    case("block", [[np.array([True])], [np.array([2j])]]),
    case("block", [np.zeros(0), np.ones(2)]),
    case("block", [[np.zeros((2, 0)), np.ones((2, 2))]]),
    case("block", [real(600, 500, dtype=np.float32), real(600, 400, dtype=np.float16)]),
    case("polydiv", [3.0, 5.0, 2.0], [2.0, 1.0]),
    case("polydiv", [1, 2, 3, 4], [1, 1]),
    case("polydiv", np.array([1, -3, 0, 2]), np.array([1, -1])),
    case("polydiv", [1, 2], [1, 2, 3]),
    case("polydiv", [5.0], [2.0]),
    case("polydiv", 4, 2),
    case("polydiv", [1, 0, 1e-9], [1, 0]),
    case("polydiv", [1.0, 0.0, 0.0], [1.0, 0.0]),
    case("polydiv", [1.0, 2.0, 3.0], [0.5, 1.0, 1.5]),
    case("polydiv", real(6), real(3)),
    case("polydiv", real(6, dtype=np.float32), real(3, dtype=np.float32)),
    case("polydiv", real(6), real(3, dtype=np.float32)),
    case("polydiv", real(5, dtype=np.float16), [1.0, 2.0]),
    case("polydiv", cplx(5), real(2)),
    case("polydiv", np.array([1, 2, 3], np.int8), np.array([True, True])),
    case("polydiv", [1.0, 2.0], [0.0, 1.0]),
    case("polydiv", [0.0, 0.0, 1.0], [1.0, 0.5]),
]

EXACT = {"trim_zeros", "size", "choose", "packbits", "unpackbits", "gcd.reduce", "lcm.reduce",
         "block"}


def call(name: str, xp: Any, args: tuple, kwargs: dict) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's own, as in NumPy
        return COMPLETED[name](xp, *args, **kwargs)


def assert_same(name: str, got: Any, want: Any) -> None:
    """``got`` (host data) has ``want``'s type of container, dtype, shape and values."""
    if isinstance(want, (tuple, list)) and not isinstance(want, np.ndarray):
        assert type(got) is type(want) and len(got) == len(want), (got, want)
        if name == "trim_zeros":  # a sequence in, the same kind of sequence out
            assert got == want
            return
        for g, w in zip(got, want, strict=True):
            assert_same(name, g, w)
        return
    if type(want) is int:
        assert type(got) is int and got == want
        return
    assert_arrays_same(got, want, name in EXACT, float32_rtol=2e-5)


@pytest.mark.parametrize(("name", "args", "kwargs"), CASES)
def test_equals_numpy(name: str, args: tuple, kwargs: dict) -> None:
    want = numpy_result(name, args, kwargs)
    got = call(name, np, args, kwargs)
    assert_same(name, got, want)
    if name == "trim_zeros" and isinstance(args[0], np.ndarray):
        assert np.shares_memory(got, args[0]) == np.shares_memory(want, args[0])
        assert np.may_share_memory(got, args[0]) or got.size == 0


@pytest.mark.parametrize("seed", range(3))
def test_random_reductions_choices_and_blocks_equal_numpy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(60):
        shape = tuple(int(n) for n in rng.integers(0, 4, rng.integers(1, 4)))
        dtype = rng.choice(["i1", "i2", "i4", "i8", "u1", "u4", "u8"])
        low = 0 if dtype.startswith("u") else -12
        a = rng.integers(low, 13, shape).astype(dtype)
        axis = [None, *range(-a.ndim, a.ndim)][rng.integers(0, 2 * a.ndim + 1)]
        keepdims = bool(rng.random() < 0.3)
        for name in ("gcd.reduce", "lcm.reduce"):
            if name == "lcm.reduce" and axis is None and a.ndim > 1:
                continue
            kwargs = {"axis": axis, "keepdims": keepdims}
            b = a % 4 if name == "lcm.reduce" else a  # lcms that fit in any integer dtype
            try:
                want = numpy_result(name, (b,), kwargs)
            except ValueError:  # lcm of nothing: NumPy's error, checked below as ours
                with pytest.raises(ValueError):
                    call(name, np, (b,), kwargs)
                continue
            assert_same(name, call(name, np, (b,), kwargs), want)
        index = rng.integers(-1, 4, shape[-1:])
        choices = [a, 7, rng.standard_normal(shape[-1:]).astype("f4")][: rng.integers(1, 4)]
        for mode in ("wrap", "clip"):
            want = numpy_result("choose", (index, choices), {"mode": mode})
            assert_same("choose", call("choose", np, (index, choices), {"mode": mode}), want)
        parts = [[a, a], [a, a]] if rng.random() < 0.5 else [a, a.astype("f2")]
        assert_same("block", call("block", np, (parts,), {}), numpy_result("block", (parts,), {}))


def test_trim_zeros_gives_views_and_sequences_as_numpy() -> None:
    x = np.array([[0, 0, 0], [0, 3, 0], [0, 0, 0]])
    got = COMPLETED["trim_zeros"](np, x)
    assert got.base is x and got.tolist() == [[3]]
    assert COMPLETED["trim_zeros"](np, x, axis=()) is x
    sequence = [0, 2, 0]
    assert COMPLETED["trim_zeros"](np, sequence) == [2] and sequence == [0, 2, 0]


def test_size_is_a_python_int() -> None:
    assert type(COMPLETED["size"](np, np.zeros((2, 3)), axis=(0, 1))) is int


def test_polydiv_of_a_poly1d_gives_poly1ds_as_numpy() -> None:
    for u, v in [(np.poly1d([1.0, 2.0, 3.0]), [1.0, 1.0]), ([3, 5, 2], np.poly1d([2, 1]))]:
        got, want = COMPLETED["polydiv"](np, u, v), np.polydiv(u, v)
        assert all(isinstance(g, np.poly1d) for g in got)
        for g, w in zip(got, want, strict=True):
            assert g == w


NOT_SUPPLIED = [
    case("logspace", 0, 2, 5, dtype=int),
    case("logspace", 0, 2, 5, dtype=np.uint8),
    case("choose", np.array([0, 1]), [[1, 2], [3, 4]], out=np.empty(2, int)),
    case("choose", np.array([0, 1]), [[1, 2], [3, 4]], mode=1.5),
    case("piecewise", X6, [X6 > 1], [np.array([7, 8])]),
    case("gcd.reduce", np.array([4, 6]), out=np.empty((), int)),
    case("gcd.reduce", np.array([4, 6]), where=np.array([True, False])),
    case("gcd.reduce", np.array([4, 6]), initial=2.0),
    case("gcd.reduce", np.array([4, 6]), initial=np.int8(2)),
    case("gcd.reduce", np.array([4, 6], object)),
    case("lcm.reduce", np.array([4, 6], object)),
    case("lcm.reduce", BIG),
    case("lcm.reduce", BIG[[0, 2, 1]]),
    case("lcm.reduce", np.array([100, 3], np.int8)),
    case("lcm.reduce", np.array([-128, 1], np.int8)),
    case("lcm.reduce", np.array([2**62, 3], np.int64)),
    case("lcm.reduce", np.array([2**32 - 1, 2], np.uint32)),
    case("lcm.reduce", np.array([[7, 11], [13, 1]], np.int8), axis=1, initial=2),
    case("polydiv", np.ones((2, 2)), [1.0]),
]


@pytest.mark.parametrize(("name", "args", "kwargs"), NOT_SUPPLIED)
def test_not_supplied(name: str, args: tuple, kwargs: dict) -> None:
    with pytest.raises(NotSupplied):
        call(name, np, args, kwargs)


def test_lcm_just_below_overflow_is_supplied() -> None:
    a = np.array([2**31 - 1, 2**31 - 1, 1], np.int32)
    assert call("lcm.reduce", np, (a,), {}) == np.lcm.reduce(a)
    b = np.array([2**40, 3**13], np.int64)  # 2**40 * 3**13 < 2**63
    assert call("lcm.reduce", np, (b,), {}) == np.lcm.reduce(b)


BAD = [
    case("logspace", 0, 1, -1),
    case("logspace", 0, 1, 2.5),
    case("logspace", 1, 3, 3, axis=1),
    case("logspace", 1, 3, 3, base=[2, 3], axis=2),
    case("logspace", [1, 2], [1, 2, 3]),
    case("trim_zeros", np.array([0, 1]), trim="x"),
    case("trim_zeros", np.array([0, 1]), trim=1),
    case("trim_zeros", np.array([0, 1]), axis=1),
    case("trim_zeros", np.array([0, 1]), axis=(0, 0)),
    case("trim_zeros", np.array([0, 1]), axis=1.0),
    case("trim_zeros", [[0, 1], [0, 0]]),
    case("size", A1, axis=2),
    case("size", A1, axis=(0, 0)),
    case("size", A1, axis=(0, -3)),
    case("size", A1, axis=1.0),
    case("size", 5, axis=0),
    case("choose", [0, 2], [[1, 2], [3, 4]]),
    case("choose", [0, -1], [[1, 2], [3, 4]]),
    case("choose", [0, 3], [[1, 2], [3, 4]], mode=2),
    case("choose", [0, 1], [[1, 2], [3, 4]], mode="c"),
    case("choose", [0, 1], [[1, 2], [3, 4]], mode="bogus"),
    case("choose", [0, 1], [[1, 2], [3, 4]], mode=3),
    case("choose", [0, 1], []),
    case("choose", [0, 1.0], [[1, 2], [3, 4]]),
    case("choose", np.array([0, 1], np.uint64), [[1, 2], [3, 4]]),
    case("choose", [0, 1], [[1, 2, 3], [3, 4]]),
    case("ediff1d", np.array([1, 2, 4], np.int8), to_begin=1.5),
    case("ediff1d", np.array([1, 2], np.uint8), to_begin=-1),
    case("ediff1d", np.array([1, 5, 2], np.uint8), to_end=7),
    case("ediff1d", np.array([1, 2], np.uint8), to_end=np.int8(-1)),
    case("ediff1d", [1, 2], to_end=[]),
    case("ediff1d", [1.0, 2], to_begin=1j),
    case("ediff1d", np.array([True, False])),
    case("ediff1d", np.array([True, False]), to_begin=True),
    case("piecewise", X6, [X6 > 0], [1, 2, 3]),
    case("piecewise", X6, [], [square]),
    case("piecewise", GRID, [np.array([True, False])], [square]),
    case("piecewise", GRID, [np.ones((3, 4, 1), bool)], [1]),
    case("piecewise", X6, [X6 > 0, X6[:3] > 0], [1, 2]),
    case("piecewise", X6, [X6 > 0], [300.0j]),
    case("piecewise", X6, [X6 > 0], [np.nan]),
    case("piecewise", np.int8(3), [True], [300]),
    case("packbits", [1.0]),
    case("packbits", np.array([], float)),
    case("packbits", [1, 0], bitorder="b"),
    case("packbits", [1, 0], bitorder="LITTLE"),
    case("packbits", [1, 0], bitorder=3),
    case("packbits", np.array(1), axis=1),
    case("packbits", BITS, axis=3),
    case("packbits", BITS, axis=0.0),
    case("unpackbits", np.array([3], np.int8)),
    case("unpackbits", [3]),
    case("unpackbits", BYTES, count=-25),
    case("unpackbits", BYTES, count=1.0),
    case("unpackbits", BYTES, bitorder="x"),
    case("unpackbits", np.array(3, np.uint8), axis=1),
    case("unpackbits", np.zeros((0, 2), np.uint8), axis=0, count=-3),
    case("average", [1, 2], weights=[0, 0]),
    case("average", [1.0, -1.0], weights=[1, -1]),
    case("average", [[1, 2]], weights=[1, 1]),
    case("average", [[1, 2]], axis=1, weights=[1, 1, 1]),
    case("average", [[1, 2]], axis=(0, 1), weights=[1, 1]),
    case("average", DATA, axis=(0, 1), weights=[[1, 2]]),
    case("average", DATA, axis=3),
    case("average", DATA, axis=(0, 0)),
    case("average", np.ones((2, 0)), axis=0),
    case("average", np.ones((2, 0)), axis=1, weights=np.ones(0)),
    case("gcd.reduce", [True, False]),
    case("gcd.reduce", np.array([1.0, 2.0])),
    case("gcd.reduce", np.array([4, 6]), dtype=np.float64),
    case("gcd.reduce", np.zeros((2, 3), np.int8), axis=(0, 0)),
    case("gcd.reduce", np.zeros((2, 3), np.int8), axis=2),
    case("gcd.reduce", np.array([4, 6], np.int8), axis=[0]),
    case("gcd.reduce", np.array(5), axis=1),
    case("gcd.reduce", np.array(5), axis=(0,)),
    case("gcd.reduce", np.array([-4, 6], np.int8), initial=300),
    case("gcd.reduce", np.zeros((2, 0), int), axis=1, initial=None),
    case("lcm.reduce", np.arange(1, 7).reshape(2, 3), axis=(1, 0)),
    case("lcm.reduce", np.arange(1, 7).reshape(1, 6), axis=None),
    case("lcm.reduce", np.zeros(0, int)),
    case("lcm.reduce", np.zeros((0, 2), int), axis=0, keepdims=True),
    case("lcm.reduce", np.zeros((2, 0), int), axis=1),
    case("lcm.reduce", np.zeros((0, 0), int), axis=0),
    case("lcm.reduce", np.array([1.5])),
    case("block", []),
    case("block", [[], [1]]),
    case("block", [[1], []]),
    case("block", [[1], 2]),
    case("block", [1, [2]]),
    case("block", ([1], [2])),
    case("block", [([1],), [2]]),
    case("block", [[1], [(2,)]]),
    case("block", [[1, 2], [3]]),
    case("block", [np.zeros((2, 2)), np.zeros(3)]),
    case("block", [[np.zeros((2, 2))], [np.zeros(3)]]),
    case("polydiv", [], [1.0]),
    case("polydiv", [1.0], []),
]


@pytest.mark.parametrize(("name", "args", "kwargs"), BAD)
def test_bad_input_raises_numpys_exception(name: str, args: tuple, kwargs: dict) -> None:
    with pytest.raises(Exception) as numpy_raised:  # any: NumPy's class is the one
        numpy_result(name, args, kwargs)
    with pytest.raises(type(numpy_raised.value)):
        call(name, np, args, kwargs)


def test_every_case_list_covers_every_name() -> None:
    assert {p.values[0] for p in CASES} == set(COMPLETED)
    assert {p.values[0] for p in BAD} == set(COMPLETED)


def test_completed_names_are_numpys() -> None:
    for name, function in COMPLETED.items():
        assert callable(numpy_function(name)), name
        assert callable(function)
    assert COMPLETED["gcd.reduce"].__name__ == "gcd_reduce"


def test_block_and_polydiv_are_the_names_cupy_lacks() -> None:
    cupy = pytest.importorskip("cupy")
    assert not hasattr(cupy, "block") and not hasattr(cupy, "polydiv")
    for name in set(COMPLETED) - {"block", "polydiv"}:
        module: Any = cupy
        for part in name.split("."):
            module = getattr(module, part)  # CuPy has it, refusing NumPy's use above


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "args", "kwargs"), CASES)
def test_equals_numpy_on_the_gpu(name: str, args: tuple, kwargs: dict) -> None:
    cupy = pytest.importorskip("cupy")
    want = numpy_result(name, args, kwargs)
    device_args = tuple(to_device(cupy, a) for a in args)
    device_kwargs = {k: to_device(cupy, v) for k, v in kwargs.items()}
    got = call(name, cupy, device_args, device_kwargs)
    assert_same(name, to_host(cupy, got), want)
    if name == "trim_zeros" and isinstance(device_args[0], cupy.ndarray) and got.size:
        start, base = device_args[0].data.ptr, device_args[0]
        assert start <= got.data.ptr < start + base.nbytes  # a view, as NumPy's


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "args", "kwargs"), BAD)
def test_bad_input_raises_numpys_exception_on_the_gpu(name: str, args: tuple,
                                                       kwargs: dict) -> None:
    cupy = pytest.importorskip("cupy")
    with pytest.raises(Exception) as numpy_raised:  # any: NumPy's class is the one
        numpy_result(name, args, kwargs)
    device_args = tuple(to_device(cupy, a) for a in args)
    device_kwargs = {k: to_device(cupy, v) for k, v in kwargs.items()}
    with pytest.raises(type(numpy_raised.value)):
        call(name, cupy, device_args, device_kwargs)


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "args", "kwargs"), NOT_SUPPLIED)
def test_not_supplied_on_the_gpu(name: str, args: tuple, kwargs: dict) -> None:
    cupy = pytest.importorskip("cupy")
    if any(isinstance(a, np.ndarray) and a.dtype == object for a in args):
        pytest.skip("CuPy has no object arrays")
    device_args = tuple(to_device(cupy, a) for a in args)
    device_kwargs = {k: to_device(cupy, v) for k, v in kwargs.items()}
    with pytest.raises(NotSupplied):
        call(name, cupy, device_args, device_kwargs)


@pytest.mark.gpu
def test_a_host_poly1d_is_not_supplied_on_the_device() -> None:
    cupy = pytest.importorskip("cupy")
    with pytest.raises(NotSupplied):
        COMPLETED["polydiv"](cupy, np.poly1d([1.0, 2.0, 3.0]), cupy.asarray([1.0, 1.0]))
    got = COMPLETED["polydiv"](cupy, cupy.poly1d(cupy.asarray([1.0, 2.0, 3.0])),
                               cupy.asarray([1.0, 1.0]))
    want = np.polydiv(np.poly1d([1.0, 2.0, 3.0]), [1.0, 1.0])
    for g, w in zip(got, want, strict=True):
        assert isinstance(g, cupy.poly1d)
        np.testing.assert_allclose(cupy.asnumpy(g.coeffs), w.coeffs, rtol=1e-12)
