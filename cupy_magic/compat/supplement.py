"""NumPy functions CuPy lacks, done with the functions of an array module ``xp`` (CuPy).

Each takes ``xp``, then NumPy's parameters, and gives NumPy's dtype, shape, values (to rounding;
a 0-d array for a NumPy scalar) and error class. What is not done exactly raises
:class:`NotSupplied`: the caller refuses the call or runs NumPy on the host (``--fallback``).
``numpy`` sees only dtypes and host arguments; the host syncs NumPy's errors force are marked."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import numpy

from .axes import AxisError, axis_index, axis_indices
from .retry import FAILED, written

__all__ = ["SUPPLIED", "NotSupplied"]

_NO_VALUE = getattr(numpy, "_NoValue", None)
# NumPy's ufunc options with their defaults: passed with these values they change nothing
_UFUNC_DEFAULTS = {"out": None, "keepdims": False, "casting": "same_kind", "order": "K",
                   "dtype": None, "subok": True, "signature": None, "where": True}


class NotSupplied(Exception):
    """An argument combination a supplied function does not do exactly as NumPy does."""


def _plain(name: str, options: dict[str, Any]) -> None:
    """Raise :class:`NotSupplied` unless the ufunc options of ``name`` are all defaults."""
    for key, value in options.items():
        if type(value) not in (str, bool, type(None)) or value != _UFUNC_DEFAULTS.get(key, ...):
            raise NotSupplied(f"{name}: the option {key}={value!r} is not supplied")


def _matrices(x: Any, error: type[Exception] = ValueError) -> Any:
    """``x`` when it has at least two dimensions, else ``error`` as NumPy raises it."""
    if x.ndim < 2:
        raise error(f"{x.ndim}-dimensional array given. Array must be at least 2-dimensional")
    return x


def _operands(xp: Any, name: str, x1: Any, x2: Any) -> tuple[Any, Any]:
    """The two operands of the gufunc ``name`` as ``xp`` arrays; booleans are refused."""
    a, b = xp.asarray(x1), xp.asarray(x2)
    if a.dtype == bool or b.dtype == bool:
        raise NotSupplied(f"{name}: boolean inputs are not supplied")
    return (xp.conj(a) if a.dtype.kind == "c" and name != "matvec" else a), b


def _real_float(dtype: Any) -> numpy.dtype:
    """The dtype of a norm of ``dtype`` values: integers give float64, complex its real."""
    return numpy.finfo(numpy.result_type(dtype, 1.0)).dtype


def linalg_trace(xp: Any, x: Any, /, *, offset: int = 0, dtype: Any = None) -> Any:
    """``numpy.linalg.trace``: the sums along the diagonals of the last two axes."""
    return xp.trace(_matrices(xp.asarray(x)), offset, axis1=-2, axis2=-1, dtype=dtype)


def linalg_diagonal(xp: Any, x: Any, /, *, offset: int = 0) -> Any:
    """``numpy.linalg.diagonal``: a view of the diagonals of the last two axes."""
    return xp.diagonal(_matrices(xp.asarray(x)), offset, axis1=-2, axis2=-1)


def linalg_outer(xp: Any, x1: Any, x2: Any, /) -> Any:
    """``numpy.linalg.outer``: the outer product of two 1-D arrays."""
    x1, x2 = xp.asarray(x1), xp.asarray(x2)
    if x1.ndim != 1 or x2.ndim != 1:
        raise ValueError(f"Input arrays must be one-dimensional, not {x1.ndim}-d, {x2.ndim}-d")
    return xp.outer(x1, x2)


def linalg_vecdot(xp: Any, x1: Any, x2: Any, /, *, axis: int = -1) -> Any:
    """``numpy.linalg.vecdot``: ``sum(conj(x1) * x2)`` along ``axis`` (not for booleans)."""
    a, b = _operands(xp, "vecdot", x1, x2)
    a, b = xp.moveaxis(a, axis, -1), xp.moveaxis(b, axis, -1)
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"vecdot: core dimension mismatch ({a.shape[-1]} != {b.shape[-1]})")
    return xp.matmul(a[..., None, :], b[..., :, None])[..., 0, 0]


def vecdot(xp: Any, x1: Any, x2: Any, /, out: Any = None, *, axis: int = -1,
           **options: Any) -> Any:
    """``numpy.vecdot`` called plainly (``axis=`` at most): see :func:`linalg_vecdot`."""
    _plain("vecdot", {"out": out, **options})
    return linalg_vecdot(xp, x1, x2, axis=axis)


def matvec(xp: Any, x1: Any, x2: Any, /, out: Any = None, **options: Any) -> Any:
    """``numpy.matvec`` called plainly: matrices ``(..., m, n)`` times vectors ``(..., n)``."""
    _plain("matvec", {"out": out, **options})
    a, b = _operands(xp, "matvec", x1, x2)
    if a.ndim < 2 or b.ndim < 1 or a.shape[-1] != b.shape[-1]:
        raise ValueError(f"matvec: shapes {a.shape} and {b.shape} do not fit (m,n),(n)->(m)")
    return xp.matmul(a, b[..., None])[..., 0]


def vecmat(xp: Any, x1: Any, x2: Any, /, out: Any = None, **options: Any) -> Any:
    """``numpy.vecmat`` called plainly: conjugated vectors ``(..., n)`` times ``(..., n, m)``."""
    _plain("vecmat", {"out": out, **options})
    a, b = _operands(xp, "vecmat", x1, x2)
    if a.ndim < 1 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"vecmat: shapes {a.shape} and {b.shape} do not fit (n),(n,m)->(m)")
    return xp.matmul(a[..., None, :], b)[..., 0, :]


def linalg_vector_norm(xp: Any, x: Any, /, *, axis: Any = None, keepdims: bool = False,
                       ord: Any = 2) -> Any:
    """``numpy.linalg.vector_norm``: the vector norm over ``axis`` (None: all, or a tuple)."""
    x = xp.asarray(x)
    shape, along = list(x.shape), 0
    if axis is None:
        kept, x = range(x.ndim), x.ravel()
    elif isinstance(axis, tuple):  # as NumPy: those axes first, flattened into one
        kept = axis_indices(axis, x.ndim)
        rest = tuple(i for i in range(x.ndim) if i not in kept)
        x = xp.transpose(x, kept + rest).reshape(
            (math.prod(x.shape[i] for i in kept), *(x.shape[i] for i in rest)))
    else:
        kept = (along := axis_index(axis, x.ndim),)
    if x.shape[along] == 0 and ord == numpy.inf:  # NumPy's max(..., initial=0)
        res = xp.zeros(x.shape[:along] + x.shape[along + 1:], _real_float(x.dtype))
    else:
        res = xp.linalg.norm(x, axis=along, ord=ord)
    shape = [1 if i in kept else d for i, d in enumerate(shape)]
    return res.reshape(tuple(shape)) if keepdims else res


def linalg_matrix_norm(xp: Any, x: Any, /, *, keepdims: bool = False, ord: Any = "fro") -> Any:
    """``numpy.linalg.matrix_norm``: the matrix norm over the last two axes."""
    x = _matrices(xp.asarray(x), AxisError)
    if x.shape[-1] * x.shape[-2] == 0 and ord in (1, 2, -2, numpy.inf):  # NumPy's initial=0
        if ord == -2:
            raise ValueError("zero-size array to reduction operation minimum")
        res = xp.zeros(x.shape[:-2], _real_float(x.dtype))
        return res.reshape((*x.shape[:-2], 1, 1)) if keepdims else res
    return xp.linalg.norm(x, ord=ord, axis=(-2, -1), keepdims=keepdims)


def linalg_svdvals(xp: Any, x: Any, /) -> Any:
    """``numpy.linalg.svdvals``: the singular values of the matrices in ``x``, descending."""
    return xp.linalg.svd(_matrices(xp.asarray(x), xp.linalg.LinAlgError), compute_uv=False)


def linalg_multi_dot(xp: Any, arrays: Any, *, out: Any = None) -> Any:
    """``numpy.linalg.multi_dot``: the chained dot product in the cheapest order (no out=)."""
    if out is not None:
        raise NotSupplied("multi_dot: out= is not supplied")
    if len(arrays) < 3:
        if len(arrays) < 2:
            raise ValueError("Expecting at least two arrays.")
        return xp.dot(xp.asarray(arrays[0]), xp.asarray(arrays[1]))
    arrays = [xp.asarray(a) for a in arrays]
    first, last, n = arrays[0].ndim, arrays[-1].ndim, len(arrays)
    arrays[0] = arrays[0][None, :] if first == 1 else arrays[0]
    arrays[-1] = arrays[-1][:, None] if last == 1 else arrays[-1]
    if any(a.ndim != 2 for a in arrays):
        raise xp.linalg.LinAlgError("the arrays must be two-dimensional (ends: or 1-D)")
    dims = [a.shape[0] for a in arrays] + [arrays[-1].shape[1]]
    best = {(i, i): (0, i) for i in range(n)}  # (i, j): (cost, split) for arrays[i..j]
    for j, i in ((j, j - length) for length in range(1, n) for j in range(length, n)):
        best[i, j] = min((best[i, k][0] + best[k + 1, j][0]
                          + dims[i] * dims[k + 1] * dims[j + 1], k) for k in range(i, j))

    def chain(i: int, j: int) -> Any:
        k = best[i, j][1]
        return arrays[i] if i == j else xp.dot(chain(i, k), chain(k + 1, j))

    result = chain(0, n - 1)
    return result[0, 0] if first == last == 1 else result.ravel() if 1 in (first, last) else result


def geomspace(xp: Any, start: Any, stop: Any, num: int = 50, endpoint: bool = True,
              dtype: Any = None, axis: int = 0) -> Any:
    """``numpy.geomspace``: ``num`` numbers from ``start`` to ``stop`` on a log scale (not to
    integers between the ends: NumPy truncates them, and the device may round across one)."""
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    start, stop = xp.asarray(start), xp.asarray(stop)
    dt = numpy.result_type(start.dtype, stop.dtype, float(num),
                           numpy.float64 if dtype is None else numpy.dtype(dtype))
    dtype = dt if dtype is None else numpy.dtype(dtype)
    if dtype.kind in "biu" and (num > 2 or (num == 2 and not endpoint)):
        raise NotSupplied("geomspace: integer dtypes between the ends are not supplied")
    if bool(xp.any(start == 0) | xp.any(stop == 0)):  # one host sync, for NumPy's error
        raise ValueError("Geometric sequence cannot include zero")
    sign = xp.sign(start.astype(dt))  # rotate start onto the positive reals, as NumPy does
    start, stop = start.astype(dt) / sign, stop.astype(dt) / sign
    low, high = xp.log10(start), xp.log10(stop)
    delta, div = high - low, num - 1 if endpoint else num
    steps = xp.arange(num, dtype=_real_float(dt)).reshape((-1,) + (1,) * delta.ndim)
    result = xp.power(10.0, steps * (delta / div if div > 0 else delta) + low)
    if num > 0:
        result[0] = start
        if num > 1 and endpoint:
            result[-1] = stop
    result = result * sign
    return (xp.moveaxis(result, 0, axis) if axis != 0 else result).astype(dtype, copy=False)


def _order(xp: Any, m: Any, p: Any, name: str) -> tuple[int, Any, Any]:
    """The order ``m`` of ``numpy.poly<name>`` checked as NumPy does, the coefficients, and
    the poly1d class to give back a poly1d in (None for coefficients), as NumPy does."""
    if int(m) < 0:
        what, other = ("derivative", "polyint") if name == "der" else ("integral", "polyder")
        raise ValueError(f"Order of {what} must be positive (see {other})")
    if type(p).__name__ != "poly1d":
        return int(m), p, None
    if isinstance(p, numpy.poly1d) is not (xp is numpy):  # a poly1d of the other module
        raise NotSupplied(f"poly{name}: a poly1d of the host is not supplied on the device")
    return int(m), p.coeffs, type(p)


def polyder(xp: Any, p: Any, m: int = 1) -> Any:
    """``numpy.polyder`` of coefficients (or a poly1d), highest power first."""
    m, p, poly = _order(xp, m, p, "der")
    p = xp.asarray(p)
    while True:
        n = len(p) - 1  # first, as NumPy: a 0-d p is a TypeError
        derivative = p[:-1] * xp.arange(n, 0, -1)
        if m == 0:
            return p if poly is None else poly(p)
        p, m = derivative, m - 1


def polyint(xp: Any, p: Any, m: int = 1, k: Any = None) -> Any:
    """``numpy.polyint`` of coefficients (or a poly1d), highest power first, constants ``k``."""
    m, p, poly = _order(xp, m, p, "int")
    k = xp.atleast_1d(xp.zeros(m, float) if k is None else xp.asarray(k))
    if len(k) == 1 and m > 1:
        k = k[0] * xp.ones(m, float)
    if len(k) < m:
        raise ValueError("k must be a scalar or a rank-1 array of length 1 or >m.")
    p = xp.asarray(p)
    for i in range(m):
        p = xp.concatenate((p / xp.arange(len(p), 0, -1), k[i:i + 1]))
    return p if poly is None else poly(p)


def spacing(xp: Any, x: Any, /, out: Any = None, **options: Any) -> Any:
    """``numpy.spacing`` called plainly: the gap to the next float away from zero, on the bits
    (exact where subnormals flush); float16 gives NumPy's ``nextafter(x, inf) - x``."""
    _plain("spacing", {"out": out, **options})
    x = xp.asarray(x)
    dt = numpy.spacing.resolve_dtypes((x.dtype, None))[1]  # NumPy's loop; TypeError if none
    if dt not in (numpy.float16, numpy.float32, numpy.float64):
        raise NotSupplied(f"spacing: {dt} is not supplied")
    info, width, half = numpy.finfo(dt), 8 * dt.itemsize, dt == numpy.float16
    word = numpy.dtype(f"uint{width}").type
    mant, emax = info.nmant, 2 * info.maxexp - 1
    bits = x.astype(dt).view(word)
    magnitude = bits & word(2 ** (width - 1) - 1)
    exponent = step = magnitude >> word(mant)
    if half:  # up from a negative power of two is the gap of the binade below
        down = (bits != magnitude) & ((bits & word(2**mant - 1)) == word(0))
        step = xp.where(down, xp.maximum(exponent, word(1)) - word(1), exponent)
    result = xp.where(step > word(mant), (step - word(mant)) << word(mant),  # else subnormal
                      xp.left_shift(word(1), xp.clip(step, word(1), word(mant)) - word(1)))
    top = int(numpy.asarray(info.max, dt).view(word))  # after the largest finite: inf
    result = xp.where((bits if half else magnitude) == word(top), word(emax << mant), result)
    result = xp.where(exponent == word(emax), word((emax << mant) | (1 << (mant - 1))), result)
    if not half:
        negative = (bits != magnitude) & (magnitude != word(0))
        result = xp.where(negative, result | word(1 << (width - 1)), result)
    return result.view(dt)


def unstack(xp: Any, x: Any, /, *, axis: int = 0) -> tuple[Any, ...]:
    """``numpy.unstack``: the views of ``x`` (an array, as NumPy asks) along ``axis``."""
    if x.ndim == 0:
        raise ValueError("Input array must be at least 1-d.")
    return tuple(xp.moveaxis(xp.asarray(x), axis, 0))


def insert(xp: Any, arr: Any, obj: Any, values: Any, axis: Any = None) -> Any:
    """``numpy.insert`` for an int, 1-D int sequence or slice ``obj`` (others are refused)."""
    arr = xp.asarray(arr)
    arr, axis = (arr.ravel(), 0) if axis is None else (arr, axis_index(axis, arr.ndim))
    n, before = arr.shape[axis], (slice(None),) * axis
    if hasattr(obj, "__cuda_array_interface__"):
        obj = obj.get()  # host sync forced: the positions decide the result's shape
    index = numpy.arange(*obj.indices(n)) if isinstance(obj, slice) else numpy.array(obj)
    if index.dtype.kind not in "iu" and (index.size or isinstance(obj, numpy.ndarray)):
        raise NotSupplied(f"insert: obj of dtype {index.dtype} is not supplied")
    if index.ndim > 1:
        raise ValueError("index array argument obj to insert must be one dimensional or scalar")
    values = xp.asarray(values, dtype=arr.dtype)
    if index.size == 1:  # NumPy's one-position path: values fill a block of their own width
        if not -n <= (at := int(index.reshape(()))) <= n:
            raise IndexError(f"index {obj} is out of bounds for axis {axis} with size {n}")
        values = values.reshape((1,) * (arr.ndim - values.ndim) + values.shape)
        values = xp.moveaxis(values, 0, axis) if index.ndim == 0 else values
        index = numpy.full(values.shape[axis], at + n * (at < 0))
    index = numpy.where(index < 0, index + n, index).astype(numpy.intp)
    index[index.argsort(kind="mergesort")] += numpy.arange(len(index))
    keep = numpy.ones(n + len(index), dtype=bool)
    keep[index] = False  # IndexError like NumPy's
    new = xp.empty((*arr.shape[:axis], len(keep), *arr.shape[axis + 1:]), arr.dtype)
    new[(*before, xp.asarray(index))] = values
    new[(*before, xp.asarray(numpy.flatnonzero(keep)))] = arr
    return new


def _nanquantile(xp: Any, a: Any, q: Any, axis: Any, out: Any, method: str, keepdims: Any,
                 weights: Any, percent: bool, overwrite: bool) -> Any:
    """``numpy.nanquantile`` (``nanpercentile`` with ``percent``) for method 'linear'."""
    if weights is not None or method != "linear" or isinstance(axis, tuple):
        raise NotSupplied("nanquantile: only method='linear', axis None or an int is supplied")
    if overwrite:  # NumPy leaves its scratch in the input, as --fallback does
        raise NotSupplied("nanquantile: overwrite_input=True is not supplied")
    a = xp.asarray(a)
    if a.dtype.kind == "c":
        raise TypeError("a must be an array of real numbers")
    weak = type(q) in (int, float)  # a Python number promotes weakly, as in NumPy
    on = xp if hasattr(q, "__cuda_array_interface__") else numpy  # check q where it lies
    q = on.true_divide(q, 100) if percent else on.asarray(q)
    if not bool(on.all((q >= 0) & (q <= 1))):  # a host sync forced where q is on the device
        raise ValueError(f"{'Percentiles' if percent else 'Quantiles'} must be in the range "
                         f"[0, {100 if percent else 1}]")
    q = xp.asarray(q)
    if q.dtype.kind not in "iuf" or q.ndim > 2:  # NumPy: booleans are odd, ndim > 2 an error
        raise NotSupplied(f"nanquantile: quantiles of dtype {q.dtype}, {q.ndim}-d are not supplied")
    keep = keepdims is not _NO_VALUE and bool(keepdims)
    along = 0 if axis is None else axis_index(axis, a.ndim)
    kept = tuple(1 if axis is None or i == along else n for i, n in enumerate(a.shape))
    if a.size == 0:  # NumPy gives the nanmean of nothing here: nan, whatever q
        empty = xp.full(kept, xp.nan, numpy.result_type(a.dtype, 1.0))
        return _into(out, empty if keep else empty.squeeze(None if axis is None else along))
    values = xp.moveaxis(xp.sort(a.ravel() if axis is None else a, axis=along), along, 0)
    rest, floating = values.shape[1:], a.dtype.kind == "f"
    count = xp.sum(~xp.isnan(values), axis=0) if floating else xp.full(rest, values.shape[0])
    last, qs = count - 1, q.reshape(q.shape + (1,) * len(rest))

    def take(index: Any) -> Any:  # the sorted values at index, per slice (all-NaN: any)
        index = xp.maximum(xp.broadcast_to(index, q.shape + rest), 0).reshape((-1, *rest))
        return xp.take_along_axis(values, index, axis=0).reshape(q.shape + rest)

    if q.dtype.kind in "iu":  # integer positions: NumPy takes the values as they are
        result = take(last * qs.astype(xp.int64))
    else:  # NumPy's _lerp with its gamma, and index -1 from the last position on
        at = last.astype(q.dtype) * qs
        above = at >= last.astype(q.dtype)
        gamma = xp.where(above, at + 1, at - xp.floor(at))
        low = xp.where(above, last, xp.floor(at).astype(xp.int64))
        lower, upper = take(low), take(xp.where(above, last, low + 1))
        kind = numpy.result_type(a.dtype, 1.0) if weak else gamma.dtype  # weak: a Python float
        t, rest_t = gamma.astype(kind), (1 - gamma).astype(kind)
        diff = upper - lower
        result = xp.where(gamma >= 0.5, upper - diff * rest_t, lower + diff * t)
    result = xp.where(count == 0, xp.nan, result) if floating else result
    if floating and result.dtype != a.dtype and bool(count.ravel()[0] == 0):  # host sync
        result = result.astype(a.dtype)  # forced: an all-NaN first slice sets NumPy's dtype
    return _into(out, result.reshape(q.shape + kept) if keep else result)


def _into(out: Any, result: Any) -> Any:
    """``result``, or written into ``out`` as NumPy writes it (:func:`.retry.written`)."""
    done = result if out is None else written(out, result)
    if done is FAILED:
        raise NotSupplied("nanquantile: out= of another shape or kind of dtype is not supplied")
    return done


def nanquantile(xp: Any, a: Any, q: Any, axis: Any = None, out: Any = None,
                overwrite_input: bool = False, method: str = "linear", keepdims: Any = _NO_VALUE,
                *, weights: Any = None) -> Any:
    """``numpy.nanquantile`` for method 'linear' and ``axis`` None or an int (no warning)."""
    return _nanquantile(xp, a, q, axis, out, method, keepdims, weights, False, overwrite_input)


def nanpercentile(xp: Any, a: Any, q: Any, axis: Any = None, out: Any = None,
                  overwrite_input: bool = False, method: str = "linear",
                  keepdims: Any = _NO_VALUE, *, weights: Any = None) -> Any:
    """``numpy.nanpercentile`` for method 'linear' and ``axis`` None or an int (no warning)."""
    return _nanquantile(xp, a, q, axis, out, method, keepdims, weights, True, overwrite_input)


# NumPy's name below ``numpy`` -> its device version, taking the array module first
SUPPLIED: dict[str, Callable[..., Any]] = {
    name: globals()[name.replace(".", "_")] for name in (
        "linalg.trace", "linalg.diagonal", "linalg.outer", "linalg.vecdot", "vecdot", "matvec",
        "vecmat", "linalg.vector_norm", "linalg.matrix_norm", "linalg.svdvals",
        "linalg.multi_dot", "geomspace", "polyder", "polyint", "spacing", "unstack", "insert",
        "nanquantile", "nanpercentile")}

