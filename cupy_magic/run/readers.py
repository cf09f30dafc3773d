"""Calls of a notebook's own function that only read an argument: ``s = total(x)`` with
``def total(a): return (a * 2.0 + 1.0).sum(axis=1)`` from an earlier cell.

:func:`~.aliases.only_read` takes an input handed to a function for one the function may
change (``center(x)`` with ``def center(a): a -= a.mean()``), so its device copy is
checksummed after the copy and after the cell, and in a batched run in every batch (on the
CPU fallback two passes over the input at about 2 GB/s: ``s = total(x)`` over 192 MB took
367 ms against 136 ms inline). Where the function's own source shows that it only reads
that parameter, by the same rules as a cell's (:mod:`.aliases`: every mention consumed at
once into a new value; no ``+=``, item assignment, in-place method, ``out=``, call of
another function with it, ``return a``, nested function or ``exec``), the argument counts as
consumed. The function is the object the cell's name holds before the cell runs, read from
its code object (not a decorator's wrapper), only where the cell does not bind that name and
the function was made in a cell (its source kept by the shell, never read again from a file
that may have changed since); a function of a module, a generator, a coroutine, or a
parameter that ``*args`` or ``**kwargs`` takes is not trusted. Nor is anything where the cell
mentions the function's name other than in its calls, or binds it anywhere (a comprehension's
target, ``except ... as``, an import, ``from m import *``), or where the cell, the function or
another notebook function the cell calls reaches other frames or code (``sys``,
``__main__``, ``inspect``, ``f.__code__ = ...``, ``f_globals``). Left open: such a swap made
two calls deep, or by a module's function.
"""

from __future__ import annotations

import ast
import functools
import inspect
import linecache
import types
from collections.abc import Mapping
from typing import Any

from .aliases import MODULE_NAMES, Reader, numpy_names, read_in
from .batching import _parsed
from .names import _binds

__all__ = ["reader_args"]

_LAZY = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def reader_args(source: str, namespace: Mapping[str, Any],
                modules: frozenset[str]) -> frozenset[Reader]:
    """The arguments of the cell's calls ``f(...)`` (``f`` a plain name in ``namespace``
    the cell binds nowhere: :func:`_called`) that the function only reads: ``("f", 0)``
    for the first positional one, ``("f", "a")`` for the keyword ``a=``. ``modules``: the
    names meaning the array module in ``namespace``, the globals of the notebook's
    functions."""
    found: set[Reader] = set()
    for name in _called(source):
        fn = namespace.get(name)
        if not isinstance(fn, types.FunctionType) or not _from_a_cell(fn.__code__):
            continue
        if _swaps(fn.__code__):  # def swap(): f.__code__ = g.__code__: no function trusted
            return frozenset()
        mine = modules if fn.__globals__ is namespace else frozenset(
            {*MODULE_NAMES, *numpy_names(fn.__globals__)})
        found |= {(name, p) for p in _read_params(fn.__code__, mine)}
    return frozenset(found)


@functools.lru_cache(maxsize=256)
def _swaps(code: types.CodeType) -> bool:
    """Whether the function compiled to ``code`` may reach other functions' code or the
    notebook's names past its globals (:func:`_reaches`), or has no source to tell."""
    node = _definition(code)
    return node is None or _reaches(list(ast.walk(node)), imports=False)


def _from_a_cell(code: types.CodeType) -> bool:
    """Whether ``code`` was compiled from a cell whose source the shell keeps in
    :mod:`linecache` (no modification time: never read again from a file, which may have
    changed since the function was made)."""
    entry = linecache.cache.get(code.co_filename)
    return entry is not None and len(entry) == 4 and entry[1] is None


# names and attributes through which code reaches another frame's or the notebook's names,
# or a function's code: a cell or a body with one of them is not trusted
_REACH_NAMES = frozenset({"__main__", "sys", "inspect", "builtins", "__builtins__"})
_REACH_ATTRS = frozenset({"__code__", "__globals__", "f_locals", "f_globals", "f_back",
                          "_getframe", "currentframe"})


def _reaches(nodes: list[ast.AST], imports: bool) -> bool:
    """Whether ``nodes`` mention :data:`_REACH_NAMES` or :data:`_REACH_ATTRS`
    (``sys._getframe(1).f_globals``, ``__main__.f = g``, ``f.__code__ = g.__code__``) or
    import: anything (``imports``), else from ``__main__`` or all of a module's names
    (``from helpers import *`` may rebind any)."""
    for n in nodes:
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ""]
            if imports or any(m.split(".")[0] in _REACH_NAMES for m in modules) or (
                    isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)):
                return True
        if (isinstance(n, ast.Name) and n.id in _REACH_NAMES) or (
                isinstance(n, ast.Attribute) and n.attr in _REACH_ATTRS):
            return True
    return False


@functools.lru_cache(maxsize=256)
def _called(source: str) -> frozenset[str]:
    """The plain names the cell calls (``f(...)``) and mentions nowhere else, nor binds
    anywhere (``[f(x) for f in fs]``, ``except E as f``, a ``match`` capture, an import),
    in a cell that reaches no other frame's names (``import __main__; __main__.f = g``):
    the functions stay the ones looked at before the cell."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return frozenset()
    nodes = list(ast.walk(tree))
    if _reaches(nodes, imports=False):
        return frozenset()
    funcs = {id(n.func) for n in nodes if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    called = {n.id for n in nodes if isinstance(n, ast.Name) and id(n) in funcs}
    other = {n.id for n in nodes if isinstance(n, ast.Name) and id(n) not in funcs}
    return frozenset(called - other - _binds(tree))


@functools.lru_cache(maxsize=256)
def _read_params(code: types.CodeType, modules: frozenset[str]) -> frozenset[int | str]:
    """The positions and keywords of the parameters of the function compiled to ``code``
    that its source only reads (``modules``: its names for the array module)."""
    if code.co_flags & _LAZY:
        return frozenset()  # its body runs later, over what it holds
    node = _definition(code)
    if node is None:
        return frozenset()
    args = node.args
    positional = [a.arg for a in (*args.posonlyargs, *args.args)]
    names = [*positional, *(a.arg for a in args.kwonlyargs)]
    if names != list(code.co_varnames[:len(names)]) or len(names) != (
            code.co_argcount + code.co_kwonlyargcount):
        return frozenset()  # the source read is not this code's
    body = ast.Module(body=node.body, type_ignores=[])
    if _reaches(list(ast.walk(body)), imports=True):
        return frozenset()  # sys._getframe(1).f_globals["x"][0] = 1, import __main__
    # a name the body declares global or nonlocal is not the parameter's alone
    shared = {n for s in ast.walk(body) if isinstance(s, (ast.Global, ast.Nonlocal))
              for n in s.names}
    read = read_in(body, frozenset(names) - shared, modules)
    posonly = {a.arg for a in args.posonlyargs}
    return frozenset({i for i, a in enumerate(positional) if a in read}
                     | {a for a in names if a in read and a not in posonly})


def _definition(code: types.CodeType) -> ast.FunctionDef | None:
    """The ``def`` that compiled to ``code``, from its source (IPython keeps each cell's),
    or None where there is none to read or it is another function's (parsed once, shared
    with the batch planner's readers of functions: :func:`~.batching._parsed`; not to be
    changed)."""
    node = _parsed(code)
    return node if node is not None and node.name == code.co_name else None
