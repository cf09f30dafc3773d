"""Re-homing what a successful cell defined onto the user namespace.

A ``%%gpu`` cell runs in a copy of the user namespace; the functions and classes it defines
are made there, and would keep reading it after the cell is over (old values, ``np`` as
CuPy, the device copies of the inputs) and write their ``global`` names into it.
:class:`Rehomer` gives them the user namespace instead, also where the cell's results hold
them (a list, a dict, a ``functools.partial``, a bound method), as a plain cell's read it.
"""

from __future__ import annotations

import collections
import functools
import types
from collections.abc import Iterable, Iterator
from typing import Any

from ..compat.proxy import ArrayModule
from ..compat.scope import host_value

__all__ = ["Rehomer", "cell_codes", "makes_functions"]

_CACHED = type(functools.lru_cache(lambda: None))  # what lru_cache and cache make
_DICTS = (dict, collections.OrderedDict, collections.defaultdict)  # changed in place
_IN_PLACE = (list, set, *_DICTS)
# what keeps a running frame, by the attribute that holds it
_FRAMED = {types.GeneratorType: "gi_frame", types.CoroutineType: "cr_frame",
           types.AsyncGeneratorType: "ag_frame"}
# what the cell's own functions can be reached through (a tuple subclass: a named tuple)
_REACHES = frozenset({*_FRAMED, ArrayModule, types.FunctionType, types.MethodType, staticmethod,
                      classmethod, property, functools.cached_property, functools.partial, _CACHED,
                      list, tuple, set, frozenset, *_DICTS})
# code objects a cell compiles that make no object which outlives the cell holding its globals
_DEEPEST = 50  # objects nested deeper than this are left as they are (no RecursionError)
# items of containers a commit walks one by one, at most: past it a container is left (a
# lambda cell naming a list of a million tuples walked them all, seconds at every such cell)
_ITEMS = 10_000
_INLINED = frozenset({"<listcomp>", "<setcomp>", "<dictcomp>"})
_MARK = "__cupy_magic_numpy__"  # what a function or type of the array module in a cell has


def cell_codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and every code object nested in it (functions, lambdas, classes, ...)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from cell_codes(const)


def makes_functions(code: types.CodeType) -> bool:
    """Whether running ``code`` can make a function, a class or a generator (which hold the
    namespace it ran in); a cell that makes none has nothing to re-home in its containers."""
    return any(c.co_name not in _INLINED for c in cell_codes(code) if c is not code)


class Rehomer:
    """Give the functions and classes a cell defined the user namespace as their globals.

    Without it they would keep reading the cell's copy of the namespace. So would what
    wraps or holds them: a decorator's closure (``functools.wraps``), ``functools.partial``,
    ``functools.lru_cache``/``cache``, a class's ``property``, ``cached_property``,
    ``staticmethod`` and ``classmethod``; those are re-homed too (closure cells in place; a
    partial, a cache or a property is made again over the re-homed function, the cache
    empty).

    With ``deep``, also what holds them in plain containers: the items of a ``list``,
    ``tuple`` (named tuples too), ``set`` and ``frozenset``, the values of a ``dict``
    (``OrderedDict``, ``defaultdict``), a ``functools.partial``'s arguments, a bound method's
    function. Lists, sets and dicts are changed in place (they keep their identity, also one
    the user had before the cell); tuples, frozensets, partials and bound methods are made
    again when something in them changed. Cost: one pass in C over the types of each such
    container's items, and a Python pass only over those that hold one of these types;
    nothing else is entered (no array's elements, no other object's ``__dict__``, no dict's
    keys, nothing nested more than 50 deep, no container whose items would take the walk past
    10,000 items in all), so a function kept only there still reads the cell's copy. A tuple
    met again through a cycle of its own keeps what it held.

    A generator (a coroutine, an async generator) the cell made cannot be re-homed: its
    frame's globals are fixed when it is made, before any commit. Those met are kept in
    :attr:`stuck`, for the report to name.

    Each object is walked once per commit (cycles end; the same function reached twice, or
    bound to two names, becomes the same re-homed function); the originals are kept while the
    rehomer lives, so that their ids are not reused meanwhile.

    Parameters
    ----------
    filename
        The cell's filename: only functions compiled from it are made again.
    namespace
        The user namespace, their new globals.
    deep
        Whether to walk plain containers (see above).
    work
        The namespace the cell ran in: where the cell kept it (``g = globals()``), the user
        namespace instead.
    """

    def __init__(self, filename: str, namespace: dict[str, Any], deep: bool = True,
                 work: dict[str, Any] | None = None) -> None:
        self.filename, self.namespace, self.deep = filename, namespace, deep
        self.work = work  # the cell's namespace: `g = globals()` in the cell is the user's
        self.seen: dict[int, tuple[Any, Any]] = {}
        self.depth = 0
        self.left = _ITEMS  # items the walk may still enter one by one
        self.stuck: list[Any] = []  # the cell's generators, which still read its namespace

    def __call__(self, value: Any) -> Any:
        """``value`` re-homed: the same object, changed in place, or one made again."""
        if value is self.work and value is not None:
            return self.namespace
        met = self.seen.get(id(value))
        if met is not None and met[0] is value:
            return met[1]
        self.seen[id(value)] = (value, value)
        kind = type(value)
        if self.depth > _DEEPEST:
            return value
        self.depth += 1
        try:
            new = self._walk(value, kind)
        finally:
            self.depth -= 1
        self.seen[id(value)] = (value, new)
        return new

    def _walk(self, value: Any, kind: type) -> Any:
        # issubclass(kind, ...), not isinstance: it asks the object's __class__, which may raise
        if kind is ArrayModule or ((kind is types.FunctionType or issubclass(kind, type))
                                   and _MARK in value.__dict__):
            return host_value(value)  # the array module in the cell: NumPy's after it
        if kind is types.FunctionType:
            return self._function(value)
        if issubclass(kind, type):
            return self._class(value)
        if kind in _FRAMED:
            frame = getattr(value, _FRAMED[kind])
            if frame is not None and frame.f_globals is not self.namespace \
                    and frame.f_code.co_filename == self.filename:
                self.stuck.append(value)
            return value
        if not self.deep:
            return self._wrapper(value)
        if kind in _IN_PLACE:
            return self._in_place(value)
        if kind is frozenset or issubclass(kind, tuple):
            return self._rebuilt(value)
        if kind is types.MethodType:
            inner = self(value.__func__)
            return value if inner is value.__func__ else types.MethodType(inner, value.__self__)
        return self._wrapper(value)

    def _function(self, value: types.FunctionType) -> types.FunctionType:
        if value.__code__.co_filename != self.filename or value.__globals__ is self.namespace:
            self._rewrap(value)  # a library's wrapper made in the cell
            return value
        defaults = value.__defaults__
        if defaults and self.deep and not _same(moved := self._each(list(defaults)), defaults):
            defaults = tuple(moved)  # `lambda a, m=np: ...`
        new = types.FunctionType(value.__code__, self.namespace, value.__name__,
                                 defaults, value.__closure__)
        self.seen[id(value)] = (value, new)
        new.__kwdefaults__ = value.__kwdefaults__
        new.__qualname__ = value.__qualname__
        new.__doc__ = value.__doc__
        new.__dict__.update({k: self(v) for k, v in value.__dict__.items()})  # __wrapped__
        new.__annotations__ = value.__annotations__
        for cell in value.__closure__ or ():  # shared with `new`: a decorator's function
            if _filled(cell) and (moved := self(cell.cell_contents)) is not cell.cell_contents:
                cell.cell_contents = moved
        return new

    def _class(self, value: type) -> type:
        """Only what the cell wrote is replaced; classes in it too."""
        inner_prefix = value.__qualname__ + "."
        for key, attr in list(vars(value).items()):
            if isinstance(attr, type) and not attr.__qualname__.startswith(inner_prefix):
                continue
            if (moved := self(attr)) is not attr:
                setattr(value, key, moved)
        return value

    def _wrapper(self, value: Any) -> Any:
        """What wraps one function: a staticmethod, a property, a partial, a cache."""
        if issubclass(type(value), (staticmethod, classmethod)):
            if (inner := self(value.__func__)) is not value.__func__:
                return type(value)(inner)
        elif type(value) is property:
            parts = (value.fget, value.fset, value.fdel)
            moved_parts = [None if f is None else self(f) for f in parts]
            if any(a is not b for a, b in zip(parts, moved_parts, strict=True)):
                return property(*moved_parts, value.__doc__)
        elif issubclass(type(value), functools.cached_property):
            value.func = self(value.func)
        elif type(value) is functools.partial:
            return self._partial(value)
        elif type(value) is _CACHED and (inner := self(value.__wrapped__)) \
                is not value.__wrapped__:
            return functools.lru_cache(**value.cache_parameters())(inner)  # lru_cache, cache
        return value

    def _partial(self, value: functools.partial) -> functools.partial:
        inner = self(value.func)
        args = self._each(list(value.args)) if self.deep else value.args
        keywords = dict(zip(value.keywords, self._each(list(value.keywords.values())),
                            strict=True)) if self.deep else value.keywords
        if inner is value.func and _same(args, value.args) \
                and _same(keywords.values(), value.keywords.values()):
            return value
        return functools.partial(inner, *args, **keywords)

    def _each(self, items: list[Any]) -> list[Any]:
        """``items`` re-homed, in order; ``items`` itself when none was walked into (none can
        hold a function, or there are too many)."""
        if len(items) > self.left or not _may_hold(items):
            return items
        self.left -= len(items)
        return [self(v) for v in items]

    def _in_place(self, value: list | set | dict) -> Any:
        """A list, a set or a dict with its items re-homed in place."""
        if len(value) > self.left:  # not copied only to be left
            return value
        if isinstance(value, dict):
            keys, olds = list(value), list(value.values())
            if (news := self._each(olds)) is olds:
                return value
            for key, old, new in zip(keys, olds, news, strict=True):
                if new is not old:
                    dict.__setitem__(value, key, new)
            return value
        items = list(value)
        if (moved := self._each(items)) is items:
            return value
        if isinstance(value, list):
            for index, (old, new) in enumerate(zip(items, moved, strict=True)):
                if new is not old:
                    value[index] = new
        else:
            for old, new in zip(items, moved, strict=True):
                if new is not old:
                    value.discard(old)
                    value.add(new)
        return value

    def _rebuilt(self, value: tuple | frozenset) -> Any:
        """A tuple (a named tuple too) or a frozenset made again if an item changed."""
        items = list(value)
        moved = self._each(items)
        if moved is items or _same(moved, items):
            return value
        if isinstance(value, frozenset):
            return frozenset(moved)
        return type(value)(*moved) if hasattr(value, "_fields") else type(value)(moved)

    def _rewrap(self, wrapper: types.FunctionType) -> None:
        """Re-home, in place, the cell's functions a function from elsewhere holds in its
        closure or as ``__wrapped__``: a library's decorator applied in the cell made it around
        one (``contextlib.contextmanager``, ``torch.no_grad()``). Nothing else is walked."""
        def ours(held: Any) -> bool:
            return isinstance(held, types.FunctionType) and \
                held.__code__.co_filename == self.filename

        for cell in wrapper.__closure__ or ():
            if _filled(cell) and ours(cell.cell_contents):
                cell.cell_contents = self(cell.cell_contents)
        held = wrapper.__dict__.get("__wrapped__")
        if ours(held):
            wrapper.__wrapped__ = self(held)  # type: ignore[attr-defined]


def _may_hold(items: Iterable[Any]) -> bool:
    """Whether one of ``items`` is of a type a cell's function can be reached through (the
    types are collected in C: a list of a million floats takes about 20 ms)."""
    return any(t in _REACHES or issubclass(t, (type, tuple)) for t in set(map(type, items)))


def _same(a: Iterable[Any], b: Iterable[Any]) -> bool:
    return all(x is y for x, y in zip(a, b, strict=True))


def _filled(cell: Any) -> bool:
    """Whether a closure cell holds a value (one of a name not yet bound raises)."""
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True
