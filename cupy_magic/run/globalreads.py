"""Calls of a notebook's own function that reads, as a global, a name the cell has bound
or an input the cell has changed by then: ``X = X * 2`` (or ``X += 1``, ``Z = 5``), then
``t = g()`` with ``def g(): return X.sum()`` from an earlier cell. ``g``'s globals are the
user's namespace, which a ``%%gpu`` cell writes only when it succeeds: ``g`` would read the
``X`` from before the cell, where a plain cell's reads the new one. So would a function, the
cell's own too, that reads an object holding an input the cell changed in its device copy
(``X += 1``, then ``h()`` with ``def h(): return L[0].sum()`` and ``L = [X]``).
:func:`stale_global` finds the first such call before the cell runs, so that it is
refused, not silently wrong.
"""

from __future__ import annotations

import ast
import dis
import functools
import types
from collections.abc import Mapping
from typing import Any

import numpy as np

from .dunders import dunder_uses
from .graphscan import _bound, _first
from .heldwrites import _bound_of, _changes, _parse, holder_arrays
from .names import SCOPES
from .reaches import (
    method_of,
    notebook_functions,
    of_notebook_class,
    self_methods,
    static_attr,
)
from .rehome import cell_codes
from .staleread import BLOCKS

__all__ = ["stale_global"]

_SCOPES = (*SCOPES, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)  # run when called, not here
_DEPTH = 3  # a function's own calls of the notebook's functions, followed this deep


def stale_global(source: str, namespace: Mapping[str, Any],
                 inputs: Mapping[str, np.ndarray]) -> str | None:
    """The refusal of the first call of a function from an earlier cell (one whose globals
    are ``namespace``) that reads as a global, itself or through such functions it calls,
    a name a top-level statement before the call binds (``Z = 5``, ``X = X * 2``, ``del
    Z``; not an import) or an input one changes in place (``X += 1``, ``X[0] = 5``,
    ``X.sort()``, ``out=X``); or that reads an object holding such a changed input (``L``
    with ``L = [X]``: ``def h(): return L[0].sum()``), as may a function the cell defines;
    or None. A statement with a block counts its own bindings for the calls in it. A name
    the cell binds itself (``def g`` in the cell) is the cell's. A class from an earlier
    cell counts as its ``__init__`` (``C()``), and a method called on a name from an earlier
    cell (``c.m()``, ``C.m(c)``) as that function, with the object as a holder too
    (``self.data`` holding a changed input). Changes made through a function the cell hands an
    input to are not looked at."""
    tree = _parse(source)
    if tree is None:
        return None
    first, loads, bound, own = _scan(tree, frozenset(inputs))
    if not first:
        return None
    called = [namespace.get(n[:-9]) for _, n, _ in loads  # C(...): "C.__call__"
              if n.endswith(".__call__") and n[:-9] not in bound]
    classes = [c for c in dict.fromkeys(called)
               if isinstance(c, type) and of_notebook_class(c, namespace)]
    for index, name, line in loads:
        base, _, attr = name.partition(".")
        if name in own:  # the cell's own function: its globals are the cell's (holders only),
            theirs = {r for n in own[name] - bound  # and the notebook's functions it calls
                      for r in _global_reads(namespace.get(n), namespace)}
            reads, outside = own[name] | theirs, theirs
        elif base in own or (base in bound and (not attr or attr[:2] == "__")):
            continue  # (a name the cell binds: its methods where it calls them, c.m())
        elif base in bound:  # c = C() in the cell, then c.m(): C's m, for each class it names
            fns = [(c, f) for c in classes if (f := method_of(c, attr, namespace)) is not None]
            if not fns:
                continue
            reads = outside = set().union(*(_method_reads(f, c, namespace) for c, f in fns))
        elif attr:  # c.m(), c.p, c + 1: the method's globals, and c itself, which it may read
            obj = namespace.get(base)  # issubclass(type(obj)): isinstance asks obj.__class__
            fn = method_of(type(obj) if issubclass(type(obj), type) and attr[:2] == "__"
                           else obj, attr, namespace)  # C(...), len(C): the metaclass's
            if fn is None:
                continue
            reads = outside = _method_reads(fn, obj, namespace)
            held = _holds_changed(obj, inputs, first, index, tree)
            if held:
                return _stale_holder(line, name, "a method from an earlier cell,", base, held)
        else:
            reads = outside = _global_reads(namespace.get(name), namespace)
        if ANY in reads:  # it may read any global: each the cell bound by then
            outside = {*outside, *first} if ANY in outside else outside
            reads = {*reads, *first} - {ANY}
        for read in reads:
            when = first.get(read)
            if when is not None and read in outside and _before(when[0], index, tree):
                return _stale_read(name, line, read, when, namespace)
            if when is None and read not in inputs:
                held = _holds_changed(namespace.get(read), inputs, first, index, tree)
                if held:
                    return _stale_holder(line, name, f"which reads {read} as its global,",
                                         read, held)
    return None


def _stale_read(name: str, line: int, read: str, when: tuple[int, int, bool],
                namespace: Mapping[str, Any]) -> str:
    """The refusal of the use of ``name`` (a function, ``c.m``, or an object that may run
    one of the notebook's functions) on ``line``, which reads ``read`` as a global after
    the cell bound or changed it (``when``: its statement, line, and whether a change)."""
    base, _, attr = name.partition(".")
    obj = namespace.get(base)
    how = "changes the input" if when[2] else "binds"
    fns = [] if attr else notebook_functions(obj, namespace)
    fn = next((f for f in fns if read in _code_globals(f.__code__)),  # the one that reads it
              next((f for f in fns if read in _global_reads(f, namespace)), None))
    member = static_attr(obj, attr) if attr else None
    if attr[:2] == attr[-2:] == "__" and len(attr) > 4:  # k + 1, len(k), k[0], k()
        where = base if isinstance(obj, type) else f"{base}'s class"
        what, runs = f"uses {base}, which runs {base}.{attr}(), a function", f"{base}.{attr}()"
    elif isinstance(member, property):  # k.total
        where, what, runs = f"{base}'s class", f"reads {name}, a property", name
    elif fn is None or fn is obj or (isinstance(obj, type) and fn.__name__ == "__init__"):
        where = name if not attr else base if isinstance(obj, type) else f"{base}'s class"
        if attr and not isinstance(obj, type) and obj is not None and \
                not of_notebook_class(type(obj), namespace) and \
                (held := method_of(obj, attr, namespace)) is not None:  # ns.g: g, which it holds
            where = held.__qualname__
        what, runs = f"calls {name}(), a function", f"{name}()"
    else:  # fns["g"](), k.p, len(k), a partial, a decorated function: what it may run
        where, runs = fn.__qualname__.split(".")[0], f"{fn.__qualname__}()"
        what = f"uses {name}, which may run {runs}, a function"
    return (f"line {line} {what} from an earlier cell that reads {read} as its global, after "
            f"the cell {how} {read} (line {when[1]}): %%gpu runs the cell in a namespace of "
            f"its own until it succeeds, so {runs} would read your {read} from before the "
            f"cell, where in a plain cell it reads the new one; pass {read} to it as an "
            f"argument, or define {where} in this cell")


def _stale_holder(line: int, call: str, what: str, holder: str, held: tuple[str, int]) -> str:
    """The refusal of a call (``what`` it is) that reads ``holder``, which holds the input
    the cell changed (``held``: its name and the change's line)."""
    x, at = held
    return (f"line {line} calls {call}(), {what} after the cell changes the input {x} in its "
            f"device copy (line {at}): {holder} holds your {x}, which that change does not "
            f"reach until the cell succeeds, where in a plain cell {call}() reads the changed "
            f"one; pass {x} to it as an argument")


def _before(when: int, index: int, tree: ast.Module) -> bool:
    """Whether top-level statement ``when`` runs before a call in statement ``index`` (or
    may: the same statement, one with a block)."""
    return when < index or (when == index and isinstance(tree.body[index], BLOCKS))


def _holds_changed(obj: Any, inputs: Mapping[str, np.ndarray],
                   first: Mapping[str, tuple[int, int, bool]], index: int,
                   tree: ast.Module) -> tuple[str, int] | None:
    """The input ``obj`` holds (an item, a value, an attribute, or a view of it) that the
    cell changed in place before statement ``index``, with the change's line; or None."""
    try:
        if obj is None or isinstance(obj, (types.ModuleType, type, types.FunctionType)):
            return None
        items = holder_arrays(obj, None)
    except Exception:  # an odd object's own error (a __getattribute__ that raises): nothing
        return None
    for x, arr in inputs.items():
        when = first.get(x)
        if when is not None and when[2] and _before(when[0], index, tree) \
                and any(np.may_share_memory(item, arr) for item in items):
            return x, when[1]
    return None


@functools.lru_cache(maxsize=256)
def _scan(tree: ast.Module, inputs: frozenset[str]) -> tuple[
        dict[str, tuple[int, int, bool]], tuple[tuple[int, str, int], ...], frozenset[str],
        dict[str, frozenset[str]]]:
    """Of ``tree``: each name's first top-level statement that binds it or, for an input,
    changes it in place (its index, line, and whether a change); the names each statement
    reads (index, name, line); every name the cell binds anywhere (``_bound_of``: its
    imports and parameters too); and the globals each
    function the cell defines at the top level reads (its names less its own)."""
    first: dict[str, tuple[int, int, bool]] = {}
    own = {stmt.name: _def_globals(stmt) for stmt in tree.body
           if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))}
    loads: list[tuple[int, str, int]] = []
    for index, stmt in enumerate(tree.body):
        # the names read where the statement runs: in comprehensions and lambdas too (not
        # in a def's body, which runs when called)
        for node in [] if isinstance(stmt, _DEFS[:2]) else _walk(stmt, _DEFS):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                loads.append((index, node.id, node.lineno))
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                loads.append((index, f"{node.value.id}.{node.attr}", node.lineno))  # c.m(), c.p
            loads += [(index, f"{name}.{op}", getattr(node, "lineno", stmt.lineno))
                      for name, op in dunder_uses(node)]  # k + 1: "k.__add__"
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):  # its body runs later
            first.setdefault(stmt.name, (index, stmt.lineno, False))
            continue
        for node in _walk(stmt):
            for target in _changes(node):  # first: X += 1 changes the input, and binds it
                name = _first(target)[0]
                if name in inputs:
                    first.setdefault(name, (index, target.lineno, True))
            if isinstance(stmt, ast.ClassDef) and node is not stmt:
                continue  # a class body binds the class's names, not the cell's
            for name, line in _binds(node):
                first.setdefault(name, (index, line, False))
    return first, tuple(loads), _bound_of(tree), own


def _def_globals(node: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    """The names a function of the cell reads and does not bind (its parameters, its
    assignments), with its inner functions' and comprehensions'."""
    loaded = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
              and isinstance(n.ctx, ast.Load)}
    return frozenset(loaded - _bound(node))


def _walk(node: ast.AST, scopes: tuple[type, ...] = ()) -> list[ast.AST]:
    """``node`` and what it holds, less the bodies of ``scopes`` (by default functions,
    lambdas, classes and comprehensions: their names are their own; a def binds its name)."""
    scopes = scopes or _SCOPES
    found, todo = [], [node]
    while todo:
        current = todo.pop()
        found.append(current)
        if current is not node and isinstance(current, scopes):
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


def _global_reads(obj: Any, namespace: Mapping[str, Any], depth: int = 0) -> set[str]:
    """The globals the notebook's functions (globals ``namespace``) that ``obj`` may run
    read (:func:`notebook_functions`), with those of the notebook's functions they read in
    turn; empty for anything else."""
    names: set[str] = set()
    for fn in notebook_functions(obj, namespace):
        names |= _code_globals(fn.__code__)
    if depth < _DEPTH:
        for name in list(names):
            names |= _global_reads(namespace.get(name), namespace, depth + 1)
    return names


def _method_reads(fn: Any, obj: Any, namespace: Mapping[str, Any]) -> set[str]:
    """The globals a method of ``obj`` (or of its class) reads, with those of the methods of
    it that it calls on itself (``self.forward()`` in ``__call__``), in turn."""
    return set().union(*(_global_reads(f, namespace) for f in self_methods(fn, obj, namespace)))


ANY = "*"  # a function that may read any global: globals()["X"], eval("X * 2")
_ANY_READS = frozenset({"globals", "eval", "exec"})


@functools.lru_cache(maxsize=1024)
def _code_globals(code: types.CodeType) -> frozenset[str]:
    """The global names ``code`` and the code inside it (comprehensions, inner functions)
    load, with :data:`ANY` where it calls ``globals``."""
    names = frozenset(i.argval for inner in cell_codes(code)
                      for i in dis.get_instructions(inner)
                      if i.opname in ("LOAD_GLOBAL", "LOAD_NAME"))
    return names | {ANY} if names & _ANY_READS else names
