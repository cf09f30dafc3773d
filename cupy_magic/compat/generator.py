"""``np.random.default_rng()`` in a cell: the array module's Generator, its methods checked.

CuPy's ``Generator`` has 18 of the methods NumPy's has; ``rng.normal``, ``rng.choice``,
``rng.permutation`` and the rest are missing. Without this a cell stops with a bare
``AttributeError: 'Generator' object has no attribute 'normal'``. Here a method CuPy lacks is
refused in one line with the CuPy way to write it, like a missing ``np`` function, or under
``--fallback`` run by NumPy's Generator (made from the same arguments, so seeded the same)
with its results copied to the device and counted in the report.
"""

from __future__ import annotations

from typing import Any

import numpy

from .calls import Calls, dressed_like
from .spec import MISSING, CallSpec, reference_module

__all__ = ["CheckedGenerator", "checked_default_rng", "checked_generator", "plain"]


def _reference_generator() -> Any:
    """CuPy's Generator class (whose methods are the limits), or MISSING."""
    return getattr(getattr(reference_module(), "random", MISSING), "Generator", MISSING)


class CheckedGenerator:
    """A Generator as a cell sees it: the array module's, with NumPy's methods that CuPy
    lacks refused in one line (or run by NumPy under ``--fallback``).

    Parameters
    ----------
    calls
        The cell's call handling (limits, fallbacks, the record).
    generator
        The array module's Generator (CuPy's on a GPU, NumPy's on the CPU fallback).
    made_with
        The arguments ``default_rng`` got, to make NumPy's Generator for the fallback.
    """

    def __init__(self, calls: Calls, generator: Any, made_with: tuple[tuple, dict]) -> None:
        self.__dict__.update(_calls=calls, _generator=generator, _made_with=made_with,
                             _host=None)

    def __getattr__(self, name: str) -> Any:
        calls, generator = self.__dict__["_calls"], self.__dict__["_generator"]
        reference = _reference_generator()
        if (calls.checked and not name.startswith("_") and reference is not MISSING
                and not hasattr(reference, name) and hasattr(numpy.random.Generator, name)):
            spec = CallSpec(f"Generator.{name}")
            host = getattr(self._numpy(), name)
            calls.missing(spec, host)  # raises unless --fallback
            value = calls.host_call(spec, host)
        else:
            value = getattr(generator, name)
        if callable(value):  # a method: later calls (a loop's) skip these checks
            self.__dict__[name] = value
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.__dict__["_generator"], name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self.__dict__["_generator"])))

    def __repr__(self) -> str:
        return f"{self.__dict__['_generator']!r} (methods CuPy lacks checked by cupy_magic)"

    def _numpy(self) -> Any:
        """NumPy's Generator from the same arguments, made on first use."""
        if self.__dict__["_host"] is None:
            args, kwargs = self.__dict__["_made_with"]
            try:
                host = numpy.random.default_rng(*args, **kwargs)
            except (TypeError, ValueError):  # a seed NumPy does not take (a device array)
                host = numpy.random.default_rng()
            self.__dict__["_host"] = host
        return self.__dict__["_host"]


def checked_default_rng(calls: Calls, default_rng: Any) -> Any:
    """``default_rng`` (already behind the array module's checks) returning a
    :class:`CheckedGenerator`."""

    def checked(*args: Any, **kwargs: Any) -> CheckedGenerator:
        return CheckedGenerator(calls, default_rng(*args, **kwargs), (args, kwargs))

    return dressed_like(checked, default_rng)


def checked_generator(module: Any, generator: Any) -> CheckedGenerator:
    """A Generator an earlier cell made, checked for this cell (``module``: the cell's array
    module). Under ``--fallback`` NumPy's Generator for it starts from a fresh seed: the
    state of the device's cannot be carried over."""
    return CheckedGenerator(module.__dict__["__compat__"][0], generator, ((), {}))


def plain(value: Any) -> Any:
    """The Generator a cell made, as the user namespace keeps it (outside cells there is no
    cell to check its calls against); any other value as it is."""
    return value.__dict__["_generator"] if isinstance(value, CheckedGenerator) else value
