"""NumPy uses CuPy 14 refuses (it has the function but raises), and ``block`` and ``polydiv``
it lacks, done with the functions of an array module ``xp`` (CuPy). As in :mod:`.supplement`:
``xp``, then NumPy's parameters; NumPy's dtype, shape, values (to rounding; a 0-d array for a
NumPy scalar) and error class, else :class:`NotSupplied`. ``numpy`` sees only dtypes, shapes
and host values; the host syncs a data-dependent shape or NumPy's errors force are marked."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import numpy

from .axes import axis_index, axis_indices
from .supplement import NotSupplied

__all__ = ["COMPLETED"]

_NO_VALUE = getattr(numpy, "_NoValue", None)


def _promoted(xp: Any, value: Any) -> Any:
    """``value`` for ``numpy.result_type``: a Python number as it is (weak), else a dtype."""
    return value if type(value) in (bool, int, float, complex) else xp.asarray(value).dtype


def logspace(xp: Any, start: Any, stop: Any, num: int = 50, endpoint: bool = True,
             base: Any = 10.0, dtype: Any = None, axis: int = 0) -> Any:
    """``numpy.logspace``: ``base ** linspace(start, stop)``, ``base`` broadcast with the ends
    (not to integer dtypes: NumPy truncates, and the device's power may round across one)."""
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    if dtype is not None and numpy.dtype(dtype).kind in "iu":
        raise NotSupplied("logspace: integer dtypes are not supplied")
    if not isinstance(base, (float, int)) and (
            base.ndim if hasattr(base, "ndim") else numpy.ndim(base)):
        start, stop, base = (xp.asarray(v) for v in (start, stop, base))
        ndmax = len(numpy.broadcast_shapes(start.shape, stop.shape, base.shape))
        start, stop, base = (v.reshape((1,) * (ndmax - v.ndim) + v.shape)
                             for v in (start, stop, base))
        base = xp.expand_dims(base, axis_index(axis, ndmax + 1))
    dt = numpy.result_type(_promoted(xp, start), _promoted(xp, stop), 0.0)  # NumPy's linspace
    start, stop = xp.asarray(start).astype(dt), xp.asarray(stop).astype(dt)
    steps = num - 1 if endpoint else num
    delta, div = stop - start, xp.asarray(steps, dt)
    y = xp.arange(num).astype(dt).reshape((-1,) + (1,) * delta.ndim)
    y = (xp.where(xp.any(delta / div == 0), y / div * delta, y * (delta / div))  # NumPy's
         if steps > 0 else y * delta) + start  # path for a zero step: for all, if any
    if endpoint and num > 1:
        y[-1, ...] = stop
    if axis != 0:
        y = xp.moveaxis(y, 0, axis_index(axis, y.ndim))
    dt = numpy.result_type(_promoted(xp, base), y.dtype)
    result = xp.power(xp.asarray(base).astype(dt), y.astype(dt))
    return result if dtype is None else result.astype(dtype)


def trim_zeros(xp: Any, filt: Any, trim: str = "fb", axis: Any = None) -> Any:
    """``numpy.trim_zeros`` (NumPy 2.2): ``filt`` sliced to its nonzeros along ``axis`` (None:
    every axis); a view of an array, a list or tuple for a list or tuple."""
    array = xp.asarray(filt)
    trim = trim.lower()
    if trim not in {"fb", "bf", "f", "b"}:
        raise ValueError(f"unexpected character(s) in `trim`: {trim!r}")
    axes = (tuple(range(array.ndim)) if axis is None
            else axis_indices(axis, array.ndim, "repeated axis in `axis` argument"))
    if not axes:
        return filt
    edges = {ax: (0, 0) for ax in axes}  # all zero: an empty slice along each axis
    if array.size:
        nonzero = array != 0
        found = [xp.any(nonzero).astype(xp.int64)]
        for ax in axes:
            along = nonzero if array.ndim == 1 else xp.any(
                nonzero, axis=tuple(i for i in range(array.ndim) if i != ax))
            found += [xp.argmax(along), array.shape[ax] - xp.argmax(along[::-1])]
        # host sync forced: the result's shape depends on where the nonzeros are
        first, *ends = (int(v) for v in xp.stack(found).tolist())
        if first:  # from the first nonzero, to after the last, along each axis
            edges = {ax: (lo if "f" in trim else None, hi if "b" in trim else None)
                     for ax, lo, hi in zip(axes, ends[::2], ends[1::2], strict=True)}
    cut = tuple(slice(*edges[ax]) if ax in edges else slice(None) for ax in range(array.ndim))
    return filt[cut[0]] if len(cut) == 1 else filt[cut]


def size(xp: Any, a: Any, axis: Any = None) -> int:
    """``numpy.size``: the elements of ``a`` (along ``axis``, an int or a tuple), an int."""
    shape = a.shape if hasattr(a, "shape") else xp.asarray(a).shape
    return math.prod(shape if axis is None else (shape[i] for i in axis_indices(axis, len(shape))))


_MODES = {None: "raise", "raise": "raise", "wrap": "wrap", "clip": "clip",  # and NumPy's ints
          0: "clip", 1: "wrap", 2: "raise"}


def choose(xp: Any, a: Any, choices: Any, out: Any = None, mode: Any = "raise") -> Any:
    """``numpy.choose``: ``a`` and every choice broadcast together, in their common dtype
    (Python numbers promote weakly, as in NumPy); no ``out=``."""
    if out is not None or type(mode) not in (str, int, type(None)):
        raise NotSupplied(f"choose: out= or mode={mode!r} is not supplied")
    if mode not in _MODES:
        raise ValueError(f"clipmode must be one of 'clip', 'raise', or 'wrap' (got {mode!r})")
    a = xp.asarray(a)
    if not numpy.can_cast(a.dtype, numpy.intp, "safe"):
        raise TypeError(f"Cannot cast array data from {a.dtype} to intp by the rule 'safe'")
    items = list(choices)
    if not items:
        raise ValueError("0-length sequence.")
    dt = numpy.result_type(*(_promoted(xp, c) for c in items))
    items = [xp.asarray(c).astype(dt) for c in items]  # unsafe, as NumPy's for Python ints
    shape = numpy.broadcast_shapes(a.shape, *(c.shape for c in items))
    index, n, how = xp.broadcast_to(a.astype(numpy.intp), shape), len(items), _MODES[mode]
    if how == "raise" and bool(xp.any((index < 0) | (index >= n))):  # host sync forced:
        raise ValueError("invalid entry in choice array")  # NumPy's ValueError
    index = index % n if how == "wrap" else xp.clip(index, 0, n - 1) if how == "clip" else index
    result = xp.broadcast_to(items[-1], shape).copy()
    for i, choice in enumerate(items[:-1]):
        result = xp.where(index == i, choice, result)
    return result


def ediff1d(xp: Any, ary: Any, to_end: Any = None, to_begin: Any = None) -> Any:
    """``numpy.ediff1d``: ``ary``'s differences, between ``to_begin`` and ``to_end`` (cast)."""
    ary = xp.asarray(ary).ravel()
    ends = {"to_begin": to_begin, "to_end": to_end}
    for name, value in ends.items():
        if value is not None:
            value = xp.asarray(value)
            if not numpy.can_cast(value.dtype, ary.dtype, casting="same_kind"):
                raise TypeError(f"dtype of `{name}` must be compatible with `ary` (same_kind)")
            ends[name] = value.ravel().astype(ary.dtype)
    if ary.dtype == bool:
        raise TypeError("numpy boolean subtract, the `-` operator, is not supported")
    diff = ary[1:] - ary[:-1]
    if to_begin is None and to_end is None:
        return diff
    return xp.concatenate([v for v in (ends["to_begin"], diff, ends["to_end"]) if v is not None])


def piecewise(xp: Any, x: Any, condlist: Any, funclist: Any, *args: Any, **kw: Any) -> Any:
    """``numpy.piecewise``: ``funclist[i]`` (a value, or a callable given the values of ``x``
    where ``condlist[i]`` holds) where ``condlist[i]``; one more function: otherwise."""
    x = xp.asarray(x)
    arrays = (numpy.ndarray, xp.ndarray)
    if numpy.isscalar(condlist) or ((condlist.ndim < 2 if isinstance(condlist, arrays)
                                     else not isinstance(condlist[0], (list, *arrays)))
                                    and x.ndim != 0):
        condlist = [condlist]  # a single condition, as NumPy reads it
    conds = (xp.asarray(condlist).astype(bool) if isinstance(condlist, arrays)
             else xp.stack([xp.asarray(c).astype(bool) for c in condlist]))
    n, n2 = len(conds), len(funclist)
    if n == n2 - 1:
        conds = xp.concatenate([conds, ~xp.any(conds, axis=0, keepdims=True)], axis=0)
    elif n != n2:
        raise ValueError(f"with {n} condition(s), either {n} or {n + 1} functions are expected")
    k = conds.ndim - 1
    if k > x.ndim or conds.shape[1:] != x.shape[:k]:
        raise IndexError(f"boolean index of shape {conds.shape[1:]} does not match {x.shape}")
    y, tail, lead = xp.zeros(x.shape, x.dtype), x.shape[k:], math.prod(x.shape[:k])
    for cond, func in zip(conds, funclist, strict=False):
        if callable(func):  # y is new and contiguous: flat is a view
            flat, chosen = y.reshape((lead, *tail)), cond.reshape(-1)
            values = x.reshape((lead, *tail))[chosen]  # host sync forced: func's input shape
            if values.size > 0:
                flat[chosen] = func(values, *args, **kw)
            continue
        value = (func.astype(x.dtype) if isinstance(func, xp.ndarray)
                 else xp.asarray(numpy.asarray(func, dtype=x.dtype)))  # NumPy's item casts
        if numpy.broadcast_shapes(value.shape, (1, *tail)) != (1, *tail):  # a value for each
            raise NotSupplied("piecewise: a value of that shape is not supplied")  # selected one
        value = value.reshape(value.shape[-len(tail):] if tail else ())  # one for all of them
        y[...] = xp.where(cond.reshape(cond.shape + (1,) * len(tail)), value, y)
    return y


def _bits(xp: Any, a: Any, axis: Any, bitorder: Any, kinds: str, what: str) -> tuple:
    """``a`` checked as NumPy does, flattened for axis None, the axis, and whether big."""
    a = xp.asarray(a)
    if a.dtype.kind not in kinds or (kinds == "u" and a.dtype != numpy.uint8):
        raise TypeError(f"Expected an input array of {what} data type")
    if not isinstance(bitorder, str):
        raise TypeError(f"bitorder must be str, not {type(bitorder).__name__}")
    if bitorder not in ("big", "little"):
        raise ValueError("'order' must be either 'little' or 'big'")
    if axis is None:
        return a.ravel(), 0, bitorder == "big"
    a = a.reshape(1) if a.ndim == 0 else a
    return a, axis_index(axis, a.ndim), bitorder == "big"


def packbits(xp: Any, a: Any, /, axis: Any = None, bitorder: str = "big") -> Any:
    """``numpy.packbits``: ``a != 0`` as the bits of uint8 along ``axis``, zero-padded."""
    a, axis, big = _bits(xp, a, axis, bitorder, "biu", "integer or boolean")
    n, bits = a.shape[axis], xp.moveaxis(a, axis, -1) != 0
    m = (n + 7) // 8
    if 8 * m > n:
        bits = xp.concatenate([bits, xp.zeros((*bits.shape[:-1], 8 * m - n), bool)], axis=-1)
    packed = xp.packbits(bits.ravel(), bitorder="big" if big else "little")
    return xp.moveaxis(packed.reshape((*bits.shape[:-1], m)), -1, axis)


def unpackbits(xp: Any, a: Any, /, axis: Any = None, count: Any = None,
               bitorder: str = "big") -> Any:
    """``numpy.unpackbits``: the bits of uint8 ``a`` along ``axis``, ``count`` of them
    (negative: all but the last ``-count``; beyond the end: zeros)."""
    a, axis, big = _bits(xp, a, axis, bitorder, "u", "unsigned byte")
    total = 8 * a.shape[axis]
    keep = total if count is None else operator.index(count)
    keep = keep if keep >= 0 else total + keep
    if keep < 0:
        raise ValueError("-count larger than number of elements")
    shifts = xp.asarray(list(range(7, -1, -1) if big else range(8)), dtype=numpy.uint8)
    x = xp.moveaxis(a, axis, -1)
    bits = ((x[..., None] >> shifts) & numpy.uint8(1)).reshape((*x.shape[:-1], total))
    if keep > total:
        bits = xp.concatenate([bits, xp.zeros((*x.shape[:-1], keep - total), numpy.uint8)], -1)
    return xp.moveaxis(bits[..., :keep], -1, axis)


def average(xp: Any, a: Any, axis: Any = None, weights: Any = None, returned: bool = False,
            *, keepdims: Any = _NO_VALUE) -> Any:
    """``numpy.average`` over ``axis`` (None, an int or a tuple), ``weights`` of ``a``'s shape
    or of its shape along ``axis``."""
    a = xp.asarray(a)
    axes = None if axis is None else axis_indices(axis, a.ndim)
    keep = False if keepdims is _NO_VALUE else keepdims
    if weights is None:
        avg = a.mean(axis=axes, keepdims=keep)
        scale = xp.full(avg.shape, a.size / avg.size, avg.dtype)  # ZeroDivisionError as NumPy
        return (avg, scale) if returned else avg
    w = xp.asarray(weights)
    if a.shape != w.shape:
        if axes is None:
            raise TypeError("Axis must be specified when shapes of a and weights differ.")
        if w.shape != tuple(a.shape[ax] for ax in axes):
            raise ValueError("Shape of weights must be consistent with shape of a along axis.")
        w = w.transpose(tuple(int(i) for i in numpy.argsort(axes))).reshape(
            tuple(n if ax in axes else 1 for ax, n in enumerate(a.shape)))
    dt = numpy.result_type(a.dtype, w.dtype, *(("f8",) if a.dtype.kind in "biu" else ()))
    scale = w.astype(dt).sum(axis=axes, keepdims=keep)
    if bool(xp.any(scale == 0.0)):  # host sync forced: NumPy's ZeroDivisionError
        raise ZeroDivisionError("Weights sum to zero, can't be normalized")
    avg = (a.astype(dt) * w.astype(dt)).sum(axis=axes, keepdims=keep) / scale
    return (avg, xp.broadcast_to(scale, avg.shape).copy()) if returned else avg


def _reduce(xp: Any, name: str, array: Any, axis: Any, dtype: Any, out: Any, keepdims: bool,
            initial: Any, where: Any) -> Any:
    """``numpy.<name>.reduce`` as a pairwise tree of ``xp.<name>`` over the axes."""
    if out is not None or where is not True:
        raise NotSupplied(f"{name}.reduce: out= and where= are not supplied")
    a, ufunc = xp.asarray(array), getattr(xp, name)
    resolve = getattr(numpy, name).resolve_dtypes  # NumPy's TypeError for no loop
    loop = (resolve((None, a.dtype, None), reduction=True) if dtype is None
            else resolve((numpy.dtype(dtype),) * 2 + (None,)))[0]
    if loop.kind not in "iu" or not numpy.can_cast(a.dtype, loop, "same_kind"):
        raise NotSupplied(f"{name}.reduce: dtype {loop} from {a.dtype} is not supplied")
    if axis is None or isinstance(axis, tuple):
        axes = (range(a.ndim) if axis is None
                else axis_indices(axis, a.ndim, "duplicate value in axis"))
    else:  # a 0-d array along axis 0 or -1: nothing to reduce, as NumPy's
        axes = (() if a.ndim == 0 and operator.index(axis) in (0, -1)
                else (axis_index(axis, a.ndim),))
    if name == "lcm" and len(axes) > 1:
        raise ValueError("reduction operation 'lcm' is not reorderable (at most one axis)")
    start = {"gcd": 0, "lcm": None}[name] if initial is _NO_VALUE else initial
    if type(start) not in (bool, int, type(None)):
        raise NotSupplied(f"{name}.reduce: initial={start!r} is not supplied")
    start = None if start is None else xp.asarray(numpy.asarray(start, loop))  # OverflowError
    axes, rest = tuple(axes), tuple(i for i in range(a.ndim) if i not in axes)
    count = math.prod(a.shape[i] for i in axes)
    if count == 0 and start is None:
        raise ValueError(f"zero-size array to reduction operation {name} which has no identity")
    x = xp.transpose(a, axes + rest).reshape((count, *(a.shape[i] for i in rest))).astype(loop)
    over, top = xp.zeros((), bool), float(numpy.iinfo(loop).max)
    limit = top * (1 - 2.0**-48) if loop.itemsize == 8 else top  # float64's rounding there

    def pair(u: Any, v: Any) -> Any:
        nonlocal over
        if name == "lcm":  # |u| / gcd * |v|, in float64: whether the lcm may not fit
            g = xp.abs(xp.gcd(u, v).astype(numpy.float64))
            size_ = xp.abs(u.astype(numpy.float64)) / xp.where(g == 0, 1.0, g)
            over = over | xp.any(size_ * xp.abs(v.astype(numpy.float64)) > limit)
        return ufunc(u, v)

    while len(x) > 1:
        half = len(x) // 2
        x = xp.concatenate([pair(x[:2 * half:2], x[1:2 * half:2]), x[2 * half:]])
    first = xp.broadcast_to(start, x.shape[1:]) if start is not None else None
    result = first.copy() if count == 0 else x[0] if first is None else pair(first, x[0])
    if name == "lcm" and bool(over):  # host sync forced: NumPy's order gives another value
        raise NotSupplied("lcm.reduce: an intermediate lcm may overflow; not supplied")
    shape = tuple(1 if i in axes else n for i, n in enumerate(a.shape))
    return result.reshape(shape) if keepdims else result


def gcd_reduce(xp: Any, array: Any, axis: Any = 0, dtype: Any = None, out: Any = None,
               keepdims: bool = False, initial: Any = _NO_VALUE, where: Any = True) -> Any:
    """``numpy.gcd.reduce``: the greatest common divisor over ``axis`` (exact in any order)."""
    return _reduce(xp, "gcd", array, axis, dtype, out, keepdims, initial, where)


def lcm_reduce(xp: Any, array: Any, axis: Any = 0, dtype: Any = None, out: Any = None,
               keepdims: bool = False, initial: Any = _NO_VALUE, where: Any = True) -> Any:
    """``numpy.lcm.reduce``, refused where an lcm may overflow (NumPy's order may differ)."""
    return _reduce(xp, "lcm", array, axis, dtype, out, keepdims, initial, where)


def _nest(xp: Any, arrays: Any, index: list[Any], leaves: list[Any]
          ) -> tuple[Any, list[Any], int, int]:
    """NumPy's check of ``block``'s nesting, depth first: the nesting with leaves as places in
    ``leaves``, NumPy's bottom index (None ends an empty list), the largest ndim, the size."""
    if isinstance(arrays, tuple):
        where = "arrays" + "".join(f"[{i}]" for i in index)
        raise TypeError(f"{where} is a tuple. Only lists can be used to arrange blocks")
    if not isinstance(arrays, list):
        leaves.append(xp.asarray(arrays))
        return len(leaves) - 1, index, leaves[-1].ndim, leaves[-1].size
    if not arrays:
        return [], [*index, None], 0, 0
    tree, first, ndim, total = [], None, 0, 0
    for i, item in enumerate(arrays):
        sub, at, nd, n = _nest(xp, item, [*index, i], leaves)
        tree.append(sub)
        ndim, total = max(ndim, nd), total + n
        if first is not None and len(at) != len(first):
            raise ValueError(f"List depths are mismatched: {len(first)}, then {len(at)}")
        first = at if first is None or at[-1] is None else first
    return tree, first, ndim, total


def block(xp: Any, arrays: Any) -> Any:
    """``numpy.block``: nested lists of arrays joined with ``xp.concatenate``, the innermost
    along the last axis, each leaf given leading ones to the result's ndim."""
    leaves: list[Any] = []
    tree, bottom, arr_ndim, total = _nest(xp, arrays, [], leaves)
    depth = len(bottom)
    if bottom and bottom[-1] is None:
        raise ValueError(f"List at arrays{''.join(f'[{i}]' for i in bottom[:-1])} cannot be empty")
    ndim = max(arr_ndim, depth)
    leaves = [v.reshape((1,) * (ndim - v.ndim) + v.shape) for v in leaves]
    common = (numpy.result_type(*(v.dtype for v in leaves))  # NumPy's path for large ones
              if depth * total > 2 * 512 * 512 else None)

    def join(item: Any, level: int) -> Any:
        if level == depth:
            return leaves[item] if common is None else leaves[item].astype(common, copy=False)
        parts = [join(sub, level + 1) for sub in item]
        axis = ndim - depth + level
        if any(p.shape[:axis] + p.shape[axis + 1:] != parts[0].shape[:axis]
               + parts[0].shape[axis + 1:] for p in parts):
            raise ValueError(f"Mismatched array shapes in block along axis {axis}.")
        dt = numpy.result_type(*(p.dtype for p in parts))
        return xp.concatenate([p.astype(dt, copy=False) for p in parts], axis=axis)

    result = join(tree, 0)
    return result.copy() if depth == 0 else result


def polydiv(xp: Any, u: Any, v: Any) -> Any:
    """``numpy.polydiv``: quotient and remainder of coefficients (highest power first), the
    remainder's leading terms within 1e-8 of zero trimmed as NumPy does; poly1d as NumPy."""
    poly = [type(p) for p in (u, v) if type(p).__name__ == "poly1d"]
    if poly and any(p is not getattr(xp, "poly1d", None) for p in poly):
        raise NotSupplied("polydiv: a poly1d of another module is not supplied")
    u, v = (xp.atleast_1d(xp.asarray(p.coeffs if poly and hasattr(p, "coeffs") else p))
            for p in (u, v))
    if u.ndim > 1 or v.ndim > 1:
        raise NotSupplied("polydiv: coefficients of more than one dimension are not supplied")
    u, v = (p.astype(numpy.result_type(p.dtype, 0.0)) for p in (u, v))
    if not len(u) or not len(v):
        raise IndexError("index 0 is out of bounds for axis 0 with size 0")
    dt, m, n = numpy.result_type(u.dtype, v.dtype), len(u) - 1, len(v) - 1
    scale = (xp.ones((), v.dtype) / v[0]).astype(dt)  # rounded in v's dtype, as NumPy's
    q, r, v = xp.zeros((max(m - n + 1, 1),), dt), u.astype(dt), v.astype(dt)
    for k in range(m - n + 1):
        d = scale * r[k]
        q[k] = d
        r[k:k + n + 1] -= d * v
    large = ~(xp.abs(r).astype(numpy.float64) <= 1e-8)  # NumPy's allclose(r[0], 0, 1e-14)
    lead = xp.where(xp.any(large), xp.argmax(large), len(r))
    r = r[min(int(lead), len(r) - 1):]  # host sync forced: the trimmed length depends on data
    return (poly[0](q), poly[0](r)) if poly else (q, r)


# NumPy's name below ``numpy`` -> its device version, taking the array module first
COMPLETED: dict[str, Callable[..., Any]] = {
    "logspace": logspace, "trim_zeros": trim_zeros, "size": size, "choose": choose,
    "ediff1d": ediff1d, "piecewise": piecewise, "packbits": packbits,
    "unpackbits": unpackbits, "average": average, "gcd.reduce": gcd_reduce,
    "lcm.reduce": lcm_reduce, "block": block, "polydiv": polydiv}
