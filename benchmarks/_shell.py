"""A real IPython shell for the benchmarks that time a cell as typed under ``%%gpu``."""

from __future__ import annotations

from typing import Any


def ipython_shell() -> Any:
    """IPython's shell with cupy_magic loaded (no history file written), or None where
    IPython is not installed."""
    try:
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets.config import Config
    except ImportError:
        return None
    if not InteractiveShell.initialized():
        config = Config()
        config.HistoryManager.enabled = False
        InteractiveShell.instance(config=config).run_line_magic("load_ext", "cupy_magic")
    return InteractiveShell.instance()


def started_backend() -> tuple[Any, str]:
    """cupy_magic's backend started as ``%load_ext`` starts it (its first launch done), and
    its label for the results' file names: ``"gpu"`` or ``"host"`` (the CPU fallback)."""
    import cupy_magic
    from cupy_magic import backend

    cupy_magic.device_info()
    be = backend.current()
    be.preheated.wait(60)
    return be, "gpu" if be.is_gpu else "host"
