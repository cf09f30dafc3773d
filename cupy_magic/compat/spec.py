"""What NumPy and CuPy each say about one function, read once from their installed modules.

NumPy's docstrings say which parameters are ``array_like`` (those take Python lists); CuPy's
namespace says which names exist and its signatures which options it takes. Nothing here
calls the device, so the CPU fallback can ask the same questions as a GPU.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy

__all__ = ["MISSING", "UNSUPPORTED_KINDS", "CallSpec", "call_spec", "input_refusal",
           "numpy_module", "reference_module"]

MISSING: Any = object()
# dtype kinds CuPy cannot hold: object, strings, void, datetimes.
UNSUPPORTED_KINDS = "OUSVMm"
# Functions that take lists themselves (they are how a list becomes an array on purpose).
_EXPLICIT = frozenset({"array", "asarray", "asanyarray", "ascontiguousarray",
                       "asfortranarray", "fromiter", "frombuffer", "copy", "asarray_chkfinite"})
# Parameters NumPy documents as array_like that CuPy reads on the host as a sequence.
_HOST_SEQUENCES = frozenset({"reps", "shape", "newshape", "axes", "axis", "pad_width"})
_PARAM = re.compile(r"^(\*{0,2}\w+(?:\s*,\s*\*{0,2}\w+)*)\s*:\s*(.*)$")
# "array_like", "1-D array_like", "int or array_like", "float or array_like of floats"; not
# "sequence of array_like" (a list of arrays there is the function's own input)
_ARRAY_LIKE = re.compile(r"(?:[\w-]+,?\s+(?:or\s+)?)*array[_-]like")
# "sequence of array_like", "tuple of array_like", "sequence of arrays": a list of arrays
_SEQUENCE_OF = re.compile(r"(?:sequence|tuple|list)\s+of\s+(?:array[_-]like|(?:nd)?arrays)")
# array_like parameters whose lists mean something else: bins=[10, 20] are two bin counts,
# typechars=['d', 'f'] type characters
_NOT_ARRAYS = frozenset({("histogram2d", "bins"), ("histogramdd", "bins"),
                         ("mintypecode", "typechars")})


@dataclass(frozen=True)
class CallSpec:
    """One function as the proxy needs it.

    Attributes
    ----------
    name
        How the cell writes it: ``np.histogram``, ``np.linalg.norm``.
    positions, keywords
        The positional indices and keyword names NumPy documents as ``array_like``.
    sequence_positions, sequences
        Those NumPy documents as a sequence of arrays (``np.stack``'s ``arrays``).
    explicit
        A creation function (``np.array``): lists are its input, not converted before it.
    missing_options
        Keyword options NumPy has and CuPy's signature lacks, with NumPy's default.
    positional_limit
        How many positional arguments CuPy's function takes (a large number when unknown).
    positional_names
        NumPy's positional parameter names, to name an extra positional argument.
    """

    name: str
    positions: tuple[int, ...] = ()
    keywords: frozenset[str] = frozenset()
    sequence_positions: tuple[int, ...] = ()
    sequences: frozenset[str] = frozenset()
    explicit: bool = False
    missing_options: tuple[tuple[str, Any], ...] = ()
    positional_limit: int = 1 << 30
    positional_names: tuple[str, ...] = ()

    @functools.cached_property
    def options(self) -> dict[str, Any]:
        """``missing_options`` as a dict (made once: it is read on every call with keywords)."""
        return dict(self.missing_options)


_UNITS = {"Y": "years", "M": "months", "W": "weeks", "D": "days", "h": "hours",
          "m": "minutes", "s": "seconds", "ms": "milliseconds", "us": "microseconds",
          "ns": "nanoseconds", "ps": "picoseconds", "fs": "femtoseconds", "as": "attoseconds"}


def input_refusal(name: str, dtype: numpy.dtype) -> str:
    """Why an input array of ``dtype`` cannot go to CuPy, with the fix; ``""`` when it can.

    CuPy holds numbers and booleans up to float64 and complex128: not objects, strings,
    structured records, dates, or NumPy's extended precision (``np.longdouble``).
    """
    def head() -> str:  # made on refusal only: a dtype's text took 4.5 of a call's 4.9 us
        return f"input {name!r} is a NumPy array of dtype {dtype}, which CuPy cannot hold"

    if dtype.names:
        first = dtype.names[0]
        return (f"{head()} (a structured array); pass its fields as arrays of their own, e.g. "
                f"{name}_{first} = {name}[{first!r}], or keep it out of the %%gpu cell")
    if dtype.kind in "Mm":
        unit, _ = numpy.datetime_data(dtype)
        what = _UNITS.get(unit, f"steps of {unit}")
        counts = (f"a count of {what} since 1970-01-01" if dtype.kind == "M"
                  else f"a count of {what}")
        if unit == "generic":
            counts = "a plain count, with no unit"
        return (f"{head()}; pass it as numbers, e.g. {name} = {name}.astype('int64') ({counts}; "
                "NaT becomes the smallest int64), or keep it out of the %%gpu cell")
    if (dtype.kind == "f" and dtype.itemsize > 8) or (dtype.kind == "c" and dtype.itemsize > 16):
        wide = "np.float64" if dtype.kind == "f" else "np.complex128"
        return (f"{head()} (CuPy has no extended precision); convert it first (e.g. {name} = "
                f"{name}.astype({wide}), which rounds to double precision) or keep it out of "
                "the %%gpu cell")
    if dtype.kind in UNSUPPORTED_KINDS:
        return (f"{head()}; convert it first (e.g. {name} = {name}.astype(float)) or keep it out "
                "of the %%gpu cell")
    return ""


@functools.cache
def reference_module() -> ModuleType | None:
    """CuPy's module, whose names and signatures are the limits (None when not installed)."""
    try:
        return importlib.import_module("cupy")
    except ImportError:
        return None


def numpy_module(path: str) -> Any:
    """NumPy's module (or attribute) at ``path`` ("" is numpy, "linalg" numpy.linalg)."""
    obj: Any = numpy
    for part in filter(None, path.split(".")):
        obj = getattr(obj, part, MISSING)
        if obj is MISSING:
            return MISSING
    return obj


def _array_like_names(func: Any, sequences: bool = False) -> set[str]:
    """Parameters NumPy's docstring types as ``array_like`` (also ``int or array_like``;
    not ``sequence of array_like``), or with ``sequences`` those typed as a sequence of
    arrays."""
    doc = inspect.getdoc(func) or ""
    names: set[str] = set()
    in_params = False
    for line in doc.splitlines():
        if line.strip() in ("Parameters", "Returns", "Other Parameters", "Raises", "See Also"):
            in_params = line.strip() in ("Parameters", "Other Parameters")
            continue
        match = _PARAM.match(line) if in_params and not line.startswith(" ") else None
        kind = match.group(2).strip() if match else ""
        if sequences:
            found = bool(_SEQUENCE_OF.match(kind))
        else:
            found = bool(_ARRAY_LIKE.match(kind)) and not re.search(r"\bof\s+array[_-]like", kind)
        if found:
            names.update(n.strip().lstrip("*") for n in match.group(1).split(","))
    name = getattr(func, "__name__", "")
    return {n for n in names - _HOST_SEQUENCES if (name, n) not in _NOT_ARRAYS}


def _params(func: Any) -> list[inspect.Parameter] | None:
    try:
        return list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return None


def _positional(params: list[inspect.Parameter]) -> list[inspect.Parameter]:
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p for p in params if p.kind in kinds]


def _options(numpy_params: list[inspect.Parameter] | None,
             cupy_params: list[inspect.Parameter] | None) -> tuple[tuple[str, Any], ...]:
    if numpy_params is None or cupy_params is None:
        return ()
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in cupy_params):
        return ()
    have = {p.name for p in cupy_params}
    return tuple((p.name, p.default) for p in numpy_params
                 if p.kind in (inspect.Parameter.KEYWORD_ONLY,
                               inspect.Parameter.POSITIONAL_OR_KEYWORD)
                 and p.name not in have and p.name != "like")


def _limit(cupy_params: list[inspect.Parameter] | None) -> int:
    if cupy_params is None or any(p.kind == inspect.Parameter.VAR_POSITIONAL
                                  for p in cupy_params):
        return 1 << 30
    return len(_positional(cupy_params))


@functools.lru_cache(maxsize=4096)
def _spec(path: str, name: str, ref_path_exists: bool) -> CallSpec:
    label = ".".join(filter(None, ("np", path, name)))
    func = getattr(numpy_module(path), name, MISSING) if numpy_module(path) is not MISSING \
        else MISSING
    if func is MISSING:
        return CallSpec(label)
    if isinstance(func, numpy.ufunc):
        return CallSpec(label, positions=tuple(range(func.nin)))
    numpy_params = _params(func)
    ref = reference_module()
    cupy_params = None
    if ref is not None and ref_path_exists:
        ref_obj = _ref_attr(ref, path, name)
        cupy_params = _params(ref_obj) if ref_obj is not MISSING else None
    wanted = _array_like_names(func)
    items = _array_like_names(func, sequences=True)
    positional = _positional(numpy_params or [])
    return CallSpec(
        label,
        positions=tuple(i for i, p in enumerate(positional) if p.name in wanted),
        keywords=frozenset(wanted),
        sequence_positions=tuple(i for i, p in enumerate(positional) if p.name in items),
        sequences=frozenset(items),
        explicit=name in _EXPLICIT,
        missing_options=_options(numpy_params, cupy_params),
        positional_limit=_limit(cupy_params),
        positional_names=tuple(p.name for p in positional),
    )


def _ref_attr(ref: ModuleType, path: str, name: str) -> Any:
    obj: Any = ref
    for part in [*filter(None, path.split(".")), name]:
        obj = getattr(obj, part, MISSING)
        if obj is MISSING:
            return MISSING
    return obj


def call_spec(path: str, name: str, checked: bool) -> CallSpec:
    """The :class:`CallSpec` of ``np.<path>.<name>``, cached; ``checked``: compare with CuPy."""
    return _spec(path, name, checked)
