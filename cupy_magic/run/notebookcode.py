"""What the notebook's own code reads and writes as globals: the functions, classes and
objects of its earlier cells that a namespace binds (:func:`notebook_reads`), for
:class:`~.staleguard.StaleGuard`."""

from __future__ import annotations

import dis
import functools
import types
import weakref
from collections.abc import Iterable, Mapping
from itertools import compress
from typing import Any, NamedTuple

from .globalreads import ANY, _code_globals
from .reaches import notebook_functions, of_notebook_class
from .rehome import cell_codes

__all__ = ["NotebookCode", "notebook_reads", "store_offsets"]

_HISTORY = ("In", "Out", "_ih", "_oh", "_dh")  # IPython's: texts, results, folders
_HOLDS_CODE = (types.FunctionType, types.MethodType, functools.partial, dict, list, tuple,
               set, frozenset, types.SimpleNamespace,
               type(functools.lru_cache(lambda: 0)))  # a cached function's __wrapped__


@functools.lru_cache(maxsize=1024)
def store_offsets(code: types.CodeType) -> dict[int, str]:
    """The globals ``code`` itself writes or deletes (``global _model; _model = ...``), by
    the offset of the instruction that does."""
    return {i.offset: i.argval for i in dis.get_instructions(code)
            if i.opname in ("STORE_GLOBAL", "DELETE_GLOBAL")}


def _code_stores(code: types.CodeType) -> frozenset[str]:
    return frozenset(store_offsets(code).values())


class NotebookCode(NamedTuple):
    """What the notebook's functions read as globals and write as globals (each with
    :data:`~.globalreads.ANY` where one calls ``globals()``, ``eval`` or ``exec``)."""

    reads: frozenset[str]
    writes: frozenset[str]


def notebook_reads(namespace: Mapping[str, Any]) -> NotebookCode:
    """The globals that the notebook's functions read, where the namespace binds them:
    functions (with what their closures, defaults and partials hold), those lists, tuples,
    sets and dicts hold (:func:`~.reaches.notebook_functions`; not IPython's ``In`` and
    ``Out``), and the methods, properties, static and class methods of the notebook's classes
    (an ``ABC``'s too) and of its objects' classes; with :data:`~.globalreads.ANY` where one
    calls ``globals()``, ``eval`` or ``exec``; and the globals they write."""
    history = {id(namespace.get(n)) for n in _HISTORY}
    values = namespace.values()  # scanned in C (a long session's namespace holds thousands)
    kinds = set(map(type, values))
    classes = {k for k in kinds if of_notebook_class(k, namespace)}  # its objects' classes
    picked = {k for k in kinds if k in _HOLDS_CODE or issubclass(k, type)} | classes
    found: list[tuple[frozenset[str], frozenset[str]]] = []
    for value in compress(values, map(picked.__contains__, map(type, values))):
        if id(value) in history:
            continue
        if issubclass(type(value), type):  # a class (its metaclass: type, ABCMeta, ...)
            if of_notebook_class(value, namespace):
                classes.add(value)
            continue
        found.append(_function_reads(value, namespace))
    for cls in classes:
        found += [_reads_of(fn) for fn in _class_functions(cls, namespace)]
    return NotebookCode(frozenset().union(*(r for r, _ in found)),
                        frozenset().union(*(w for _, w in found)))


def _reads_of(fn: types.FunctionType) -> tuple[frozenset[str], frozenset[str]]:
    reads = _code_globals(fn.__code__)
    writes = frozenset().union(*map(_code_stores, cell_codes(fn.__code__)))
    return reads, writes | {ANY} if ANY in reads else writes


def _function_reads(value: Any, namespace: Mapping[str, Any]
                    ) -> tuple[frozenset[str], frozenset[str]]:
    """What the notebook's functions that ``value`` may run read and write as globals; a
    function's kept with it (a notebook's fifty functions took 2 ms a cell, each
    looked at again)."""
    hit = _READS.get(value) if type(value) is types.FunctionType else None
    if hit is None:
        each = [_reads_of(fn) for fn in notebook_functions(value, namespace)]
        hit = frozenset().union(*(r for r, _ in each)), frozenset().union(*(w for _, w in each))
        if type(value) is types.FunctionType:
            _READS[value] = hit
    return hit


_READS: weakref.WeakKeyDictionary[types.FunctionType, tuple[frozenset[str], frozenset[str]]] = \
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
