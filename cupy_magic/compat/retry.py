"""Calls CuPy refused, tried once more in the form NumPy would have read them.

- **Device integers where CuPy needs Python ints** (``np.hsplit(x, np.array([3, 6]))``): NumPy
  reads the indices as ints; the call runs again with its small 0-d or 1-D device integer
  arguments (never the data: the first argument, or one NumPy documents as ``array_like``)
  copied to the host, a host sync as NumPy's reading them is.
- **An ``out=`` CuPy fails on** (``np.percentile(a, 50, axis=0, out=out)``: "cannot select an
  axis to squeeze out" on the H200): the result is computed without it and written into
  ``out`` when NumPy would write it there as it is (the same shape, a same-kind cast).

Each gives :data:`FAILED` when the retry does not apply or fails too; the caller then refuses
the call in one line as before.
"""

from __future__ import annotations

from typing import Any

import numpy

from .advice import LIMIT_ERRORS
from .spec import CallSpec

__all__ = ["FAILED", "into_out", "with_host_ints", "written"]

FAILED: Any = object()
HOST_INTS = 1 << 10  # the largest device integer argument read as Python ints


def with_host_ints(device_type: type, spec: CallSpec, func: Any, args: tuple,
                   kwargs: dict) -> Any:
    """``func`` again with its small device integer arguments as Python ints or lists."""
    def host(at: Any, value: Any) -> Any:
        if (at == 0 or at in spec.positions or at in spec.keywords
                or not isinstance(value, device_type) or value.dtype.kind not in "iu"
                or value.ndim > 1 or value.size > HOST_INTS):
            return value
        return value.tolist()

    values = [host(at, v) for at, v in (*enumerate(args), *kwargs.items())]
    if all(v is w for v, w in zip(values, (*args, *kwargs.values()), strict=True)):
        return FAILED
    try:
        return func(*values[:len(args)], **dict(zip(kwargs, values[len(args):], strict=True)))
    except LIMIT_ERRORS:
        return FAILED


def into_out(device_type: type, func: Any, args: tuple, kwargs: dict) -> Any:
    """``func`` without ``out=``, its result written into ``out`` as NumPy writes it."""
    out, rest = kwargs["out"], {k: v for k, v in kwargs.items() if k != "out"}
    try:
        value = func(*args, **rest)
    except LIMIT_ERRORS:
        return FAILED
    return written(out, value) if isinstance(value, device_type) else FAILED


def written(out: Any, value: Any) -> Any:
    """``out`` with ``value`` written into it as NumPy writes a result there (the same shape,
    a same-kind cast), or :data:`FAILED` where NumPy would not write it as it is."""
    if value.shape != out.shape or not numpy.can_cast(value.dtype, out.dtype, "same_kind"):
        return FAILED
    out[...] = value
    return out
