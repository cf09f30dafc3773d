"""Where a CuPy result is a view of its argument and NumPy's is a copy.

A cell's code reaches two of them without a call through ``np`` (which
:mod:`.differs` guards), so compiling the cell puts a builtin of the cell in front of each
(:mod:`cupy_magic.run.rewrite`):

- **``v.ravel(order)``**: NumPy's is a view only where ``v`` is contiguous in ``order``;
  CuPy's is a view wherever a reshape can be one (``x[:, ::2].ravel()``), so a change to the
  result changed ``x``. The cell's ``v.ravel(...)`` is ``RAVEL_NAME(v)(...)``.
- **``x[i, j]``**: NumPy's is a scalar, a copy of the item; CuPy's a 0-d array that is a view
  of it. Kept while ``x`` changes, it changed too: ``tmp = a[i]; a[i] = a[j]; a[j] = tmp``
  and ``a[i], a[j] = a[j], a[i]`` left ``a[j]`` as it was, ``s = x[0]; s += 1`` changed
  ``x``, and ``trace.append(x[0])`` in a loop that changes ``x`` kept its last value each
  time. Where the cell may keep the item (bound to a name, put in a container, passed to a
  function that is not known to make a new value) it is ``ITEM_NAME(x[i, j])``: a 0-d copy
  on the device. Where it is used at once (``x[i] * 2``, ``if x[i] > 0``, ``s += x[i]``,
  ``float(x[i])``, ``np.sqrt(x[i])``) nothing is added: a kernel launch per item would
  double the cost of a scalar loop for nothing.

A third is a refusal rather than a view: **``np.float32(x[0])``** (any NumPy scalar type
called on a device value) raised CuPy's "Implicit conversion to a NumPy array is not
allowed", where NumPy reads the item. The cell's ``np.<type>(v, ...)`` is
``SCALAR_NAME(np.<type>, v, ...)``: the NumPy scalar of a 0-d device value's item (read to
the host, a sync as NumPy's reading is one), the array cast on the device for a larger one
(NumPy's ``np.float32(a)`` is ``a.astype(np.float32)``).

On the CPU fallback the builtins leave the value as it is: its arrays are NumPy's.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

__all__ = ["ITEM_NAME", "RAVEL_NAME", "SCALAR_NAME", "item_copy", "method_ravel",
           "ravel_as_numpy", "scalar_of", "view_builtins"]

RAVEL_NAME = "__cupy_magic_ravel__"  # v.ravel(...) is RAVEL_NAME(v)(...)
ITEM_NAME = "__cupy_magic_item__"  # a kept x[i, j] is ITEM_NAME(x[i, j])
SCALAR_NAME = "__cupy_magic_scalar__"  # np.float32(v) is SCALAR_NAME(np.float32, v)


def _contiguous_in(a: Any, order: Any) -> bool:
    """Whether NumPy's ``a.ravel(order)`` is a view of ``a``: ``a`` contiguous in it."""
    flags, wanted = a.flags, str(order).upper() if order is not None else "C"
    if wanted == "F":
        return bool(flags.f_contiguous)
    if wanted in ("A", "K"):
        return bool(flags.c_contiguous or flags.f_contiguous)
    return bool(flags.c_contiguous)


def ravel_as_numpy(device_type: type, a: Any, ravel: Callable[[Any], Any],
                   order: Any = "C") -> Any:
    """``ravel(order)`` (CuPy's ``a.ravel`` or ``cupy.ravel`` of ``a``) as NumPy's: a copy
    where ``a``, a device array, is not contiguous in ``order`` and CuPy gave a view."""
    out = ravel(order)
    if isinstance(a, device_type) and getattr(out, "base", None) is not None \
            and not _contiguous_in(a, order):
        out = out.copy()
    return out


def method_ravel(device_type: type) -> Callable[[Any], Any]:
    """The builtin :data:`RAVEL_NAME`: ``v.ravel`` for any ``v``, NumPy's view-or-copy rule
    for a device array's (:func:`ravel_as_numpy`)."""
    def ravel_of(value: Any) -> Any:
        __tracebackhide__ = True  # IPython shows the cell's line, not this frame
        method = value.ravel
        if not isinstance(value, device_type):
            return method

        def ravel(order: Any = "C") -> Any:
            __tracebackhide__ = True
            return ravel_as_numpy(device_type, value, method, order)
        return ravel
    return ravel_of


def item_copy(device_type: type) -> Callable[[Any], Any]:
    """The builtin :data:`ITEM_NAME`: ``value`` itself, or a 0-d copy of it where it is a 0-d
    device array that views another (CuPy's ``x[i, j]``, NumPy's scalar)."""
    def item(value: Any) -> Any:
        if isinstance(value, device_type) and value.ndim == 0 and value.base is not None:
            return value.copy()
        return value
    return item


def scalar_of(device_type: type) -> Callable[..., Any]:
    """The builtin :data:`SCALAR_NAME`: ``kind(value, ...)`` (a NumPy scalar type) as NumPy
    makes it of a device ``value``: of its item where it is 0-d, by a cast on the device
    where it is larger."""
    def made(kind: Any, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        if args and isinstance(args[0], device_type):
            value = args[0]
            if value.ndim == 0:
                return kind(value.get()[()], *args[1:], **kwargs)
            if len(args) == 1 and not kwargs:
                return value.astype(kind)
        return kind(*args, **kwargs)
    return made


def _same(value: Any) -> Any:
    return value


def _call(kind: Any, *args: Any, **kwargs: Any) -> Any:
    return kind(*args, **kwargs)


@functools.lru_cache(maxsize=8)
def view_builtins(device_type: type | None) -> dict[str, Any]:
    """The builtins the cell's rewritten code calls; ``device_type`` None: the CPU
    fallback's, which leave values as they are (made once per array type: read-only)."""
    if device_type is None:
        return {RAVEL_NAME: operator.attrgetter("ravel"), ITEM_NAME: _same, SCALAR_NAME: _call}
    return {RAVEL_NAME: method_ravel(device_type), ITEM_NAME: item_copy(device_type),
            SCALAR_NAME: scalar_of(device_type)}
