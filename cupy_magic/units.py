"""Sizes, shapes and bytes: parsing, formatting, and the guide's estimate (section 2B).

Pure functions, no device access: every part of the package reads and writes sizes here.
"""

from __future__ import annotations

import functools
import math
import numbers
import re
import reprlib
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Estimate",
    "GiB",
    "SizeError",
    "dtype_name",
    "dtype_text",
    "estimate",
    "estimate_array",
    "format_bytes",
    "parse_shape",
    "parse_size",
    "short_repr",
    "whole",
]

GiB = 1024**3
MAX_ELEMENTS = 2**63 - 1  # NumPy's and CuPy's sizes are signed 64-bit

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
    "t": 10**12,
}

_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def short_repr(value: object) -> str:
    """``repr(value)`` in one short line (an array's repr spans lines), for error messages."""
    return " ".join(reprlib.repr(value).split())


def whole(value: object) -> int | None:
    """``value`` as an int when it is a whole number (``int``, NumPy's integers; not a
    bool), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return None
    return int(value)


class SizeError(ValueError):
    """A size, budget or shape that cannot be understood; the message says the fix."""


def parse_size(text: str) -> int:
    """Parse a size with a unit into bytes.

    ``GB``/``MB`` are powers of 1000 and ``GiB``/``MiB`` powers of 1024, as on the box of
    a disk and in ``nvidia-smi`` respectively.

    Examples
    --------
    >>> parse_size("8GB"), parse_size("1.5GiB"), parse_size("512MB")
    (8000000000, 1610612736, 512000000)
    """
    m = _SIZE_RE.match(text or "")
    if not m:
        raise SizeError(f"cannot read the size {text!r}; write a number and a unit, e.g. 8GB, "
                        "1.5GiB or 512MB")
    number, unit = float(m.group(1)), m.group(2).lower()
    if not math.isfinite(number) or number > 1e30:
        raise SizeError(f"the size {text!r} is too large to mean anything; write e.g. 8GB")
    if unit not in _UNITS:
        raise SizeError(f"unknown unit {m.group(2)!r} in {text!r}; use B, KB, MB, GB, TB or "
                        "KiB, MiB, GiB, TiB")
    if unit in ("", "b") and number != int(number):
        raise SizeError(f"{text!r} is a fraction of a byte; give whole bytes or a unit like MB")
    nbytes = round(number * _UNITS[unit])
    if nbytes <= 0:
        raise SizeError(f"the size {text!r} must be more than 0 bytes; e.g. 512MB")
    return nbytes


def format_bytes(nbytes: float) -> str:
    """Format bytes with binary units and the unit named exactly (``1.49 GiB``)."""
    value = float(nbytes)
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            if unit == "B":
                return f"{sign}{int(value)} B"
            return f"{sign}{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def parse_shape(text: str) -> tuple[int, ...]:
    """Parse ``20000x20000`` (or ``20000,20000`` / ``(20000, 20000)`` / ``1e4x1e4``) into a shape.

    A power such as ``2**10`` is refused rather than read as the shape ``2x10``.
    """
    raw = (text or "").strip().strip("()[]")
    power = re.fullmatch(r"\s*([0-9]+)\s*\*\*\s*([0-9]+)\s*", raw)
    if power and int(power.group(2)) <= 64:
        value = int(power.group(1)) ** int(power.group(2))
        raise SizeError(f"{text!r} is a power, not a shape (lengths joined by x); write it "
                        f"as {value}, e.g. --estimate {value} float32")
    if "**" in raw:
        raise SizeError(f"a shape is lengths joined by x, not a power, got {text!r}; write the "
                        "lengths out, e.g. 1024x1024")
    parts = [p for p in re.split(r"\s*[x×,*]\s*", raw) if p != ""]
    if not parts:
        raise SizeError(f"cannot read the shape {text!r}; write e.g. 20000x20000")
    try:
        dims = tuple(_length(p) for p in parts)
    except (ValueError, OverflowError):
        raise SizeError(f"cannot read the shape {text!r}; write whole numbers joined by x, "
                        "e.g. 20000x20000") from None
    return _checked(dims, text)


def _checked(dims: tuple[int, ...], shown: object) -> tuple[int, ...]:
    """``dims``, refused when a length is negative or the array could not exist."""
    if any(d < 0 for d in dims):
        raise SizeError(f"a shape cannot have negative lengths, got {short_repr(shown)}; "
                        "e.g. 20000x20000")
    if math.prod(dims) > MAX_ELEMENTS:
        raise SizeError(f"the shape {short_repr(shown)} has more elements than any array can hold "
                        "(at most 2**63-1); e.g. 20000x20000")
    return dims


def _length(part: str) -> int:
    """One length of a shape: ``20000`` or a whole number in e-notation (``2e4``)."""
    if "e" not in part.lower():
        return int(part)
    value = float(part)
    if not value.is_integer():
        raise ValueError(part)
    return int(value)


@dataclass(frozen=True)
class Estimate:
    """The guide's estimate: elements x bytes per element / 1024^3."""

    shape: tuple[int, ...]
    dtype: str
    itemsize: int
    nbytes: int
    label: str = ""

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def gib(self) -> float:
        return self.nbytes / GiB

    @property
    def gb(self) -> float:
        return self.nbytes / 1e9

    def formula(self) -> str:
        dims = " x ".join(f"{d:,}" for d in self.shape) or "1 (a scalar)"
        return (f"{dims} = {self.elements:,} elements x {self.itemsize} bytes ({self.dtype}) "
                f"= {self.nbytes:,} bytes / 1024^3 = {self.gib:.2f} GiB ({self.gb:.2f} GB)")

    def __str__(self) -> str:
        head = f"{self.label}: " if self.label else ""
        return head + self.formula()

    def _repr_pretty_(self, p, cycle: bool) -> None:
        p.text(str(self))


def _dtype(name: str) -> np.dtype:
    try:
        dt = np.dtype(name)
    except (TypeError, ValueError):
        raise SizeError(f"unknown dtype {name!r}; use e.g. float32, float64, int8, complex64") \
            from None
    if dt.kind in "OUSV" or dt.itemsize == 0:
        raise SizeError(f"dtype {name!r} has no fixed size on the GPU; CuPy arrays hold numbers "
                        "and booleans (e.g. float32)")
    if dt.kind in "Mm":
        raise SizeError(f"dtype {name!r} cannot go to the GPU: CuPy has no datetime64 or "
                        "timedelta64 (%%gpu refuses such inputs); estimate the int64 it would be "
                        "converted to, e.g. int64")
    if (dt.kind == "f" and dt.itemsize > 8) or (dt.kind == "c" and dt.itemsize > 16):
        raise SizeError(f"dtype {name!r} ({dt.name}) cannot go to the GPU: CuPy has no extended "
                        "precision; use e.g. float64 or complex128")
    return dt


def estimate(shape: tuple[int, ...] | list[int] | int | str,
             dtype: str = "float64") -> Estimate:
    """Estimate the memory of an array from its shape and dtype (guide 2B).

    ``shape`` is a tuple or list of whole numbers (one number: a 1-d array), or text such
    as ``"20000x20000"`` (:func:`parse_shape`); a negative length, or more elements than
    an array can hold, is refused with :class:`SizeError`, as is a ``dtype`` CuPy cannot
    hold.

    Examples
    --------
    >>> round(estimate("20000x20000", "float32").gib, 2)
    1.49
    """
    if isinstance(shape, str):
        dims = parse_shape(shape)
    else:
        try:  # a number is the length of a 1-d array; else any sequence of lengths
            lengths = [shape] if whole(shape) is not None else list(shape)  # type: ignore
        except TypeError:
            lengths = [None]
        dims = tuple(whole(d) for d in lengths)  # type: ignore[misc]
        if None in dims:
            raise SizeError(f"cannot read the shape {short_repr(shape)}: give whole numbers, "
                            "e.g. estimate((20000, 20000), 'float32') or estimate('20000x20000')")
        dims = _checked(dims, shape)  # type: ignore[arg-type]
    dt = _dtype(dtype)
    return Estimate(dims, dt.name, dt.itemsize, math.prod(dims) * dt.itemsize)


def estimate_array(array: object, label: str = "") -> Estimate:
    """Estimate what an existing array (NumPy or CuPy) takes on the device."""
    shape = getattr(array, "shape", None)
    dtype = getattr(array, "dtype", None)
    if shape is None or dtype is None:
        raise SizeError(f"{label or 'the value'} is a {type(array).__name__}, not an array; "
                        "give an array or a shape such as 20000x20000 float32")
    try:
        dt = _dtype(str(dtype))
    except SizeError as exc:
        raise SizeError(f"{label}: {exc}" if label else str(exc)) from None
    return Estimate(tuple(shape), dt.name, dt.itemsize, math.prod(shape) * dt.itemsize, label)


@functools.lru_cache(maxsize=256)
def dtype_name(dtype: np.dtype) -> str:
    """``dtype.name``, kept per dtype: NumPy 2 builds it in Python (about 2 us; a cell read
    a few per run, issue 20's fixed cost per cell)."""
    return dtype.name


def dtype_text(dtype: np.dtype) -> str:
    """``str(dtype)`` (``float32``, ``<U3``, ``[('a', '<f8')]``), kept per dtype (about 3 us);
    a structured dtype is written each time (an aligned one equals its unaligned twin, so a
    kept text could drop its ``'aligned': True``)."""
    return _dtype_text(dtype) if dtype.fields is None else str(dtype)


@functools.lru_cache(maxsize=256)
def _dtype_text(dtype: np.dtype) -> str:
    return str(dtype)
