"""CuPy's own names (those NumPy lacks) in a ``%%gpu`` cell on the CPU fallback.

A cell written for CuPy uses names NumPy has not: ``cp.asnumpy(x)``, ``cp.get_array_module``,
``@cp.fuse``, ``cp.ElementwiseKernel``, ``cp.cuda.Device(0)``. On a GPU the cell's module
passes them through; on the CPU fallback its module fronts NumPy, so each is decided here:

- **The same meaning on NumPy** (:data:`ON_NUMPY`): ``cp.asnumpy(x)`` is a NumPy copy of ``x``
  (CuPy's is a new host array too), ``cp.get_array_module(...)`` the cell's module (NumPy's
  functions behind CuPy's limits), ``@cp.fuse`` and ``@cp.fuse(...)`` the function itself
  (a fusion changes how a GPU runs it, not what it computes), ``cp.is_available()`` False.
- **No meaning without a GPU** (:data:`NEEDS_GPU`, and any other name CuPy has and NumPy
  lacks): refused in one line (:class:`~.advice.NeedsGpu`) naming what to write instead.

An ``import cupy`` or ``import cupyx...`` in a cell on the CPU fallback is refused in one line
too (:func:`refused_import`): CuPy imports without a GPU and then fails at its first array
with a CUDA error many frames deep.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy

from .advice import TO_HOST, NeedsGpu
from .calls import Calls
from .spec import MISSING, reference_module

__all__ = ["NEEDS_GPU", "ON_NUMPY", "NoGpuImport", "cupy_only", "host_copy", "refused_import"]


def asnumpy(a: Any, stream: Any = None, order: str = "C", out: Any = None, *,
            blocking: bool = True) -> numpy.ndarray:
    """CuPy's ``asnumpy`` on the CPU fallback: a NumPy copy of ``a`` (a device array's is a
    new host array on a GPU too, so a later write to one never shows in the other)."""
    if out is not None:
        out[...] = a
        return out
    copy = numpy.array(a, order=order, copy=True)
    _HOST_COPIES[id(copy)] = copy
    return copy


# what cp.asnumpy gave in a cell: host arrays after it, as on a GPU (not the device's)
_HOST_COPIES: weakref.WeakValueDictionary[int, numpy.ndarray] = weakref.WeakValueDictionary()


def host_copy(value: Any) -> bool:
    """Whether ``value`` is a host copy ``cp.asnumpy`` made on the CPU fallback, which the
    commit leaves on the host (a GPU's would be a NumPy array)."""
    return _HOST_COPIES.get(id(value)) is value


def fuse(*args: Any, **kwargs: Any) -> Any:
    """CuPy's ``fuse`` on the CPU fallback: ``@cp.fuse`` and ``@cp.fuse(kernel_name=...)``
    give the function itself, run as NumPy's whole-array operations."""
    if len(args) == 1 and not kwargs and callable(args[0]):
        return args[0]

    def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
        return func

    return decorator


def is_available() -> bool:
    """CuPy's ``is_available`` on the CPU fallback: no GPU is usable."""
    return False


# name -> what it is on the CPU fallback, given the cell's top module
ON_NUMPY: dict[str, Callable[[Any], Any]] = {
    "asnumpy": lambda top: asnumpy,
    "get_array_module": lambda top: lambda *args: top,
    "fuse": lambda top: fuse,
    "is_available": lambda top: is_available,
}
_KERNEL = ("whole-array np expressions (a function of them under @cp.fuse is fused on a GPU "
           "and runs as NumPy here), or run the cell where there is a GPU")
_MEMORY = "%vram_who and %vram_budget, which show the memory on both backends"
# name -> what it is, and what to write instead on the CPU fallback
NEEDS_GPU: dict[str, tuple[str, str]] = {
    **dict.fromkeys(("ElementwiseKernel", "ReductionKernel", "RawKernel", "RawModule"),
                    ("a CUDA kernel", _KERNEL)),
    "cuda": ("CuPy's CUDA API (devices, streams, events)",
             "leave it out (the CPU fallback has one device and no streams); %%gpu --devices "
             "and --streams choose them on both backends"),
    "get_default_memory_pool": ("CuPy's device memory pool", _MEMORY),
    "get_default_pinned_memory_pool": ("CuPy's pinned host memory pool", _MEMORY),
}
_WHY = "and this cell runs on NumPy (the CPU fallback)"


def cupy_only(calls: Calls, name: str, top: Any) -> Any:
    """``cp.<name>`` on the CPU fallback for a top-level name NumPy lacks: its NumPy meaning
    (:data:`ON_NUMPY`), a one-line refusal for a name of CuPy's that needs a GPU, or
    :data:`~.spec.MISSING` for a name CuPy lacks too (the caller's ``AttributeError``)."""
    made = ON_NUMPY.get(name)
    if made is not None:
        return made(top)
    what, instead = NEEDS_GPU.get(name, ("", ""))
    if not what:
        cupy = reference_module()
        if cupy is None or getattr(cupy, name, MISSING) is MISSING:
            return MISSING
        what, instead = "CuPy's own (NumPy has none)", "np. names, which run on both backends"
    line = calls.record.line()
    where = f" at line {line} `{calls.record.code(line)}`" if line else ""
    raise NeedsGpu(f"cp.{name}{where}: {what} needs a GPU, {_WHY}; instead: {instead}",
                   function=f"cp.{name}", line=line, kind="needs-gpu", fix=instead)


class NoGpuImport(ImportError):
    """``import cupy`` (or ``cupyx``) in a cell on the CPU fallback; an ``ImportError``, so a
    cell's ``try: import cupy ... except ImportError:`` takes its NumPy branch."""


def refused_import(calls: Calls, name: str, why: str) -> NoGpuImport:
    """The one-line error for ``import <name>`` (``cupy``, ``cupyx.scipy``, ...) in a cell on
    the CPU fallback; ``why`` says why there is no GPU (the backend's probe)."""
    line = calls.record.line()
    code = calls.record.code(line)
    where = f"line {line} `{code}`" if line else f"import {name}"
    if name.split(".")[0] != "cupyx":
        instead = ("leave the import out: the cell's np. (and cp.) names are NumPy's here and "
                   f"CuPy's on a GPU; {TO_HOST} gives a NumPy copy on both")
    elif "cupyx.scipy" in code:
        instead = (f"{code.replace('cupyx.scipy', 'scipy')} (SciPy's, on the host) on the CPU "
                   "fallback, and cupyx.scipy where there is a GPU")
    else:
        instead = "its NumPy or SciPy counterpart on the CPU fallback"
    return NoGpuImport(f"{where}: {why}, {_WHY}; instead: {instead}", name=name.split(".")[0])
