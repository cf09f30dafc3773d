"""What NumPy's names mean inside a cell and outside it.

Inside a ``%%gpu`` cell, ``import numpy as np``, ``from numpy import linalg as LA`` and
``from numpy.fft import fft`` give the cell's array module (:class:`~.proxy.ArrayModule`),
as the ``np`` the cell finds in the namespace does: a cell pasted from NumPy code, imports
and all, runs on the device instead of silently on the CPU. What the cell leaves in the user
namespace is the plain value again (:func:`host_value`): NumPy's module or function for a
proxy or a wrapper, the array module's Generator for a checked one. On the CPU fallback an
``import cupy`` or ``import cupyx...`` in a cell is refused in one line
(:func:`~.cupyonly.refused_import`).
"""

from __future__ import annotations

import builtins
import types
from typing import Any

from ..backend.cupy import probe_cupy
from .cupyonly import refused_import
from .generator import plain
from .proxy import ArrayModule
from .spec import MISSING, numpy_module
from .views import install

__all__ = ["cell_builtins", "host_value"]

_FRONTED = "numpy"
_GPU_ONLY = ("cupy", "cupyx")  # imported on the CPU fallback, they fail at the first array


def _no_gpu() -> str:
    """Why a cell runs on NumPy, for the refusal of its ``import cupy``."""
    cupy, why = probe_cupy()
    if cupy is not None:
        return ("the host backend was chosen (CUPY_MAGIC_BACKEND=host or %gpu_backend host), "
                "though CuPy sees a GPU")
    if why.startswith("CuPy is not installed"):
        return why.split(";")[0]
    return f"CuPy is installed but no GPU is visible ({why})"


def cell_builtins(module: ArrayModule) -> types.ModuleType:
    """The builtins a cell runs with: Python's, with an ``__import__`` that gives ``module``
    (or its submodule) for ``numpy`` and ``numpy.*`` and imports anything else as usual,
    and the builtins of :mod:`.views`, which the cell's ``v.ravel(...)`` and kept ``x[i]``
    go through.

    A module, as ``__builtins__`` is in a plain cell (IPython's user namespace holds the
    ``builtins`` module): ``__builtins__.sum`` reaches Python's ``sum`` where the cell
    shadowed the name."""
    real = builtins.__import__
    calls = module.__dict__["__compat__"][0]

    def cell_import(name: str, globals: Any = None, locals: Any = None,
                    fromlist: Any = (), level: int = 0) -> Any:
        if not level and calls.host and name.split(".")[0] in _GPU_ONLY:
            raise refused_import(calls, name, _no_gpu())
        if level or not (name == _FRONTED or name.startswith(_FRONTED + ".")):
            return real(name, globals, locals, fromlist, level)
        real(name, globals, locals, fromlist, level)  # a name NumPy lacks fails as usual
        if not fromlist:  # import numpy[.linalg] [as x]: the top module (Python walks on)
            return module
        found: Any = module
        for part in name.split(".")[1:]:  # from numpy.linalg import norm: the submodule
            found = getattr(found, part)
        for wanted in fromlist:  # a name CuPy lacks is refused here, in one line (Python
            if wanted != "*":    # would turn the AttributeError into a bare ImportError)
                getattr(found, wanted)
        return found

    # what the cell's code calls in front of v.ravel() and a kept x[i] (run/rewrite.py),
    # put in Python's builtins, for the functions the cell defines too, and so in the cell's
    install()
    scope = types.ModuleType(builtins.__name__, builtins.__doc__)
    vars(scope).update(builtins.__dict__, __import__=cell_import)
    return scope


def host_value(value: Any) -> Any:
    """``value`` as the user namespace keeps it after the cell: NumPy's own module for a
    proxy (``LA`` bound by ``from numpy import linalg as LA``), NumPy's function for a
    wrapper (``from numpy import sqrt``), the plain Generator for a checked one; anything
    else unchanged."""
    if issubclass(type(value), ArrayModule):  # not isinstance: it asks the object's __class__
        _calls, target, path, _fallen = value.__dict__["__compat__"]
        found = numpy_module(path.rstrip("."))
        return found if found is not MISSING else target
    try:  # (an object's own __getattr__ may raise anything: a KeyError)
        marked = callable(value) and hasattr(value, "__cupy_magic_numpy__")
    except Exception:
        marked = False
    if marked:
        host = value.__cupy_magic_numpy__  # MISSING: a CuPy name NumPy lacks (cp.asnumpy)
        return host if host is not MISSING else getattr(value, "__wrapped__", value)
    return plain(value)
