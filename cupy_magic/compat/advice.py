"""Why a call cannot run on CuPy, told in one line, with the CuPy way to write it.

:func:`limit_message` builds the line; :data:`WAYS` is the table of common fixes (grown from
the failures of NumPy's own docstring examples, ``benchmarks/numpy_examples.py``);
:func:`classify` reads an error CuPy raised; :func:`explain_failure` turns a cell's
"Implicit conversion to a NumPy array" error into the same kind of line.
"""

from __future__ import annotations

import re
from types import TracebackType
from typing import Any

from ..source import line_code

__all__ = ["FALLBACK_HINT", "KINDS", "LIMIT_ERRORS", "TO_HOST", "WAYS", "CupyLimit",
           "MissingInCupy", "NeedsGpu", "classify", "explain_failure", "limit_message",
           "why_text"]

# A NumPy copy of a cell's array that runs on both backends (on the CPU fallback a cell's
# arrays are NumPy's, which have no .get()); the advice below names it, never x.get()
TO_HOST = "cp.asnumpy(x)"

FALLBACK_HINT = "or run the cell with %%gpu --fallback (NumPy on the host for this call)"
KINDS = {
    "missing": "CuPy has no {short}",
    "option": "CuPy's {short} has no {detail} option",
    "dtype": "CuPy has no dtype {detail}",
    "device-array": "NumPy-only code received a device array",
    "not-implemented": "CuPy has not implemented this use ({detail})",
    "argument": "CuPy does not take {detail} here",
    "device-int": "a device array was used where Python needs an int",
    "differs": "NumPy and CuPy give different values for {detail}",
    "fp-errors": ("the GPU never checks floating-point errors, so {detail} cannot be honoured "
                  "by the cell's device computations (they run as if 'ignore' were set)"),
    "needs-gpu": "{short} needs a GPU, which the CPU fallback has not",
    "view": ("NumPy returns a view of its argument here, and run on the host the result "
             "can only be a copy on the device (a write to one would not show in the other)"),
}
# The CuPy way to write the common cases; keys are the function's name without "np.".
WAYS = {
    "Generator.choice": "a[rng.integers(0, len(a), size)] (draws with replacement)",
    "Generator.permutation": "x[np.argsort(rng.random(len(x)))]",
    "Generator.shuffle": "x = x[np.argsort(rng.random(len(x)))]",
    "Generator.permuted": "x[np.argsort(rng.random(len(x)))]",
    "nditer": "loop over x.ravel() with whole-array expressions, or bring x to the host "
              f"({TO_HOST}, on either backend) and iterate there",
    "ndenumerate": "np.indices(x.shape) or np.argwhere for the positions, with whole-array "
                   "expressions",
    "ndindex": "np.indices(shape).reshape(len(shape), -1).T",
    "arange": ("np.arange(start, stop, step).astype(dtype) for steps of the fraction, or "
               "integer start, stop and step"),
    **dict.fromkeys(("errstate", "seterr"), "check the result (np.isfinite(y).all() after the "
                    "computation), or set the mode outside the %%gpu cell for NumPy code"),
    "emath": "np.sqrt(x.astype(complex)) (emath picks complex output by value)",
    "datetime64": "integer offsets (e.g. seconds as int64) on the device, dates on the host",
    "timedelta64": "integer offsets (e.g. seconds as int64) on the device",
    "void": "a structured array as separate arrays, one per field",
    "char": "keep strings on the host; put codes (integers) on the device",
    "ma": "a data array and a boolean mask array, e.g. np.where(mask, x, 0)",
    "matrix": "a 2-D array and @ for the matrix product",
    "packbits": "np.packbits(x) on a flattened or transposed array (CuPy packs the last "
                "axis only)",
    "unpackbits": "np.unpackbits(x) on a flattened array",
    "can_cast": "np.can_cast(np.min_scalar_type(v), dtype) for a Python number v",
    "logical_and.reduce": "np.all(x, axis=...)",
    "logical_or.reduce": "np.any(x, axis=...)",
    "histogram": "np.histogram(np.asarray(x), bins=np.asarray(edges))",
    "vectorize": "whole-array expressions (np.where for branches)",
    "frompyfunc": "whole-array expressions (np.where for branches)",
    "apply_along_axis": "a whole-array expression with axis=...",
    "set_printoptions": f"set NumPy's print options outside the cell, then print({TO_HOST}) "
                        "in it",
    "busday_count": "compute dates on the host, outside the cell",
    "save": f"np.save of a host copy ({TO_HOST}), or CuPy's np.save on the device array",
    # grown from NumPy's docstring examples (benchmarks/numpy_examples.py)
    "(where=)": "select first: np.sum(np.where(mask, x, 0)) (the identity: 0 for sum, 1 for "
                "prod, True for all, False for any), or x[mask] for min, max, mean, std, var",
    "(keepdims=)": "np.expand_dims(result, axis) after the reduction",
    "indices(sparse=)": "np.ogrid[:n, :m] (open grids)",
    "trim_zeros(axis=)": "nz = np.flatnonzero(x); x[nz[0]:nz[-1] + 1] (1-D)",
    "(dtype structured)": "one array per field (a dict of arrays), np.lexsort over the fields "
                          "for sorting",
    "(dtype string)": "keep strings on the host; put integer codes on the device (np.unique("
                      "..., return_inverse=True) on the host)",
    "(dtype object)": "a numeric dtype on the device; other objects stay on the host",
    "(dtype datetime)": "integer offsets (e.g. seconds as int64) on the device, dates on the "
                        "host",
    "insert": "np.concatenate((x[:i], values, x[i:]))",
    "block": "np.concatenate of np.concatenate (np.vstack of np.hstack for 2-D blocks)",
    "geomspace": "np.logspace(np.log10(start), np.log10(stop), num)",
    "nanpercentile": "np.percentile(x[~np.isnan(x)], q) (1-D; per row: sort, NaNs last)",
    "nanquantile": "np.quantile(x[~np.isnan(x)], q) (1-D; per row: sort, NaNs last)",
    "spacing": "np.nextafter(x, np.inf) - x",
    "histogram_bin_edges": "np.histogram(x, bins=n)[1] (an integer n: CuPy has no 'auto')",
    "einsum_path": "drop it: CuPy's np.einsum picks its own contraction order",
    "unstack": "tuple(np.moveaxis(x, axis, 0))",
    "vecdot": "(a.conj() * b).sum(axis=-1)",
    "matvec": "np.einsum('...ij,...j->...i', a, v)",
    "vecmat": "np.einsum('...i,...ij->...j', v.conj(), a)",
    "polyder": "p[:-1] * np.arange(len(p) - 1, 0, -1)",
    "polyint": "np.concatenate((p / np.arange(len(p), 0, -1), np.zeros(1)))",
    "linalg.outer": "np.outer(a, b)",
    "linalg.trace": "np.trace(x, axis1=-2, axis2=-1)",
    "linalg.diagonal": "np.diagonal(x, axis1=-2, axis2=-1)",
    "linalg.svdvals": "np.linalg.svd(x, compute_uv=False)",
    "linalg.vecdot": "(a.conj() * b).sum(axis=-1)",
    "asmatrix": "a 2-D array and @ for the matrix product",
}


class CupyLimit(NotImplementedError):
    """A call CuPy cannot run as NumPy would; the message says the fix in one line.

    Attributes
    ----------
    function, line, kind, fix
        The function as the cell wrote it (``np.nditer``), the cell line (or None), the
        kind of limit (a key of :data:`KINDS`), and the CuPy way to write it (may be empty).
    """

    def __init__(self, message: str, *, function: str, line: int | None, kind: str,
                 fix: str = "") -> None:
        super().__init__(message)
        self.function = function
        self.line = line
        self.kind = kind
        self.fix = fix

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled whole (a cluster worker's error reaches the kernel so): an exception
        pickles as ``cls(*args)``, which misses the keyword-only arguments, and
        ``distributed`` then sent a bare ``Exception`` of the error's repr instead."""
        return (_limit, (type(self), str(self), self.function, self.line, self.kind, self.fix),
                self.__dict__)


def _limit(cls: type[CupyLimit], message: str, function: str, line: int | None, kind: str,
           fix: str) -> CupyLimit:
    """A :class:`CupyLimit` (or a subclass) again, from its pickled parts."""
    return cls(message, function=function, line=line, kind=kind, fix=fix)


class MissingInCupy(CupyLimit, AttributeError):
    """``np.<name>`` that CuPy lacks (an ``AttributeError`` too, as a missing attribute is)."""


class NeedsGpu(CupyLimit, AttributeError):
    """``cp.<name>``, CuPy's own, that has no meaning on the CPU fallback (a CUDA kernel, a
    device, a stream); an ``AttributeError`` too, so ``hasattr(cp, "cuda")`` is False there."""


def _short(function: str) -> str:
    return function.removeprefix("np.")


def why_text(function: str, kind: str, detail: str = "") -> str:
    """Why CuPy cannot run ``function`` ("CuPy has no nditer"): the message's middle, also
    the reason a fallback row gives."""
    return KINDS[kind].format(short=_short(function), detail=detail)


def limit_message(function: str, line: int | None, code: str, kind: str,
                  detail: str = "", fallback: bool = True) -> tuple[str, str]:
    """The one-line message and the fix for ``function`` at ``line`` of the cell.

    Returns
    -------
    tuple
        ``(message, fix)``: "np.nditer at line 3 `for v in np.nditer(x):`: CuPy has no
        nditer; instead: ..., or run the cell with %%gpu --fallback ...".
    """
    short = _short(function)
    fix = WAYS.get(f"{short}({detail})") or WAYS.get(f"({_dtype_family(detail)})"
                                                     if kind == "dtype" else f"({detail})") \
        or WAYS.get(short, "")
    why = why_text(function, kind, detail)
    where = f" at line {line} `{code}`" if line else " (called outside the cell's lines)"
    hint = FALLBACK_HINT if fallback else ""
    if fix:
        tail = f"instead: {fix}" + (f", {hint}" if hint else "")
    else:
        tail = hint.removeprefix("or ") if hint else "no CuPy counterpart is known"
    return f"{function}{where}: {why}; {tail}", fix


def _dtype_family(name: str) -> str:
    """The :data:`WAYS` key of a dtype CuPy has not: structured, string, object, datetime."""
    if name.startswith(("[", "(", "void", "|V")):
        return "dtype structured"
    if name.startswith(("datetime", "timedelta", "<M", "<m")):
        return "dtype datetime"
    return "dtype object" if name == "object" else "dtype string"


# The errors a CuPy function may raise for what NumPy runs (AttributeError: CuPy's functions
# call array methods on what they get, 'int' object has no attribute 'dot' for np.dot(3, 4));
# classify() keeps only those it knows
LIMIT_ERRORS = (TypeError, ValueError, NotImplementedError, AttributeError)

_RULES: tuple[tuple[type[BaseException], re.Pattern[str], str], ...] = (
    (TypeError, re.compile(r"Implicit conversion to a NumPy array is not allowed"),
     "device-array"),
    (TypeError, re.compile(r"'ndarray' object cannot be interpreted as an integer"),
     "device-int"),
    (Exception, re.compile(r"[Uu]nsupported dtype (\S+)|dtype (\S+) is not supported"),
     "dtype"),
    (TypeError, re.compile(r"unexpected keyword argument '(\w+)'"), "option"),
    (TypeError, re.compile(r"Unsupported type (<class '\w+'>)|does not support (Python \w+)"
                           r"|must be a cupy\.ndarray object, not (\w+)"
                           r"|unhashable type: '(\w+)'|'(\w+)' object has no attribute 'ndim'"
                           r"|has incorrect type \(expected cupy\.\S+, got (\w+)\)"
                           r"|should be of type cupy\.ndarray"
                           r"|int\(\) argument must be a string, a bytes-like object or a "
                           r"real number, not '(\w+)'"),
     "argument"),
    (Exception, re.compile(r"only supports cupy\.ndarray"), "argument"),
    # a device array where CuPy's function needs a Python number (np.random.randint(1, [3, 5]))
    (TypeError, re.compile(r"(only 0-dimensional arrays can be converted to Python scalars)"),
     "not-implemented"),
    (AttributeError, re.compile(r"^'(list|tuple|range|set|int|float|bool|complex)' object "
                                r"has no attribute '\w+'$"), "argument"),
    (NotImplementedError, re.compile(r"(.*)"), "not-implemented"),
)


def classify(exc: BaseException) -> tuple[str, str] | None:
    """``(kind, detail)`` when ``exc`` is CuPy refusing what NumPy runs, else None.

    Any other error (a shape mismatch, a bad value) is the cell's own and is left as it is.
    """
    text = str(exc).splitlines()[0] if str(exc) else ""
    for base, pattern, kind in _RULES:
        match = pattern.search(text) if isinstance(exc, base) else None
        if match:
            detail = next((g for g in match.groups() if g), "") if match.groups() else ""
            if kind == "argument" and detail and not detail.startswith(("<", "Python")):
                detail = f"a Python {detail}"
            if kind == "argument" and not detail:
                detail = "a Python value"
            if kind == "option":
                detail = f"{detail}="
            return kind, detail.rstrip(".")
    return None


# What device arrays do not do outside np.* calls (met on the H200 in NumPy's docstring
# examples): (error type, CuPy's message, what the cell asked, the CuPy way)
_ARRAY_LIMITS: tuple[tuple[type[BaseException], re.Pattern[str], str, str], ...] = (
    (IndexError, re.compile(r"unsupported iterator index"),
     "x.flat[...] with an array index", "x.ravel()[i]"),
    # ndarray.sort and .partition sort in place only contiguous arrays (a reversed or strided
    # view, x[:, ::-1].sort(axis=1), or a transpose); np.sort copies first, then sorts
    (NotImplementedError, re.compile(r"non-contiguous array is not supported"),
     "sorting a non-contiguous view in place (x[:, ::-1].sort(), x.T.sort())",
     "x[...] = np.sort(x, axis=...), which writes the sorted copy back (np.partition for "
     ".partition())"),
    (TypeError, re.compile(r"'Flags' object does not support item assignment"),
     "setting x.flags (a device array cannot be made read-only)",
     "keep a copy (y = x.copy()) where a read-only flag was meant"),
    (TypeError, re.compile(r"operand type\(s\) all returned NotImplemented from __array_ufunc__"),
     "an operator between a device array and a Python list or NumPy array",
     "np.asarray(the list) first, so both sides are device arrays"),
    # the other order (device array first) and 0-d device results (np.sum(x) + h): CuPy's own
    # words; the host array is often an item of a list, dict or object from an earlier cell
    # (L[0]), which the cell reads as it is and never moves
    (TypeError, re.compile(r"^Unsupported type <class '(?:numpy\.ndarray|list|tuple)'>"),
     "a NumPy array or Python list mixed with a device array (an item of a list, dict or "
     "object from outside the cell stays a NumPy array)",
     "np.asarray(the NumPy array or list) first, so both sides are device arrays"),
    # NumPy's x.sum() is a hashable scalar, CuPy's a 0-d device array, which is not: the
    # same `d[x.sum()] = 1` runs on the CPU fallback and fails on a GPU
    (TypeError, re.compile(r"unhashable type: '(?:cupy\.[\w.]*)?_?(?:ndarray|ndarray_base)'"),
     "a device array as a dict key or set item (x.sum() and x[i] are 0-d device arrays, "
     "where NumPy gives hashable scalars)",
     "a Python number as the key: d[x.sum().item()] (a host sync), or keep keys as Python "
     "ints"),
)
# What a NumPy array lacks that a cell written for CuPy asks of it (the CPU fallback's arrays
# are NumPy's): (method, what it is, the form that runs on both backends)
_NUMPY_LACKS = {
    "get": ("CuPy's copy to the host", f"{TO_HOST}, a NumPy copy on either backend"),
    "set": ("CuPy's copy from the host", "x[...] = h, which copies h in on either backend"),
}
_NO_ATTRIBUTE = re.compile(r"^'numpy\.\w+' object has no attribute '(\w+)'$")


def _array_limit(exc: BaseException) -> tuple[str, str] | None:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return next(((what, fix) for base, pattern, what, fix in _ARRAY_LIMITS
                 if isinstance(exc, base) and pattern.search(text)), None)


def _numpy_lacks(exc: BaseException) -> tuple[str, str, str] | None:
    """``(method, what it is, the fix)`` for ``x.get()`` asked of a NumPy array or scalar."""
    match = _NO_ATTRIBUTE.match(str(exc)) if isinstance(exc, AttributeError) else None
    if match is None or match.group(1) not in _NUMPY_LACKS:
        return None
    return (match.group(1), *_NUMPY_LACKS[match.group(1)])


def explain_failure(exc: BaseException, filename: str) -> CupyLimit | None:
    """A :class:`CupyLimit` for a cell that failed when NumPy-only code (outside the proxy,
    e.g. another library) received a device array, Python needed an int and got a device
    scalar (``range(np.argmax(x))``), a device array was asked what CuPy's arrays do not
    do (``x.flat[idx]``, ``d[x.sum()]``: :data:`_ARRAY_LIMITS`), or a NumPy array what only
    CuPy's do (``x.get()`` on the CPU fallback); None for any other failure."""
    if isinstance(exc, CupyLimit):
        return None
    found = classify(exc)
    array_limit = _array_limit(exc) if found not in (("device-array", ""),
                                                     ("device-int", "")) else None
    lacks = _numpy_lacks(exc)
    if found not in (("device-array", ""), ("device-int", "")) and array_limit is None \
            and lacks is None:
        return None
    tb: TracebackType | None = exc.__traceback__
    line, callee = None, ""
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_filename == filename:
            line, callee = tb.tb_lineno, ""
        elif line is not None and not callee:
            module = frame.f_globals.get("__name__", "")
            callee = f"{module}.{frame.f_code.co_name}" if module else frame.f_code.co_name
        tb = tb.tb_next
    code = line_code(filename, line)
    where = f"line {line} `{code}`" if line else "the cell"
    who = f" ({callee})" if callee and not callee.startswith("cupy") else ""
    if lacks is not None:
        method, what, fix = lacks
        return CupyLimit(f"{where}: .{method}() is {what}, and a NumPy array has no .{method}() "
                         "(on the CPU fallback a cell's arrays are NumPy's); instead: "
                         f"{fix}", function=f"ndarray.{method}", line=line,
                         kind="not-implemented", fix=fix.split(", ")[0])
    if array_limit is not None:
        what, fix = array_limit
        return CupyLimit(f"{where}: CuPy does not support {what}; instead: {fix}",
                         function=callee or "?", line=line, kind="not-implemented", fix=fix)
    if found == ("device-int", ""):
        return CupyLimit(
            f"{where}: a device array was used where Python needs an int (a size, a range, "
            "an index): a CuPy scalar is not one; write int(x), which copies it to the host "
            "(a host sync), or keep sizes as Python ints", function=callee or "?", line=line,
            kind="device-int", fix="int(x)")
    return CupyLimit(
        f"{where}: NumPy-only code{who} received a device array, which CuPy does not convert "
        f"implicitly; pass it {TO_HOST} (a NumPy copy), or use the cupyx.scipy counterpart; "
        "--fallback covers np functions only",
        function=callee or "?", line=line, kind="device-array",
        fix=TO_HOST)
