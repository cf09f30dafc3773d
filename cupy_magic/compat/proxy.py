"""The array module a ``%%gpu`` cell sees as ``np``, ``numpy`` and ``cp``.

An :class:`ArrayModule` is a module object in front of the backend's array module. The first
access of a name resolves it (a submodule gets its own proxy, a function a wrapper, a type or
a constant passes through) and stores it in the proxy's ``__dict__``, so later accesses are
plain module lookups. A wrapper's fast path is one loop over the arguments NumPy documents as
``array_like``; lists, keywords, extra positional arguments and errors take :class:`Calls`.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy

from .advice import limit_message
from .calls import LIMIT_ERRORS, SEQUENCES, Calls
from .record import CompatRecord
from .spec import MISSING, CallSpec, call_spec, numpy_module, reference_module

__all__ = ["ArrayModule", "UfuncProxy", "array_module"]

_UFUNC_METHODS = {"reduce": (0,), "accumulate": (0,), "reduceat": (0,), "outer": (0, 1),
                  "at": (0,)}


def array_module(xp: ModuleType, record: CompatRecord) -> ArrayModule:
    """The proxy of ``xp`` (CuPy, or NumPy on the CPU fallback) for one cell."""
    return ArrayModule(Calls(xp, record, reference_module()), xp, "")


def _ref(path: str, name: str) -> Any:
    obj: Any = reference_module()
    for part in [*filter(None, path.split(".")), name]:
        obj = getattr(obj, part, MISSING)
        if obj is MISSING:
            return MISSING
    return obj


def make_call(calls: Calls, func: Any, spec: CallSpec, host_func: Any) -> Any:
    """``func`` behind the checks: lists converted, options checked, CuPy's refusals told."""
    positions = () if spec.explicit else spec.positions
    limit = spec.positional_limit
    strict = spec.explicit and calls.host

    def call(*args: Any, **kwargs: Any) -> Any:
        if kwargs or len(args) > limit or strict:
            return calls.slow(spec, func, host_func, args, kwargs)
        for i in positions:
            if i < len(args) and type(args[i]) in SEQUENCES:
                return calls.slow(spec, func, host_func, args, kwargs)
        try:
            return func(*args)
        except LIMIT_ERRORS as exc:
            return calls.failed(spec, func, host_func, args, kwargs, exc)

    call.__name__ = getattr(func, "__name__", spec.name)
    call.__qualname__ = spec.name
    call.__doc__ = getattr(func, "__doc__", None)
    call.__wrapped__ = func  # type: ignore[attr-defined]
    return call


class UfuncProxy:
    """A ufunc (``np.add``) behind the same checks; ``.reduce`` and the other methods too."""

    __slots__ = ("_calls", "_func", "_host", "_methods", "_spec")

    def __init__(self, calls: Calls, func: Any, spec: CallSpec, host_func: Any) -> None:
        self._calls, self._func, self._spec, self._host = calls, func, spec, host_func
        self._methods: dict[str, Any] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            return self._calls.slow(self._spec, self._func, self._host, args, kwargs)
        for arg in args:
            if type(arg) in SEQUENCES:
                return self._calls.slow(self._spec, self._func, self._host, args, kwargs)
        try:
            return self._func(*args)
        except LIMIT_ERRORS as exc:
            return self._calls.failed(self._spec, self._func, self._host, args, kwargs, exc)

    def __getattr__(self, name: str) -> Any:
        if name not in _UFUNC_METHODS:
            return getattr(self._func, name)
        method = self._methods.get(name)
        if method is None:
            spec = CallSpec(f"{self._spec.name}.{name}", positions=_UFUNC_METHODS[name])
            host = getattr(self._host, name, MISSING)
            if self._calls.checked and not hasattr(_ref("", self._func.__name__), name):
                self._calls.missing(spec, host)
            method = make_call(self._calls, getattr(self._func, name), spec, host)
            self._methods[name] = method
        return method

    def __repr__(self) -> str:
        return repr(self._func)


class ArrayModule(ModuleType):
    """The module a cell sees as ``np``: ``xp``'s names, checked and wrapped on first use.

    Parameters
    ----------
    calls
        The cell's call handling (conversions, limits, fallbacks).
    target
        The module it fronts: the array module, one of its submodules, or, under
        ``--fallback``, a NumPy submodule CuPy lacks (``np.emath``).
    path
        Where ``target`` is below the top module: "" or "linalg." or "random.".
    fallen
        ``target`` is NumPy's and every function in it runs through the fallback.
    """

    def __init__(self, calls: Calls, target: ModuleType, path: str, fallen: bool = False):
        super().__init__(getattr(target, "__name__", "numpy"), getattr(target, "__doc__", ""))
        self.__dict__["__compat__"] = (calls, target, path, fallen)

    def __getattr__(self, name: str) -> Any:
        calls, target, path, fallen = self.__dict__["__compat__"]
        if name.startswith("__") and name.endswith("__"):
            return getattr(target, name)
        value, keep = _resolve(calls, target, path.rstrip("."), name, fallen)
        if keep:
            self.__dict__[name] = value
        return value

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self.__dict__["__compat__"][1])))

    def __repr__(self) -> str:
        _calls, target, _, fallen = self.__dict__["__compat__"]
        what = "NumPy's, run under --fallback" if fallen else "calls checked by cupy_magic"
        return f"<module {target.__name__!r} ({what})>"


def _resolve(calls: Calls, target: ModuleType, path: str, name: str,
             fallen: bool) -> tuple[Any, bool]:
    """``(value, cache it)`` for ``np.<path>.<name>``."""
    host_mod = numpy_module(path)
    host = getattr(host_mod, name, MISSING) if host_mod is not MISSING else MISSING
    sub = f"{path}.{name}" if path else name
    if fallen:
        return _wrap_host(calls, host, sub, path, name, target), True
    if calls.checked and host is not MISSING and _ref(path, name) is MISSING:
        calls.missing(call_spec(path, name, False), host)  # raises unless --fallback
        if isinstance(host, type) and issubclass(host, numpy.generic):
            # a scalar type (np.datetime64, np.bytes_) is also a dtype, and issubclass's
            # argument: NumPy's own, counted at each use like a constant
            calls.missing_value(call_spec(path, name, False))
            return host, False
        if not callable(host) and not isinstance(host, ModuleType):
            return host, False  # a constant: counted at each use
        return _wrap_host(calls, host, sub, path, name, None), True
    value = getattr(target, name, MISSING)
    if value is MISSING:
        label = ".".join(filter(None, ("numpy", path)))
        raise AttributeError(f"module {label!r} has no attribute {name!r}")
    if host is MISSING or isinstance(value, type):
        return value, True
    if isinstance(value, ModuleType):
        return ArrayModule(calls, value, sub + "."), True
    wrapped = calls.wrapped.get(id(value))
    if wrapped is not None:  # an alias keeps its identity: np.conj is np.conjugate
        return wrapped, True
    spec = call_spec(path, name, calls.checked)
    if isinstance(value, numpy.ufunc) or type(value).__name__ == "ufunc":
        wrapped = UfuncProxy(calls, value, spec, host)
    elif callable(value):
        wrapped = make_call(calls, value, spec, host)
    else:
        return value, True
    calls.wrapped[id(value)] = wrapped
    return wrapped, True


def _wrap_host(calls: Calls, host: Any, sub: str, path: str, name: str,
               target: ModuleType | None) -> Any:
    """NumPy's ``host`` as the fallback runs it (a submodule: a proxy whose calls fall back)."""
    if host is MISSING:
        label = ".".join(filter(None, ("numpy", path)))
        raise AttributeError(f"module {label!r} has no attribute {name!r}")
    if isinstance(host, ModuleType):
        return ArrayModule(calls, host, sub + ".", fallen=True)
    if not callable(host):
        return host
    spec = call_spec(path, name, False)
    why = limit_message(spec.name, None, "", "missing")[0].split(": ", 1)[1].split(";")[0]

    def fall_back(*args: Any, **kwargs: Any) -> Any:
        return calls.run_host(spec, host, args, kwargs, why)

    fall_back.__name__ = getattr(host, "__name__", name)
    fall_back.__doc__ = getattr(host, "__doc__", None)
    return fall_back

