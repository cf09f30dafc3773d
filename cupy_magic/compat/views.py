"""Where a CuPy result is a view of its argument and NumPy's is a copy.

A cell's code reaches these without a call through ``np`` (which :mod:`.differs` guards),
so compiling the cell puts a builtin in front of each (:mod:`cupy_magic.run.rewrite`):

- **``v.ravel(order)``**: NumPy's is a view only where ``v`` is contiguous in ``order``;
  CuPy's is a view wherever a reshape can be one (``x[:, ::2].ravel()``), so a change to the
  result changed ``x``. The cell's ``v.ravel(...)`` is ``RAVEL_NAME(v)(...)``. The device
  copy of a strided input that moved as a contiguous array (:func:`stands_strided`) ravels
  to a copy too, as the user's array would.
- **``x[i, j]``**: NumPy's is a scalar, a copy of the item; CuPy's a 0-d array that is a view
  of it. Kept while ``x`` changes, it changed too: ``tmp = a[i]; a[i] = a[j]; a[j] = tmp``
  and ``a[i], a[j] = a[j], a[i]`` left ``a[j]`` as it was, ``s = x[0]; s += 1`` changed
  ``x``, and ``trace.append(x[0])`` in a loop that changes ``x`` kept its last value each
  time. Where the cell may keep the item (bound to a name, put in a container, passed to a
  function that is not known to make a new value) it is ``ITEM_NAME(x[i, j])``: a 0-d copy
  on the device. Where it is used at once (``x[i] * 2``, ``if x[i] > 0``, ``s += x[i]``,
  ``float(x[i])``, ``np.sqrt(x[i])``) nothing is added: a kernel launch per item would
  double the cost of a scalar loop for nothing. An index with a slice, ``...`` or ``None``
  (``v = x[0, ...]``, a 0-d view in NumPy too) gets nothing.
- **``for v in x``** over a 1-D device array (a comprehension's ``for``, an unpacking
  ``a, b = x``, the builtins that iterate: ``list(x)``, ``max(x)``, ``zip(x, y)``): CuPy
  yields 0-d views of the items, NumPy scalars; they run over ``ITER_NAME(x)``, which yields
  0-d copies. ``reversed(x)`` is ``REVERSED_NAME(reversed, x)``: the copies in reverse order
  (``reversed`` needs a sequence, so it cannot take ``ITER_NAME(x)``'s generator).
- **``np.float32(x[0])``** (any NumPy scalar type called on a device value) raised CuPy's
  "Implicit conversion to a NumPy array is not allowed", where NumPy reads the item. The
  cell's ``np.<type>(v, ...)`` is ``SCALAR_NAME(np.<type>, v, ...)``: the NumPy scalar of a
  0-d device value's item (read to the host, a sync as NumPy's reading is one), the array
  cast on the device for a larger one (NumPy's ``np.float32(a)`` is
  ``a.astype(np.float32, copy=False)``).

The builtins go into Python's ``builtins`` module too (:func:`install`), and stay after the
extension is unloaded: a function a cell defined is compiled with them and may be called
from any later cell (pickled into a process where none is installed, it runs as plain Python
code: :mod:`cupy_magic.run.rewrite`). They act on CuPy arrays only (``cupy.ndarray`` where CuPy is
imported); anything else, the CPU fallback's NumPy arrays included, passes as it is.
"""

from __future__ import annotations

import builtins
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["ITEM_NAME", "ITER_NAME", "RAVEL_NAME", "REVERSED_NAME", "SCALAR_NAME", "install",
           "item_copy", "iter_copies", "method_ravel", "ravel_as_numpy", "reversed_copies",
           "scalar_of", "stands_strided"]

RAVEL_NAME = "__cupy_magic_ravel__"  # v.ravel(...) is RAVEL_NAME(v)(...)
ITEM_NAME = "__cupy_magic_item__"  # a kept x[i, j] is ITEM_NAME(x[i, j])
SCALAR_NAME = "__cupy_magic_scalar__"  # np.float32(v) is SCALAR_NAME(np.float32, v)
ITER_NAME = "__cupy_magic_iter__"  # for v in x is for v in ITER_NAME(x)
REVERSED_NAME = "__cupy_magic_reversed__"  # reversed(x) is REVERSED_NAME(reversed, x)

# device copies of strided user arrays that moved as contiguous arrays (by id; weakly)
_STRIDED: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def _device_type() -> type | None:
    """CuPy's array type where CuPy is imported (no import here: a cell that never made a
    CuPy array has none)."""
    cupy = sys.modules.get("cupy")
    return getattr(cupy, "ndarray", None)


def _on_device(value: Any) -> bool:
    kind = _device_type()
    return kind is not None and isinstance(value, kind)


def stands_strided(copy: Any) -> None:
    """Note that ``copy``, a contiguous device array (the CPU fallback's: a NumPy array),
    stands for a strided user array (whose ravel NumPy makes a copy): its ravel is a copy
    too."""
    _STRIDED[id(copy)] = copy


def _strided(a: Any) -> bool:
    return _STRIDED.get(id(a)) is a


def _contiguous_in(a: Any, order: Any) -> bool:
    """Whether NumPy's ``a.ravel(order)`` is a view of ``a``: ``a`` contiguous in it (for
    'K', in the order its strides lie in memory)."""
    if _strided(a):
        return False
    flags, wanted = a.flags, str(order).upper() if order is not None else "C"
    if wanted == "F":
        return bool(flags.f_contiguous)
    if wanted == "A":
        return bool(flags.c_contiguous or flags.f_contiguous)
    if wanted == "K":
        step = a.itemsize
        for stride, n in sorted(((s, n) for s, n in zip(a.strides, a.shape, strict=True)
                                 if n > 1)):
            if stride != step:
                return False
            step *= n
        return True
    return bool(flags.c_contiguous)


def ravel_as_numpy(a: Any, ravel: Callable[[Any], Any], order: Any = "C") -> Any:
    """``ravel(order)`` (CuPy's ``a.ravel`` or ``cupy.ravel`` of ``a``) as NumPy's: a copy
    where ``a``, a device array, is not contiguous in ``order`` and CuPy gave a view."""
    out = ravel(order)
    if (_on_device(a) or _strided(a)) and getattr(out, "base", None) is not None \
            and not _contiguous_in(a, order):
        out = out.copy()
    return out


def method_ravel(value: Any) -> Any:
    """:data:`RAVEL_NAME`: ``value.ravel``, with NumPy's view-or-copy rule for a device
    array's (:func:`ravel_as_numpy`)."""
    __tracebackhide__ = True  # IPython shows the cell's line, not this frame
    method = value.ravel
    if not (_on_device(value) or _strided(value)):
        return method

    def ravel(order: Any = "C") -> Any:
        __tracebackhide__ = True
        return ravel_as_numpy(value, method, order)
    return ravel


def item_copy(value: Any) -> Any:
    """:data:`ITEM_NAME`: ``value`` itself, or a 0-d copy of it where it is a 0-d device
    array that views another (CuPy's ``x[i, j]``, NumPy's scalar)."""
    if _on_device(value) and value.ndim == 0 and value.base is not None:
        return value.copy()
    return value


def iter_copies(value: Any) -> Any:
    """:data:`ITER_NAME`: what ``for v in value`` iterates: ``value``, or 0-d copies of the
    items of a 1-D device array (CuPy yields views of them, NumPy scalars)."""
    if _on_device(value) and value.ndim == 1:
        return _copies(value)
    return value


def _copies(value: Any) -> Iterator[Any]:
    for item in value:
        yield item.copy()


def reversed_copies(fn: Callable[[Any], Any], value: Any) -> Any:
    """:data:`REVERSED_NAME`: ``fn(value)`` (``fn`` what the cell calls ``reversed``), or 0-d
    copies of the items of a 1-D device array in reverse order, read as NumPy's iterator
    reads them: one at a time, from the array as it is then."""
    if fn is builtins.reversed and _on_device(value) and value.ndim == 1:
        return _copies(value[::-1])
    return fn(value)


def scalar_of(kind: Any, *args: Any, **kwargs: Any) -> Any:
    """:data:`SCALAR_NAME`: ``kind(value, ...)`` (a NumPy scalar type) as NumPy makes it of a
    device ``value``: of its item where it is 0-d, by a cast on the device where it is
    larger (the array itself where it has the type)."""
    __tracebackhide__ = True
    if args and _on_device(args[0]):
        value = args[0]
        if value.ndim == 0:
            return kind(value.get()[()], *args[1:], **kwargs)
        if len(args) == 1 and not kwargs:
            return value.astype(kind, copy=False)
    return kind(*args, **kwargs)


def install() -> None:
    """Put the builtins in Python's ``builtins`` module (once): a function a cell defined runs
    with the user namespace's builtins after the cell, and each cell's builtins copy them."""
    if getattr(builtins, ITEM_NAME, None) is not item_copy:
        for name, value in ((RAVEL_NAME, method_ravel), (ITEM_NAME, item_copy),
                            (SCALAR_NAME, scalar_of), (ITER_NAME, iter_copies),
                            (REVERSED_NAME, reversed_copies)):
            setattr(builtins, name, value)
