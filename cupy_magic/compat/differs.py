"""Calls where CuPy silently gives another result than NumPy: made right, or refused.

Found with ``benchmarks/numpy_examples.py`` on the H200 (NumPy's docstring examples, whose
results are compared with NumPy's):

- **Window functions** (``np.bartlett``, ``blackman``, ``hamming``, ``hanning``, ``kaiser``):
  CuPy's kernels take their parameter as float32, so a float64 window has float32 precision
  (``hanning(12)[1]``: 0.07937321066856384 against NumPy's 0.07937323358440945). A window is
  made from scalars, so the cell computes it with NumPy on the host and moves its ``M``
  values to the device; the report's fallback row says so.
- **``np.float_power`` in complex**: for complex64 inputs, or a ``dtype=complex128``, CuPy
  runs its complex64 loop (``'FF->D'``), so the result has complex64 precision (1.19e-08
  where NumPy gives -1.8e-16); the inputs are widened to complex128 first.
- **``np.arange`` with an integer dtype and a fractional start, stop or step**: NumPy steps
  by ``int(start + step) - int(start)`` (``arange(-3, 3, 0.5, dtype=int)`` is -3, -2, -1, ...),
  CuPy by the fraction; refused in one line on both backends, NumPy's under ``--fallback``.
- **``np.format_float_scientific`` and ``np.format_float_positional``**: CuPy's make every
  argument a 0-d array first, so a NumPy float32 scalar prints with float64's digits
  (``'3.1415927410125732e+00'`` for NumPy's ``'3.1415927e+00'``); the cell calls NumPy's with
  its device values as NumPy scalars of their dtype (``x[0]``, ``x.sum()`` are scalars there).
- **``np.load`` of an ``.npz``**: CuPy's ``NpzFile`` has only ``[key]`` and ``close``; NumPy's
  is a mapping with ``.files``, ``keys()``, iteration, ``len`` and ``in``
  (``npzfile.files`` stopped NumPy's own example). The cell gets a :class:`DeviceNpz`: NumPy's
  mapping, its arrays read onto the device.
- **``np.percentile`` and ``np.quantile`` of data with a NaN**: NumPy gives NaN for a slice
  holding one; CuPy sorts the NaN last and interpolates over the rest (3.5 for NumPy's nan in
  NumPy's own example). The slices holding a NaN are set to NaN on the device.
- **``np.std`` and ``np.var`` with a wider ``dtype=``** (float32 data, ``dtype=float64``):
  CuPy's result has float32 precision (0.45000000066 for NumPy's 0.44999999925 in NumPy's
  example); the data is cast to ``dtype`` first, as NumPy computes in it.
- **``np.ravel_multi_index`` without ``mode=``**: NumPy's default is 'raise' (an index out of
  bounds is an error), CuPy's 'wrap' (it wraps silently); the cell passes NumPy's default.
- **``np.require`` with 'A', 'W' or 'E'**: a device array is always aligned, writeable and a
  base-class array, and CuPy's refuses those letters; they are taken as met.
- **``np.isin`` with a Python set**: NumPy makes the set one object, equal to no element, so
  the result is all False (all True with ``invert=True``), as NumPy's documentation warns;
  CuPy refuses the set. The cell gets NumPy's result, made on the device.
- **``np.genfromtxt`` and ``np.loadtxt`` of a stream whose data CuPy cannot hold** (text
  columns): CuPy's call NumPy's parser and then refuse the result, so the stream was read to its
  end and ``--fallback`` read nothing. The cell calls NumPy's parser once, moves a result CuPy
  can hold to the device, and refuses (or under ``--fallback`` keeps on the host) one it
  cannot.
- **``np.mintypecode`` of a device array**: NumPy's reads each element's type character,
  which a device array cannot give it; the cell passes the array's own (and a list of type
  characters stays a list, never an array of strings).
- **``np.binary_repr`` and ``np.base_repr`` of a device number** (``x[0]``, a 0-d array there):
  NumPy's reads the number as a Python int, a host sync as NumPy's reading it is.
- **``np.random.randint`` with array bounds**: CuPy takes a device array ``low`` or ``high``
  without NumPy's checks (``low >= high`` drew values outside the range, with no error); the
  cell draws them with :func:`cupy_magic.compat.draws.random_randint`, NumPy's errors and an
  exactly uniform draw per element.
- **``np.linalg`` of a singular or non-converging matrix** (``inv``, ``solve``, ``cholesky``,
  ``svd``, ``eigh``, ``lstsq`` and those built on them): CuPy does not read cuSOLVER's status
  by default (``cupyx.errstate(linalg='ignore')``), so ``np.linalg.inv(np.zeros((2, 2)))``
  gave an array of garbage where NumPy raises ``LinAlgError: Singular matrix``. The cell's
  calls run under ``linalg='raise'`` (a host sync per call, as NumPy's LAPACK call returns
  its status) and raise NumPy's error with NumPy's message.
- **``ravel`` of an array not contiguous in the order asked** (``x[:, ::2].ravel()``,
  ``np.ravel(x.T)``): NumPy makes a copy, CuPy a view wherever a reshape can (a uniformly
  strided array), so a change to the result changed ``x`` on the device. The cell's
  ``np.ravel`` and its ``.ravel()`` calls (:mod:`.views`) copy then, as NumPy does.
- **``np.trim_zeros`` of a Python list, tuple or range**: NumPy slices the sequence itself, so
  ``np.trim_zeros([0, 1, 2, 0])`` is the list ``[1, 2]``; made a device array first, it became
  an array. The cell calls NumPy's on the sequence (Python values in, Python values out:
  nothing crosses to or from the device).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterator, Mapping
from typing import Any

import numpy

from .calls import Calls
from .draws import random_randint
from .dress import dressed_like
from .spec import UNSUPPORTED_KINDS, CallSpec
from .supplement import NotSupplied
from .views import ravel_as_numpy

__all__ = ["DeviceNpz", "guarded"]


_QUANTILES = frozenset({"percentile", "quantile"})
_MET = frozenset({"A", "ALIGNED", "W", "WRITEABLE", "E", "ENSUREARRAY"})  # by any device array
_FORMATS = frozenset({"format_float_scientific", "format_float_positional"})
WINDOWS = frozenset({"bartlett", "blackman", "hamming", "hanning", "kaiser"})
_WINDOW_WHY = ("CuPy computes np.{name} with a float32 parameter (float32 precision in a "
               "float64 array); NumPy's float64 window, computed on the host from scalars")
_ARANGE = ("an integer dtype with a fractional start, stop or step (NumPy steps by "
           "int(start + step) - int(start))")
#: NumPy's error where CuPy, by default, leaves NaN or garbage (``cupyx.errstate(linalg=
#: 'ignore')``): the functions whose cuSOLVER/cuBLAS status CuPy reads under 'raise'.
LINALG_ERRORS = {
    **dict.fromkeys(("linalg.inv", "linalg.solve", "linalg.tensorinv", "linalg.tensorsolve",
                     "linalg.matrix_power"), "Singular matrix"),
    "linalg.cholesky": "Matrix is not positive definite",
    **dict.fromkeys(("linalg.eigh", "linalg.eigvalsh"), "Eigenvalues did not converge"),
    **dict.fromkeys(("linalg.svd", "linalg.pinv", "linalg.matrix_rank"),
                    "SVD did not converge"),
    "linalg.lstsq": "SVD did not converge in Linear Least Squares",
}


def guarded(calls: Calls, sub: str, wrapped: Any, host: Any, spec: CallSpec) -> Any:
    """``wrapped`` (the cell's ``np.<sub>``), or a function in front of it when CuPy is
    known to differ from NumPy for ``sub``; on the CPU fallback only the refusals apply."""
    on_device = calls.xp is not numpy
    if sub in WINDOWS and on_device:
        why = _WINDOW_WHY.format(name=sub)

        def window(*args: Any, **kwargs: Any) -> Any:
            return calls.run_host(spec, host, args, kwargs, why)
        return dressed_like(window, wrapped)
    if sub == "float_power" and on_device:
        def float_power(*args: Any, **kwargs: Any) -> Any:
            if len(args) >= 2 and _complex(args[:2], kwargs.get("dtype")):
                wide = tuple(calls.xp.asarray(a, dtype=numpy.complex128) for a in args[:2])
                kwargs = {k: v for k, v in kwargs.items() if k != "dtype"}
                return wrapped(*wide, *args[2:], **kwargs)
            return wrapped(*args, **kwargs)
        return dressed_like(float_power, wrapped)
    if sub == "arange" and calls.checked:
        def arange(*args: Any, **kwargs: Any) -> Any:
            dtype = kwargs.get("dtype", args[3] if len(args) > 3 else None)
            if dtype is not None and numpy.dtype(dtype).kind in "iub":
                values = [*args[:3], *(kwargs.get(k) for k in ("start", "stop", "step"))]
                if any(_fraction(v) for v in values):
                    return calls.refuse(spec, host, args, kwargs, "differs", _ARANGE)
            return wrapped(*args, **kwargs)
        return dressed_like(arange, wrapped)
    if sub in _FORMATS and on_device:
        def format_float(*args: Any, **kwargs: Any) -> Any:
            def down(a: Any) -> Any:  # a device value stands for NumPy's scalar (x[0])
                return calls.to_host(a)[()] if isinstance(a, calls.device_type) else a
            return host(*map(down, args), **{k: down(v) for k, v in kwargs.items()})
        return dressed_like(format_float, wrapped)
    if sub == "ravel":  # on the CPU fallback too: a strided input's copy (views.py)
        def ravel(a: Any, order: Any = "C") -> Any:
            return ravel_as_numpy(a, lambda o: wrapped(a, o), order)
        return dressed_like(ravel, wrapped)
    if sub in _QUANTILES and on_device:
        def quantile(*args: Any, **kwargs: Any) -> Any:
            return _nan_slices(calls.xp, wrapped, args, kwargs)
        return dressed_like(quantile, wrapped)
    if sub in ("std", "var") and on_device:
        def spread(*args: Any, **kwargs: Any) -> Any:
            dtype = kwargs.get("dtype", args[2] if len(args) > 2 else None)
            a = args[0] if args else None
            if dtype is not None and isinstance(a, calls.device_type):
                dtype = numpy.dtype(dtype)
                if dtype != a.dtype and numpy.can_cast(a.dtype, dtype, "safe"):
                    args = (a.astype(dtype), *args[1:])
            return wrapped(*args, **kwargs)
        return dressed_like(spread, wrapped)
    if sub == "ravel_multi_index" and on_device:
        def ravel_multi_index(*args: Any, **kwargs: Any) -> Any:
            if len(args) < 3 and "mode" not in kwargs:
                kwargs = {**kwargs, "mode": "raise"}
            return wrapped(*args, **kwargs)
        return dressed_like(ravel_multi_index, wrapped)
    if sub == "require" and on_device:
        def require(a: Any, dtype: Any = None, requirements: Any = None, **kwargs: Any) -> Any:
            if requirements is not None:  # NumPy reads a string letter by letter ('CW')
                letters = list(requirements) if isinstance(requirements, str) else requirements
                requirements = [r for r in letters if str(r).upper() not in _MET]
            return wrapped(a, dtype, requirements or None, **kwargs)
        return dressed_like(require, wrapped)
    if sub in ("binary_repr", "base_repr") and on_device:
        def text_of(*args: Any, **kwargs: Any) -> Any:
            if args and isinstance(args[0], calls.device_type) and args[0].ndim == 0:
                args = (operator.index(args[0].item()), *args[1:])  # host sync, as NumPy's
            return wrapped(*args, **kwargs)
        return dressed_like(text_of, wrapped)
    if sub in ("genfromtxt", "loadtxt") and calls.checked:  # both backends refuse alike
        def read_text(*args: Any, **kwargs: Any) -> Any:
            result = host(*args, **kwargs)  # NumPy's parser, which CuPy's calls: read once
            if not isinstance(result, numpy.ndarray):  # a structured dtype unpacked by field
                why = ("dtype", "structured (unpacked by field)")
            elif isinstance(result, numpy.ma.MaskedArray):  # a device array has no mask
                why = ("not-implemented", "usemask=True (a masked array)")
            elif result.dtype.names or result.dtype.kind in UNSUPPORTED_KINDS:
                why = ("dtype", str(result.dtype))
            else:
                return calls.to_device(result)
            return calls.refuse(spec, lambda *_a, **_k: result, args, kwargs, *why)
        return dressed_like(read_text, wrapped)
    if sub == "mintypecode" and calls.checked:
        def mintypecode(typechars: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(typechars, calls.device_type):  # each element's is the array's
                if typechars.ndim == 0:
                    raise TypeError("iteration over a 0-d array")  # NumPy's, as it iterates
                typechars = [typechars.dtype.char] * len(typechars)
            return host(typechars, *args, **kwargs)  # NumPy's, on type characters only
        return dressed_like(mintypecode, wrapped)
    if sub == "isin" and on_device:
        def isin(element: Any, test_elements: Any, *args: Any, **kwargs: Any) -> Any:
            # kind= is an option CuPy lacks: refused below in one line, as on the CPU fallback
            if isinstance(test_elements, (set, frozenset)) and "kind" not in kwargs:
                invert = kwargs.get("invert", args[1] if len(args) > 1 else False)
                shape = calls.xp.asarray(element).shape
                return calls.xp.full(shape, bool(invert))
            return wrapped(element, test_elements, *args, **kwargs)
        return dressed_like(isin, wrapped)
    if sub == "trim_zeros" and calls.checked:
        def trim_zeros(filt: Any, *args: Any, **kwargs: Any) -> Any:
            if type(filt) is range or (type(filt) in (list, tuple) and not any(
                    isinstance(v, calls.device_type) for v in filt)):
                return host(filt, *args, **kwargs)  # NumPy's slice of the list: a list
            return wrapped(filt, *args, **kwargs)
        return dressed_like(trim_zeros, wrapped)
    if sub == "random.randint" and on_device:
        def randint(*args: Any, **kwargs: Any) -> Any:
            bounds = (*args[:2], kwargs.get("low"), kwargs.get("high"))
            if any(isinstance(b, (list, tuple)) or getattr(b, "ndim", 0) > 0 for b in bounds):
                try:  # CuPy's own takes array bounds unchecked: low >= high drew garbage
                    return random_randint(calls.xp, *args, **kwargs)
                except NotSupplied as exc:
                    return calls.refuse(spec, host, args, kwargs, "not-implemented",
                                        str(exc).split(": ", 1)[-1])
            return wrapped(*args, **kwargs)
        return dressed_like(randint, wrapped)
    if sub in LINALG_ERRORS and on_device:
        target = _as_lapack(sub, calls.xp, wrapped)

        def checked_linalg(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True  # the cell's line, then NumPy's error, as a plain cell
            return _raising(target, LINALG_ERRORS[sub], args, kwargs)
        return dressed_like(checked_linalg, wrapped)
    if sub == "load" and on_device:
        def load(*args: Any, **kwargs: Any) -> Any:
            result = wrapped(*args, **kwargs)
            return DeviceNpz(result) if hasattr(result, "npz_file") else result
        return dressed_like(load, wrapped)
    return wrapped


class DeviceNpz(Mapping):
    """``np.load``'s ``.npz`` in a cell: NumPy's ``NpzFile`` (``.files``, ``keys()``,
    iteration, ``len``, ``in``, ``with``) whose arrays are read onto the device by CuPy's."""

    def __init__(self, npz: Any) -> None:
        self._npz = npz  # CuPy's NpzFile; NumPy's is its .npz_file

    def __getitem__(self, key: str) -> Any:
        return self._npz[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._npz.npz_file)

    def __len__(self) -> int:
        return len(self._npz.npz_file)

    def __contains__(self, key: object) -> bool:
        return key in self._npz.npz_file

    def __getattr__(self, name: str) -> Any:  # files, zip, fid, ...: NumPy's
        return getattr(self.__dict__["_npz"].npz_file, name)

    def __enter__(self) -> DeviceNpz:
        self._npz.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._npz.__exit__(*exc)

    def close(self) -> None:
        self._npz.close()

    def __repr__(self) -> str:
        return f"{self._npz.npz_file!r} (its arrays read onto the device)"


def _as_lapack(sub: str, xp: Any, wrapped: Any) -> Any:
    """``np.linalg.inv``, ``matrix_power`` (of a negative power) and ``tensorinv`` factoring
    the matrix NumPy's LAPACK call factors. CuPy's ``inv`` factors the transpose of a
    C-ordered matrix (and of each matrix of a stack), where a pivot that is exactly zero in
    LAPACK's factors of a singular matrix can come out tiny: no error, and a result of
    garbage (on an H100, ``inv`` of a rank-2 3x3 matrix, session 22), while ``solve``, which
    factors the matrix itself, raised. Here the matrix CuPy factors is the matrix itself."""
    inv = xp.linalg.inv

    def lapack_inv(a: Any, *rest: Any, **kw: Any) -> Any:
        if not isinstance(a, xp.ndarray):  # np.linalg.inv's own call alone passes one: a
            return wrapped(a, *rest, **kw)  # host np.matrix under --fallback is NumPy's
        if a.ndim < 2 or rest or kw:
            return inv(a, *rest, **kw)
        if a.ndim == 2:  # CuPy factors an F-ordered matrix as it is
            return xp.ascontiguousarray(inv(xp.asfortranarray(a)))
        flipped = xp.ascontiguousarray(a.swapaxes(-1, -2))  # each transposed, then back
        return xp.ascontiguousarray(inv(flipped).swapaxes(-1, -2))

    def matrix_power(a: Any, n: Any) -> Any:
        if isinstance(a, xp.ndarray) and isinstance(n, (int, numpy.integer)) and n < 0:
            return wrapped(lapack_inv(a), -int(n))  # NumPy: inv(a), then its power
        return wrapped(a, n)

    def tensorinv(a: Any, ind: int = 2) -> Any:
        if not isinstance(a, xp.ndarray) or not isinstance(ind, int) or ind <= 0:
            return wrapped(a, ind)
        rows = math.prod(a.shape[ind:])  # NumPy's own steps
        return lapack_inv(a.reshape(rows, -1)).reshape(*a.shape[ind:], *a.shape[:ind])

    return {"linalg.inv": lapack_inv, "linalg.matrix_power": matrix_power,
            "linalg.tensorinv": tensorinv}.get(sub, wrapped)


def _raising(wrapped: Any, message: str, args: tuple, kwargs: dict) -> Any:
    """``wrapped`` run with CuPy reading the solver's status (a host sync, as NumPy's LAPACK
    call returns it): a singular or non-converging input raises NumPy's ``LinAlgError`` with
    NumPy's message, where CuPy's default gives NaN or garbage silently."""
    __tracebackhide__ = True
    import cupyx  # on a GPU only

    with cupyx.errstate(linalg="raise"):
        try:
            return wrapped(*args, **kwargs)
        except numpy.linalg.LinAlgError as exc:
            if "cuSOLVER" not in str(exc) and "cuBLAS" not in str(exc):
                raise  # a shape error CuPy raises as NumPy does
            raise numpy.linalg.LinAlgError(message) from None


def _nan_slices(xp: Any, wrapped: Any, args: tuple, kwargs: dict) -> Any:
    """``np.percentile``/``np.quantile`` with NaN where the slice reduced holds a NaN."""
    names = ("a", "q", "axis", "out", "overwrite_input", "method", "keepdims")
    given = {**dict(zip(names, args, strict=False)), **kwargs}
    a, axis, keep = given.get("a"), given.get("axis"), bool(given.get("keepdims"))
    nan = None
    if type(a) in (list, tuple):  # host data: its NaNs found on the host
        try:
            host = numpy.asarray(a)
        except (TypeError, ValueError):  # it holds device scalars: the device's array of them
            a = xp.stack([xp.asarray(v) for v in a])  # ragged: CuPy's error, as NumPy's
            args, kwargs = ((a, *args[1:]), kwargs) if args else (args, {**kwargs, "a": a})
        else:
            if host.dtype.kind in "fc":
                nan = xp.asarray(numpy.isnan(host).any(axis=axis, keepdims=keep))
    if isinstance(a, xp.ndarray) and a.dtype.kind in "fc":
        nan = xp.isnan(a).any(axis=axis, keepdims=keep)  # before CuPy may sort a in place
    if nan is None:
        return wrapped(*args, **kwargs)
    result = wrapped(*args, **kwargs)
    if not isinstance(result, xp.ndarray) or result.dtype.kind not in "fc":
        return result
    out = given.get("out")
    fixed = xp.where(nan, xp.asarray(numpy.nan, result.dtype), result)
    if out is not None:
        out[...] = fixed
        return out
    return fixed


def _complex(inputs: tuple, dtype: Any) -> bool:
    """CuPy would take its complex64 loop where NumPy computes in complex128."""
    if dtype is not None:
        return numpy.dtype(dtype) == numpy.complex128
    return any(getattr(a, "dtype", None) == numpy.complex64 for a in inputs)


def _fraction(value: Any) -> bool:
    return isinstance(value, (float, numpy.floating)) and not float(value).is_integer()

