"""Dressing a cell's stand-ins for NumPy's functions: the names, documentation and data
they show, and what their name means again outside the cell."""

from __future__ import annotations

from typing import Any

__all__ = ["dressed_like", "fronting"]


def fronting(func: Any, host: Any, name: str) -> Any:
    """``func``, a cell's stand-in for NumPy's ``host``, named and documented as ``host``,
    which is what the name means again outside the cell (:func:`.scope.host_value`)."""
    func.__name__ = getattr(host, "__name__", name)
    func.__doc__ = getattr(host, "__doc__", None)
    func.__cupy_magic_numpy__ = host
    return func


def dressed_like(func: Any, wrapped: Any) -> Any:
    """``func``, put in front of the cell's wrapper ``wrapped``, with its name, documentation
    and data (a ufunc's ``nin``, ``types`` and methods; ``__cupy_magic_numpy__``)."""
    func.__dict__.update(getattr(wrapped, "__dict__", {}))
    func.__name__ = getattr(wrapped, "__name__", func.__name__)
    func.__qualname__ = getattr(wrapped, "__qualname__", func.__qualname__)
    func.__doc__ = getattr(wrapped, "__doc__", None)
    return func
