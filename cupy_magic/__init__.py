"""cupy_magic: move NumPy notebook cells onto the GPU with CuPy, and see what it costs.

``%load_ext cupy_magic`` registers ``%%gpu``, ``%vram_budget`` and ``%gpu_backend``. Every
magic is a parser in front of a function that can be called from plain Python, exported
here. Importing the package is cheap and needs neither IPython nor CuPy.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "budget_status",
    "device_info",
    "estimate",
    "free_cached",
    "last_report",
    "load_ipython_extension",
    "memory_pool",
    "panel_summary",
    "run_cell",
    "set_budget",
    "set_sync_mode",
    "show_panel",
    "unload_ipython_extension",
    "use_backend",
]

if TYPE_CHECKING:
    from .report import RunReport

_LAZY = {
    "budget_status": "session",
    "device_info": "session",
    "set_budget": "session",
    "set_sync_mode": "session",
    "free_cached": "session",
    "memory_pool": "session",
    "use_backend": "session",
    "estimate": "budget",
    "run_cell": "runner",
    "show_panel": "panel",
    "panel_summary": "panel",
}

# Callables run at unload, newest first: stop threads, remove hooks, close widgets.
_cleanups: list[Callable[[], None]] = []


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cupy_magic' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{module}", __name__), name)


def on_unload(func: Callable[[], None]) -> None:
    """Register ``func`` to run when the extension is unloaded."""
    _cleanups.append(func)


def load_ipython_extension(ip: Any) -> None:
    """Register the magics and print one line about the GPU (or why there is none).

    The backend is CuPy when a GPU works, else NumPy on the host; set the environment
    variable ``CUPY_MAGIC_BACKEND=host`` (or ``cupy``) to force one.
    """
    from . import session
    from .magics import GpuMagics

    prefer = os.environ.get("CUPY_MAGIC_BACKEND", "").strip().lower() or None
    if prefer not in (None, "cupy", "host"):
        raise ValueError(f"CUPY_MAGIC_BACKEND={prefer!r} is not a backend; use 'cupy' or 'host'")
    session.use_backend(prefer)
    ip.register_magics(GpuMagics)
    print(session.describe_device())


def unload_ipython_extension(ip: Any) -> None:
    """Undo every registration, hook and thread of :func:`load_ipython_extension`.

    Safe to call twice.
    """
    from . import session

    while _cleanups:
        _cleanups.pop()()
    nvml = sys.modules.get("cupy_magic.nvml")
    if nvml is not None:
        nvml.shutdown()
    manager = ip.magics_manager
    instance = manager.registry.pop("GpuMagics", None)
    for kind, names in (instance.magics.items() if instance is not None else ()):
        table = manager.magics[kind]
        for name in names:
            bound = table.get(name)
            if bound is not None and getattr(bound, "__self__", None) is instance:
                del table[name]
    session.reset()


def last_report() -> RunReport | None:
    """The report of the last ``%%gpu`` cell that succeeded, or ``None``."""
    from .session import last_report as _last

    return _last()
