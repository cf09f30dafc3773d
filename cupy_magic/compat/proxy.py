"""The array module a ``%%gpu`` cell sees as ``np``, ``numpy`` and ``cp``.

An :class:`ArrayModule` is a module object in front of the backend's array module. The first
access of a name resolves it (a submodule gets its own proxy, a function or a ufunc a
wrapper, a type or a constant passes through) and stores it in the proxy's ``__dict__``, so
later accesses are plain module lookups. A wrapper is a plain function generated per shape of
function (:func:`make_call`): its fast path tests the types of the ``array_like`` positions
and the keywords that matter (options CuPy lacks, ``array_like`` keywords, a ``dtype`` not yet
known good) without a loop or an allocation, then calls the function; lists, those keywords,
extra positional arguments and errors take :class:`Calls`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from types import CodeType, ModuleType
from typing import Any

import numpy

from .advice import LIMIT_ERRORS
from .blame import WRAPPER_FILE
from .calls import COMPLETIONS, DTYPES_OK, SEQUENCES, Calls
from .cupyonly import cupy_only
from .differs import guarded
from .dress import fronting
from .fperrors import FP_ERRORS, fp_errors_call
from .generator import checked_default_rng
from .record import CompatRecord
from .spec import MISSING, CallSpec, call_spec, numpy_module, reference_module
from .supplement import SUPPLIED, NotSupplied

__all__ = ["ArrayModule", "array_module", "make_call", "ufunc_call"]

_UFUNC_METHODS = {"reduce": (0,), "accumulate": (0,), "reduceat": (0,), "outer": (0, 1),
                  "at": (0,)}


def array_module(xp: ModuleType, record: CompatRecord,
                 uncounted: Callable[[], AbstractContextManager[None]] = nullcontext,
                 ) -> ArrayModule:
    """The proxy of ``xp`` (CuPy, or NumPy on the CPU fallback) for one cell; ``uncounted``:
    the backend's context for the extension's own work (building a name's wrapper on its
    first use), whose memory is not the cell's."""
    return ArrayModule(Calls(xp, record, reference_module(), uncounted), xp, "")


def _ref(path: str, name: str) -> Any:
    obj: Any = reference_module()
    for part in [*filter(None, path.split(".")), name]:
        obj = getattr(obj, part, MISSING)
        if obj is MISSING:
            return MISSING
    return obj


# The wrappers' fast path is generated per shape of function (which positions and keywords
# take array_like, which options CuPy lacks, whether dtype= is checked): a call that needs
# nothing done costs one Python frame, no loop, no allocation of its own (on the CPU fallback
# tracemalloc watches every allocation while a cell runs, so an iterator costs ~1 us there).
_FACTORIES: dict[tuple, Any] = {}
_FAST = """
def factory(func, spec, host_func, slow, failed, LIMIT_ERRORS, SEQ, DTYPES_OK):
    def call(*args, **kwargs):
        __tracebackhide__ = True  # IPython and pytest show the call's frame as hidden
        if kwargs:{keyword_checks}
        n = len(args)
        if {positional_checks}:
            return slow(spec, func, host_func, args, kwargs)
        try:
            return func(*args, **kwargs)
        except LIMIT_ERRORS as exc:
            return failed(spec, func, host_func, args, kwargs, exc)
    return call
"""
_DTYPE_CHECK = """
            dt = kwargs.get("dtype")
            if dt is not None:
                try:
                    known = dt in DTYPES_OK
                except TypeError:  # a structured dtype as a list: the slow path judges it
                    known = False
                if not known:
                    return slow(spec, func, host_func, args, kwargs)"""


def _flat_lines(code: CodeType) -> CodeType:
    """``code`` with a location table that puts every instruction on its first line.

    On the CPU fallback tracemalloc runs while a cell runs, and for each block NumPy allocates
    inside a call it asks the innermost Python frame for its line: CPython 3.11+ finds it by
    reading the frame's location table from the start, an entry per expression, so the
    wrapper's checks in front of the call cost ~1 us per call there (the "unexplained" time
    of ``benchmarks/compat_overhead.py``'s 10,000-call cell). Entries of up to 8 code units
    without columns make that read ~8x shorter; a traceback through the wrapper names its
    ``def`` line. Any other interpreter (or a surprise) keeps ``code`` as it is."""
    if sys.implementation.name != "cpython" or sys.version_info < (3, 11):
        return code
    try:
        units = len(code.co_code) // 2
        table = bytearray()
        while units > 0:
            n = min(8, units)
            units -= n
            table += bytes((0x80 | (13 << 3) | (n - 1), 0))  # no columns, line delta 0
        flat = code.replace(co_linetable=bytes(table))
        if {line for _, _, line in flat.co_lines()} != {code.co_firstlineno}:
            return code
        return flat
    except Exception:  # a format this does not know: keep the original
        return code


def _factory(positions: tuple[int, ...], keywords: tuple[str, ...], options: tuple[str, ...],
             dtype: bool, limit: int | None, strict: bool) -> Any:
    """The compiled maker of wrappers of one shape (made once per shape, then reused)."""
    key = (positions, keywords, options, dtype, limit, strict)
    factory = _FACTORIES.get(key)
    if factory is not None:
        return factory
    kw = [f"{name!r} in kwargs" for name in options]
    kw += [f"type(kwargs.get({name!r})) in SEQ" for name in keywords if name != "out"]
    checks = ""
    if kw:
        checks += (f"\n            if {' or '.join(kw)}:\n"
                   "                return slow(spec, func, host_func, args, kwargs)")
    if dtype:
        checks += _DTYPE_CHECK
    if not checks:
        checks = "\n            pass"
    pos = ["True"] if strict else []
    if limit is not None:
        pos.append(f"n > {limit}")
    pos += [f"(n > {i} and type(args[{i}]) in SEQ)" for i in positions]
    source = _FAST.format(keyword_checks=checks, positional_checks=" or ".join(pos) or "False")
    namespace: dict[str, Any] = {}
    exec(compile(source, f"{WRAPPER_FILE} {len(_FACTORIES)}>", "exec"), namespace)
    factory = namespace["factory"]
    factory.__code__ = factory.__code__.replace(co_consts=tuple(
        _flat_lines(c) if isinstance(c, CodeType) else c for c in factory.__code__.co_consts))
    _FACTORIES[key] = factory
    return factory


def make_call(calls: Calls, func: Any, spec: CallSpec, host_func: Any) -> Any:
    """``func`` behind the checks: lists converted, options checked, CuPy's refusals told.

    The checks run in the order :meth:`Calls.slow` would make them; a call that none of them
    would change goes straight to ``func`` (a dtype is known good once the slow path has
    checked it: :data:`~.calls.DTYPES_OK`)."""
    limit = spec.positional_limit if spec.positional_limit < (1 << 30) else None
    factory = _factory(() if spec.explicit else spec.positions,
                       () if spec.explicit else tuple(sorted(spec.keywords)),
                       tuple(name for name, _ in spec.missing_options), calls.checked, limit,
                       spec.explicit and calls.host)
    call = factory(func, spec, host_func, calls.slow, calls.failed, LIMIT_ERRORS, SEQUENCES,
                   DTYPES_OK)
    call.__name__ = getattr(func, "__name__", spec.name)
    call.__qualname__ = spec.name
    call.__doc__ = getattr(func, "__doc__", None)
    call.__wrapped__ = func  # type: ignore[attr-defined]
    call.__cupy_magic_numpy__ = host_func  # what the name means outside a cell
    return call


_UFUNC_DATA = ("nin", "nout", "nargs", "ntypes", "types", "identity", "signature")


def ufunc_call(calls: Calls, func: Any, spec: CallSpec, host_func: Any, ref: Any) -> Any:
    """A ufunc (``np.add``) behind the same checks: a :func:`make_call` wrapper (a plain
    function, the cheapest thing Python calls) carrying the ufunc's data (``nin``, ``types``,
    ...) and its methods (``.reduce``, ``.outer``, ...), each behind the checks too.

    ``ref`` is the reference module's ufunc of that name (CuPy's), whose methods say which
    of NumPy's it has; found by the name the cell used, since CuPy names its ufuncs
    ``cupy_add``."""
    call = make_call(calls, func, spec, host_func)
    for attr in _UFUNC_DATA:
        value = getattr(func, attr, MISSING)
        if value is not MISSING:
            setattr(call, attr, value)
    for name, positions in _UFUNC_METHODS.items():
        method = getattr(func, name, MISSING)
        if method is MISSING:
            continue
        mspec = CallSpec(f"{spec.name}.{name}", positions=positions)
        host = getattr(host_func, name, MISSING)
        wrapped = make_call(calls, method, mspec, host)
        if calls.checked and not hasattr(ref, name):  # CuPy's ufunc lacks it (np.matmul)
            wrapped = _refused_method(calls, mspec, host, wrapped)
        setattr(call, name, wrapped)
    return call


def _refused_method(calls: Calls, spec: CallSpec, host: Any, wrapped: Any) -> Any:
    """A ufunc method CuPy lacks: each call is refused in one line, or under ``--fallback``
    counted as a fallback and run."""

    def refused(*args: Any, **kwargs: Any) -> Any:
        calls.missing(spec, host)  # raises unless --fallback
        return wrapped(*args, **kwargs)

    refused.__name__ = getattr(wrapped, "__name__", spec.name)
    refused.__qualname__ = spec.name
    return refused


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
        if name == "__all__":  # `from numpy import *` in the cell
            return _star_names(calls, path.rstrip("."), fallen)
        if name.startswith("__") and name.endswith("__"):
            return getattr(target, name)
        with calls.uncounted():
            value, keep = _resolve(calls, target, path.rstrip("."), name, fallen, self)
        if keep:
            self.__dict__[name] = value
        return value

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self.__dict__["__compat__"][1])))

    def __repr__(self) -> str:
        _calls, target, _, fallen = self.__dict__["__compat__"]
        what = "NumPy's, run under --fallback" if fallen else "calls checked by cupy_magic"
        return f"<module {target.__name__!r} ({what})>"


def _star_names(calls: Calls, path: str, fallen: bool) -> list[str]:
    """What ``from numpy import *`` binds in a cell: NumPy's public names at ``path`` that
    the array module gives (all of them under ``--fallback``), as a plain cell binds NumPy's;
    CuPy's module has no ``__all__`` of its own. A name it lacks is left unbound, not
    refused, unless the cell uses it."""
    host_mod = numpy_module(path)
    if host_mod is MISSING:
        return []
    names = getattr(host_mod, "__all__", None) or [n for n in dir(host_mod)
                                                   if not n.startswith("_")]
    if fallen or not calls.checked or calls.record.fallback:
        return list(names)
    made = SUPPLIED.keys() | COMPLETIONS.keys()  # once, not per name
    return [n for n in names if _ref(path, n) is not MISSING or (not path and n in FP_ERRORS)
            or (f"{path}.{n}" if path else n) in made]


def _resolve(calls: Calls, target: ModuleType, path: str, name: str,
             fallen: bool, module: ArrayModule) -> tuple[Any, bool]:
    """``(value, cache it)`` for ``np.<path>.<name>`` (``module``: the proxy asked)."""
    host_mod = numpy_module(path)
    host = getattr(host_mod, name, MISSING) if host_mod is not MISSING else MISSING
    sub = f"{path}.{name}" if path else name
    if fallen:
        return _wrap_host(calls, host, sub, path, name, target), True
    if calls.checked and host is not MISSING and _ref(path, name) is MISSING:
        if not path and name in FP_ERRORS:  # NumPy's host settings; 'ignore' is the GPU's
            return fp_errors_call(calls, host, name), True
        made = SUPPLIED.get(sub) or COMPLETIONS.get(sub)
        if made is not None:  # done with the array module's own functions
            return _supplied_call(calls, made, host, call_spec(path, name, False)), True
        calls.missing(call_spec(path, name, False), host)  # raises unless --fallback
        if isinstance(host, type) and issubclass(host, (numpy.generic, numpy.ndarray)):
            # a scalar type or array class (np.datetime64, np.bytes_, np.recarray) is a dtype,
            # issubclass's or .view's argument: NumPy's own, counted at each use like a
            # constant (np.nditer and other classes that take arrays run as fallback calls)
            calls.missing_value(call_spec(path, name, False))
            if host is numpy.matrix:  # made from arrays: np.matrix(x) of a device x
                return _host_class(calls, call_spec(path, name, False), host), False
            return host, False
        if not callable(host) and not isinstance(host, ModuleType):
            return host, False  # a constant: counted at each use
        return _wrap_host(calls, host, sub, path, name, None), True
    value = getattr(target, name, MISSING)
    if value is MISSING and calls.host and not path and host is MISSING:
        value = cupy_only(calls, name, module)  # cp.asnumpy; cp.cuda refused in one line
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
        wrapped = ufunc_call(calls, value, spec, host, _ref(path, name))
    elif callable(value):
        wrapped = make_call(calls, value, spec, host)
        if sub == "random.default_rng":
            wrapped = checked_default_rng(calls, wrapped)
    else:
        return value, True
    wrapped = guarded(calls, sub, wrapped, host, spec)  # where CuPy differs from NumPy
    calls.wrapped[id(value)] = wrapped
    return wrapped, True


def _supplied_call(calls: Calls, made: Any, host: Any, spec: CallSpec) -> Any:
    """A function CuPy lacks, made from the array module's own (:mod:`.supplement`): run on
    the device; a use it does not cover is refused in one line (or falls back to NumPy)."""
    xp = calls.xp

    def run(*args: Any, **kwargs: Any) -> Any:
        return made(xp, *args, **kwargs)

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return run(*args, **kwargs)
        except NotSupplied as exc:
            return calls.refuse(spec, host, args, kwargs, "not-implemented", str(exc))
        except LIMIT_ERRORS as exc:  # CuPy's refusal inside (a list of device scalars), or
            return calls.failed(spec, run, host, args, kwargs, exc)  # the cell's own error

    return fronting(call, host, spec.name)


class _HostClass(type):
    """The type of a cell's stand-in for a NumPy array class CuPy lacks: ``isinstance`` and
    ``issubclass`` answer for NumPy's class itself."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls.__cupy_magic_numpy__)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, cls.__cupy_magic_numpy__)


def _host_class(calls: Calls, spec: CallSpec, host: type) -> type:
    """NumPy's array class ``host`` (``np.matrix``) as ``--fallback`` runs it: made from host
    copies of a cell's device arrays, and staying on the host (CuPy has no such class)."""
    made = calls.wrapped.get(id(host))
    if made is None:
        fall_back = calls.host_call(spec, host)

        def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
            return fall_back(*args, **kwargs)

        made = calls.wrapped[id(host)] = _HostClass(host.__name__, (host,), {
            "__new__": __new__, "__cupy_magic_numpy__": host, "__module__": host.__module__,
            "__doc__": host.__doc__, "__qualname__": host.__qualname__})
    return made


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
    return calls.host_call(call_spec(path, name, False), host)

