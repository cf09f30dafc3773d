"""The names a cell binds to values that certainly depend on no batched row: constants such
as ``eps = np.float32(1e-3)`` or ``c = np.sqrt(2 / np.pi)``.

A batched run refuses a NumPy scalar result without a ``--reduce`` rule, as most are a
batch's reduction (``t = x.sum()``); one named here it keeps as it keeps a Python value,
when every batch gives the same. A name is named only where the check can read its value
through: bound once in the cell, at its top level, by ``name = value``, and the value built
of literals, array-module functions and constants (``np.sqrt``, ``np.pi``, not
``np.random``), arithmetic, and names named before or read from earlier cells (plain values,
no functions); no batched input, no indexing, no call the check cannot see into.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..syncs.values import attr_path
from .rowvocab import ARRAY_MODULES

__all__ = ["row_free"]

# names through which a cell can bind or read names the check does not see
_HIDDEN = frozenset({"exec", "eval", "globals", "locals", "vars", "setattr", "delattr",
                     "__import__", "__builtins__", "get_ipython"})


def row_free(tree: ast.Module, batched: Iterable[str], xp: Iterable[str],
             plain: Callable[[str], bool]) -> frozenset[str]:
    """The names ``tree`` leaves bound to values that depend on no batched row.

    Parameters
    ----------
    tree
        The cell, parsed.
    batched
        The batched inputs' names.
    xp
        Names of the array modules in the cell (those it imports among them).
    plain
        Whether a name the cell reads but never binds holds a plain value (a number, an
        array: not a function, a module or an object whose calls the check cannot see).
    """
    bound, imports, arrays = _bindings(tree)
    if any(isinstance(n, ast.Name) and n.id in _HIDDEN for n in ast.walk(tree)):
        return frozenset()
    reader = _Reader(frozenset(batched), {m for m in xp if not bound[m] and
                                          imports[m] == arrays[m]},
                     lambda n: not bound[n] and not imports[n] and plain(n))
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            target, value = stmt.target, stmt.value
        else:
            continue
        if isinstance(target, ast.Name) and bound[target.id] + imports[target.id] == 1 \
                and reader.known(value):
            reader.free.add(target.id)
    return frozenset(reader.free)


@dataclass
class _Reader:
    """Reads a value: ``cut`` the batched inputs, ``modules`` the array modules, ``outside``
    whether a name the cell never binds holds a plain value, ``free`` the names found."""

    cut: frozenset[str]
    modules: set[str]
    outside: Callable[[str], bool]
    free: set[str] = field(default_factory=set)

    def known(self, node: ast.expr) -> bool:
        """Whether ``node``'s value certainly depends on no batched row."""
        if isinstance(node, ast.Constant):
            return True
        if isinstance(node, ast.Name):
            return node.id not in self.cut and (node.id in self.free or self.outside(node.id))
        if isinstance(node, ast.Attribute):
            path = attr_path(node)
            return len(path) >= 2 and path[0] in self.modules and "random" not in path
        if isinstance(node, ast.BinOp):
            return self.known(node.left) and self.known(node.right)
        if isinstance(node, ast.UnaryOp):
            return self.known(node.operand)
        if isinstance(node, (ast.Tuple, ast.List)):
            return all(self.known(e) for e in node.elts)
        if isinstance(node, ast.Call):
            return isinstance(node.func, ast.Attribute) and self.known(node.func) and \
                all(self.known(a) for a in node.args) and \
                all(k.arg is not None and self.known(k.value) for k in node.keywords)
        return False  # indexing, comprehensions, lambdas, starred...


def _bindings(tree: ast.Module) -> tuple[Counter[str], Counter[str], Counter[str]]:
    """How often each name is bound anywhere in the cell (assigned, deleted, defined, named
    global, caught, matched; inside its functions too), how often imported, and how often
    bound to an array module by ``import numpy as np``."""
    bound: Counter[str] = Counter()
    imports: Counter[str] = Counter()
    arrays: Counter[str] = Counter()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound[node.id] += 1
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound[node.name] += 1
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            bound[node.name] += 1
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bound[node.rest] += 1
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.update(a.asname or a.name.split(".")[0] for a in node.names)
            if isinstance(node, ast.Import):
                arrays.update(a.asname or a.name.split(".")[0] for a in node.names
                              if a.name.split(".")[0] in ARRAY_MODULES
                              and "random" not in a.name.split("."))
    return bound, imports, arrays
