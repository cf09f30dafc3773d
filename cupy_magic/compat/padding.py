"""``np.pad`` uses CuPy refuses, made on the device with CuPy's own padding steps.

- **``mode='median'``**: CuPy's ``pad`` has the statistic modes (``'maximum'``, ``'mean'``,
  ``'minimum'``) but leaves ``'median'`` out. The median mode is the same steps with
  ``median`` as the statistic, as in NumPy: the padded array made, then, axis by axis, the
  median of the edge area (``stat_length`` values, or all) written into each pad area, rounded
  for an integer dtype. The steps are CuPy's (private, ``cupy._padding.pad``; NumPy's module
  on the CPU has the same); where they are not there, the call is refused as before.
- **``pad_width`` as a dict** (NumPy 2.3: ``np.pad(a, {1: (1, 2)})``, axes not named get no
  padding): made the sequence of pairs CuPy takes.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy

from .supplement import NotSupplied

__all__ = ["PADS"]

_STEPS = ("_pad_simple", "_as_pairs", "_view_roi", "_get_stats", "_set_pad_area")


def _steps(xp: Any) -> Any:
    """The module with ``xp``'s padding steps, or :class:`NotSupplied`."""
    name = "numpy.lib._arraypad_impl" if xp is numpy else f"{xp.__name__}._padding.pad"
    try:
        module = importlib.import_module(name)
    except ImportError:
        module = None
    if module is None or not all(hasattr(module, step) for step in _STEPS):
        raise NotSupplied(f"pad: {name} has not the padding steps this needs")
    return module


def _pairs(pad_width: dict, ndim: int) -> list[tuple[int, int]]:
    """NumPy's reading of a dict ``pad_width``: ``{axis: n or (before, after)}``."""
    pairs = [(0, 0)] * ndim
    for axis, width in pad_width.items():
        if isinstance(width, int) and not isinstance(width, bool):
            pairs[axis] = (width, width)
        elif (isinstance(width, tuple) and len(width) == 2
              and all(isinstance(w, int) and not isinstance(w, bool) for w in width)):
            pairs[axis] = width
        else:
            raise TypeError(f"`pad_width` must be an int or a pair of ints, got {width}")
    return pairs


def pad(xp: Any, array: Any, pad_width: Any, mode: Any = "constant", **kwargs: Any) -> Any:
    """``numpy.pad`` with ``mode='median'`` or a dict ``pad_width``."""
    array = xp.asarray(array)
    if isinstance(pad_width, dict):
        pad_width = _pairs(pad_width, array.ndim)
        if mode != "median":
            return xp.pad(array, pad_width, mode, **kwargs)
    if mode != "median":
        raise NotSupplied(f"pad: mode {mode!r} with this pad_width is not supplied")
    if set(kwargs) - {"stat_length"}:
        raise ValueError(f"unsupported keyword arguments for mode 'median': "
                         f"{set(kwargs) - {'stat_length'}}")
    steps = _steps(xp)
    if array.size == 0:
        raise NotSupplied("pad: mode 'median' of an empty array is not supplied")
    widths = numpy.asarray(pad_width)
    if widths.dtype.kind not in "iu":
        raise TypeError("`pad_width` must be of integral type.")
    widths = steps._as_pairs(widths, array.ndim, as_index=True)
    lengths = steps._as_pairs(kwargs.get("stat_length"), array.ndim, as_index=True)
    if any(length == 0 for pair in lengths for length in pair):  # NumPy: a NaN and a warning
        raise NotSupplied("pad: mode 'median' with a stat_length of 0 is not supplied")
    padded, area = steps._pad_simple(array, widths)
    for axis, (width_pair, length_pair) in enumerate(zip(widths, lengths, strict=True)):
        roi = steps._view_roi(padded, area, axis)
        stats = steps._get_stats(roi, axis, width_pair, length_pair, xp.median)
        steps._set_pad_area(roi, axis, width_pair, stats)
    return padded


# NumPy's name below ``numpy`` -> its device version, taking the array module first
PADS = {"pad": pad}
