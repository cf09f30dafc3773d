"""NumPy's reading of ``axis=`` arguments, for the device versions in :mod:`.supplement` and
:mod:`.complete`: the same indices, and the same errors, as NumPy's ``normalize_axis_index``
and ``normalize_axis_tuple``."""

from __future__ import annotations

import operator
from typing import Any

import numpy

__all__ = ["AxisError", "axis_index", "axis_indices"]

AxisError = getattr(numpy, "exceptions", numpy).AxisError


def axis_index(axis: Any, ndim: int) -> int:
    """``axis`` as an index in ``range(ndim)``; NumPy's AxisError when out of bounds."""
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise AxisError(axis, ndim)
    return axis % ndim


def axis_indices(axis: Any, ndim: int, repeated: str = "repeated axis") -> tuple[int, ...]:
    """``axis`` (an int or ints) as indices, as NumPy's ``normalize_axis_tuple`` reads it."""
    single = type(axis) not in (tuple, list) and hasattr(axis, "__index__")
    axes = tuple(axis_index(a, ndim) for a in ([axis] if single else axis))
    if len(set(axes)) != len(axes):
        raise ValueError(repeated)
    return axes
