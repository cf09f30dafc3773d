"""The one teardown registry: what ``%unload_ext cupy_magic`` undoes, newest first.

Every part that starts a thread, installs a hook or changes CuPy's state registers its undo
step here when it does so; :func:`teardown` (called at unload) runs them all and is safe to
call twice. Nothing else in the package keeps a list of things to undo.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["forget", "on_unload", "registered", "teardown"]

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_steps: list[Callable[[], None]] = []


def on_unload(func: Callable[[], None]) -> None:
    """Register ``func`` to run at unload (once, even if registered again before then)."""
    with _lock:
        if func not in _steps:
            _steps.append(func)


def registered() -> tuple[Callable[[], None], ...]:
    """The undo steps registered now, oldest first."""
    with _lock:
        return tuple(_steps)


def forget(func: Callable[[], None]) -> None:
    """Drop ``func`` from the registry without running it (it undid itself already)."""
    with _lock:
        if func in _steps:
            _steps.remove(func)


def teardown() -> None:
    """Run every registered step, newest first; a failing step is logged, the rest still run."""
    while True:
        with _lock:
            if not _steps:
                return
            step = _steps.pop()
        try:
            step()
        except Exception:  # one broken step must not leave threads or hooks of the others
            _log.exception("cupy_magic: an unload step failed: %r", step)
