"""Reads of an input through an object from outside that holds it, after the cell changed
the input's device copy: ``X += 1`` then ``Z = L[0] * 2`` with ``L = [X]`` from an earlier
cell. The cell's ``X`` is the copy, ``L[0]`` the user's array, which the change does not
reach until the commit (``--to-host``) or never (a device run): a plain cell's ``Z`` has the
change, the ``%%gpu`` cell's would not. :func:`held_reads` finds such reads before the run;
a change the cell surely makes first is refused then, one it may make is refused after the
run where its copy changed (:func:`cupy_magic.run.whole.run_whole`), before the commit.
"""

from __future__ import annotations

import ast
import functools
import types
from collections.abc import Mapping, Set
from typing import Any

import numpy as np

from .aliases import _VIEW_ATTRS, _binds_new_memory
from .graphscan import _first
from .heldwrites import (
    _BLOCKS,
    _IN_PLACE,
    Held,
    _bound_of,
    _changes,
    _item_bindings,
    _parse,
    holder_arrays,
)
from .names import _MUTATING_FUNCTIONS, parents
from .rewrite import _SAFE_CALLS, _VIEW_FUNCS
from .staleread import _META, _bound_as_is, binding

__all__ = ["held_reads", "read_message"]

_HOLDER_ONLY = frozenset({"append", "extend", "insert", "clear"})  # L.append(z): not its items


def held_reads(source: str, namespace: Mapping[str, Any], inputs: Mapping[str, Any]
               ) -> tuple[tuple[Held, bool], ...]:
    """The reads of ``inputs`` through an object from outside the cell that holds one of
    them, or a view of it, as an item, a value or an attribute (``L[0] * 2``, ``D["x"]``,
    ``for a in arrs``, ``Y = L[0]`` or ``Q = [L[0]]`` then ``Y * 2``, ``Q[0] + 0``), at or
    after a top-level statement that may change the input's device copy, through its name
    or a name bound to it (``X += 1``, ``X[0] = 5``, ``X.sort()``, ``f(X)``, ``Y = X`` then
    ``Y += 1``, ``for r in X: r += 1``; :func:`_use`), each input's first; each with whether
    a top-level statement before the read surely changes it through its own name
    (``X += 1``, not ``if c: X += 1``). A name only bound to the item or a view of it reads
    nothing (``Y = L[0]``: the user's array, as a plain cell's); nor do ``len(L)`` and
    ``L.append(z)``. Reads in a function the cell calls are not read."""
    tree = _parse(source)
    if tree is None or not inputs:
        return ()
    starts, sure, reads = _scan(tree, frozenset(inputs))
    if not starts:
        return ()
    found: dict[str, tuple[Held, bool]] = {}
    for root, key, line, index in reads:
        obj = namespace.get(root)
        if obj is None or issubclass(type(obj), (types.ModuleType, type, np.ndarray)):
            continue  # an array read is an input; a class's attributes are not its items
        for item in holder_arrays(obj, key):
            for name, arr in inputs.items():
                if name in found or starts.get(name, index + 1) > index \
                        or not np.may_share_memory(item, arr):
                    continue
                found[name] = (Held(root, f"{root}, which holds it", name, line),
                               sure.get(name, index) < index)
    return tuple(found.values())


def read_message(held: Held, after_run: bool = False) -> str:
    """The refusal of a read :func:`held_reads` finds, before the run (a sure change) or
    after it (a change the cell may make, and made)."""
    x = held.name
    done = "; the cell is not committed" if after_run else ""
    return (f"the cell changes the input {x!r} (or a view of it) in its device copy and "
            f"then reads it through {held.how} (line {held.line}): %%gpu copies {x} to the "
            f"device before the cell runs, and {held.who}'s item is the user's array, which "
            f"that change does not reach (a plain cell's would){done}; read {x} through its "
            f"name in the cell, not through {held.who}")


@functools.lru_cache(maxsize=256)
def _scan(tree: ast.Module, inputs: frozenset[str]) -> tuple[
        dict[str, int], dict[str, int], tuple[tuple[str, Any, int, int], ...]]:
    """Of ``tree``, once per tree and inputs: the index of the first top-level statement
    that may change each input's copy, and of the first that surely does; the reads of
    objects from outside (the object's name, the item's key where the source gives it as a
    constant, the line and the index of the top-level statement), and of names the cell
    binds to their items (``Y = L[0]``, ``W = Y``, while they may: a top-level binding
    ends it, one in a block may not run and does not), as reads of the item."""
    bound, up = _bound_of(tree), parents(tree)
    ids = {id(child): parent for child, parent in up.items()}
    starts: dict[str, int] = {}
    sure: dict[str, int] = {}
    reads: list[tuple[str, Any, int, int]] = []
    fresh: set[str] = set()  # bound to new memory (X = X * 2): no longer the copy
    held: set[str] = set()  # bound at all at the top level (X = Y): maybe not the copy
    now: dict[str, tuple[str, Any]] = {}  # the names that may hold an item now, with it
    holding: dict[str, list[str]] = {}  # each name's inputs whose copy it may hold
    uses = {n: _use(n, up) for n in ast.walk(tree) if isinstance(n, ast.Name)}
    for x, names in _aliases(inputs, uses).items():
        for name in names:
            holding.setdefault(name, []).append(x)
    for index, stmt in enumerate(tree.body):
        block = isinstance(stmt, _BLOCKS)
        if block:  # its bindings may run, or run again (a loop): from its start
            now.update([p for node in ast.walk(stmt) for p in _holding(node, bound, now)])
        else:
            for target in _changes(stmt.value if isinstance(stmt, ast.Expr) else stmt):
                if _first(target)[0] in inputs - held:  # X += 1, X[0] = 5, X.sort()
                    sure.setdefault(_first(target)[0], index)
        for node in ast.walk(stmt):
            if not isinstance(node, ast.Name):
                continue
            for x in holding.get(node.id, ()):  # X += 1, or Y += 1 after Y = X
                if (node.id != x or x not in fresh) and uses[node] == "change":
                    starts.setdefault(x, index)
            chain = _chain(node, up)
            if not isinstance(node.ctx, ast.Load) or _written(chain, up):
                continue
            if node.id in now and not _bound_to(node, up, ids):  # Y = L[0] before, Y * 2
                reads.append((*now[node.id], node.lineno, index))
            elif node.id not in bound and node.id not in inputs and node.id not in now \
                    and not _holder_only(node, up) and not _bound_to(_item_of(node, up), up, ids):
                reads.append((*_first(chain), node.lineno, index))  # L[0] * 2
        if not block:  # a top-level binding ends the last
            pairs = _holding(stmt, bound, now)
            for node in ast.walk(stmt):
                if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                    now.pop(node.id, None)
            now.update(pairs)
            fresh.update(n for n in inputs if _binds_new_memory(stmt, n))
            held.update(n for n in inputs if any(binding(t, n) for t in ast.walk(stmt)))
    return starts, sure, tuple(reads)


def _chain(node: ast.AST, up: Mapping[ast.AST, ast.AST]) -> ast.AST:
    """The longest chain of items and attributes read from ``node`` (``L[0]`` of ``L``)."""
    while isinstance(up.get(node), (ast.Subscript, ast.Attribute)) and up[node].value is node:
        node = up[node]
    return node


def _bound_to(node: ast.AST, up: Mapping[ast.AST, ast.AST], ids: Mapping[int, ast.AST]
              ) -> bool:
    """Whether ``node``, or a view of it by slices or ``.T``, is only bound to names, itself
    or in a list, tuple, set or dict that is (``Y = L[0]``, ``W = Y``, ``V = Y[1:].T``, ``Q =
    [Y]``): the names then hold the user's array itself or a view of it, as a plain cell's
    do, and their reads are the reads (``Y[0]``, an item, is a read)."""
    while True:
        parent = up.get(node)
        if isinstance(parent, ast.Attribute) and parent.attr in ("T", "mT"):
            node = parent
            continue
        parts = parent.slice.elts if isinstance(parent, ast.Subscript) \
            and isinstance(parent.slice, ast.Tuple) else [getattr(parent, "slice", None)]
        if not (isinstance(parent, ast.Subscript) and parent.value is node and all(
                isinstance(p, ast.Slice) or (isinstance(p, ast.Constant)
                                             and p.value in (None, Ellipsis)) for p in parts)):
            return _bound_as_is(node, ids)
        node = parent


def _item_of(node: ast.Name, up: Mapping[ast.AST, ast.AST]) -> ast.AST:
    """The holder's item ``node`` reads (``L[0]`` of ``L``, ``b.x`` of ``b``), or ``node``."""
    parent = up.get(node)
    return parent if isinstance(parent, (ast.Subscript, ast.Attribute)) \
        and parent.value is node else node


def _written(chain: ast.AST, up: Mapping[ast.AST, ast.AST]) -> bool:
    """Whether the cell writes into the holder's item here (``L[0][:] = -1``, ``L[0] += 1``,
    ``L[0].sort()``): a change through the holder, :mod:`.heldwrites`' to refuse."""
    parent = up.get(chain)
    return isinstance(getattr(chain, "ctx", None), (ast.Store, ast.Del)) \
        or (isinstance(parent, ast.Call) and isinstance(chain, ast.Attribute)
            and chain.attr in _IN_PLACE and parent.func is chain)


def _holder_only(node: ast.Name, up: Mapping[ast.AST, ast.AST]) -> bool:
    """A use of the holder that reads none of its items: ``len(L)``, ``L.append(z)``,
    ``L[0] = z`` (an item replaced)."""
    parent = up.get(node)
    return (isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name)
            and parent.func.id == "len") \
        or (isinstance(parent, ast.Attribute) and parent.attr in _HOLDER_ONLY) \
        or (isinstance(parent, ast.Subscript) and isinstance(parent.ctx, (ast.Store, ast.Del)))


def _use(name: ast.Name, up: Mapping[ast.AST, ast.AST]) -> str | list[str]:
    """What this use of a name holding an input's copy does with it: ``"change"`` (a change
    in place, ``X[0] = 5``, ``X.sort()``, ``X += 1``, or a call that may make one, ``f(X)``,
    ``out=X``), the names it binds the copy or a view of it to (``Y = X``, ``Y = X[1:].T``,
    ``Q = [X]``, ``for r in X``: the rows), or ``"read"`` (an operand, ``X.sum()``,
    ``X.shape``, ``print(X)``, an array module's function that gives a new array)."""
    if not isinstance(name.ctx, ast.Load):
        return "change" if isinstance(up.get(name), ast.AugAssign) else "read"
    node: ast.AST = name
    while True:
        parent = up.get(node)
        if isinstance(parent, (ast.Subscript, ast.Attribute)) and parent.value is node:
            if isinstance(parent.ctx, (ast.Store, ast.Del)) or isinstance(
                    up.get(parent), ast.AugAssign):
                return "change"  # X[0] = 5, X[0] += 1
            if isinstance(parent, ast.Attribute) and parent.attr in _META:
                return "read"
            node = parent
        elif isinstance(parent, ast.Call) and parent.func is node:
            if isinstance(node, ast.Attribute) and node.attr in _IN_PLACE:
                return "change"  # X.sort()
            if isinstance(node, ast.Attribute) and node.attr not in _VIEW_ATTRS:
                return "read"  # X.sum(), X.copy(): a new value
            node = parent  # X.reshape(2, 6): a view, which may be kept
        elif isinstance(parent, ast.Call) and node in parent.args \
                and not any(k.arg == "out" for k in parent.keywords):
            func = parent.func
            if isinstance(func, ast.Name) and func.id in _SAFE_CALLS:
                return "read"
            if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                    and func.attr not in _VIEW_FUNCS | _IN_PLACE | _MUTATING_FUNCTIONS):
                return "change"  # f(X): a function may change its argument
            node = parent  # np.sum(X): a new array, read on
        elif (isinstance(parent, ast.IfExp) and parent.test is not node) or isinstance(
                parent, (ast.List, ast.Tuple, ast.Set, ast.Starred)) or (
                isinstance(parent, ast.Dict) and node in parent.values):
            node = parent  # Y = X if c else Z, Q = [X]: Y or Q[0] may be X
        elif isinstance(parent, (ast.Assign, ast.AnnAssign, ast.For)) and node is getattr(
                parent, "iter", getattr(parent, "value", None)):
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            return [_first(t)[0] if isinstance(t, (ast.Subscript, ast.Attribute)) else t.id
                    for top in targets for t in _unpacked(top)]
        elif isinstance(parent, (ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.Expr,
                                 ast.IfExp, ast.If, ast.While, ast.Assert,
                                 ast.FormattedValue)):
            return "read"
        else:
            return "change"  # returned, yielded, a keyword argument: anything may follow


def _holding(node: ast.AST, bound: Set[str], now: Mapping[str, tuple[str, Any]]
             ) -> list[tuple[str, tuple[str, Any]]]:
    """:func:`~.heldwrites._item_bindings`, and names bound to a list, tuple or set that holds
    such an item (``Q = [L[0]]``, ``Q = (Y, 1)``): each name, with the item."""
    pairs = _item_bindings(node, bound, now)
    if pairs or not (isinstance(node, ast.Assign)
                     and isinstance(node.value, (ast.List, ast.Tuple, ast.Set))):
        return pairs
    items = [now[e.id] if isinstance(e, ast.Name) and e.id in now else _first(e)
             for e in ast.walk(node.value) if (isinstance(e, ast.Name) and e.id in now) or (
                 isinstance(e, (ast.Subscript, ast.Attribute)) and _first(e)[0]
                 and _first(e)[0] not in bound)]
    return [(t.id, items[0]) for t in node.targets if isinstance(t, ast.Name)] if items else []


def _unpacked(target: ast.AST) -> list[ast.AST]:
    """The targets an assignment's target binds (``a, (b, *c) = ...``: ``a``, ``b``, ``c``)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [t for elt in target.elts for t in _unpacked(elt)]
    return _unpacked(target.value) if isinstance(target, ast.Starred) else [target]


def _aliases(inputs: frozenset[str], uses: Mapping[ast.Name, str | list[str]]
             ) -> dict[str, set[str]]:
    """Each input's names that may hold its copy or a view of it somewhere in the cell: its
    own, and those bound from them (``Y = X``, ``Q = [Y]``, ``for r in X``), anywhere
    (``uses``: :func:`_use` of each name in the cell)."""
    found = {x: {x} for x in inputs}
    for names in found.values():
        grew = True
        while grew:
            before = len(names)
            for node, use in uses.items():
                if node.id in names and isinstance(use, list):
                    names.update(use)
            grew = len(names) > before
    return found
