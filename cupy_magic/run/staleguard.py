"""While a cell runs: the functions from earlier cells it calls, which read and write your
namespace, not the cell's.

A function from an earlier cell reads its globals from your namespace, which a ``%%gpu``
cell writes only when it succeeds, so it would read the value from before the cell where a
plain cell's reads the new one. :func:`~.globalreads.stale_global` refuses, before anything
moves, the calls it sees in the cell's source; :class:`StaleGuard` is the net for those it
cannot see (a method reached through a chain or a loop, ``getattr(k, "f")()``, a lambda or a
class of the cell that calls one, what NumPy calls on an object, a loop that rebinds a name
after the call): the call is refused as it is made, and the cell is not committed. A function
that writes a global (``global _model``) writes your namespace at once, as in a plain cell:
the guard brings what it wrote into the cell's namespace as it returns, so that the cell reads
it and the commit keeps it. The guard is set only where a function, class or object of the
notebook's reads a name the cell may bind or writes a global, since a trace function costs
each Python call the cell makes.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import sys
import threading
import types
from collections.abc import Iterable
from types import FrameType, TracebackType
from typing import Any, NamedTuple

import numpy as np

from ..compat.scope import host_value
from ..compat.spec import MISSING
from .errors import CellError
from .globalreads import ANY, _code_globals, _scan
from .heldwrites import _parse
from .notebookcode import notebook_reads, store_offsets

__all__ = ["InPlaceFirst", "StaleGuard", "guarding"]

_BY_VALUE = (int, float, complex, str, bytes, bool, type(None))  # `n = 500` again: the same
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_RESUMES = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


class InPlaceFirst(NamedTuple):
    """The inputs a cell changes in place before it binds them (``X += 1``), each with its
    first change's top-level statement and line, and each top-level statement's first and
    last lines and whether it is a loop."""

    first: dict[str, tuple[int, int]]
    spans: tuple[tuple[int, int, bool], ...]

    @classmethod
    def of(cls, source: str, inputs: Iterable[str]) -> InPlaceFirst | None:
        """Those of the cell ``source`` over ``inputs``; None where it changes none so."""
        tree = _parse(source)
        if tree is None:
            return None
        first = {n: (i, line) for n, (i, line, change) in _scan(tree, frozenset(inputs))[0]
                 .items() if change}
        spans = tuple((s.lineno, s.end_lineno or s.lineno, isinstance(s, _LOOPS))
                      for s in tree.body)
        return cls(first, spans) if first else None

    def made_by(self, name: str, line: int) -> int | None:
        """The line of the first change of input ``name``, where it may have run before a
        call made at the cell's top-level line ``line``: in an earlier statement, in the same
        loop, or on an earlier line of the same ``if``, ``with`` or ``try``; else None. (A
        change under an ``if`` that did not run counts: it is the source's.)"""
        index = next((i for i, (a, b, _) in enumerate(self.spans) if a <= line <= b), None)
        if index is None or name not in self.first:
            return None
        when, at = self.first[name]
        return at if when < index or (when == index and (self.spans[index][2] or at < line)) \
            else None


def _same(now: Any, was: Any) -> bool:
    """Whether a name bound again holds what it held, for a function reading it: the same
    object, or an equal number, text, NumPy scalar or tuple of them (``hidden = (4, 2)``)."""
    if now is was:
        return True
    kind = type(now)
    if kind is not type(was):
        return False
    if kind in _BY_VALUE:
        return bool(now == was)
    if issubclass(kind, np.generic):
        return now.dtype == was.dtype and bool(now == was)
    if kind is tuple:
        return len(now) == len(was) and all(map(_same, now, was))
    return False


class StaleGuard:
    """Refuses the call of a function whose globals are ``namespace`` (the user's) that
    reads one of ``watched`` after the cell's namespace ``work`` rebound or deleted it (or
    changed it in place, an input); brings into ``work`` what such a function writes as a
    global, as it returns.

    Parameters
    ----------
    namespace
        The user namespace: the globals of the functions from earlier cells.
    work
        The cell's namespace as it runs; what each watched name holds on entry is the
        value from before the cell (an input's: its device copy).
    watched
        The names the cell may bind that such a function reads.
    filename
        The cell's code's file name, to name the line of the cell that made the call.
    in_place
        Where the cell changes its inputs in place first.
    """

    def __init__(self, namespace: dict[str, Any], work: dict[str, Any],
                 watched: frozenset[str], filename: str,
                 in_place: InPlaceFirst | None = None) -> None:
        self.namespace, self.work, self.watched, self.filename = \
            namespace, work, watched, filename
        self.in_place = in_place
        self.base: dict[str, Any] = {}
        self.refusal: CellError | None = None
        self.active = False
        self._previous: Any = None
        self._thread_previous: Any = None
        self._codes: dict[int, tuple[types.CodeType, frozenset[str], dict[int, str]]] = {}
        self._idle: dict[int, types.CodeType] = {}  # (by id, as _codes)
        # the globals functions wrote into your namespace, with what each held before
        self.synced: dict[str, Any] = {}
        self.undo = False

    @classmethod
    def for_cell(cls, namespace: dict[str, Any], work: dict[str, Any],
                 binds: Iterable[str], skip: Iterable[str], filename: str,
                 in_place: InPlaceFirst | None = None) -> StaleGuard | None:
        """The guard of a cell that may bind ``binds`` (not ``skip``: the array module's
        names, which are the cell's own) or change inputs in place (``in_place``), or None
        where no function of the notebook reads any of them nor writes a global (any such
        write is brought into the cell's namespace, or the commit would put back the value
        from before the cell)."""
        # a name new to the namespace is no function's stale read: it read nothing before
        # (a NameError, which the cell raises too)
        bound = frozenset(binds) - frozenset(skip) - {"__builtins__"}
        rebound = bound.intersection(namespace)
        changed = frozenset(in_place.first) if in_place is not None else frozenset()
        code = notebook_reads(namespace)
        if ANY not in code.reads:
            rebound, changed = rebound & code.reads, changed & code.reads
        if not rebound and not changed and not code.writes:
            return None
        return cls(namespace, work, rebound | changed, filename,
                   in_place if changed else None)

    @classmethod
    def of_plan(cls, plan: Any, namespace: dict[str, Any], work: dict[str, Any],
                filename: str) -> StaleGuard | None:
        """:meth:`for_cell` of a planned cell (a :class:`~.plan.CellPlan`, which imports this
        module): the names it stores or deletes, its inputs changed in place first; not its
        array module's names."""
        return cls.for_cell(namespace, work, plan.stored | plan.deleted, plan.overrides,
                            filename, plan.in_place_first)

    def _changed(self, name: str) -> bool:
        now, was = self.work.get(name, MISSING), self.base[name]
        if _same(now, was):
            return False
        try:  # `import numpy as npy` in the cell: NumPy's module, as before
            return host_value(now) is not was
        except Exception:  # an odd object's own error (a __getattr__ raising KeyError)
            return True

    def _stale(self, names: frozenset[str], top: int | None) -> str | None:
        """What makes the call's read of one of ``names`` stale (``top``: the cell's top-level
        line at the call), or None."""
        for name in sorted(names):
            if self._changed(name):
                how = "deleted" if self.work.get(name, MISSING) is MISSING else "rebound"
                return f"{name}\x00the cell {how} {name}"
            at = None if self.in_place is None or top is None else \
                self.in_place.made_by(name, top)
            if at is not None:
                return f"{name}\x00the cell changed the input {name} in place (line {at})"
        return None

    def _refuse(self, frame: FrameType, names: frozenset[str], reads: frozenset[str]) -> None:
        cheap = names - (self.in_place.first.keys() if self.in_place is not None else set())
        if not any(map(self._changed, sorted(cheap))) and self.in_place is None:
            return  # (the stack is walked only for a read that may be stale)
        back, line, top = frame.f_back, None, None  # the call's line in the cell; the
        while back is not None:  # top-level statement's
            if back.f_code.co_filename == self.filename:
                line = back.f_lineno if line is None else line
                top = back.f_lineno if back.f_code.co_name == "<module>" else top
            back = back.f_back
        found = self._stale(names, top)
        if found is None:
            return
        name, after = found.split("\x00")
        code = frame.f_code
        reads_it = f"reads {name} as its global" if name in reads else \
            f"may read any global ({name} too: it calls globals(), eval or exec)"
        where = f"line {line} of the cell" if line is not None else "the cell"
        self.refusal = CellError(
            f"{where} ran {code.co_qualname}() from an earlier cell, which {reads_it}, after "
            f"{after}: %%gpu runs the cell in a namespace of its own until it succeeds, so it "
            f"would read your {name} from before the cell, where in a plain cell it reads the "
            f"new one; pass {name} to it as an argument, or define {code.co_name} in this "
            "cell (nothing was committed)")
        raise self.refusal

    def _code(self, code: types.CodeType) -> tuple[frozenset[str], dict[int, str]]:
        hit = self._codes.get(id(code))  # by identity: hashing a code object reads it all
        if hit is None or hit[0] is not code:
            hit = self._codes[id(code)] = (code, _code_globals(code), store_offsets(code))
        return hit[1], hit[2]

    def _synced(self, name: str, now: Any, was: Any) -> None:
        """A function wrote ``name`` into your namespace (``was``: what it held before): the
        cell's holds it now too."""
        self.synced.setdefault(name, was)
        if now is MISSING:
            self.work.pop(name, None)
        else:
            self.work[name] = now
        if name in self.base:  # (no longer a stale read: both hold it)
            self.base[name] = now

    def _check(self, frame: FrameType) -> Any:
        """The call of ``frame``: refused where it reads stale; where its function writes
        globals, the local trace function that brings them into the cell's namespace."""
        code = frame.f_code
        if code.co_flags & _RESUMES and frame.f_lineno != code.co_firstlineno:
            return None  # a generator resumed: it read its globals where it started
        reads, offsets = self._code(code)
        names = self.watched if ANY in reads else self.watched & reads
        if names and self.refusal is None:
            self._refuse(frame, names, reads)
        if not offsets and ANY not in reads:
            if not names:  # nothing to do at its calls: they cost one lookup from now on
                self._idle[id(code)] = code
            return None
        space = self.namespace
        # what it may write: its own stores, or any name (globals()["x"] = 1, exec)
        before = dict(space) if ANY in reads else \
            {n: space.get(n, MISSING) for n in offsets.values()}
        stored: set[str] = set()  # stores run: one writing what the name held is one too
        frame.f_trace_lines = False
        # a store of what the namespace holds is seen only as it runs (`n = 0` again, where
        # the cell bound n = 3): its instructions are traced where the cell's differs
        differ = sorted(n for n in set(offsets.values())
                        if self.work.get(n, MISSING) is not space.get(n, MISSING))
        if differ and not _opcode_events():
            self.refusal = CellError(
                f"the cell ran {code.co_qualname}() from an earlier cell, which may write the "
                f"global {differ[0]}, after the cell bound {differ[0]} otherwise: where it "
                f"writes the value your {differ[0]} holds, this Python {sys.version.split()[0]} "
                "cannot see it, and the cell would keep its own; run it in a plain cell, or "
                f"call {code.co_name} before the cell binds {differ[0]} (nothing was committed)")
            raise self.refusal
        frame.f_trace_opcodes = bool(differ)

        def written(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "opcode":
                if frame.f_lasti in offsets:
                    stored.add(offsets[frame.f_lasti])
            elif event == "return":  # (a yield too)
                for name in {*before, *space} if ANY in reads else before:
                    now = space.get(name, MISSING)
                    if now is not before.get(name, MISSING) or name in stored:
                        self._synced(name, now, before.get(name, MISSING))
                        before[name] = now
                stored.clear()
            return written
        return written

    def _global(self, frame: FrameType, event: str, arg: Any) -> Any:
        return self._traced(self._previous, frame, event, arg)

    def _in_thread(self, frame: FrameType, event: str, arg: Any) -> Any:
        """The trace function of the threads the cell starts (a ``ThreadPoolExecutor``)."""
        return self._traced(self._thread_previous, frame, event, arg)

    def _traced(self, previous: Any, frame: FrameType, event: str, arg: Any) -> Any:
        """A trace function's event: ``previous`` (one set before the guard's) first, then,
        for the call of a function from an earlier cell, :meth:`_check`."""
        theirs = previous(frame, event, arg) if previous is not None else None
        if event != "call" or frame.f_globals is not self.namespace or not self.active:
            return theirs
        code = frame.f_code
        if self._idle.get(id(code)) is code:  # reads none of the names, writes no global
            return theirs
        ours = self._check(frame)
        return ours if theirs is None else theirs if ours is None else _both(ours, theirs)

    def over(self, work: dict[str, Any], undo: bool = False) -> StaleGuard:
        """This guard over another run of the cell: a batch's namespace ``work``; ``undo``:
        put back, as it exits, the globals functions wrote (the ``--warmup`` slice's run)."""
        self.work, self.refusal, self.synced, self.undo = work, None, {}, undo
        return self

    def put_back(self, names: Iterable[str] | None = None) -> None:
        """Put back in your namespace what the globals the notebook's functions wrote during
        the run held before (only those: a warning's registry, a thread's writes stay), or
        ``names`` of them: after the ``--warmup`` slice's run, after a failed cell, which
        changes no variable, and before a commit, which then writes them as the cell's own."""
        for name in self.synced if names is None else names:
            was = self.synced[name]
            if was is MISSING:
                self.namespace.pop(name, None)
            else:
                self.namespace[name] = was

    def __enter__(self) -> StaleGuard:
        self.base = {n: self.work.get(n, MISSING) for n in self.watched}
        _opcode_events()  # (known before the trace function is set: none runs inside one)
        self._previous, self._thread_previous = sys.gettrace(), threading.gettrace()
        self.active = True
        sys.settrace(self._global)
        threading.settrace(self._in_thread)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.active = False  # (a thread the cell left running keeps the function, idle,
        self.work, self.base = {}, {}  # holding none of the cell's values)
        sys.settrace(self._previous)
        threading.settrace(self._thread_previous)
        if self.undo:
            self.put_back()
        if self.refusal is not None and exc is not self.refusal:
            raise self.refusal  # caught in the cell (`except Exception`): refused all the same


@functools.cache
def _opcode_events() -> bool:
    """Whether this Python gives a frame's trace function an event per instruction where the
    frame asks as it starts (``f_trace_opcodes``): 3.11 does; 3.12.1 gives none."""
    seen: list[int] = []

    def probe() -> int:
        return len(seen)

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            seen.append(frame.f_lasti)
        return local

    def started(frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code is probe.__code__:
            frame.f_trace_opcodes = True
            return local
        return None

    previous = sys.gettrace()
    sys.settrace(started)
    try:
        probe()
    finally:
        sys.settrace(previous)
    return bool(seen)


def _both(ours: Any, theirs: Any) -> Any:
    """One local trace function that runs two, each as long as it asks to."""
    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal ours, theirs
        theirs = theirs(frame, event, arg) if theirs is not None else None
        ours = ours(frame, event, arg) if ours is not None else None
        return local if ours is not None or theirs is not None else None
    return local


def guarding(guard: StaleGuard | None, work: dict[str, Any],
             undo: bool = False) -> contextlib.AbstractContextManager:
    """``guard`` over the run of the cell in ``work`` (:meth:`StaleGuard.over`); nothing
    where there is none."""
    return guard.over(work, undo) if guard is not None else contextlib.nullcontext()
