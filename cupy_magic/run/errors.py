"""A failed cell, told plainly: its errors, their messages, and a traceback that ends at the
cell's own line.

One failure path serves the whole and the batched run (:func:`fail`): the cell's frames are
cleared so that its device arrays go back to the pool, an out-of-memory error is explained,
and the traceback starts (and, for our own errors, ends) at the cell's lines.
"""

from __future__ import annotations

import gc
import linecache
import re
import sys
import traceback
from types import TracebackType

from ..backend import Backend, BudgetExceeded
from ..syncs.record import HostSyncError
from ..units import format_bytes

__all__ = ["CellError", "cell_line", "cell_traceback", "explain_oom", "fail"]


class CellError(ValueError):
    """The cell or its options cannot be run as given; the message says the fix."""


_CUPY_OOM = re.compile(
    r"Out of memory allocating ([\d,]+) bytes \(allocated so far: ([\d,]+) bytes")


def _last_cell_entry(tb: TracebackType | None, filename: str | None) -> TracebackType | None:
    """The innermost entry of ``tb`` in the cell's own code, or None."""
    last = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            last = tb
        tb = tb.tb_next
    return last


def cell_line(tb: TracebackType | None, filename: str | None) -> str:
    """``line N `code` `` for the cell's innermost frame in ``tb``, or ``""``."""
    last = _last_cell_entry(tb, filename)
    if last is None:
        return ""
    code = linecache.getline(filename or "", last.tb_lineno).strip()
    return f"line {last.tb_lineno} `{code}` " if code else f"line {last.tb_lineno} "


def explain_oom(exc: BaseException, be: Backend, peak: int,
                filename: str | None = None) -> BaseException:
    """Turn an out-of-memory error into one that says what was asked and what to try."""
    if not isinstance(exc, MemoryError) or (isinstance(exc, BudgetExceeded) and exc.explained):
        return exc
    limit = be.limit
    where = (f"the VRAM budget of {format_bytes(limit)} (set with %vram_budget)"
             if limit else "the device's free memory")
    first = str(exc).splitlines()[0].rstrip(".") if str(exc) else type(exc).__name__
    asked = _CUPY_OOM.search(first)
    if isinstance(exc, BudgetExceeded) and exc.line is not None:
        head = f"over the budget: {first}"
    elif asked:
        size, held = (int(g.replace(",", "")) for g in asked.groups())
        head = (f"{cell_line(exc.__traceback__, filename)}asked the pool for "
                f"{format_bytes(size)} ({size:,} bytes) while it held {format_bytes(held)}: "
                f"over {where}; the cell had reached {format_bytes(peak)} in the pool")
    else:
        head = (f"out of memory: {first}; the cell reached {format_bytes(peak)} in the pool, "
                f"against {where}")
    release = ", or cupy_magic.free_cached() to release cached blocks" if be.is_gpu else ""
    return BudgetExceeded(
        f"{head}. Try batching the data (smaller slices per cell), --dtype float32, deleting "
        f"arrays earlier cells left on the device, a larger %vram_budget{release}",
        explained=True)


def cell_traceback(tb: TracebackType | None, filename: str, *,
                   trim_below: bool = False) -> TracebackType | None:
    """Keep the frames from the cell's first frame on (and, if asked, up to its last)."""
    cur = tb
    while cur is not None and cur.tb_frame.f_code.co_filename != filename:
        cur = cur.tb_next
    if cur is None:
        return None if trim_below else tb
    if trim_below:
        last = _last_cell_entry(cur, filename)
        if last is not None:
            last.tb_next = None
    return cur


def fail(exc: BaseException, be: Backend, peak: int, filename: str,
         where: str = "") -> BaseException:
    """The exception a failed cell raises, with its traceback set; the caller raises it.

    The cell's frames are cleared first (their locals hold device arrays), so the pool is
    back at its level before the cell. ``where`` (a batched run's position) is added to the
    message of our own errors and as a note to the others.
    """
    traceback.clear_frames(exc.__traceback__)
    gc.collect()
    new = explain_oom(exc, be, peak, filename)
    if where:
        if isinstance(new, CellError):
            new.args = (f"{new.args[0]} ({where})",)
        elif hasattr(new, "add_note"):  # Python 3.11+
            new.add_note(where)
        else:
            print(where, file=sys.stderr)
    # Our own errors end at the cell's line: the frames below it (CuPy's, the sync record's
    # hook) say nothing to the user.
    ours = new is not exc or isinstance(exc, HostSyncError)
    return new.with_traceback(cell_traceback(exc.__traceback__, filename, trim_below=ours))
