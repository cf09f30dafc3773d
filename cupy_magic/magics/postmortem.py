"""Post-mortem debugging of a failed ``%%gpu`` cell, and its traceback.

A failed cell frees its frames and its namespace copy, so that the device memory they hold
goes back to the pool. Under ``%pdb on`` it keeps them, and IPython's debugger opens in the
cell's frame with its values, as after a plain cell; so it does under ``%xmode Verbose``,
whose traceback shows each frame's values. In a shell's cell the frames are freed once the
shell has shown the traceback, whose frames name their arguments (``in f(a)``) as a plain
cell's do. ``%debug`` on a cell that freed them says so in one line, with the fix, before the
debugger opens on the empty frames.

A failed cell's traceback starts at the cell's own frame, below the line that called the
magic, as a plain cell's starts at its own: without the frames of ``cupy_magic`` between
them, which IPython would count as ``[... skipping hidden 4 frame]`` and which Python's own
``traceback`` module, used by IPython for an exception group (``ExceptionGroup``,
``except*``), would print in full; nor after the cell's last (the array module's wrapper of a
NumPy function that raised).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from .. import lifecycle
from ..run.errors import FREED, free_frames, freeing_later, keeping_frames

__all__ = ["FREED_MESSAGE", "freed_once_shown", "from_the_cell", "kept_for_pdb",
           "watch_debugger"]


FREED_MESSAGE = ("%%gpu freed the failed cell's values (their memory goes back to the pool), "
                 "so the debugger shows none; run %pdb on, then the cell again, to debug it "
                 "with them")


@contextlib.contextmanager
def kept_for_pdb(shell: Any) -> Iterator[None]:
    """Keep a failing cell's frames while ``%pdb`` is on (``shell.call_pdb``) or the
    traceback shows their values (``%xmode Verbose``: ``InteractiveTB.include_vars``)."""
    verbose = getattr(getattr(shell, "InteractiveTB", None), "include_vars", False)
    with keeping_frames(bool(getattr(shell, "call_pdb", False)) or bool(verbose)):
        yield


@contextlib.contextmanager
def freed_once_shown(shell: Any, running: Any) -> Iterator[None]:
    """Free a failing cell's frames after the shell has shown its traceback (its next
    ``post_execute`` event, also after a silent cell), not before; at once outside a shell's
    cell (``running``: IPython's ``ExecutionResult`` of the cell, ``None`` when the magic is
    called from Python), where no traceback is shown for it."""
    if running is None:
        yield
        return
    with freeing_later() as later:
        try:
            yield
        finally:
            if later:
                def free() -> None:
                    shell.events.unregister("post_execute", free)
                    free_frames(later)

                shell.events.register("post_execute", free)


def watch_debugger(shell: Any) -> None:
    """Make ``shell.debugger`` (``%debug``, ``%pdb``) say :data:`FREED_MESSAGE` first when
    the last error is that of a ``%%gpu`` cell that freed its frames; undone at unload."""
    if "debugger" in vars(shell):
        return
    original = shell.debugger

    def debugger(force: bool = False) -> Any:
        if (force or shell.call_pdb) and getattr(getattr(sys, "last_value", None), FREED,
                                                 False):
            print(FREED_MESSAGE, file=sys.stderr)
        return original(force)

    shell.debugger = debugger

    def unwatch() -> None:
        if vars(shell).get("debugger") is debugger:
            del shell.debugger

    lifecycle.on_unload(unwatch)


_PACKAGE = str(Path(__file__).resolve().parents[1])


def _hidden(tb: TracebackType) -> bool:
    frame = tb.tb_frame
    return bool(frame.f_locals.get("__tracebackhide__",
                                   frame.f_globals.get("__tracebackhide__", False)))


def _ours(tb: TracebackType) -> bool:
    """A frame of cupy_magic (a module of the package, or a wrapper it made)."""
    name = tb.tb_frame.f_code.co_filename
    return name.startswith(("<cupy_magic", _PACKAGE))


def from_the_cell(exc: BaseException, filename: str) -> BaseException:
    """``exc``, given a traceback from the cell's (``filename``) first frame on, without the
    hidden frames (``__tracebackhide__``) between it and the last; ``exc`` as it is where
    the cell's code is not on its traceback (an error before the cell ran)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    if tb is None:
        return exc
    kept = tb
    while kept.tb_next is not None:
        following = kept.tb_next
        # the last hidden one stays (where it raised), unless it is ours: a NumPy function
        # the array module wraps raised, and a plain cell's traceback ends at the cell's line
        if _hidden(following) and (following.tb_next is not None or _ours(following)):
            kept.tb_next = following.tb_next
        else:
            kept = following
    return exc.with_traceback(tb)
