"""Which reads of a cell's input, after a change made to the user's array through an object
from outside (``L[0][:] = -1`` with ``L = [x]`` from an earlier cell), see the device copy's
old values: ``y = x + 0``, or through a view bound before or after (``v = x[1:]``, then
``v + 0``). Under ``--to-host`` a name bound as it is (``y = x``, ``q = [x[1:]]``) comes back
as the user's array or a view of it where the input's views do
(:func:`cupy_magic.run.homes.view_kinds`); :mod:`.heldwrites` refuses the others.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence, Set
from typing import Any

from .aliases import _FRESH_ATTRS, MODULE_NAMES, _fresh_call

__all__ = ["BLOCKS", "binding", "reads_values", "through_views"]

_HOLDS = (ast.List, ast.Tuple, ast.Set, ast.Dict)
BLOCKS = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try,
          ast.Match)  # the statements with a block: one's bindings may not run
_META = frozenset({"shape", "ndim", "dtype", "size", "nbytes", "itemsize", "strides"})


def through_views(tree: ast.Module, first: int, name: str, kind: str | None,
                  changed: Set[str]) -> bool:
    """Whether the cell reads the input ``name``'s copy from statement ``first`` on (the
    change's) through another name that holds it or a view of it then (``y = x[1:]``,
    before the change or after, then ``z = y + 0``: the old values); or leaves such a name
    (or ``name`` rebound to a view of itself, ``x = x.T``) from before the change, not
    bound again after it by a top-level statement outside a block (``if c: y = x`` may not
    run): a device run commits the copy (or its view), and ``--to-host`` a view of it as a
    new array of the old values where the input's views do not come back as the user's
    (``kind`` not ``"views"``). The top-level statements are read in order (a name
    rebound to new memory, ``x = x * 2``, holds the copy no more); one with a block counts
    the bindings it may make. A name the cell ``changed`` in place is left to the refusal
    of a change on both sides (:func:`cupy_magic.run.whole.run_whole`).
    """
    body, state = tree.body, {name: "same"}  # the names holding the copy, or a view of it
    for i, stmt in enumerate(body):
        if i == first and any(
                alias not in changed and not any(binding(n, alias) for s in body[first:]
                                                 if not isinstance(s, BLOCKS)
                                                 for n in ast.walk(s))
                and ((held == "view" and kind != "views")
                     or (held == "same" and kind is None and alias != name))
                for alias, held in state.items()):
            return True  # left holding the copy's old values
        was, state = state, _step(stmt, state)
        if i >= first and any(reads_values([stmt], alias, kind)
                              for alias in (was.keys() | state.keys()) - {name}):
            return True
    return False


def binding(node: ast.AST, name: str) -> bool:
    """Whether ``node`` binds or deletes ``name`` (``name += 1`` too: its target is a
    store)."""
    return isinstance(node, ast.Name) and node.id == name \
        and isinstance(node.ctx, (ast.Store, ast.Del))


def _step(stmt: ast.stmt, state: Mapping[str, str]) -> dict[str, str]:
    """``state`` (each name holding the copy, ``"same"``, or a view of it, ``"view"``)
    after the top-level ``stmt``. A statement with a block may or may not bind a name: the
    stronger of before and after counts."""
    aug = {id(n.target) for n in ast.walk(stmt) if isinstance(n, ast.AugAssign)}
    bound = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)
             and isinstance(n.ctx, (ast.Store, ast.Del)) and id(n) not in aug}
    if not bound:
        return dict(state)
    made: dict[str, set[str | None]] = {}
    for node in ast.walk(stmt):
        if isinstance(node, ast.Assign):
            held = _holding(node.value, state)
            for target in node.targets:
                if isinstance(target, ast.Name):
                    made.setdefault(target.id, set()).add(held)
    new = dict(state)
    for b in bound:
        kinds = made.get(b, {None})
        if not isinstance(stmt, ast.Assign):  # under a block: may not be bound
            kinds = kinds | {state.get(b)}
        held = next((k for k in ("view", "same") if k in kinds), None)
        if held is None:
            new.pop(b, None)
        else:
            new[b] = held
    return new


_VIEWS = frozenset({"reshape", "ravel", "view", "transpose", "swapaxes", "squeeze",
                    "diagonal"})
_SAME = frozenset({"asarray", "asanyarray", "ascontiguousarray", "asfortranarray", "require"})


def _holding(expr: ast.expr, names: Mapping[str, Any]) -> str | None:
    """``"same"`` where ``expr`` is one of ``names`` (or may be: ``np.asarray(x)``), as
    ``names`` has it (``y`` bound to ``x[::2]`` holds a view); ``"view"`` where it is or
    may be a view of one (``x[1:]``, ``x.T``, ``y.reshape(2, 3)``, a call of a name's
    method or over it that may give back its memory); ``None`` otherwise (new memory:
    ``x * 2``, ``x[[2, 1, 0]]``, ``x.copy()``, ``np.sin(x)``); a list, tuple, set or dict
    display by its items."""
    depth = 0
    while True:
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) \
                and expr.func.attr in _VIEWS:
            expr = expr.func.value
        elif (isinstance(expr, ast.Attribute) and expr.attr in ("T", "real", "imag")) \
                or (isinstance(expr, ast.Subscript) and _is_view(expr, expr.value)):
            expr = expr.value
        elif isinstance(expr, _HOLDS) and not depth:  # [x, x[1:]]: its items'
            found = {_holding(e, names) for e in _items(expr)}
            return "view" if "view" in found else "same" if "same" in found else None
        elif isinstance(expr, ast.Call) and not depth:
            return _call_holding(expr, names)
        else:
            held = isinstance(expr, ast.Name) and expr.id in names
            return None if not held else "view" if depth else names[expr.id]
        depth += 1


def _call_holding(call: ast.Call, names: Mapping[str, Any]) -> str | None:
    """:func:`_holding` of a call: none of ``names`` in it, or a fresh one (a NumPy
    function or ufunc that makes new memory, ``x.copy()``): ``None``; ``np.asarray(x)``:
    ``"same"``; another: ``"view"``."""
    if _fresh_call(call, frozenset(MODULE_NAMES)) or not any(
            isinstance(n, ast.Name) and n.id in names for n in ast.walk(call)):
        return None
    attr = call.func.attr if isinstance(call.func, ast.Attribute) else ""
    if attr in _FRESH_ATTRS and isinstance(call.func, ast.Attribute) \
            and isinstance(call.func.value, ast.Name) and call.func.value.id in names:
        return None  # x.copy(), x.sum()
    return "same" if attr in _SAME else "view"


def _items(expr: ast.expr) -> list[ast.expr]:
    """The items of a list, tuple or set display, or a dict display's values."""
    return [v for v in expr.values if v is not None] if isinstance(expr, ast.Dict) \
        else list(getattr(expr, "elts", ()))


def reads_values(stmts: Sequence[ast.stmt], name: str, kind: str | None) -> bool:
    """Whether ``stmts`` read ``name``'s values: not its shape or dtype, nor (``kind``
    ``"whole"`` or ``"views"``) the name bound as it is to another (``y = x``) or put so in
    a list, tuple, set or dict that is bound (``q = [x]``), nor (``"views"``) a view of it
    made by basic indexing or ``.T`` and bound so (``v = x[1:].T``, ``q = [x[1:]]``). A
    view used otherwise reads the values (``y = x[1:] + 0``, ``np.sum([x])``)."""
    for stmt in stmts:
        up = {id(c): p for p in ast.walk(stmt) for c in ast.iter_child_nodes(p)}
        for node in ast.walk(stmt):
            if not (isinstance(node, ast.Name) and node.id == name
                    and isinstance(node.ctx, ast.Load)):
                continue
            top = node
            while kind == "views" and _is_view(up.get(id(top)), top):
                top = up[id(top)]
            parent = up.get(id(top))
            if isinstance(parent, ast.Attribute) and parent.attr in _META:
                continue  # x.shape, x[1:].shape: the copy's is the user's array's
            if kind and _bound_as_is(top, up):
                continue  # y = x, q = [x]: the user's array itself, back on the host
            return True
    return False


def _is_view(parent: ast.AST | None, node: ast.AST) -> bool:
    """Whether ``parent`` makes a view of ``node``: ``node[1:, 0]`` or ``node.T``."""
    if isinstance(parent, ast.Attribute):
        return parent.attr == "T"
    if not (isinstance(parent, ast.Subscript) and parent.value is node):
        return False
    parts = parent.slice.elts if isinstance(parent.slice, ast.Tuple) else [parent.slice]
    return all(isinstance(p, (ast.Slice, ast.Constant)) for p in parts)


def _bound_as_is(node: ast.AST, up: Mapping[int, ast.AST]) -> bool:
    """Whether ``node`` is the value an assignment binds, itself or as an item of a list,
    tuple, set or dict's value that is (``y = x``, ``q = [x, (x, 1)]``)."""
    parent = up.get(id(node))
    while isinstance(parent, _HOLDS) and not (isinstance(parent, ast.Dict)
                                              and any(k is node for k in parent.keys)):
        node, parent = parent, up.get(id(parent))
    return isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is node
