"""While a cell runs: a call of a function from an earlier cell that reads, as a global, a
name the cell has rebound or deleted by then.

A function from an earlier cell reads its globals from your namespace, which a ``%%gpu``
cell writes only when it succeeds, so it would read the value from before the cell where a
plain cell's reads the new one. :func:`~.globalreads.stale_global` refuses, before anything
moves, the calls it sees in the cell's source; :class:`StaleGuard` is the net for those it
cannot see (a method reached through a chain or a loop, ``getattr(k, "f")()``, a lambda or a
class of the cell that calls one, what NumPy calls on an object, a loop that rebinds a name
after the call): the call is refused as it is made, and the cell is not committed. It is set
only where a function, class or object of the notebook's reads a name the cell may bind,
since a trace function costs each Python call the cell makes.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import types
import weakref
from collections.abc import Iterable, Mapping
from itertools import compress
from types import FrameType, TracebackType
from typing import Any, NamedTuple

from ..compat.scope import host_value
from .errors import CellError
from .globalreads import ANY, _code_globals, _scan
from .heldwrites import _parse
from .reaches import notebook_functions, of_notebook_class
from .staleread import BLOCKS

__all__ = ["InPlaceFirst", "StaleGuard", "guarding", "notebook_reads"]

_MISSING = object()
_BY_VALUE = (int, float, complex, str, bytes, bool, type(None))  # `n = 500` again: the same
_HISTORY = ("In", "Out", "_ih", "_oh", "_dh")  # IPython's: texts, results, folders
_HOLDS_CODE = (types.FunctionType, types.MethodType, functools.partial, dict, list, tuple,
               set, frozenset, types.SimpleNamespace)


def notebook_reads(namespace: Mapping[str, Any]) -> frozenset[str]:
    """The globals that the notebook's functions read, where the namespace binds them:
    functions (with what their closures, defaults and partials hold), those lists, tuples,
    sets and dicts hold (:func:`~.reaches.notebook_functions`; not IPython's ``In`` and
    ``Out``), and the methods, properties, static and class methods of the notebook's classes
    and of its objects' classes; with :data:`~.globalreads.ANY` where one calls
    ``globals()``."""
    history = {id(namespace.get(n)) for n in _HISTORY}
    values = namespace.values()  # scanned in C (a long session's namespace holds thousands)
    kinds = set(map(type, values))
    classes = {k for k in kinds if of_notebook_class(k, namespace)}  # its objects' classes
    holders = {k for k in kinds if k in _HOLDS_CODE}
    picked = kinds & (holders | classes | {type})
    names: set[str] = set()
    if not picked:
        return frozenset()
    for value in compress(values, map(picked.__contains__, map(type, values))):
        if id(value) in history:
            continue
        if type(value) is type:
            if of_notebook_class(value, namespace):
                classes.add(value)
            continue
        names |= _function_reads(value, namespace)
    for cls in classes:
        for fn in _class_functions(cls, namespace):
            names |= _code_globals(fn.__code__)
    return frozenset(names)


def _function_reads(value: Any, namespace: Mapping[str, Any]) -> frozenset[str]:
    """The globals the notebook's functions that ``value`` may run read; a function's kept
    with it (a notebook's fifty functions took 2 ms a cell, each looked at again)."""
    hit = _READS.get(value) if type(value) is types.FunctionType else None
    if hit is None:
        hit = frozenset().union(*(_code_globals(fn.__code__)
                                  for fn in notebook_functions(value, namespace)))
        if type(value) is types.FunctionType:
            _READS[value] = hit
    return hit


_READS: weakref.WeakKeyDictionary[types.FunctionType, frozenset[str]] = \
    weakref.WeakKeyDictionary()


def _class_functions(cls: type, namespace: Mapping[str, Any]) -> Iterable[types.FunctionType]:
    """The notebook's functions a class of it and its notebook bases define: methods, static
    and class methods, properties' parts, cached properties' functions."""
    for base in cls.__mro__:
        if not of_notebook_class(base, namespace):
            continue
        for member in vars(base).values():
            kind = type(member)
            parts = (member.fget, member.fset, member.fdel) if kind is property else \
                (member.__func__,) if kind in (staticmethod, classmethod) else \
                (member.func,) if kind is functools.cached_property else (member,)
            yield from (p for p in parts if type(p) is types.FunctionType
                        and p.__globals__ is namespace)


class InPlaceFirst(NamedTuple):
    """The inputs a cell changes in place before it binds them (``X += 1``), each with its
    first change's top-level statement and line, and each top-level statement's first and
    last lines and whether it has a block."""

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
        spans = tuple((s.lineno, s.end_lineno or s.lineno, isinstance(s, BLOCKS))
                      for s in tree.body)
        return cls(first, spans) if first else None

    def made_by(self, name: str, line: int) -> int | None:
        """The line of the first change of input ``name``, where it may have run before a
        call made from the cell's top-level line ``line`` (an earlier statement, or the same
        one with a block, as :func:`~.globalreads.stale_global` counts); else None."""
        index = next((i for i, (a, b, _) in enumerate(self.spans) if a <= line <= b), None)
        if index is None or name not in self.first:
            return None
        when, at = self.first[name]
        return at if when < index or (when == index and self.spans[index][2]) else None


class StaleGuard:
    """Refuses the call of a function whose globals are ``namespace`` (the user's) that
    reads one of ``watched`` after the cell's namespace ``work`` rebound or deleted it.

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
    """

    def __init__(self, namespace: dict[str, Any], work: dict[str, Any],
                 watched: frozenset[str], filename: str,
                 in_place: InPlaceFirst | None = None) -> None:
        self.namespace, self.work, self.watched, self.filename = \
            namespace, work, watched, filename
        self.in_place = in_place
        self.base: dict[str, Any] = {}
        self.refusal: CellError | None = None
        self._previous: Any = None

    @classmethod
    def for_cell(cls, namespace: dict[str, Any], work: dict[str, Any],
                 binds: Iterable[str], skip: Iterable[str], filename: str,
                 in_place: InPlaceFirst | None = None) -> StaleGuard | None:
        """The guard of a cell that may bind ``binds`` (not ``skip``: the array module's
        names, which are the cell's own) or change inputs in place (``in_place``), or None
        where no function of the notebook reads any of them."""
        # a name new to the namespace is no function's stale read: it read nothing before
        # (a NameError, which the cell raises too)
        names = frozenset(binds).intersection(namespace) - frozenset(skip) - {"__builtins__"}
        changed = frozenset(in_place.first) if in_place is not None else frozenset()
        if not names and not changed:
            return None
        reads = notebook_reads(namespace)
        if ANY not in reads:
            names, changed = names & reads, changed & reads
        if not names and not changed:
            return None
        return cls(namespace, work, names | changed, filename,
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
        now, was = self.work.get(name, _MISSING), self.base[name]
        if now is was or host_value(now) is was:  # `import numpy as npy`: NumPy's, as before
            return False
        return not (type(now) is type(was) and type(now) in _BY_VALUE and now == was)

    def _refuse(self, frame: FrameType, names: frozenset[str]) -> CellError | None:
        code = frame.f_code
        back, line, top = frame.f_back, None, None  # the call's line in the cell; the
        while back is not None:  # top-level statement's
            if back.f_code.co_filename == self.filename:
                line = back.f_lineno if line is None else line
                top = back.f_lineno if back.f_code.co_name == "<module>" else top
            back = back.f_back
        for name in sorted(names):
            if self._changed(name):
                how = "deleted" if self.work.get(name, _MISSING) is _MISSING else "rebound"
                after = f"the cell {how} {name}"
                break
            at = None if self.in_place is None or top is None else \
                self.in_place.made_by(name, top)
            if at is not None:
                after = f"the cell changed the input {name} in place (line {at})"
                break
        else:
            return None
        where = f"line {line} of the cell" if line is not None else "the cell"
        return CellError(
            f"{where} ran {code.co_qualname}() from an earlier cell, which reads {name} as "
            f"its global, after {after}: %%gpu runs the cell in a namespace of "
            f"its own until it succeeds, so it would read your {name} from before the cell, "
            f"where in a plain cell it reads the new one; pass {name} to it as an argument, "
            f"or define {code.co_name} in this cell (nothing was committed)")

    def _global(self, frame: FrameType, event: str, arg: Any) -> Any:
        theirs = self._previous(frame, event, arg) if self._previous is not None else None
        if frame.f_globals is self.namespace and event == "call" and self.refusal is None:
            reads = _code_globals(frame.f_code)
            names = self.watched if ANY in reads else self.watched & reads
            if names and (refusal := self._refuse(frame, names)) is not None:
                self.refusal = refusal
                raise refusal
        return theirs

    def over(self, work: dict[str, Any]) -> StaleGuard:
        """This guard over another run of the cell: a batch's namespace ``work``."""
        self.work, self.refusal = work, None
        return self

    def __enter__(self) -> StaleGuard:
        self.base = {n: self.work.get(n, _MISSING) for n in self.watched}
        self._previous = sys.gettrace()
        sys.settrace(self._global)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        sys.settrace(self._previous)
        if self.refusal is not None and exc is not self.refusal:
            raise self.refusal  # caught in the cell (`except Exception`): refused all the same


def guarding(guard: StaleGuard | None, work: dict[str, Any]) -> contextlib.AbstractContextManager:
    """``guard`` over the run of the cell in ``work``; nothing where there is none."""
    return guard.over(work) if guard is not None else contextlib.nullcontext()
