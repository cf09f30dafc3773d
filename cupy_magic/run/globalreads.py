"""Calls of a notebook's own function that reads, as a global, a name the cell has bound
or an input the cell has changed by then: ``X = X * 2`` (or ``X += 1``, ``Z = 5``), then
``t = g()`` with ``def g(): return X.sum()`` from an earlier cell. ``g``'s globals are the
user's namespace, which a ``%%gpu`` cell writes only when it succeeds: ``g`` would read the
``X`` from before the cell, where a plain cell's reads the new one. :func:`stale_global`
finds the first such call before the cell runs, so that it is refused, not silently wrong.
"""

from __future__ import annotations

import ast
import dis
import functools
import types
from collections.abc import Mapping, Set
from typing import Any

from .graphscan import _first
from .heldwrites import _changes, _parse
from .staleread import BLOCKS

__all__ = ["stale_global"]

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_DEPTH = 3  # a function's own calls of the notebook's functions, followed this deep


def stale_global(source: str, namespace: Mapping[str, Any], inputs: Set[str]) -> str | None:
    """The refusal of the first call of a function from an earlier cell (one whose globals
    are ``namespace``) that reads as a global, itself or through such functions it calls,
    a name a top-level statement before the call binds (``Z = 5``, ``X = X * 2``, ``del
    Z``; not an import) or an input one changes in place (``X += 1``, ``X[0] = 5``,
    ``X.sort()``, ``out=X``); or None. A statement with a block counts its own bindings
    for the calls in it. A name the cell binds itself (``def g`` in the cell) is the
    cell's, not looked at; nor are methods, or changes made through a function the cell
    hands an input to."""
    tree = _parse(source)
    if tree is None:
        return None
    first, loads, bound = _scan(tree, frozenset(inputs))
    if not first:
        return None
    for index, name, line in loads:
        if name in bound:
            continue
        for read in _global_reads(namespace.get(name), namespace):
            when = first.get(read)
            if when is not None and (when[0] < index or (
                    when[0] == index and isinstance(tree.body[index], BLOCKS))):
                how = "changes the input" if when[2] else "binds"
                return (f"line {line} calls {name}(), a function from an earlier cell that "
                        f"reads {read} as its global, after the cell {how} {read} (line "
                        f"{when[1]}): %%gpu runs the cell in a namespace of its own until "
                        f"it succeeds, so {name}() would read your {read} from before the "
                        f"cell, where in a plain cell it reads the new one; pass {read} to it "
                        f"as an argument, or define {name} in this cell")
    return None


@functools.lru_cache(maxsize=256)
def _scan(tree: ast.Module, inputs: frozenset[str]) -> tuple[
        dict[str, tuple[int, int, bool]], tuple[tuple[int, str, int], ...], frozenset[str]]:
    """Of ``tree``: each name's first top-level statement that binds it or, for an input,
    changes it in place (its index, line, and whether a change); the names each statement
    reads (index, name, line); and every name the cell binds anywhere."""
    first: dict[str, tuple[int, int, bool]] = {}
    loads: list[tuple[int, str, int]] = []
    everywhere: set[str] = set()
    for index, stmt in enumerate(tree.body):
        for node in _walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                loads.append((index, node.id, node.lineno))
            for target in _changes(node):  # first: X += 1 changes the input, and binds it
                name = _first(target)[0]
                if name in inputs:
                    first.setdefault(name, (index, target.lineno, True))
            for name, line in _binds(node):
                everywhere.add(name)
                first.setdefault(name, (index, line, False))
        for node in ast.walk(stmt):  # names bound in the cell's own functions too
            everywhere.update(name for name, _ in _binds(node))
    return first, tuple(loads), frozenset(everywhere)


def _walk(node: ast.AST) -> list[ast.AST]:
    """``node`` and what it holds, less the bodies of functions, lambdas, classes and
    comprehensions (their names are their own; a function's def binds its name)."""
    found, todo = [], [node]
    while todo:
        current = todo.pop()
        found.append(current)
        if current is not node and isinstance(current, _SCOPES):
            continue
        todo.extend(ast.iter_child_nodes(current))
    return found


def _binds(node: ast.AST) -> list[tuple[str, int]]:
    """The names ``node`` binds at the cell's level (not an import: the same module,
    whose globals read the same)."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return [(node.id, node.lineno)]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [(node.name, node.lineno)]
    return []


def _global_reads(fn: Any, namespace: Mapping[str, Any], depth: int = 0) -> set[str]:
    """The globals a function of the notebook (its globals ``namespace``) reads, with
    those of the notebook's functions it reads in turn; empty for anything else."""
    if not isinstance(fn, types.FunctionType) or fn.__globals__ is not namespace:
        return set()
    names = set(_code_globals(fn.__code__))
    if depth < _DEPTH:
        for name in list(names):
            names |= _global_reads(namespace.get(name), namespace, depth + 1)
    return names


@functools.lru_cache(maxsize=1024)
def _code_globals(code: types.CodeType) -> frozenset[str]:
    """The global names ``code`` and the code inside it (comprehensions, inner functions)
    load."""
    names = {i.argval for i in dis.get_instructions(code)
             if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_globals(const)
    return frozenset(names)
