"""Options CuPy's reductions lack, done exactly with CuPy's own functions.

``np.sum(x, where=mask)`` and friends are common in NumPy code and CuPy has no ``where=``
(nor ``initial=``) on its reductions. A masked reduction is the plain reduction over
``np.where(mask, x, fill)``, where ``fill`` leaves the result unchanged: 0 for ``sum``, 1 for
``prod``, False for ``any``, True for ``all``, and ``initial`` for ``max`` and ``min`` (which
NumPy requires there). Done this way the call runs on the device and gives NumPy's result;
``count_nonzero(..., keepdims=True)`` is the count with its axes kept. Calls with options
this does not cover (``out=``, ``max``/``min`` without ``initial``) go on to the cell's
function, which refuses them in one line as before.
"""

from __future__ import annotations

from typing import Any

from .calls import dressed_like

__all__ = ["emulated"]

_FILLS = {"sum": 0, "prod": 1, "any": False, "all": True}
_REDUCTIONS = frozenset({*_FILLS, "max", "min", "amax", "amin"})
_TAKEN = frozenset({"axis", "dtype", "keepdims", "where", "initial"})


def emulated(xp: Any, sub: str, wrapped: Any) -> Any:
    """``wrapped`` (the cell's ``np.<sub>``), or a function in front of it that runs the
    options :mod:`this module <cupy_magic.compat.emulate>` covers with ``xp``'s functions."""
    if sub in _REDUCTIONS:
        name = {"amax": "max", "amin": "min"}.get(sub, sub)
        plain = getattr(xp, name)

        def reduction(a: Any, *args: Any, **kwargs: Any) -> Any:
            if args or "where" not in kwargs or not set(kwargs) <= _TAKEN:
                return wrapped(a, *args, **kwargs)
            return _masked(xp, name, plain, a, kwargs) if name in _FILLS or (
                kwargs.get("initial") is not None) else wrapped(a, **kwargs)
        return dressed_like(reduction, wrapped)
    if sub == "count_nonzero":
        def count_nonzero(a: Any, axis: Any = None, *, keepdims: bool = False) -> Any:
            if not keepdims:
                return wrapped(a, axis=axis)
            a = xp.asarray(a)
            counts = xp.asarray(wrapped(a, axis=axis))
            kept = tuple(1 if _kept(i, axis, a.ndim) else n for i, n in enumerate(a.shape))
            return counts.reshape(kept)
        return dressed_like(count_nonzero, wrapped)
    return wrapped


def _masked(xp: Any, name: str, plain: Any, a: Any, kwargs: dict) -> Any:
    """``np.<name>(a, where=..., ...)`` as the plain reduction over the filled array."""
    a = xp.asarray(a)
    where = xp.asarray(kwargs["where"])
    initial = kwargs.get("initial")
    fill = initial if name in ("max", "min") else _FILLS[name]
    filled = xp.where(where, a, xp.asarray(fill, dtype=a.dtype))
    options = {k: kwargs[k] for k in ("axis", "dtype", "keepdims") if k in kwargs}
    if name in ("any", "all", "max", "min"):
        options.pop("dtype", None)
    result = plain(filled, **options)
    if initial is not None and name in ("sum", "prod"):  # NumPy casts it to the result's dtype
        result = (result + initial if name == "sum" else result * initial).astype(result.dtype)
    return result

def _kept(i: int, axis: Any, ndim: int) -> bool:
    if axis is None:
        return True
    axes = axis if isinstance(axis, tuple) else (axis,)
    return i in {ax % ndim for ax in axes}

