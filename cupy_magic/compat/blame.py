"""Warnings from a call the cell made point at the cell's line, as in a plain cell.

A call such as ``np.log(x - 5)`` inside a cell goes through a wrapper compiled by
:mod:`.proxy` (``<cupy_magic.compat wrapper N>``) before NumPy's (or CuPy's) function, so a
warning NumPy raises from C, or with ``stacklevel=2``, names the wrapper's line
(``<cupy_magic.compat wrapper 0>:3: RuntimeWarning: invalid value encountered in log``).
While a cell runs, :func:`cell_warnings` shows such a warning at the nearest frame outside
the wrapper, this package, NumPy, CuPy and ``warnings``: the cell's line (or the line of a
function of the user's the call was in), with its source.

Only where a warning is shown changes: whether it is shown (the filters, ``"error"``
included) is decided as before, by the wrapper's location, so one message from two lines of
one cell is shown once.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from types import FrameType
from typing import Any

__all__ = ["WRAPPER_FILE", "cell_warnings"]

WRAPPER_FILE = "<cupy_magic.compat wrapper"  # how proxy names the wrappers it compiles
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_COMPAT = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _library_dirs() -> tuple[str, ...]:
    dirs = [_PACKAGE, os.path.abspath(warnings.__file__)]  # a file is its own prefix
    for name in ("numpy", "cupy", "cupyx"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            dirs.append(os.path.dirname(os.path.abspath(module.__file__)) + os.sep)
    return tuple(dirs)


def _in_front(filename: str) -> bool:
    """Whether ``filename`` is the layer between a cell and NumPy: a wrapper or compat."""
    return filename.startswith(WRAPPER_FILE) or os.path.abspath(filename).startswith(_COMPAT)


def _user_frame(frame: FrameType | None, skip: tuple[str, ...]) -> FrameType | None:
    """The nearest frame from ``frame`` outwards that is the user's code."""
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith(WRAPPER_FILE) or (not name.startswith("<")
                                                   and os.path.abspath(name).startswith(skip))):
            return frame
        frame = frame.f_back
    return None


@contextlib.contextmanager
def cell_warnings() -> Iterator[None]:
    """While inside, a warning located in the wrapper or in :mod:`cupy_magic.compat` is shown
    at the user's line that made the call (see the module's docstring)."""
    before = warnings.showwarning

    def shown(message: Any, category: type[Warning], filename: str, lineno: int,
              file: Any = None, line: str | None = None) -> None:
        if _in_front(filename):
            # the libraries' folders, read when a warning shows (most cells show none)
            frame = _user_frame(sys._getframe(1), _library_dirs())
            if frame is not None:
                filename, lineno, line = frame.f_code.co_filename, frame.f_lineno, None
        before(message, category, filename, lineno, file, line)

    warnings.showwarning = shown
    try:
        yield
    finally:
        if warnings.showwarning is shown:  # unless the cell set its own since
            warnings.showwarning = before
