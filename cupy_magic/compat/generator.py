"""``np.random.default_rng()`` in a cell: the array module's Generator, its methods checked.

CuPy's ``Generator`` has 18 of the methods NumPy's has; ``rng.normal``, ``rng.choice``,
``rng.permutation`` and the rest are missing. Without this a cell stops with a bare
``AttributeError: 'Generator' object has no attribute 'normal'``. Here ``normal`` and
``lognormal`` run on the device, made from ``standard_normal`` exactly as NumPy makes them
(``loc + scale * z``, ``exp`` of that), so with NumPy's Generator they give NumPy's very
numbers; any other method CuPy lacks is refused in one line with the CuPy way to write it,
like a missing ``np`` function, or under ``--fallback`` run by NumPy's Generator (made from
the same arguments, so seeded the same) with its results copied to the device and counted in
the report.
"""

from __future__ import annotations

import importlib
import operator
from typing import Any

import numpy

from .calls import Calls
from .dress import dressed_like
from .spec import MISSING, CallSpec, reference_module

__all__ = ["CheckedGenerator", "checked_default_rng", "checked_generator", "lognormal",
           "normal", "plain"]


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
        if name in _SUPPLIED:  # NumPy's own where the Generator has it (the CPU fallback)
            value = getattr(generator, name, None) or _supplied(name, generator)
        elif (calls.checked and not name.startswith("_") and reference is not MISSING
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

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance(rng, np.random.Generator), as for the plain one
        return type(self.__dict__["_generator"])

    def __reduce_ex__(self, protocol: Any) -> Any:  # copy, deepcopy, pickle: the plain one's
        return self.__dict__["_generator"].__reduce_ex__(protocol)

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


def normal(generator: Any, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Any:
    """NumPy's ``Generator.normal`` with ``generator``'s ``standard_normal``: ``loc + scale *
    z`` over the broadcast shape of ``loc`` and ``scale`` (or ``size``), float64, as NumPy
    computes it. A 0-d array where NumPy returns a float (``rng.normal()``)."""
    if _negative(scale):
        raise ValueError("scale < 0")
    if isinstance(loc, (str, bytes)) or isinstance(scale, (str, bytes)):
        raise TypeError("loc and scale must be numbers or arrays of numbers, not strings")
    xp = _module_of(generator)
    loc, scale = xp.asarray(loc, dtype=xp.float64), xp.asarray(scale, dtype=xp.float64)
    shape = numpy.broadcast_shapes(loc.shape, scale.shape)
    if size is not None:
        size = ((operator.index(size),) if numpy.ndim(size) == 0
                else tuple(operator.index(n) for n in size))
        if numpy.broadcast_shapes(size, shape) != size:
            raise ValueError(f"shape mismatch: objects cannot be broadcast to a single shape; "
                             f"loc and scale of shape {shape} against size {size}")
        shape = size
    return loc + scale * generator.standard_normal(size=shape)


def lognormal(generator: Any, mean: Any = 0.0, sigma: Any = 1.0, size: Any = None) -> Any:
    """NumPy's ``Generator.lognormal``: ``exp`` of :func:`normal`, as NumPy computes it."""
    if _negative(sigma):
        raise ValueError("sigma < 0")
    return _module_of(generator).exp(normal(generator, mean, sigma, size))


_SUPPLIED = {"normal": normal, "lognormal": lognormal}


def _negative(value: Any) -> bool:
    """Whether a scale NumPy checks has a negative value (or -0.0): read where it is (Python
    numbers and NumPy arrays on the host; a device array's check waits for the GPU)."""
    on = _module_of(value) if hasattr(value, "__cuda_array_interface__") else numpy
    value = on.asarray(value)  # NumPy refuses -0.0 too: it tests the sign bit
    return bool((on.signbit(value) & ~on.isnan(value)).any()) if value.dtype.kind in "fc" \
        else bool((value < 0).any())


def _module_of(generator: Any) -> Any:
    """The array module ``generator`` draws into (NumPy's or CuPy's)."""
    return importlib.import_module(type(generator).__module__.partition(".")[0])


def _supplied(name: str, generator: Any) -> Any:
    """``generator.<name>`` done with its own methods (:data:`_SUPPLIED`), named as NumPy's."""
    make = _SUPPLIED[name]

    def method(*args: Any, **kwargs: Any) -> Any:
        return make(generator, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = getattr(numpy.random.Generator, name).__doc__
    return method


def checked_default_rng(calls: Calls, default_rng: Any) -> Any:
    """``default_rng`` (already behind the array module's checks) returning a
    :class:`CheckedGenerator`."""

    def checked(*args: Any, **kwargs: Any) -> CheckedGenerator:
        if len(args) == 1 and not kwargs and type(args[0]) is CheckedGenerator:
            return args[0]  # default_rng(rng) is rng itself, as NumPy's
        args = tuple(map(plain, args))
        kwargs = {k: plain(v) for k, v in kwargs.items()}
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
    return value.__dict__["_generator"] if type(value) is CheckedGenerator else value
