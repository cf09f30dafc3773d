"""Where a cell's time goes, line by line: ``%%gpu --lines`` and NVTX ranges (``--nvtx``).

:class:`LineTracer` follows the lines of the cell's own code (its compiled filename; the
functions the cell defines included) on the thread that runs it: ``sys.monitoring`` with
events on the cell's code objects only where Python has it (3.12+), ``sys.settrace``
otherwise. At each statement boundary it charges the host time since the last boundary to
the line that ran, records a CUDA event on the current stream (:class:`EventMarks`, on the
GPU) and, with NVTX, ends the line's range and starts the next. A line's time is its own:
the lines of a function the cell defines are charged to those lines, not to the line that
called it, as the sync and compile records charge the innermost frame of the cell.

:func:`line_rows` joins that with what the other records already hold per line: the host
syncs and their wait (:mod:`cupy_magic.syncs.record`), kernel builds
(:mod:`cupy_magic.backend.compiles`) and copies between host and device
(:class:`~cupy_magic.backend.marks.TransferWatch`); nothing is measured twice.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from types import CodeType, TracebackType
from typing import Any

from ..backend import Backend
from ..backend.marks import EventMarks, TransferWatch, nvtx_ranges

__all__ = ["MANY_EVENTS", "LineRecord", "LineStat", "LineTracer", "line_rows", "off_the_lines",
           "tracer_note"]

MANY_EVENTS = 10_000  # line events above which the report says what the tracer cost
_LARGE_SHARE = 0.05  # the tracer's share of the cell above which the report says it anyway
_HAS_MONITORING = hasattr(sys, "monitoring")
_ACTIVE = threading.local()  # the tracer following the cell that runs on this thread


@dataclass(frozen=True)
class LineStat:
    """One line of the cell that ran: what it cost, summed over its runs.

    Attributes
    ----------
    line, code
        The cell line and its text.
    count
        How many times it ran (iterations of a loop, batches of a batched cell).
    gpu_s
        Device seconds between its start and the next line's (CUDA events on the current
        stream), less its kernel builds; ``None`` on the CPU fallback, which has no device.
    host_s
        Host seconds the line took (the tracer's own time left out).
    bytes_moved, transfer_s
        Bytes copied between host and device by the line (``x.get()``, ``cp.asarray(h)``)
        and their seconds, less the syncs' wait; 0 on the CPU fallback (no PCIe).
    syncs, wait_s
        Host syncs CuPy declared on the line and the seconds the host waited at them (the
        sync record); ``None`` where there is no runtime record (CPU fallback, --syncs off).
    compile_s
        Seconds of kernel builds the line asked for (the compile record).
    fallbacks
        Calls the line ran on NumPy because CuPy has no counterpart (``--fallback``); 0 when
        none did.
    share
        The line's part of the cell's time (GPU time on the GPU, host time on the host).
    """

    line: int
    code: str
    count: int
    gpu_s: float | None
    host_s: float
    bytes_moved: int = 0
    transfer_s: float = 0.0
    syncs: int | None = None
    wait_s: float | None = None
    compile_s: float = 0.0
    fallbacks: int = 0
    share: float = 0.0

    @property
    def seconds(self) -> float:
        """The time its share is of: GPU time where measured, host time otherwise."""
        return self.host_s if self.gpu_s is None else self.gpu_s


class LineTracer:
    """Follow the lines of one cell's code while it runs (a context manager).

    Parameters
    ----------
    code_filename : str
        The filename the cell was compiled with.
    codes : iterable of code
        The cell's compiled code objects (the functions they define are found inside).
    marks : EventMarks, optional
        Device timing marks (on the GPU).
    nvtx : tuple of (push, pop), optional
        NVTX range functions; each line becomes a range ``{label}:L{line} {code}``.
    label : str
        The cell's name in the ranges, e.g. ``In[3]``.
    source : str
        The cell's source, for the ranges' names.
    """

    def __init__(self, code_filename: str, codes: Iterable[CodeType | None], *,
                 marks: EventMarks | None = None,
                 nvtx: tuple[Callable[[str], None], Callable[[], None]] | None = None,
                 label: str = "", source: str = "") -> None:
        self.code_filename = code_filename
        self.codes = _all_codes(c for c in codes if c is not None)
        self.marks, self.nvtx, self.label = marks, nvtx, label
        self.text = source.splitlines()
        self.host: dict[int, float] = {}
        self.count: dict[int, int] = {}
        self.gpu: dict[Any, float] | None = None
        self.events = 0
        self.cost = 0.0  # seconds spent in the tracer's callbacks
        self.traced = 0.0  # seconds from entering to leaving
        self._line: int | None = None
        self._t = 0.0
        self._thread = threading.get_ident()
        self._tool: int | None = None
        self._previous: Any = None
        self._aside = False  # the cell's time is charged to none of its lines
        self._outer: LineTracer | None = None

    # --- the one step: a statement boundary ---------------------------------------------
    def _switch(self, line: int | None) -> None:
        now = time.perf_counter()
        if self._line is not None:
            self.host[self._line] = self.host.get(self._line, 0.0) + now - self._t
            if self.nvtx is not None:
                self.nvtx[1]()
        if line is not None and self.nvtx is not None:
            code = self.text[line - 1].strip() if 0 < line <= len(self.text) else ""
            self.nvtx[0](f"{self.label}:L{line} {code}")
        if self.marks is not None:
            self.marks.mark(line)
        self._line = line
        self.events += 1
        end = time.perf_counter()
        self.cost += end - now
        self._t = end

    def _line_event(self, line: int) -> None:
        if self._aside:
            return
        self.count[line] = self.count.get(line, 0) + 1
        self._switch(line)

    def _left(self, back: Any) -> None:
        """A frame of the cell returned (or yielded) to ``back``: its line goes on."""
        if self._aside:
            return
        inside = back is not None and back.f_code.co_filename == self.code_filename
        self._switch(back.f_lineno if inside else None)

    # --- sys.settrace (Python 3.11) -----------------------------------------------------
    # A trace function already set (the host budget's check at every line, a debugger) keeps
    # running: each frame's local function calls its local function first.
    def _global(self, frame: Any, event: str, arg: Any) -> Any:
        theirs = self._previous(frame, event, arg) if self._previous is not None else None
        if frame.f_code.co_filename != self.code_filename:
            return theirs
        return self._local if theirs is None else self._chained(theirs)

    def _local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            self._line_event(frame.f_lineno)
        elif event == "return":
            self._left(frame.f_back)
        return self._local

    def _chained(self, theirs: Callable[..., Any]) -> Callable[..., Any]:
        def local(frame: Any, event: str, arg: Any) -> Any:
            nonlocal theirs
            if theirs is not None:
                theirs = theirs(frame, event, arg)
            self._local(frame, event, arg)
            return local
        return local

    # --- sys.monitoring (Python 3.12+) --------------------------------------------------
    def _mon_line(self, code: CodeType, line: int) -> None:
        if threading.get_ident() == self._thread:
            self._line_event(line)

    def _mon_return(self, code: CodeType, offset: int, value: Any) -> None:
        if threading.get_ident() == self._thread:
            self._left(sys._getframe(1).f_back)  # 1: the cell's frame that returns

    def _start_monitoring(self) -> bool:
        mon = sys.monitoring  # type: ignore[attr-defined]
        tool = next((t for t in (mon.PROFILER_ID, 3, 4, 5) if mon.get_tool(t) is None), None)
        if tool is None:
            return False
        mon.use_tool_id(tool, "cupy_magic --lines")
        ev = mon.events
        mon.register_callback(tool, ev.LINE, self._mon_line)
        mon.register_callback(tool, ev.PY_RETURN, self._mon_return)
        mon.register_callback(tool, ev.PY_YIELD, self._mon_return)
        for code in self.codes:
            mon.set_local_events(tool, code, ev.LINE | ev.PY_RETURN | ev.PY_YIELD)
        self._tool = tool
        return True

    def _stop_monitoring(self) -> None:
        mon = sys.monitoring  # type: ignore[attr-defined]
        ev = mon.events
        for code in self.codes:
            mon.set_local_events(self._tool, code, 0)
        for event in (ev.LINE, ev.PY_RETURN, ev.PY_YIELD):
            mon.register_callback(self._tool, event, None)
        mon.free_tool_id(self._tool)
        self._tool = None

    # --- context manager ----------------------------------------------------------------
    def __enter__(self) -> LineTracer:
        self._thread = threading.get_ident()
        self._outer, _ACTIVE.tracer = getattr(_ACTIVE, "tracer", None), self
        self.traced -= time.perf_counter()
        if not (_HAS_MONITORING and self._start_monitoring()):
            self._previous = sys.gettrace()
            sys.settrace(self._global)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        _ACTIVE.tracer = self._outer
        if self._tool is not None:
            self._stop_monitoring()
        else:
            sys.settrace(self._previous)
        if self._line is not None:  # an exception left the cell's code: close its line
            self._switch(None)
        self.traced += time.perf_counter()
        if self.marks is not None:
            self.gpu = self.marks.finish()


@contextlib.contextmanager
def off_the_lines() -> Iterator[None]:
    """While inside, on this thread, the running cell's time is charged to none of its lines
    (a value the cell shows through ``sys.displayhook``: IPython formats it for the user)."""
    tracer: LineTracer | None = getattr(_ACTIVE, "tracer", None)
    if tracer is None or tracer._aside:
        yield
        return
    line = tracer._line
    tracer._switch(None)
    tracer._aside = True
    try:
        yield
    finally:
        tracer._aside = False
        tracer._switch(line)


def _all_codes(roots: Iterable[CodeType]) -> list[CodeType]:
    """The code objects and every function, class body and comprehension inside them."""
    found: list[CodeType] = []
    todo = list(roots)
    while todo:
        code = todo.pop()
        if code in found:
            continue
        found.append(code)
        todo.extend(c for c in code.co_consts if isinstance(c, CodeType))
    return found


def line_rows(tracer: LineTracer, syncs: Iterable[Any], compiles: Any,
              watch: TransferWatch | None) -> list[LineStat]:
    """One :class:`LineStat` per line that ran, from the tracer and the other records.

    Parameters
    ----------
    syncs
        The report's :class:`~cupy_magic.syncs.record.MergedSync` rows; their runtime
        ``count`` (``None`` without a record) and ``wait_seconds``.
    compiles
        The report's :class:`~cupy_magic.backend.compiles.CompileRecord` (or ``None``): the
        builds of the timed run, by line.
    watch
        The copies between host and device per line, or ``None`` (CPU fallback).
    """
    counted = {s.line: s for s in syncs if s.count is not None}
    built: dict[int, float] = {}
    for b in getattr(compiles, "builds", ()):
        if b.line is not None and b.timed:
            built[b.line] = built.get(b.line, 0.0) + b.seconds
    moved = watch.moved if watch is not None else {}
    rows = []
    for line in sorted(tracer.count):
        sync = counted.get(line)
        wait = sync.wait_seconds if sync is not None else None
        nbytes, copy_s = moved.get(line, (0, 0.0))
        gpu = None if tracer.gpu is None else max(
            0.0, tracer.gpu.get(line, 0.0) - built.get(line, 0.0))
        rows.append(LineStat(
            line, tracer.text[line - 1].strip() if 0 < line <= len(tracer.text) else "",
            tracer.count[line], gpu, tracer.host.get(line, 0.0), int(nbytes),
            max(0.0, copy_s - (wait or 0.0)), sync.count if sync is not None else None, wait,
            built.get(line, 0.0)))
    total = sum(r.seconds for r in rows)
    return [replace(r, share=r.seconds / total if total > 0 else 0.0) for r in rows]


def tracer_note(tracer: LineTracer) -> str:
    """What following the lines cost, when it is large (many events or over 5% of the
    cell's time); ``""`` otherwise."""
    if not tracer.events:
        return ""
    share = tracer.cost / tracer.traced if tracer.traced > 0 else 0.0
    if tracer.events < MANY_EVENTS and share < _LARGE_SHARE:
        return ""
    return (f"--lines followed {tracer.events:,} line events at "
            f"{tracer.cost / tracer.events * 1e6:.1f} us each in its own callbacks "
            f"({tracer.cost * 1e3:,.1f} ms, {share:.0%} of the cell's time, left out of the "
            "rows); the cell runs that much faster without --lines")


_SAID: set[str] = set()  # what NVTX lacks is said once a process


def _once(text: str) -> list[str]:
    said, _ = text in _SAID, _SAID.add(text)
    return [] if said else [text]


class LineRecord:
    """``--lines`` and ``--nvtx`` for one cell: the tracer, the device marks, the copies.

    Entered around the cell's code (with the sync record); :meth:`rows` then joins what they
    saw with the sync and compile records into the report's rows.

    Parameters
    ----------
    be
        The live backend.
    codes
        The cell's compiled code objects.
    filename, source
        The cell's code filename and its source.
    lines
        Record the per-line table (``--lines``).
    nvtx
        Make each line an NVTX range (``--nvtx``); ``--lines`` makes them too on the GPU,
        and only ``--nvtx`` asks for a note on the CPU fallback, which has none.
    label
        The cell's name in the ranges (``In [3]`` becomes ``In[3]``).
    """

    def __init__(self, be: Backend, codes: Iterable[CodeType | None], filename: str,
                 source: str, *, lines: bool, nvtx: bool, label: str) -> None:
        self.lines = lines
        self.notes: list[str] = []
        ranges = None
        if nvtx and not be.is_gpu:
            self.notes += _once("no NVTX ranges on the CPU fallback: they mark the GPU's "
                                "timeline for Nsight Systems, which needs the GPU")
        elif nvtx or lines:  # --lines makes the ranges too on the GPU
            found = nvtx_ranges()
            if isinstance(found, str):
                self.notes += _once(f"no NVTX ranges: {found}")
            else:
                ranges = found
        self.watch = TransferWatch(filename) if lines and be.is_gpu else None
        self.tracer = LineTracer(filename, codes, marks=be.line_marks() if lines else None,
                                 nvtx=ranges, label=label.replace(" ", "") or filename,
                                 source=source)
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> LineRecord:
        with contextlib.ExitStack() as stack:
            if self.watch is not None:
                stack.enter_context(self.watch)
            stack.enter_context(self.tracer)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stack.close()

    def rows(self, syncs: Iterable[Any], compiles: Any) -> list[LineStat]:
        """The report's rows (empty without ``--lines``); notes what the tracer cost."""
        if not self.lines:
            return []
        note = tracer_note(self.tracer)
        if self.watch is not None and not self.watch.available:
            note = "; ".join(filter(None, [note, "bytes moved per line not recorded (this "
                                           "CuPy's ndarray.get/set could not be wrapped)"]))
        self.notes += [note] if note else []
        return line_rows(self.tracer, syncs, compiles, self.watch)
