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

import functools
import sys
import types
from collections.abc import Iterable, Mapping
from itertools import compress
from types import FrameType, TracebackType
from typing import Any

from ..compat.scope import host_value
from .errors import CellError
from .globalreads import ANY, _code_globals
from .reaches import notebook_functions, of_notebook_class

__all__ = ["StaleGuard", "notebook_reads"]

_MISSING = object()
_BY_VALUE = (int, float, complex, str, bytes, bool, type(None))  # `n = 500` again: the same
_HOLDS_CODE = (types.FunctionType, types.MethodType, functools.partial, dict, list, tuple,
               set, frozenset, types.SimpleNamespace)


def notebook_reads(namespace: Mapping[str, Any]) -> frozenset[str]:
    """The globals that the notebook's functions read, where the namespace binds them:
    functions (with what their closures, defaults and partials hold), those lists, tuples,
    sets and dicts hold (:func:`~.reaches.notebook_functions`), and the methods, properties,
    static and class methods of the notebook's classes and of its objects' classes; with
    :data:`~.globalreads.ANY` where one calls ``globals()``."""
    values = list(namespace.values())
    kinds = set(map(type, values))
    classes = {k for k in kinds if of_notebook_class(k, namespace)}  # its objects' classes
    holders = {k for k in kinds if k in _HOLDS_CODE}
    picked = kinds & (holders | classes | {type})
    names: set[str] = set()
    if not picked:
        return frozenset()
    for value in compress(values, map(picked.__contains__, map(type, values))):
        if type(value) is type:
            if of_notebook_class(value, namespace):
                classes.add(value)
            continue
        for fn in notebook_functions(value, namespace):
            names |= _code_globals(fn.__code__)
    for cls in classes:
        for fn in _class_functions(cls, namespace):
            names |= _code_globals(fn.__code__)
    return frozenset(names)


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
                 watched: frozenset[str], filename: str) -> None:
        self.namespace, self.work, self.watched, self.filename = \
            namespace, work, watched, filename
        self.base: dict[str, Any] = {}
        self.refusal: CellError | None = None
        self._previous: Any = None

    @classmethod
    def for_cell(cls, namespace: dict[str, Any], work: dict[str, Any],
                 binds: Iterable[str], skip: Iterable[str],
                 filename: str) -> StaleGuard | None:
        """The guard of a cell that may bind ``binds`` (not ``skip``: the array module's
        names, which are the cell's own), or None where no function of the notebook reads
        any of them."""
        names = frozenset(binds) - frozenset(skip) - {"__builtins__"}
        if not names:
            return None
        reads = notebook_reads(namespace)
        watched = names if ANY in reads else names & reads
        return cls(namespace, work, watched, filename) if watched else None

    def _changed(self, name: str) -> bool:
        now, was = self.work.get(name, _MISSING), self.base[name]
        if now is was or host_value(now) is was:  # `import numpy as npy`: NumPy's, as before
            return False
        return not (type(now) is type(was) and type(now) in _BY_VALUE and now == was)

    def _refuse(self, frame: FrameType, names: frozenset[str]) -> CellError | None:
        name = next((n for n in sorted(names) if self._changed(n)), None)
        if name is None:
            return None
        code = frame.f_code
        back, line = frame.f_back, None
        while back is not None and line is None:
            line = back.f_lineno if back.f_code.co_filename == self.filename else None
            back = back.f_back
        how = "deleted" if self.work.get(name, _MISSING) is _MISSING else "rebound"
        at = f"line {line} of the cell" if line is not None else "the cell"
        return CellError(
            f"{at} ran {code.co_qualname}() from an earlier cell, which reads {name} as its "
            f"global, after the cell {how} {name}: %%gpu runs the cell in a namespace of its "
            f"own until it succeeds, so it would read your {name} from before the cell, where "
            f"in a plain cell it reads the new one; pass {name} to it as an argument, or "
            f"define {code.co_name} in this cell (nothing was committed)")

    def _global(self, frame: FrameType, event: str, arg: Any) -> Any:
        theirs = self._previous(frame, event, arg) if self._previous is not None else None
        if frame.f_globals is self.namespace and event == "call" and self.refusal is None:
            reads = _code_globals(frame.f_code)
            names = self.watched if ANY in reads else self.watched & reads
            if names and (refusal := self._refuse(frame, names)) is not None:
                self.refusal = refusal
                raise refusal
        return theirs

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
