"""Functions from earlier plain cells, called by a ``%%gpu`` cell, run as the cell's own.

A plain cell's ``def loss(w): return ((X @ w - y) ** 2).mean()`` reads the user namespace.
Called from a ``%%gpu`` cell it would read it too: the NumPy ``X`` beside the cell's device
``w`` (on a GPU CuPy refuses the mix), ``np`` as NumPy, none of the names the cell has bound
so far, and its ``global`` writes would land in the user namespace even if the cell fails.
A plain cell calling it sees none of that: its helper reads and writes the one namespace the
cell runs in. So for the run, each such helper the cell names (and each helper those name,
and so on) is made again over the cell's namespace (:func:`bind`): the same code, defaults,
closure and attributes, as a plain cell's call would run it, only with the cell's globals.
The global names the helpers read count among the cell's reads, so the NumPy arrays among
them move to the device with the cell's other inputs.

The copies never leave the cell: the commit finds a copy wherever the cell put it and puts the
user's function back (:func:`user_function`), so ``h = loss`` after the cell is ``loss``.
"""

from __future__ import annotations

import dis
import functools
import types
from collections.abc import Iterator
from typing import Any

__all__ = ["bind", "global_names", "helpers_of", "user_function"]

_GLOBAL_OPS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL"})
_MARK = "__cupy_magic_helper__"  # a copy's attribute: the user's function it was made from


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


@functools.lru_cache(maxsize=1024)
def global_names(code: types.CodeType) -> tuple[frozenset[str], frozenset[str]]:
    """The global names ``code`` (and the code nested in it) reads (``LOAD_GLOBAL``,
    ``LOAD_NAME``), and those it assigns or deletes (``STORE_GLOBAL``, ``DELETE_GLOBAL``);
    not the attribute names ``co_names`` also lists."""
    found = [(i.opname, i.argval) for c in _codes(code) for i in dis.get_instructions(c)
             if i.opname in _GLOBAL_OPS and isinstance(i.argval, str)]
    return (frozenset(n for op, n in found if op.startswith("LOAD")),
            frozenset(n for op, n in found if not op.startswith("LOAD")))


def helpers_of(code: types.CodeType, namespace: dict[str, Any]
               ) -> tuple[dict[str, types.FunctionType], frozenset[str], frozenset[str]]:
    """The functions of ``namespace`` (made by plain cells: their globals are it) that
    ``code`` names, directly or through one another, by name; the global names they read,
    and those they assign or delete (``global c; c += 1``)."""
    helpers: dict[str, types.FunctionType] = {}
    reads: set[str] = set()
    writes: set[str] = set()
    todo = list(global_names(code)[0])
    while todo:
        name = todo.pop()
        value = namespace.get(name)
        if name in helpers or type(value) is not types.FunctionType \
                or value.__globals__ is not namespace:
            continue
        helpers[name] = value
        read, written = global_names(value.__code__)
        reads |= read
        writes |= written
        todo.extend(read)
    return helpers, frozenset(reads), frozenset(writes)


def bind(work: dict[str, Any], helpers: dict[str, types.FunctionType]) -> None:
    """Put into ``work`` (the cell's namespace) a copy of each helper over it, under its name,
    unless the cell's namespace already holds something else there."""
    for name, fn in helpers.items():
        if work.get(name) is not fn:
            continue
        copy = types.FunctionType(fn.__code__, work, fn.__name__, fn.__defaults__,
                                  fn.__closure__)
        copy.__kwdefaults__ = fn.__kwdefaults__
        copy.__qualname__, copy.__module__, copy.__doc__ = \
            fn.__qualname__, fn.__module__, fn.__doc__
        copy.__annotations__ = fn.__annotations__
        copy.__dict__.update(fn.__dict__)
        setattr(copy, _MARK, fn)
        work[name] = copy


def user_function(value: Any) -> Any:
    """The user's function a copy :func:`bind` made stands for; ``value`` if it is none."""
    if type(value) is types.FunctionType:
        return value.__dict__.get(_MARK, value)
    return value
