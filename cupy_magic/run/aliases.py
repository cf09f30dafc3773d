"""Which inputs a cell can only read: no other name, view or function ever holds them.

:class:`~.inputwrites.InputWatch` checksums the device copy of every input the cell's source
does not show changing, after the copy and after the cell: the copy can change through an
alias, a view or a function the cell passes it to. Where the source shows none can exist,
the checksums are skipped (on the CPU fallback each costs a pass over the input at about
2 GB/s). An input is only read when every mention of it is consumed at once into a new value:
an operand (``x * 2``, ``x > 0``, ``-x``), a method or attribute that makes a new value
(``x.sum()``, ``x.shape``, ``x.astype(...)``), an argument of a NumPy ufunc or of a NumPy
function that returns a new array (``np.sqrt(x)``, ``np.mean(x, axis=0)``) without ``out=``,
of ``len``, ``print`` and the like; or a view of it (``x[0]``, ``x.T``, ``x.reshape(...)``)
itself consumed so. A name a plain assignment binds to it or a view of it (``y = x``,
``r = x[1:]``) counts as it: ``y = x`` then ``y = y * 2`` only reads ``x``, ``y += 1`` does
not. Anything else (put in a container, passed to another function, iterated, mentioned
inside a function or lambda of the cell) may alias it.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Mapping
from itertools import compress, repeat
from operator import is_
from types import ModuleType
from typing import Any

import numpy as np

from .names import SCOPES, parents

__all__ = ["MODULE_NAMES", "Reader", "numpy_names", "only_read", "read_in", "read_until_rebound"]

# what a cell may name the array module, besides the names bound to NumPy before it
MODULE_NAMES = ("np", "numpy", "cp", "cupy")
Reader = tuple[str, int | str]  # a function's name; the position or keyword it only reads


def numpy_names(space: Mapping[str, Any]) -> set[str]:
    """The names ``space`` (a notebook's namespace, a function's globals) binds to NumPy,
    scanned in C (a notebook's namespace holds thousands)."""
    return set(compress(space.keys(), map(is_, space.values(), repeat(np))))

# a NumPy array's methods and attributes that give a new value, never one over its memory
_FRESH_ATTRS = frozenset({
    "sum", "mean", "std", "var", "min", "max", "prod", "any", "all", "argmax", "argmin",
    "cumsum", "cumprod", "round", "clip", "copy", "astype", "dot", "nonzero", "tolist", "item",
    "tobytes", "trace", "ptp", "argsort", "searchsorted", "get", "shape", "dtype", "ndim",
    "size", "nbytes", "itemsize", "strides",
})
# those that give a view of it (consumed at once, safe as the array itself)
# (``conj`` of a real array is the array itself)
_VIEW_ATTRS = frozenset({"T", "real", "imag", "conj", "conjugate", "reshape", "ravel", "view",
                         "transpose", "swapaxes", "squeeze", "diagonal", "flatten"})
# NumPy functions (besides the ufuncs) that return a new array, never an argument, by the
# positional arguments they may be given before one that is ``out`` (``np.sum(a, axis,
# dtype, out)``) or ``copy`` (``np.array(a, dtype, copy)``); ufuncs take ``nin``
_FRESH_FUNCS = {
    "sum": 3, "mean": 3, "std": 3, "var": 3, "prod": 3, "cumsum": 3, "cumprod": 3,
    "nansum": 3, "nanmean": 3, "min": 2, "max": 2, "amin": 2, "amax": 2, "any": 2, "all": 2,
    "argmax": 2, "argmin": 2, "nanmax": 2, "nanmin": 2, "round": 2, "around": 2, "clip": 3,
    "dot": 2, "vdot": 2, "inner": 2, "outer": 2, "tensordot": 3, "where": 3,
    "concatenate": 2, "stack": 2, "vstack": 1, "hstack": 1, "column_stack": 1, "sort": 4,
    "argsort": 4, "unique": 1, "median": 2, "percentile": 3, "quantile": 3, "norm": 4,
    "copy": 2, "array": 2, "count_nonzero": 2, "allclose": 5, "isclose": 5, "array_equal": 3,
    "trace": 5, "average": 4, "searchsorted": 4, "bincount": 3, "cholesky": 1, "inv": 1,
    "solve": 2, "det": 1, "asnumpy": 1,
}
# a method that may give the array itself past this many positional arguments (``copy``)
_METHOD_ARGS = {"astype": 4}
_FRESH_BUILTINS = frozenset({"len", "print", "float", "int", "bool", "repr", "str",
                             "isinstance", "type", "id", "abs", "format"})
# what reaches the cell's namespace other than by name: every input may then be changed
_REACH_NAMESPACE = frozenset({"exec", "eval", "globals", "vars", "locals", "get_ipython",
                              "__import__", "compile"})


def _module_call(func: ast.expr, modules: frozenset[str]) -> str | None:
    """The last name of ``np.linalg.norm`` when ``func`` is such a chain on a module name
    through NumPy's modules only: ``np.ndarray.sort(x)`` sorts ``x`` in place, where
    ``np.sort(x)`` copies it."""
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not (isinstance(func, ast.Name) and func.id in modules and parts):
        return None
    through: object = np
    for part in reversed(parts[1:]):
        through = getattr(through, part, None)
        if not isinstance(through, ModuleType):
            return None
    return parts[0]


def _copies(call: ast.Call, positional: int | None = None) -> bool:
    """No ``out=`` or ``overwrite_*=`` (``np.median(x, overwrite_input=True)`` sorts ``x``),
    no ``copy=`` other than ``True`` (``x.astype(t, copy=False)`` may be ``x`` itself), no
    starred arguments, and at most ``positional`` positional ones (past them: ``out``)."""
    if positional is not None and len(call.args) > positional:
        return False
    return not any(isinstance(a, ast.Starred) for a in call.args) and not any(
        k.arg is None or k.arg == "out" or k.arg.startswith("overwrite")
        or (k.arg == "copy" and not (isinstance(k.value, ast.Constant)
                                     and k.value.value is True)) for k in call.keywords)


def _fresh_call(call: ast.Call, modules: frozenset[str]) -> bool:
    if isinstance(call.func, ast.Name):
        return call.func.id in _FRESH_BUILTINS and _copies(call)
    name = _module_call(call.func, modules)
    if name is None:
        return False
    ufunc = getattr(np, name, None)
    if isinstance(ufunc, np.ufunc):
        return _copies(call, ufunc.nin)
    return name in _FRESH_FUNCS and _copies(call, _FRESH_FUNCS[name])


def _reads(call: ast.Call, key: int | str, readers: frozenset[Reader]) -> bool:
    """Whether ``call`` is of a function :mod:`.readers` found only reading its argument
    ``key`` (a position, after no starred argument, or a keyword)."""
    if not (isinstance(call.func, ast.Name) and (call.func.id, key) in readers):
        return False
    return isinstance(key, str) or not any(isinstance(a, ast.Starred)
                                           for a in call.args[:key + 1])


def _consumed(node: ast.expr, parent: dict[ast.AST, ast.AST], modules: frozenset[str],
              readers: frozenset[Reader] = frozenset()) -> bool:
    """Whether the value of ``node`` (the array, or a view of it) is consumed at once."""
    up = parent.get(node)
    if isinstance(up, (ast.BinOp, ast.UnaryOp, ast.Compare)):
        return True
    if isinstance(up, ast.AugAssign) and up.value is node:  # z += x reads x into z
        return True
    if isinstance(up, ast.Attribute) and up.value is node:
        if not isinstance(up.ctx, ast.Load):  # y.shape = (2, 3) reshapes the array itself
            return False
        call = parent.get(up)
        whole = call if isinstance(call, ast.Call) and call.func is up else up
        if up.attr in _FRESH_ATTRS:
            return whole is up or _copies(whole, _METHOD_ARGS.get(up.attr))
        return up.attr in _VIEW_ATTRS and _consumed(whole, parent, modules, readers)
    if isinstance(up, ast.Subscript) and up.value is node and isinstance(up.ctx, ast.Load):
        return _consumed(up, parent, modules, readers)
    if isinstance(up, ast.keyword):
        call = parent.get(up)
        return isinstance(call, ast.Call) and (
            _fresh_call(call, modules) or (up.arg is not None and _reads(call, up.arg, readers)))
    if isinstance(up, ast.Call) and node in up.args:
        return _fresh_call(up, modules) or _reads(up, up.args.index(node), readers)
    return False


def _viewed(expr: ast.expr) -> ast.Name | None:
    """The name ``expr`` is, or is a view of (``x``, ``x[1:]``, ``x.T``, ``x.reshape(2, 3)``)."""
    while True:
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) \
                and expr.func.attr in _VIEW_ATTRS:
            expr = expr.func.value
        elif isinstance(expr, ast.Subscript) or (
                isinstance(expr, ast.Attribute) and expr.attr in _VIEW_ATTRS):
            expr = expr.value
        else:
            return expr if isinstance(expr, ast.Name) else None


def _aliases(tree: ast.Module, names: frozenset[str]) -> tuple[dict[str, set[str]], set[int]]:
    """For each name that may hold an input or a view of one through plain assignments
    (``y = x``, ``r = x[1:]``, then ``z = y``), the inputs it may hold; and the ids of the
    name nodes those assignments read (the binding itself is no use of the value)."""
    binds = [(node.targets[0].id, _viewed(node.value)) for node in _module_level(tree)
             if isinstance(node, ast.Assign) and len(node.targets) == 1
             and isinstance(node.targets[0], ast.Name)]
    holds: dict[str, set[str]] = {n: {n} for n in names}
    passed: set[int] = set()
    changed = True
    while changed:
        changed = False
        for target, source in binds:
            if source is not None and source.id in holds:
                passed.add(id(source))
                new = holds.setdefault(target, set())
                if not holds[source.id] <= new:
                    new |= holds[source.id]
                    changed = True
    return holds, passed


def _module_level(tree: ast.Module) -> list[ast.AST]:
    """The nodes of the cell outside its functions, lambdas and classes."""
    found: list[ast.AST] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        found.append(node)
        todo.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, SCOPES))
    return found


@functools.lru_cache(maxsize=256)
def only_read(source: str, names: frozenset[str], modules: frozenset[str],
              readers: frozenset[Reader] = frozenset()) -> frozenset[str]:
    """Those of ``names`` (the cell's inputs) that the cell's source can only read (see the
    module's docstring); ``modules``: the names that mean the array module in the cell. A
    name a plain assignment binds to an input or a view of one (``y = x``) counts as the
    input: ``y = x`` then ``y = y * 2`` only reads ``x``; ``y += 1`` does not. ``readers``:
    the arguments of the notebook's functions that only read them (:mod:`.readers`:
    ``("total", 0)``), consumed as a NumPy function's are."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return frozenset()
    return read_in(tree, names, modules, readers)


def read_in(tree: ast.Module, names: frozenset[str], modules: frozenset[str],
            readers: frozenset[Reader] = frozenset()) -> frozenset[str]:
    """:func:`only_read` of a parsed body (a function's, whose ``return`` a source at the
    top level could not hold)."""
    parent = parents(tree)
    if any(isinstance(n, ast.Name) and n.id in _REACH_NAMESPACE for n in ast.walk(tree)):
        return frozenset()  # exec('x[0] = 5'), globals()['x'], get_ipython().ex(...), %time
    holds, passed = _aliases(tree, names)
    unsafe: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, SCOPES):  # a function of the cell may keep or pass anything
            for name in ast.walk(node):
                if isinstance(name, ast.Name) and name.id in holds:
                    unsafe |= holds[name.id]
        elif isinstance(node, ast.Name) and node.id in holds and (
                (isinstance(node.ctx, ast.Load) and id(node) not in passed
                and not _consumed(node, parent, modules, readers))
                or (isinstance(up := parent.get(node), ast.AugAssign)
                and up.target is node)):  # y += 1 writes y in place
            unsafe |= holds[node.id]
    return frozenset(names - unsafe)


def _binds_new_memory(stmt: ast.stmt, name: str) -> bool:
    """Whether ``stmt`` is a top-level ``name = ...`` whose value holds new memory, never a
    view of the input's copy nor the copy (an operator's result: ``X = X * 2``; an array's
    ``.copy()``; not ``X = X[::-1]``, ``X = X.T``, ``X = np.transpose(X)`` or ``X = [X]``)."""
    if isinstance(stmt, ast.Assign):
        targets, value = stmt.targets, stmt.value
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        targets, value = [stmt.target], stmt.value
    else:
        return False
    copied = isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
        and value.func.attr == "copy" and not value.args and not value.keywords \
        and isinstance(value.func.value, ast.Name) and value.func.value.id == name  # X.copy()
    return any(isinstance(t, ast.Name) and t.id == name for t in targets) \
        and (copied or isinstance(value, (ast.BinOp, ast.UnaryOp, ast.Compare, ast.Constant))) \
        and not any(isinstance(n, ast.NamedExpr) for n in ast.walk(value))


@functools.lru_cache(maxsize=256)
def read_until_rebound(source: str, names: frozenset[str],
                       modules: frozenset[str]) -> frozenset[str]:
    """Those of ``names`` that the cell's source can only read up to the end of the first
    top-level assignment that binds the name to new memory (all of the source where none
    does; :func:`_binds_new_memory`): after it the name holds another value, and what the
    source does to that one cannot reach the input's copy but through a name bound to it
    before (``Y = X``, ``Y = X[:2]``): none may be. ``X = X * 2; X += 1``
    reads ``X``'s copy only; ``X = f(X)`` may change it (``def f(a): a -= 1``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return frozenset()
    lines = source.splitlines(keepends=True)
    found = set()
    for name in names:
        end = next((stmt.end_lineno for stmt in tree.body if _binds_new_memory(stmt, name)),
                   None)
        part = source if end is None else "".join(lines[:end])
        # a name bound to the copy or a view of it there (`Y = X[:2]`) may write it later
        held = _aliases(ast.parse(part), frozenset({name}))[0]
        if only_read(part, frozenset({name}), modules) and held.keys() == {name}:
            found.add(name)
    return frozenset(found)
