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
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy

from .calls import Calls
from .dress import dressed_like
from .spec import CallSpec

__all__ = ["DeviceNpz", "guarded"]

_FORMATS = frozenset({"format_float_scientific", "format_float_positional"})
WINDOWS = frozenset({"bartlett", "blackman", "hamming", "hanning", "kaiser"})
_WINDOW_WHY = ("CuPy computes np.{name} with a float32 parameter (float32 precision in a "
               "float64 array); NumPy's float64 window, computed on the host from scalars")
_ARANGE = ("an integer dtype with a fractional start, stop or step (NumPy steps by "
           "int(start + step) - int(start))")


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


def _complex(inputs: tuple, dtype: Any) -> bool:
    """CuPy would take its complex64 loop where NumPy computes in complex128."""
    if dtype is not None:
        return numpy.dtype(dtype) == numpy.complex128
    return any(getattr(a, "dtype", None) == numpy.complex64 for a in inputs)


def _fraction(value: Any) -> bool:
    return isinstance(value, (float, numpy.floating)) and not float(value).is_integer()

