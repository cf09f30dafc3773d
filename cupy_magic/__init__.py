"""cupy_magic: move NumPy notebook cells onto the GPU with CuPy, and see what it costs.

``%load_ext cupy_magic`` registers ``%%gpu``, ``%vram_budget``, ``%vram_panel``,
``%vram_who``, ``%gpu_syncs``, ``%gpu_fallback``, ``%gpu_backend`` and ``%gpu_cluster``.
Every magic is a parser in front of a function that can be called from plain Python,
exported here (they live in :mod:`cupy_magic.session`).
Importing the package is cheap and needs neither IPython nor CuPy.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

__all__ = [
    "BatchOptions",
    "CellError",
    "__version__",
    "budget_status",
    "cluster_status",
    "device_info",
    "estimate",
    "free_cached",
    "last_report",
    "load_ipython_extension",
    "memory_pool",
    "panel_summary",
    "run_cell",
    "set_budget",
    "set_fallback",
    "set_sync_mode",
    "show_panel",
    "unload_ipython_extension",
    "use_backend",
    "use_cluster",
    "vram_free",
    "vram_holders",
]

_LAZY = {"BatchOptions": "run.batching",
         "CellError": "run.errors"}  # what a cell the extension refuses raises
_LAZY.update({name: "session" for name in __all__ if name not in _LAZY
              and name != "__version__" and "ipython_extension" not in name})


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cupy_magic' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def load_ipython_extension(ip: Any) -> None:
    """Register the magics and print one line about the GPU (or why there is none).

    The settings come from IPython's configuration (``c.CupyMagic.budget = "8GB"``, ...;
    see :mod:`cupy_magic.config`); the environment variable ``CUPY_MAGIC_BACKEND=host`` (or
    ``cupy``) forces a backend.
    """
    from . import config, lifecycle, session
    from .magics import GpuMagics
    from .magics.emptycell import give_empty_cells_a_body
    from .magics.postmortem import watch_debugger
    from .view import panel

    # a setting that is refused stays at its default, in one line, and the magics load
    settings, problems = config.use_config_leniently(ip.config)
    problems += session.apply_settings()
    ip.register_magics(GpuMagics)
    panel.watch_cells(ip)  # the panels' "held by" section, refreshed after each cell
    watch_debugger(ip)  # %debug after a %%gpu cell that freed its frames says so
    give_empty_cells_a_body(ip)  # a cell of %%gpu alone runs as an empty cell, Run All goes on
    if settings not in ip.configurables:
        ip.configurables.append(settings)
    lifecycle.on_unload(session.reset)
    print("\n".join([*problems, session.describe_device()]))


def unload_ipython_extension(ip: Any) -> None:
    """Undo every registration, hook and thread of :func:`load_ipython_extension`.

    Safe to call twice.
    """
    from . import config, lifecycle

    lifecycle.teardown()
    manager = ip.magics_manager
    instance = manager.registry.pop("GpuMagics", None)
    for kind, names in (instance.magics.items() if instance is not None else ()):
        table = manager.magics[kind]
        for name in names:
            bound = table.get(name)
            if bound is not None and getattr(bound, "__self__", None) is instance:
                del table[name]
    live = config.settings()
    if live in ip.configurables:
        ip.configurables.remove(live)
    # The settings came from this shell's configuration (and its %config changes): after
    # unload, Python callers get the defaults again.
    config.use_config()
