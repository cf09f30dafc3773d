"""The slow path of a call through the array module: options checked, lists converted,
CuPy's refusals told in one line, or run with NumPy under ``--fallback``."""

from __future__ import annotations

import contextlib
import re
import sys
import time
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any, NoReturn

import numpy

from .advice import LIMIT_ERRORS, WAYS, CupyLimit, MissingInCupy, classify, limit_message, why_text
from .complete import COMPLETED
from .draws import DRAWS
from .dress import fronting
from .emulate import EMULATED, NOT_EMULATED, emulate
from .moves import SEQUENCES, Moves, host_data
from .padding import PADS
from .record import CompatRecord
from .retry import FAILED, into_out, with_host_ints
from .spec import MISSING, UNSUPPORTED_KINDS, CallSpec
from .supplement import NotSupplied

__all__ = ["DTYPES_OK", "MUTATES", "SEQUENCES", "Calls"]

# NumPy functions that write into their first argument: under --fallback its host copy is
# writable and copied back; every other argument's host copy is read-only, so a function
# that writes into one fails (and is refused) instead of changing a copy nobody sees.
MUTATES = frozenset({"np.copyto", "np.put", "np.place", "np.putmask", "np.fill_diagonal",
                     "np.put_along_axis", "np.random.shuffle"})
# Uses CuPy refuses that are made from its own functions, by NumPy's name below ``numpy``
COMPLETIONS = {**COMPLETED, **DRAWS, **PADS}
_SCRATCH = ("overwrite_input", "overwrite_a", "overwrite_b")
# A CuPy error classify() does not know is CuPy's limit when NumPy runs the same call: tried
# on read-only host copies up to this size, never for calls with effects beyond their result
_PROBE_BYTES = 64 << 20
_NO_PROBE = ("random.", "save", "load", "info", "set_", "seterr", "setbufsize", "tofile",
             "show")
# dtype= arguments the slow path found CuPy can hold (np.float32, "f4", a numpy.dtype): the
# wrappers' fast path lets a call with one of them through without the slow path. Only
# "supported" is kept, which no setting changes (not --fallback, not the backend); a refusal
# is decided again at each call.
DTYPES_OK: set[Any] = set()
_DTYPES_OK_MAX = 512


def _same(value: Any, default: Any) -> bool:
    """Whether ``value`` is NumPy's default for an option (so leaving it out changes nothing)."""
    if value is default:
        return True
    try:
        return type(value) is type(default) and bool(value == default)
    except Exception:  # an array compared with a default: not the default
        return False


class Calls(Moves):
    """One cell's handling of the calls the proxy could not pass straight through."""

    def __init__(self, xp: ModuleType, record: CompatRecord, reference: ModuleType | None,
                 uncounted: Callable[[], contextlib.AbstractContextManager[None]] = \
                     contextlib.nullcontext):
        self.xp = xp
        self.uncounted = uncounted  # the backend's: the extension's own work is not the cell's
        self.record = record
        self.checked = reference is not None
        self.host = xp is numpy
        self.device_type = xp.ndarray
        # one wrapper per function object (keyed by id; the module keeps the object alive)
        self.wrapped: dict[int, Any] = {}

    # --- the slow path ------------------------------------------------------------------
    def _options(self, spec: CallSpec, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """Drop options CuPy lacks that carry NumPy's default; refuse the others."""
        options = spec.options
        if len(args) <= spec.positional_limit and not options and "dtype" not in kwargs:
            return args, kwargs
        if len(args) > spec.positional_limit:
            for i in range(spec.positional_limit, len(args)):
                name = spec.positional_names[i] if i < len(spec.positional_names) else ""
                if not (name in options and _same(args[i], options[name])):
                    return self.limit(spec, "option", f"{name or f'positional #{i + 1}'}=")
            args = args[:spec.positional_limit]
        if kwargs and options:
            for key in [k for k in kwargs if k in options]:
                if not _same(kwargs[key], options[key]):
                    return self.limit(spec, "option", f"{key}=")
                kwargs = {k: v for k, v in kwargs.items() if k != key}
        dtype = kwargs.get("dtype")
        if dtype is not None and self.checked:
            try:
                kind = numpy.dtype(dtype).kind
            except TypeError:
                kind = ""
            if kind in UNSUPPORTED_KINDS:
                self.limit(spec, "dtype", str(numpy.dtype(dtype)))
            elif kind and len(DTYPES_OK) < _DTYPES_OK_MAX:
                with contextlib.suppress(TypeError):  # unhashable (a list of fields)
                    DTYPES_OK.add(dtype)
        return args, kwargs

    def slow(self, spec: CallSpec, func: Any, host_func: Any, args: tuple,
             kwargs: dict) -> Any:
        """A call with keywords, extra positional arguments or lists."""
        if self.checked and spec.name in EMULATED:  # an option CuPy lacks, done with its own
            done = emulate(self.xp, spec.name, args, kwargs)
            if done is not NOT_EMULATED:
                return done
        if self.checked and _missing_used(spec, args, kwargs):
            done = self._completed(spec, args, kwargs)  # np.trim_zeros(b, axis=-1)
            if done is not FAILED:
                return done
        try:
            args, kwargs = self._options(spec, args, kwargs)
            if not spec.explicit:
                args, kwargs, kinds = self.convert(spec, args, kwargs)
                if kinds:
                    self.record.moved(kinds, spec.name)
        except _Fallback as fb:
            return self.run_host(spec, host_func, args, kwargs, fb.why)
        try:
            result = func(*args, **kwargs)
        except LIMIT_ERRORS as exc:
            return self.failed(spec, func, host_func, args, kwargs, exc)
        if (spec.explicit and self.host and self.checked and isinstance(result, numpy.ndarray)
                and result.dtype.kind in UNSUPPORTED_KINDS):  # NumPy made it; CuPy would not
            return self.refuse(spec, host_func, args, kwargs, "dtype", str(result.dtype))
        return result

    def failed(self, spec: CallSpec, func: Any, host_func: Any, args: tuple, kwargs: dict,
               exc: BaseException) -> Any:
        """CuPy raised: retry once with Python values converted, else tell or fall back."""
        __tracebackhide__ = True  # an error NumPy raises too is the cell's own, as it is
        found = classify(exc)
        if found is None:
            if not self._numpy_runs(spec, host_func, args, kwargs):
                raise exc  # NumPy fails too: the cell's own error, as it is
            found = ("not-implemented", str(exc).split("\n")[0].rstrip("."))
        kind, detail = found
        if kind == "device-int":  # np.hsplit(x, np.array([3, 6])): NumPy reads them as ints
            result = with_host_ints(self.device_type, spec, func, args, kwargs)
            if result is not FAILED:
                return result
        if isinstance(kwargs.get("out"), self.device_type):  # np.percentile(..., out=out)
            result = into_out(self.device_type, func, args, kwargs)
            if result is not FAILED:
                return result
        if kind == "argument":
            try:
                result = self._converted(spec, func, host_func, args, kwargs)
            except _Fallback as fb:  # a list of strings: NumPy's under --fallback
                return self.run_host(spec, host_func, args, kwargs, fb.why)
            if result is not FAILED:
                return result
        if kind in ("argument", "not-implemented"):
            done = self._completed(spec, args, kwargs)
            if done is not FAILED:
                return done
        return self.refuse(spec, host_func, args, kwargs, kind, detail, cause=exc)

    def _completed(self, spec: CallSpec, args: tuple, kwargs: dict) -> Any:
        """The call made by its completion (a use CuPy lacks, made from its own functions),
        or :data:`FAILED` where there is none or it does not cover the call."""
        completed = COMPLETIONS.get(spec.name.removeprefix("np."))
        if completed is None:
            return FAILED
        try:
            return completed(self.xp, *args, **kwargs)
        except NotSupplied:
            return FAILED

    def _converted(self, spec: CallSpec, func: Any, host_func: Any, args: tuple,
                   kwargs: dict) -> Any:
        """``func`` again with the Python values CuPy refused made device arrays, as NumPy
        reads them: the items of a "sequence of array_like" parameter (``np.stack((x, y))``
        of two lists, ``np.ravel_multi_index((3, 1), dims)``), then lists anywhere (numbers
        too when no argument is an array), then numbers at ``array_like`` parameters next to
        arrays (``np.inner(x, 7)``; NumPy's asarray makes them int64 or float64 arrays too);
        :data:`FAILED` when none applies or CuPy refuses it too. A retry CuPy takes but
        fails with an error of the cell's own (an index out of bounds, which NumPy raises
        too) raises it."""
        arrays = any(isinstance(a, (self.device_type, numpy.ndarray))
                     for a in (*args, *kwargs.values()))
        tries = (lambda: self.convert_items(spec, args, kwargs),
                 lambda: self.convert(spec, args, kwargs, everywhere=True, scalars=not arrays),
                 lambda: self.convert(spec, args, kwargs, scalars=True))
        for attempt in tries[:3 if arrays else 2]:
            new_args, new_kwargs, kinds = attempt()
            if not kinds:
                continue
            try:
                result = func(*new_args, **new_kwargs)
            except LIMIT_ERRORS as exc:
                if classify(exc) is None and not self._numpy_runs(spec, host_func, args,
                                                                  kwargs):
                    raise exc from None  # NumPy fails too: the cell's own error
                continue
            self.record.moved(kinds, spec.name)
            return result
        return FAILED

    def _numpy_runs(self, spec: CallSpec, host_func: Any, args: tuple, kwargs: dict) -> bool:
        """Whether NumPy runs a call CuPy failed on with an error :func:`classify` does not
        know (``np.pad(x, 2, mode='median')``: "mode 'median' is not supported"): then it is
        CuPy's limit, told in one line, and ``--fallback`` can run it."""
        short = spec.name.removeprefix("np.")
        values = (*args, *kwargs.values())
        if (host_func is MISSING or spec.name in MUTATES or short.startswith(_NO_PROBE)
                or sum(v.nbytes for v in values if isinstance(v, (self.device_type,
                                                                  numpy.ndarray)))
                > _PROBE_BYTES):  # (np.float32 has an nbytes too: a descriptor)
            return False
        moved = [0]
        try:
            with warnings.catch_warnings(), numpy.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                scratch = _scratch(kwargs)  # out= may be written
                host_func(*(self._down(a, moved, writable=scratch) for a in args),
                          **{k: self._down(v, moved, writable=scratch or k == "out")
                             for k, v in kwargs.items()})
        except Exception:
            return False
        return True

    def stop(self, function: str, kind: str, detail: str = "") -> NoReturn:
        """Stop the cell with the one-line message, with or without ``--fallback`` (for what
        NumPy on the host cannot make right either)."""
        line = self.record.line()
        message, fix = limit_message(function, line, self.record.code(line), kind, detail,
                                     fallback=False)
        raise CupyLimit(message, function=function, line=line, kind=kind, fix=fix)

    def refuse(self, spec: CallSpec, host_func: Any, args: tuple, kwargs: dict, kind: str,
               detail: str = "", cause: BaseException | None = None) -> Any:
        """Stop the cell with the one-line message; under ``--fallback``, run the call with
        NumPy (``host_func``) instead and return its result."""
        try:
            self.limit(spec, kind, detail, cause=cause)
        except _Fallback as fb:
            return self.run_host(spec, host_func, args, kwargs, fb.why)
        raise AssertionError("unreachable: limit() always raises")

    def limit(self, spec: CallSpec, kind: str, detail: str = "",
              cause: BaseException | None = None) -> Any:
        """Stop the cell with the one-line message, or signal the fallback."""
        line = self.record.line()
        message, fix = limit_message(spec.name, line, self.record.code(line), kind, detail,
                                     fallback=not self.record.fallback)
        if self.record.fallback:
            raise _Fallback(why_text(spec.name, kind, detail))
        error = MissingInCupy if kind == "missing" else CupyLimit
        raise error(message, function=spec.name, line=line, kind=kind, fix=fix) from None

    def missing(self, spec: CallSpec, host: Any) -> None:
        """A name CuPy lacks: refuse it, or under ``--fallback`` count one use of a value."""
        try:
            self.limit(spec, "missing")
        except _Fallback:
            if not callable(host) and not isinstance(host, ModuleType):
                self.missing_value(spec)

    def missing_value(self, spec: CallSpec) -> None:
        """Count one use of NumPy's value (a constant, a scalar type) under ``--fallback``."""
        self.record.fell_back(spec.name, why_text(spec.name, "missing"),
                              WAYS.get(spec.name.removeprefix("np."), "")).calls += 1

    def host_call(self, spec: CallSpec, host: Any) -> Any:
        """NumPy's ``host`` as ``--fallback`` runs a name CuPy lacks: each call on host
        copies, counted in the report."""
        why = why_text(spec.name, "missing")

        def fall_back(*args: Any, **kwargs: Any) -> Any:
            if spec.name == "np.bmat" and args and isinstance(args[0], str):
                # NumPy reads the names in the string from its caller's frame: the cell's,
                # its device arrays as host copies
                caller, names = sys._getframe(1), set(re.findall(r"[A-Za-z_]\w*", args[0]))

                def scope(values: dict) -> dict:
                    return {k: self.to_host(v) if isinstance(v, self.device_type) else v
                            for k, v in values.items() if k in names}
                kwargs = {"ldict": scope(caller.f_locals), "gdict": scope(caller.f_globals),
                          **kwargs}
            return self.run_host(spec, host, args, kwargs, why)

        return fronting(fall_back, host, spec.name)

    # --- the fallback -------------------------------------------------------------------
    def _down(self, value: Any, moved: list[int], writable: bool = False) -> Any:
        if isinstance(value, self.device_type):
            host = self.to_host(value)
            moved[0] += host.nbytes
            if not writable:
                host.setflags(write=False)
            return host
        if type(value) in SEQUENCES:
            return type(value)(self._down(v, moved) for v in value)
        return value

    def _up(self, value: Any, moved: list[int]) -> Any:
        # only plain arrays: a masked array, np.matrix or record array stays NumPy's on the
        # host (as a device array it would lose its mask or its meaning without a word)
        if type(value) is numpy.ndarray and value.dtype.kind not in UNSUPPORTED_KINDS:
            moved[0] += value.nbytes
            return self.to_device(value)
        if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named result
            return type(value)(*(self._up(v, moved) for v in value))
        if type(value) in SEQUENCES:
            return type(value)(self._up(v, moved) for v in value)
        return value

    def _no_view(self, spec: CallSpec, result: Any, args: tuple, copies: tuple,
                 written: tuple) -> None:
        """Refuse a NumPy result that is a view of a device argument's host copy: NumPy
        returns a view of the argument there (``np.asmatrix(x)``), and the device can only
        get a copy, so a later write to one would not show in the other."""
        if not isinstance(result, numpy.ndarray) or any(result is w for w in written):
            return
        for arg, copy in zip(args, copies, strict=True):
            if (copy is not arg and isinstance(copy, numpy.ndarray)
                    and numpy.may_share_memory(result, copy)):
                self.stop(spec.name, "view")

    def run_host(self, spec: CallSpec, host_func: Any, args: tuple, kwargs: dict,
                 why: str) -> Any:
        """Run ``host_func`` (NumPy's) on host copies; results back on the device."""
        if host_func is MISSING:
            raise AttributeError(f"NumPy has no {spec.name} either")
        row = self.record.fell_back(spec.name, why, WAYS.get(spec.name.removeprefix("np."), ""))
        t0 = time.perf_counter()
        down, up = [0], [0]
        mutates = spec.name in MUTATES
        # overwrite_input=True lets NumPy use its input as scratch: the copies may be written
        scratch = _scratch(kwargs)
        hargs = tuple(self._down(a, down, writable=scratch or (mutates and i == 0))
                      for i, a in enumerate(args))
        out = kwargs.get("out")
        hkw = {k: self._down(v, down, writable=scratch or k == "out")
               for k, v in kwargs.items()}
        try:
            result = host_func(*hargs, **hkw)
        except ValueError as exc:
            if "read-only" not in str(exc):
                raise
            line = self.record.line()
            raise CupyLimit(
                f"{spec.name} at line {line} `{self.record.code(line)}`: it writes into an "
                "argument, and under --fallback that would change a host copy only; write the "
                "result to a new name instead", function=spec.name, line=line,
                kind="not-implemented") from None
        self._no_view(spec, result, (*args, *kwargs.values()), (*hargs, *hkw.values()),
                      written=(hkw.get("out"), hargs[0] if mutates and args else None))
        writes = [(out, hkw["out"])] if out is not None else []
        if mutates and args:
            writes.append((args[0], hargs[0]))
        if scratch:  # NumPy left its scratch in the inputs: so do the device arrays
            writes.extend((a, h) for a, h in zip(args, hargs, strict=True) if a is not out)
        for dev, host in writes:
            if isinstance(dev, self.device_type):
                dev[...] = self._up(host, up)
                result = dev if result is host else result
        if self.host or not host_data(args, kwargs):
            result = self._up(result, up)
        # else NumPy-only data went in (strings, np.matrix): its results stay with it on the
        # host, so that `a[np.unique(a, return_index=True)[1]]` indexes a host array with
        # host indices
        row.calls += 1
        row.to_host_bytes += down[0]
        row.to_device_bytes += up[0]
        row.seconds += time.perf_counter() - t0
        return result


def _missing_used(spec: CallSpec, args: tuple, kwargs: dict) -> bool:
    """Whether the call passes an option CuPy's function lacks, other than NumPy's default."""
    return len(args) > spec.positional_limit or any(
        key in spec.options and not _same(value, spec.options[key])
        for key, value in kwargs.items())


def _scratch(kwargs: dict) -> bool:
    """Whether the call lets NumPy use its inputs as scratch (``overwrite_input=True``)."""
    return any(kwargs.get(k) is True for k in _SCRATCH)


class _Fallback(Exception):
    """Raised by :meth:`Calls.limit` under ``--fallback``: run this call with NumPy."""

    @property
    def why(self) -> str:
        return str(self.args[0])
