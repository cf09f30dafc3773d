"""A failed cell, told plainly: its errors, their messages, and a traceback that ends at the
cell's own line.

One failure path serves the whole and the batched run (:func:`fail`): the cell's frames are
cleared so that its device arrays go back to the pool, an out-of-memory error is explained,
and the traceback starts (and, for our own errors, ends) at the cell's lines.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import re
import sys
import warnings
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from types import FrameType, TracebackType
from typing import Any

import numpy as np

from ..backend import Backend, BudgetExceeded
from ..compat.advice import CupyLimit, explain_failure
from ..compat.blame import WRAPPER_FILE
from ..holders.account import top_hint
from ..source import line_code
from ..syncs.record import HostSyncError
from ..units import format_bytes

__all__ = [
    "FREED",
    "CellError",
    "at_cell_line",
    "cell_line",
    "cell_traceback",
    "explain_oom",
    "fail",
    "frames_freed",
    "free_frames",
    "freeing_later",
    "keeping_frames",
    "unawaited_quiet",
]

# The attribute fail() sets on the error of a cell whose frames it cleared: a debugger that
# opens on it finds no values, and says why (magics.postmortem)
FREED = "_cupy_magic_frames_freed"
_KEEP: ContextVar[bool] = ContextVar("cupy_magic_keep_frames", default=False)
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_LATER: ContextVar[list[FrameType] | None] = ContextVar("cupy_magic_free_later", default=None)


@contextlib.contextmanager
def keeping_frames(keep: bool = True) -> Iterator[None]:
    """While inside, a failed cell keeps its frames and their values (``%pdb on``: the
    post-mortem debugger opens in the cell's frame, as for a plain cell) instead of freeing
    them for the device memory they hold."""
    token = _KEEP.set(keep)
    try:
        yield
    finally:
        _KEEP.reset(token)


def frames_freed() -> bool:
    """Whether a failed cell frees its frames and its namespace now (the default)."""
    return not _KEEP.get()


@contextlib.contextmanager
def freeing_later() -> Iterator[list[FrameType]]:
    """While inside, a failed cell empties its namespace at once but leaves its frames to
    the caller: they are put in the list yielded, for :func:`free_frames` once the shell has
    shown the traceback (IPython names each frame's arguments, ``in f(a)``, from its locals;
    cleared, it writes ``f(***failed resolving arguments***)``)."""
    later: list[FrameType] = []
    token = _LATER.set(later)
    try:
        yield later
    finally:
        _LATER.reset(token)


def _frames_of(exc: BaseException) -> list[FrameType]:
    """The frames of ``exc``'s traceback (and of the error it was raised over) that have
    returned: the cell's, those it called, ours between; not those still running (ours
    above the cell), whose ``__tracebackhide__`` hides them from a traceback shown later."""
    running = set()
    frame: FrameType | None = sys._getframe()
    while frame is not None:
        running.add(frame)
        frame = frame.f_back
    found: list[FrameType] = []
    for error in (exc, exc.__context__):
        tb = error.__traceback__ if error is not None else None
        while tb is not None:
            if tb.tb_frame not in running:
                found.append(tb.tb_frame)
            tb = tb.tb_next
    return found


@contextlib.contextmanager
def unawaited_quiet() -> Iterator[None]:
    """No "coroutine ... was never awaited" warning while a failed cell's names and frames
    go: a plain cell's traceback keeps them until the next error, and the warning would name
    this file."""
    shown = warnings.showwarning  # swapped, not filtered: a filter change (catch_warnings)
    # would make every warning already shown once show again (the registries start over)

    def show(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
        if not (category is RuntimeWarning and "was never awaited" in str(message)):
            shown(message, category, *args, **kwargs)

    warnings.showwarning = show
    try:
        yield
    finally:
        if warnings.showwarning is show:
            warnings.showwarning = shown


def free_frames(frames: Iterable[FrameType]) -> None:
    """Clear failed cells' ``frames``, so that the device arrays their locals hold go back
    to the pool; and the dict of their locals that reading ``f_locals`` (IPython's traceback
    does) left behind, which ``frame.clear()`` keeps (Python 3.11); without the warnings of
    coroutines never awaited (:func:`unawaited_quiet`)."""
    with unawaited_quiet():
        for frame in frames:
            with contextlib.suppress(RuntimeError):  # one still executing keeps its locals
                frame.clear()
            frame.f_locals  # noqa: B018 (read again: it drops the names cleared)
        gc.collect()


class CellError(ValueError):
    """The cell or its options cannot be run as given; the message says the fix."""


_CUPY_OOM = re.compile(
    r"Out of memory allocating ([\d,]+) bytes \(allocated so far: ([\d,]+) bytes")
_NUMPY_OOM = re.compile(
    r"Unable to allocate .* for an array with shape (\([\d, ]*\)) and data type (\w+)")


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
    code = line_code(filename, last.tb_lineno)
    return f"line {last.tb_lineno} `{code}` " if code else f"line {last.tb_lineno} "


def _asked(message: str) -> tuple[int, int | None] | None:
    """``(bytes asked, bytes the pool held)`` from CuPy's or NumPy's out-of-memory message."""
    cupy = _CUPY_OOM.search(message)
    if cupy:
        size, held = (int(g.replace(",", "")) for g in cupy.groups())
        return size, held
    numpy = _NUMPY_OOM.search(message)
    if numpy:
        shape = [int(n) for n in re.findall(r"\d+", numpy.group(1))]
        try:
            itemsize = np.dtype(numpy.group(2)).itemsize
        except TypeError:
            return None
        return math.prod(shape) * itemsize, None
    return None


def _root_memory_error(exc: BaseException) -> BaseException:
    """The out-of-memory error a budget error was raised over, if any, else ``exc``.

    The host backend checks the budget at every line event, also while an allocation's own
    ``MemoryError`` unwinds the cell; its figure then counts the failed request, which never
    allocated, so the request is what to report.
    """
    context = exc.__context__
    if isinstance(exc, BudgetExceeded) and isinstance(context, MemoryError) \
            and _asked(str(context)) is not None:
        return context
    return exc


def explain_oom(exc: BaseException, be: Backend, peak: int,
                filename: str | None = None, *, batchable: bool = False) -> BaseException:
    """Turn an out-of-memory error into one that says what was asked and what to try.

    A request that never allocated is reported as what was asked, never as what the cell
    reached in the pool (the host's tracing counts such a request as held). ``batchable``:
    the cell ran whole with inputs that have rows, so ``--batch`` is the first thing to try
    (its inputs fit the budget, its temporaries did not).
    """
    exc = _root_memory_error(exc)
    if not isinstance(exc, MemoryError) or (isinstance(exc, BudgetExceeded) and exc.explained):
        return exc
    limit = be.limit
    where = (f"the VRAM budget of {format_bytes(limit)} (set with %vram_budget)"
             if limit else "the device's free memory")
    first = str(exc).splitlines()[0].rstrip(".") if str(exc) else type(exc).__name__
    asked = _asked(first)
    at = cell_line(exc.__traceback__, filename)
    if isinstance(exc, BudgetExceeded) and exc.line is not None:
        head = f"over the budget: {first}"
    elif asked and asked[1] is not None:  # CuPy's pool: its peak never counts the request
        size, held = asked
        head = (f"{at}asked the pool for {format_bytes(size)} ({size:,} bytes) while it held "
                f"{format_bytes(held)}: over {where}; the cell had reached "
                f"{format_bytes(peak)} in the pool")
    elif asked:  # NumPy: the host's tracing counts the failed request, so no peak is told
        size = asked[0]
        head = (f"{at}asked for {format_bytes(size)} ({size:,} bytes), which was never "
                f"allocated: over {where}")
    else:
        head = f"{at}out of memory: {first}, against {where}"
    release = ", or cupy_magic.free_cached() to release cached blocks" if be.is_gpu else ""
    batch = ("%%gpu --batch (batches sized to the budget from the first one's peak; each "
             "row's results must depend only on that row; batch=BatchOptions(forced=True) "
             "from Python)" if batchable else "batching the data (smaller slices per cell)")
    return BudgetExceeded(
        f"{head}. Try {batch}, --dtype float32 (dtype='float32'), deleting "
        f"arrays earlier cells left on the device, a larger %vram_budget "
        f"(cupy_magic.set_budget){release}",
        line=getattr(exc, "line", None), explained=True)


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


def _raised_at(filename: str, line: int) -> TracebackType:
    """A traceback entry of a frame compiled under the cell's name, at its ``line``.

    IPython always shows a traceback's last entry, hidden or not; for an error raised outside
    the cell's code (a move, a budget check, a batch's gather) this entry makes it the cell's
    line, quoted from the cell's source (``linecache``).
    """
    code = compile("\n" * (max(line, 1) - 1) + "raise __cell_error__", filename, "exec")
    marker = _AtCellLine()
    try:
        exec(code, {"__cell_error__": marker})
    except _AtCellLine as raised:
        tb = raised.__traceback__
        assert tb is not None and tb.tb_next is not None
        return tb.tb_next
    raise AssertionError("unreachable: the code above always raises")


class _AtCellLine(Exception):
    """Raised only by :func:`_raised_at` to make a traceback entry at a cell line."""


def _known_line(exc: BaseException) -> int | None:
    line = getattr(exc, "line", None)
    return line if isinstance(line, int) and line > 0 else None


def _ending_at_cell(exc: BaseException, new: BaseException,
                    filename: str) -> TracebackType | None:
    """The traceback a failed cell shows: from its first frame to the line that failed.

    Frames below the cell (CuPy's, NumPy's, the budget's trace function) are kept for an
    error the user's code raised inside a library and dropped for our own errors; an error
    raised where no cell frame ran ends at the line it names (or the cell's first line).
    """
    ours = new is not exc or isinstance(exc, (HostSyncError, BudgetExceeded, CupyLimit))
    source = _root_memory_error(exc) if ours else exc
    if _last_cell_entry(source.__traceback__, filename) is None:
        source = exc
    tb = cell_traceback(source.__traceback__, filename, trim_below=ours)
    line = _known_line(new) or _known_line(exc)
    last = _last_cell_entry(tb, filename)
    if last is None:
        return _raised_at(filename, line or 1)
    if isinstance(exc, KeyboardInterrupt):
        _drop_our_tail(last)
    if ours and line is not None and last.tb_lineno != line:
        # The cell stopped on a later line than the one that failed (the host backend checks
        # the budget at the next line event); IPython renders a frame's own line, so the
        # entry is replaced with one raised at the failing line.
        fixed = _raised_at(filename, line)
        if last is tb:
            return fixed
        prev = tb
        while prev is not None and prev.tb_next is not last:
            prev = prev.tb_next
        if prev is not None:
            prev.tb_next = fixed
    return tb


def _drop_our_tail(tb: TracebackType) -> None:
    """End ``tb`` at its last entry outside cupy_magic's own code. Ctrl-C stops the cell
    wherever it runs, also in what we run at its lines (the ``--lines`` tracer, the budget's
    check), whose frames a plain cell has not: IPython shows a traceback's last frame even
    when hidden, so it ends at the cell's line (or in the library it called) instead."""
    keep: TracebackType | None = None
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename  # ours: this package's, or a compat wrapper's
        if not (name.startswith(WRAPPER_FILE) or os.path.abspath(name).startswith(_PACKAGE)):
            keep = tb
        tb = tb.tb_next
    if keep is not None:
        keep.tb_next = None


def fail(exc: BaseException, be: Backend, peak: int, filename: str,
         where: str = "", namespace: dict[str, Any] | None = None, *,
         batchable: bool = False, work: dict[str, Any] | None = None) -> BaseException:
    """The exception a failed cell raises, with its traceback set; the caller raises it.

    The cell's frames are cleared first (their locals hold device arrays), so the pool is
    back at its level before the cell; inside :func:`freeing_later` once the shell has shown
    the traceback; not inside :func:`keeping_frames` (``%pdb on``), and then the error is not
    marked :data:`FREED`. ``where`` (a batched run's position) is
    added to the message of our own errors and as a note to the others. The traceback ends at
    the cell's line (:func:`_ending_at_cell`). With the user ``namespace``, an out-of-memory
    or over-budget error also names the three largest holders and the command that frees
    them. ``work``: the namespace the cell ran in (its frame's globals), emptied with the
    frames.
    """
    freed = frames_freed()
    if freed:
        if work is not None:
            with unawaited_quiet():
                work.clear()
        later = _LATER.get()
        if later is None:
            free_frames(_frames_of(exc))
        else:
            later += _frames_of(exc)
    new = explain_oom(exc, be, peak, filename, batchable=batchable)
    if new is exc:  # NumPy-only code handed a device array: one line naming it and the fix
        new = explain_failure(exc, filename) or exc
    if namespace is not None and isinstance(new, MemoryError) and new.args:
        hint = top_hint(namespace, be)
        if hint:
            new.args = (f"{str(new.args[0]).rstrip('.')}. {hint}", *new.args[1:])
    if where:
        if isinstance(new, CellError):
            new.args = (f"{new.args[0]} ({where})",)
        elif hasattr(new, "add_note"):  # Python 3.11+
            new.add_note(where)
        else:
            print(where, file=sys.stderr)
    if freed:
        with contextlib.suppress(AttributeError, TypeError):  # a type without a __dict__
            setattr(new, FREED, True)
    return new.with_traceback(_ending_at_cell(exc, new, filename))


def at_cell_line(exc: BaseException, filename: str, line: int | None) -> BaseException:
    """``exc`` with a traceback that ends at the cell's ``line`` (an error found before the
    cell ran, such as ``--syncs error``'s static check); the caller raises it."""
    return exc.with_traceback(_raised_at(filename, line or 1))
