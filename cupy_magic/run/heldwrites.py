"""Changes a cell makes to its inputs through objects from outside it, read before anything
runs: an object that holds an input (``L[0][:] = -1`` with ``L = [x]`` from an earlier cell,
``for a in arrs: a *= 2``) or a function from an earlier cell that changes one as a global
(``def reset(): x[:] = 0``). Such a change reaches the user's array, not the copy the cell's
name holds: a batched run would upload the later batches' rows changed
(:func:`holder_changed`), a whole run's name would read the copy from before it
(:func:`stale_read`)."""

from __future__ import annotations

import ast
import collections
import functools
import inspect
import operator
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from itertools import compress, repeat
from typing import Any, NamedTuple

import numpy as np

from .aliases import _binds_new_memory
from .batching import _definition
from .graphscan import MAX_DEPTH, _bound, _first
from .names import MUTATING_METHODS, written_args
from .staleread import BLOCKS, binding, reads_values, through_views

__all__ = ["Held", "by_its_name", "held_changes", "held_sure", "holder_changed",
           "rebound_after", "stale_message", "stale_read"]

_IN_PLACE = MUTATING_METHODS | {"__setitem__", "__iadd__", "__isub__", "__imul__",
                                "__itruediv__"}
_BLOCKS = (*BLOCKS, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def by_its_name(name: str) -> str:
    """The fix both refusals name: change the input through its own name in the cell."""
    return (f"change {name} through its name in the cell ({name}[...] = ..., or a function's "
            f"argument: f({name}))")


class Held(NamedTuple):
    """A change through an object from outside: ``who`` made it (``L``, ``the function
    reset()``), ``how`` says so in a message (``L, which holds it``), ``name`` is the input
    it reaches and ``line`` the cell's line of the change (or of the call)."""

    who: str
    how: str
    name: str
    line: int


def holder_changed(source: str, namespace: Mapping[str, Any],
                   inputs: Mapping[str, Any]) -> Held | None:
    """An object from outside the cell that the cell changes through an item or attribute
    (``L[0][:] = -1``, ``d["x"] += 1``, ``L[0].sort()``) and that holds one of ``inputs``
    (the batched ones) or a view of it, as an item, a value or an attribute; or a function
    from outside that the cell calls and that changes one of them in place as a global
    (``def f(): X[:, 0] = -1``), itself or through such a holder, or through a function it
    calls; ``None`` where there is none. A batched run uploads the input's rows as the
    batches go, so such a change reaches the later batches' rows only."""
    tree = _parse(source)
    return None if tree is None else next(
        _changed_in(tree, _bound_of(tree), namespace, inputs, set(), 0), None)


def held_changes(source: str, namespace: Mapping[str, Any],
                 inputs: Mapping[str, Any]) -> tuple[Held, ...]:
    """:func:`holder_changed`'s changes of ``inputs``, each input's at each line (``if c:
    L[0][:] = -1`` and a top-level one after it: a read between them is stale, a view
    made there kept from before the second), in the order of their lines, for a whole run:
    :func:`stale_read` and :func:`held_sure` read them."""
    tree, found = _parse(source), {}
    for hit in () if tree is None else _changed_in(tree, _bound_of(tree), namespace, inputs,
                                                   set(), 0):
        found.setdefault((hit.name, hit.line), hit)
    return tuple(sorted(found.values(), key=lambda hit: hit.line))


def stale_read(source: str, changes: Iterable[Held], stored: Iterable[str],
               sure: Iterable[str], views: Mapping[str, str] | None = None,
               fresh: bool = False) -> Held | None:
    """Of ``changes`` (:func:`held_changes`), one whose input the cell then reads, at that
    statement or a later one, and does not change in place through its name (``stored``:
    those it does, left to the run; a name only read, then rebound, ``X = X * 2``, read
    the old copy); or one whose input a top-level statement surely changes through its name
    too (``sure``); else ``None``. The cell's name holds the device copy made before it
    ran, which the change through the host does not reach: ``L[0][:] = -1; y = x + 0``
    would read the old values, and a change of the copy would be written over the host's
    (a plain cell's ``x`` is ``L[0]`` itself). Reads before the change are right; so, for
    the names ``views`` gives (the names come back to the host:
    :func:`~.homes.view_kinds`), are ``y = x`` and ``q = [x]`` where an unchanged copy comes
    back as the user's array (``"whole"``), and ``x[1:]`` and ``x.T`` too where its views
    come back as views of it (``"views"``) (:func:`reads_values`); with ``fresh``, those after a
    top-level ``x = x * 2`` (or ``x = x.copy()``) before the change, by which the name
    holds new memory. A cell that may change or rebind the name is left to the run's watch
    (``if c: x += 1``, README). A change through a holder under an ``if`` counts as made:
    whether it runs is not known before the run."""
    tree = _parse(source)
    body, stored, sure = [] if tree is None else tree.body, set(stored), set(sure)
    for hit in changes:
        first = next((i for i, s in enumerate(body)
                      if s.lineno <= hit.line <= (s.end_lineno or s.lineno)), 0)
        if fresh and any(_binds_new_memory(s, hit.name) for s in body[:first]):
            continue  # `X = X * 2` first: by the change the name holds new memory
        kind = (views or {}).get(hit.name)
        if hit.name in sure or (hit.name not in stored
                                and reads_values(body[first:], hit.name, kind)):
            return hit
        if not fresh and tree is not None and through_views(
                tree, first, hit.name, kind, {_first(t)[0] for n in ast.walk(tree)
                                              for t in _changes(n)}):
            return hit
    return None


def rebound_after(source: str, held: Held) -> bool:
    """Whether the cell may bind ``held``'s input name anew at the statement of the change
    through the holder or after it (``L[0][:] = -1; if c: X = X * 2``); a binding only
    before it (``if c: X = X * 2; L[0][:] = -1``) read the copy before the change."""
    tree = _parse(source)
    body = [] if tree is None else tree.body
    return any(binding(node, held.name) for stmt in body
               if (stmt.end_lineno or stmt.lineno) >= held.line for node in ast.walk(stmt))


def stale_message(held: Held, after_run: bool = False) -> str:
    """The refusal of a cell :func:`stale_read` finds: before the run, or after it for a
    change the cell may make and did (``if c: L[0][:] = -1``, the user's array changed)."""
    x = held.name
    done = (f" (the change through {held.who} stays made in the user's array; the cell is "
            "not committed)") if after_run else ""
    return (f"the cell changes the input {x!r} (or a view of it) in place through "
            f"{held.how}, and then reads {x} or changes it: %%gpu copies {x} to the device "
            f"before the cell runs, so the cell's {x} would not see that change (a plain "
            f"cell's would){done}; {by_its_name(x)}")


def held_sure(source: str, changes: Iterable[Held]) -> tuple[Held, ...]:
    """Those of ``changes`` a top-level statement makes (whenever the cell gets there, not
    under an ``if`` or in a loop, which may not run). A whole run refuses one whose input's
    device copy changed too (:func:`cupy_magic.run.whole.run_whole`): the change through
    the holder is in the user's array, the other in the copy, and no commit has both
    (``if c: X += 1`` then ``L[0][:] = -1``)."""
    tree = _parse(source)
    spans = [] if tree is None else [(s.lineno, s.end_lineno or s.lineno) for s in tree.body
                                     if not isinstance(s, _BLOCKS)]
    return tuple(hit for hit in changes if any(a <= hit.line <= b for a, b in spans))


@functools.lru_cache(maxsize=256)
def _bound_of(tree: ast.AST) -> frozenset[str]:
    """:func:`graphscan._bound` of a cell's tree, once per tree."""
    return frozenset(_bound(tree))


@functools.lru_cache(maxsize=256)
def _parse(source: str) -> ast.Module | None:
    """The cell's tree, parsed once per text (a cell run again reads it again: with the
    walks below, 22% of a warm tiny cell's profile on the CPU); ``None``: not Python."""
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


@functools.lru_cache(maxsize=256)
def _scan(tree: ast.AST, bound: Set[str]) -> tuple[
        tuple[tuple[str, Any, int, bool, bool], ...], dict[str, tuple[str, Any]],
        tuple[tuple[str, str | None, int], ...], tuple[tuple[str, str, Any, int], ...],
        tuple[tuple[str, int, tuple[tuple[int, str, Any], ...]], ...]]:
    """What :func:`_changed_in` reads of ``tree`` alone, once per tree: each change in place
    (the root, its key, the line, whether the target is a bare name, an item or attribute),
    ``for a in arrs: a *= 2`` as a change of ``arrs``; the names bound there once to an item
    of an object from outside (``Y = L[0]``), with that item; the calls of names from
    outside (``f()``, and ``obj.reset()`` with the method's name), with their lines. All in
    the order of their lines. Then the changes through a name bound to such an
    item more than once (:func:`_aliased`). Last, the calls of a name (``f(L[0])``,
    ``f(Y)`` with ``Y = L[0]``) given such an item, each with the positions it is given at
    and the item."""
    aug = {id(n.target) for n in ast.walk(tree) if isinstance(n, ast.AugAssign)}
    binds = collections.Counter(n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                                and not isinstance(n.ctx, ast.Load) and id(n) not in aug)
    held = {name: item for n in ast.walk(tree) for name, item in _item_bindings(n, bound, {})
            if binds[name] == 1}  # bound there only: no other value
    changes: list[tuple[str, Any, int, bool, bool]] = []
    calls: list[tuple[str, str | None, int]] = []
    passed = []
    for node in ast.walk(tree):
        for target in _changes(node):
            changes.append((*_first(target), node.lineno, isinstance(target, ast.Name),
                            isinstance(target, (ast.Subscript, ast.Attribute))))
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) \
                and any(_first(t)[0] == node.target.id for n in node.body for m in ast.walk(n)
                        for t in _changes(m)):  # for a in arrs: a *= 2
            changes.append((_first(node.iter)[0], None, node.lineno, False, True))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id not in bound:
            calls.append((node.func.id, None, getattr(node, "lineno", 0)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id not in bound:
            calls.append((node.func.value.id, node.func.attr, getattr(node, "lineno", 0)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            given = tuple((i, *(held[a.id] if isinstance(a, ast.Name) else _first(a)))
                          for i, a in enumerate(node.args)
                          if (isinstance(a, ast.Name) and a.id in held) or (
                              isinstance(a, (ast.Subscript, ast.Attribute))
                              and _first(a)[0] and _first(a)[0] not in bound))
            if given:
                passed.append((node.func.id, getattr(node, "lineno", 0), given))
    aliased, handed = _aliased(tree, bound, held)
    by_line = operator.itemgetter(2)  # ast.walk meets a nested `if c: L[0][:] = -1` after
    return (tuple(sorted(changes, key=by_line)), held,  # the top-level statements below it
            tuple(sorted(calls, key=by_line)), aliased,
            tuple(sorted(passed + handed, key=operator.itemgetter(1))))


def _aliased(tree: ast.AST, bound: Set[str], held: Mapping[str, tuple[str, Any]]
             ) -> tuple[tuple[tuple[str, str, Any, int], ...],
                        list[tuple[str, int, tuple[tuple[int, str, Any], ...]]]]:
    """The changes made through a name, and its calls handing it to a function (``f(Y)``),
    while a statement before may have bound it to an item of an object from outside (``Y =
    L[0]; Y += 1; Y = X[::2]``: ``Y`` bound twice, which ``held`` leaves out): the changes as
    the name, the object, the item's key and the line, the calls as :func:`_scan` gives them.
    A top-level statement that binds the name otherwise ends that; one in a block (``if not
    c: Y = X``) may not run and does not, and a block's ``Y = L[0]`` counts from the block's
    start (a loop runs it again). A statement that binds the name and changes it counts the
    change (its order inside the statement is not read)."""
    found, handed, now = [], [], {}  # the names that may be bound to an item now, with it
    for stmt in getattr(tree, "body", ()):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            now.pop(stmt.name, None)  # its own names: not the cell's
            continue
        block = isinstance(stmt, _BLOCKS)
        if block:  # its bindings may run, or run again (a loop): from its start
            now.update([p for node in ast.walk(stmt) for p in _item_bindings(node, bound, now)])
        for node in ast.walk(stmt):
            for target in _changes(node):
                name = _first(target)[0]
                if name in now and name not in held:
                    found.append((name, *now[name], node.lineno))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                given = tuple((i, *now[a.id]) for i, a in enumerate(node.args)
                              if isinstance(a, ast.Name) and a.id in now and a.id not in held)
                if given:
                    handed.append((node.func.id, node.lineno, given))
        if block:
            continue
        pairs = _item_bindings(stmt, bound, now)
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                now.pop(node.id, None)
        now.update(pairs)
    return tuple(found), handed


def _item_bindings(node: ast.AST, bound: Set[str], now: Mapping[str, tuple[str, Any]]
                   ) -> list[tuple[str, tuple[str, Any]]]:
    """``Y = L[0]`` with ``L`` from outside the cell, or ``W = Y`` with ``Y`` one of ``now``
    (bound to such an item): each name bound, with the item (its object and key); none for
    any other statement."""
    value = node.value if isinstance(node, ast.Assign) else None
    item = now.get(value.id) if isinstance(value, ast.Name) else _first(value) \
        if isinstance(value, (ast.Subscript, ast.Attribute)) \
        and _first(value)[0] not in bound else None
    return [(t.id, item) for t in node.targets if isinstance(t, ast.Name)] if item else []


def _changed_in(tree: ast.AST, bound: Set[str], namespace: Mapping[str, Any],
                inputs: Mapping[str, Any], seen: set[int], depth: int,
                this: str = "") -> Iterator[Held]:
    """:func:`holder_changed` over ``tree``: the cell's (``depth`` 0, where a change through
    an input's own name is the batch's) or a called function's (its globals, where such a
    change is the user's array; a method's first argument, ``this``, is its object); with
    the cell's line of the change (or of the call). Each change found, the changes through
    a holder first, then the functions handed its item, then the functions called, each
    kind in the order of its lines (a function read once, at its first call)."""
    direct, changed = depth > 0, []
    scanned, held, calls, aliased, passed = _scan(tree, bound)
    for root, key, line, bare, part in scanned:
        if root in held and root not in inputs:  # `Y = L[0]; Y += 1`: through the holder
            changed.append((*held[root], line))
        elif part or (direct and bare):
            changed.append((root, key, line))
    changed += [(root, key, line) for name, root, key, line in aliased]
    changed.sort(key=operator.itemgetter(2))
    for root, key, line in changed:
        if not root or root in bound or (root in inputs and not direct):
            continue
        for item in holder_arrays(namespace.get(root), key):
            for name, arr in inputs.items():
                if np.may_share_memory(item, arr):
                    if direct and root == this:  # self.x[:] = -1 in obj.reset()
                        who = f"the method {_owner(tree)}"
                        part = f"{root}.{key}" if isinstance(key, str) else root
                        yield Held(who, f"{who}, which changes it as {part}", name, line)
                        continue
                    who = f"the function {_owner(tree)}" if direct else root
                    yield Held(who, f"{who}, which changes it as its global {root}" if direct
                               else f"{root}, which holds it", name, line)
    for func, line, given in passed:  # f(L[0]) with def f(a): a -= 1
        yield from _passed_in(tree, func, line, given, namespace, inputs)
    if depth >= MAX_DEPTH:
        return
    for func, attr, line in calls:  # the functions from outside it calls: f() writing X
        fn, owner = _called(namespace.get(func), attr)
        definition = _definition(fn) if fn is not None and id(fn) not in seen else None
        if definition is not None:
            seen.add(id(fn))
            local = _bound(definition) - {n for g in ast.walk(definition)
                                          if isinstance(g, ast.Global) for n in g.names}
            scope: Mapping[str, Any] = fn.__globals__
            this = definition.args.args[0].arg if owner is not None and \
                definition.args.args else ""
            if this:  # self.x[:] = 0: the object's
                local, scope = local - {this}, collections.ChainMap({this: owner}, scope)
            yield from (hit._replace(line=line)  # the cell's line is the call's
                        for hit in _changed_in(definition, frozenset(local - {definition.name}),
                                               scope, inputs, seen, depth + 1, this))


def _passed_in(tree: ast.AST, func: str, line: int, given: Sequence[tuple[int, str, Any]],
               namespace: Mapping[str, Any], inputs: Mapping[str, Any]) -> Iterator[Held]:
    """A change through a holder's item the cell hands to a function that changes that
    argument in place (``f(L[0])`` or ``Y = L[0]; f(Y)`` with ``def f(a): a -= 1``,
    defined in the cell or before it; the function's own statements only)."""
    found = [n for n in getattr(tree, "body", ()) if isinstance(n, ast.FunctionDef)
             and n.name == func]
    definition = found[-1] if found else _definition(namespace.get(func))
    if definition is None:
        return
    params = [a.arg for a in definition.args.args]
    changed = {_first(t)[0] for n in ast.walk(definition) for t in _changes(n)}
    for i, root, key in given:
        if i >= len(params) or params[i] not in changed or root in inputs:
            continue  # an input's own item (`f(X.T)`): its device copy, the run's
        item = _item(namespace.get(root), key)
        for name, arr in inputs.items():
            if isinstance(item, np.ndarray) and np.may_share_memory(item, arr):
                yield Held(root, f"{root}, which holds it (handed to {func}(), which "
                           f"changes its argument {params[i]})", name, line)


def holder_arrays(obj: Any, key: Any) -> list[np.ndarray]:
    """The arrays an object from outside holds that may be an input: the item ``key`` where
    the source names one (``L[1]``, ``D["x"]``, ``b.x``), else among its items, values or
    attributes; an array is itself; a module holds none. Picked in C: a million-item list
    looked at item by item for each input took over a second a cell."""
    kind = type(obj)  # (not isinstance nor hasattr: an object's __getattribute__ may raise)
    try:  # (no __dict__, or the object's own error: none)
        items = [obj] if issubclass(kind, np.ndarray) else [_item(obj, key)] if key is not None \
            else list(obj.values() if issubclass(kind, dict) else obj if issubclass(
                kind, (list, tuple)) else () if issubclass(kind, types.ModuleType)
                else vars(obj).values())
    except Exception:
        items = []
    return list(compress(items, map(issubclass, map(type, items), repeat(np.ndarray))))


def _item(obj: Any, key: Any) -> Any:
    """``obj[key]`` of a dict, list or tuple, else its attribute ``key``; ``None`` if none."""
    try:
        return obj[key] if issubclass(type(obj), (dict, list, tuple)) else getattr(obj, key)
    except (LookupError, TypeError, AttributeError):
        return None


def _called(obj: Any, attr: str | None) -> tuple[Any, Any]:
    """The function a call runs (``f()``: ``obj``; ``obj.reset()``: the method of ``obj``'s
    class, where the class is the notebook's own, defined in ``__main__``) and the object
    its first argument is (``None`` for a plain function). A library's methods
    (``df.apply``) are not read: a cell calls many, and their source is not the user's."""
    if attr is None:
        return obj, None
    cls = type(obj)
    if obj is None or cls.__module__ != "__main__":
        return None, None
    fn = inspect.getattr_static(cls, attr, None)
    return (fn, obj) if inspect.isfunction(fn) else (None, None)


def _changes(node: ast.AST) -> list[ast.AST]:
    """What ``node`` changes in place: the object written into (``L[0][:] = -1``: ``L[0]``;
    ``L[0] = 5`` replaces an item of ``L``, the array unchanged), changed in place
    (``L[0] += 1``), whose method changes it (``L[0].sort()``), or a function's output
    (``np.add(Y, 1, out=Y)``, ``np.copyto(Y, 0)``)."""
    items = (ast.Subscript, ast.Attribute)
    if isinstance(node, ast.Call):
        out = written_args(node)
        return [node.func.value, *out] if isinstance(node.func, ast.Attribute) \
            and node.func.attr in _IN_PLACE else out
    return [t.value for t in node.targets if isinstance(t, items)] \
        if isinstance(node, ast.Assign) else [node.target.value] \
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, items) else \
        [node.target] if isinstance(node, ast.AugAssign) else []


def _owner(tree: ast.AST) -> str:
    return f"{tree.name}()" if isinstance(tree, ast.FunctionDef) else "called"
