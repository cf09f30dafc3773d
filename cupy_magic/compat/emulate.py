"""Options CuPy's reductions lack, done exactly with CuPy's own functions.

``np.sum(x, where=mask)`` and friends are common in NumPy code and CuPy has no ``where=``
(nor ``initial=``) on its reductions. A masked reduction is the plain reduction over
``np.where(mask, x, fill)``, where ``fill`` leaves the result unchanged: 0 for ``sum``, 1 for
``prod``, False for ``any``, True for ``all``, and ``initial`` for ``max`` and ``min`` (which
NumPy requires there); ``initial`` alone is taken into the plain reduction's result (added,
multiplied, or the larger or smaller). Done this way the call runs on the device and gives
NumPy's result; ``count_nonzero(..., keepdims=True)`` is the count with its axes kept,
``indices(..., sparse=True)`` an ``arange`` per axis, and ``mean``, ``var`` and ``std`` with
``where=`` (``var`` and ``std`` also with a ``mean=`` given, or ``correction=``) the moments
of the selected values, computed as NumPy computes them.

A call with an option CuPy lacks takes the slow path (:meth:`~.calls.Calls.slow`), which asks
:func:`emulate` first; calls with options this does not cover (``out=``, ``max``/``min``
with ``where=`` but without ``initial``, ``max``/``min`` of an empty array) are refused there
in one line as before.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy

__all__ = ["EMULATED", "NOT_EMULATED", "emulate"]

_FILLS = {"sum": 0, "prod": 1, "any": False, "all": True}
_REDUCTIONS = {**{n: n for n in (*_FILLS, "max", "min")}, "amax": "max", "amin": "min"}
_TAKEN = frozenset({"axis", "dtype", "keepdims", "where", "initial"})
_MOMENTS = frozenset({"mean", "var", "std"})
EMULATED = frozenset(f"np.{n}" for n in (*_REDUCTIONS, *_MOMENTS, "count_nonzero", "indices"))
NOT_EMULATED = object()


def emulate(xp: Any, function: str, args: tuple, kwargs: dict) -> Any:
    """``function(*args, **kwargs)`` (``"np.sum"``, one of :data:`EMULATED`) done with
    ``xp``'s functions when it uses an option this module covers, else :data:`NOT_EMULATED`."""
    short = function.removeprefix("np.")
    if short == "indices":
        return _sparse_indices(xp, *args, **kwargs)
    if short in _MOMENTS:
        return _moment(xp, short, *args, **kwargs)
    if short == "count_nonzero":
        if len(args) != 1 or not kwargs.get("keepdims") or not set(kwargs) <= {"axis",
                                                                                 "keepdims"}:
            return NOT_EMULATED
        a = xp.asarray(args[0])
        axis = kwargs.get("axis")
        counts = xp.asarray(xp.count_nonzero(a, axis=axis))
        return counts.reshape(tuple(1 if _kept(i, axis, a.ndim) else n
                                    for i, n in enumerate(a.shape)))
    name = _REDUCTIONS[short]
    initial = kwargs.get("initial")
    if (len(args) != 1 or not ("where" in kwargs or initial is not None)
            or not set(kwargs) <= _TAKEN or (name not in _FILLS and initial is None)
            or numpy.ndim(initial) != 0):
        return NOT_EMULATED
    a = xp.asarray(args[0])
    if name in ("max", "min") and a.size == 0:  # NumPy gives initial; refused here
        return NOT_EMULATED
    return _masked(xp, name, a, kwargs)


def _masked(xp: Any, name: str, a: Any, kwargs: dict) -> Any:
    """``np.<name>(a, where=..., initial=..., ...)`` as the plain reduction over the array
    filled where it is masked, ``initial`` cast on the host as NumPy casts it (unsafe:
    ``np.max([1, 2], initial=3.7)`` is 3; out of range for the dtype, NumPy's error) and
    then taken into the result."""
    initial = kwargs.get("initial")
    if "where" in kwargs:
        fill = initial if name in ("max", "min") else _FILLS[name]
        a = xp.where(xp.asarray(kwargs["where"]), a, numpy.asarray(fill, dtype=a.dtype)[()])
    options = {k: kwargs[k] for k in ("axis", "dtype", "keepdims") if k in kwargs}
    if name in ("any", "all", "max", "min"):
        options.pop("dtype", None)
    result = getattr(xp, name)(a, **options)
    if initial is None:
        return result
    start = numpy.asarray(initial, dtype=result.dtype)[()]  # NumPy casts it to the result's
    if name in ("sum", "prod"):
        return (result + start if name == "sum" else result * start).astype(result.dtype)
    return (xp.maximum if name == "max" else xp.minimum)(result, start)


def _moment(xp: Any, name: str, a: Any, axis: Any = None, dtype: Any = None, out: Any = None,
            ddof: Any = 0, keepdims: bool = False, *, where: Any = None, mean: Any = None,
            correction: Any = None) -> Any:
    """``np.mean``/``var``/``std`` with ``where=`` (or ``var``/``std`` with ``mean=`` or
    ``correction=``), as NumPy computes them: the mean of the selected values (in float64 for
    integers; or the ``mean`` given), then the mean square of their distance to it, divided by
    ``count - ddof``; else :data:`NOT_EMULATED` (``out=``, float16, ...)."""
    if correction is not None:
        if ddof != 0:
            raise ValueError("ddof and correction can't be provided simultaneously.")
        ddof = correction
    if (out is not None or (name == "mean" and (ddof != 0 or mean is not None))
            or (where is None and mean is None and correction is None)):
        return NOT_EMULATED
    a = xp.asarray(a)
    if a.dtype.kind not in "biufc" or a.dtype == numpy.float16:
        return NOT_EMULATED
    mask = xp.broadcast_to(xp.asarray(True if where is None else where, dtype=bool), a.shape)
    if dtype is None and a.dtype.kind in "biu":
        dtype = numpy.float64
    count = xp.sum(mask, axis=axis, keepdims=True)
    if mean is None:
        total = xp.sum(xp.where(mask, a, 0), axis=axis, dtype=dtype, keepdims=True)
        mean = (total / count).astype(total.dtype)
        if name == "mean":
            return mean if keepdims else _squeezed(mean, axis, a.ndim)
    x = xp.where(mask, a - xp.asarray(mean), 0)
    square = x.real * x.real + x.imag * x.imag if x.dtype.kind == "c" else x * x
    ret = xp.sum(square, axis=axis, dtype=dtype, keepdims=True)
    ret = (ret / xp.maximum(count - ddof, 0)).astype(ret.dtype)
    ret = xp.sqrt(ret) if name == "std" else ret
    return ret if keepdims else _squeezed(ret, axis, a.ndim)


def _squeezed(x: Any, axis: Any, ndim: int) -> Any:
    """``x`` reduced with ``keepdims=True`` over ``axis``, without those axes."""
    return x.squeeze(tuple(i for i in range(ndim) if _kept(i, axis, ndim)))


def _sparse_indices(xp: Any, dimensions: Any, dtype: Any = int, sparse: bool = False,
                    **others: Any) -> Any:
    """``np.indices(dimensions, sparse=True)``: one ``arange`` per axis, shaped to broadcast
    (as NumPy makes them); else :data:`NOT_EMULATED`."""
    if sparse is not True or others:
        return NOT_EMULATED
    dims = tuple(operator.index(d) for d in dimensions)
    return tuple(xp.arange(d, dtype=dtype).reshape((1,) * i + (d,) + (1,) * (len(dims) - i - 1))
                 for i, d in enumerate(dims))


def _kept(i: int, axis: Any, ndim: int) -> bool:
    if axis is None:
        return True
    axes = axis if isinstance(axis, tuple) else (axis,)
    return i in {ax % ndim for ax in axes}
