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
