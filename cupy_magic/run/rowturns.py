"""Transposes that bring a batch's rows back to the leading axis, as :mod:`.rowwise` reads
them: ``np.vstack([a, b]).T``, ``np.array([a, b]).T``, ``(x.T * b[:, None]).T``,
``(w @ x.T).T``, ``np.atleast_2d(v).T``.

In between, the value holds the rows on its last axis (two dimensions, the rows as
columns): a stack of one-dimensional rows, ``x.T`` of a two-dimensional ``x``, and what
element-wise arithmetic makes of them with small tables and one-dimensional rows (which
broadcast along the last axis, row by row), or a small matrix times them. Transposed back,
each row is the row it was. Read by the expression's form only; a name bound to such a
value is read the usual way (a stack over the leading axis, a value without a row axis).
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from ..syncs.values import attr_path
from .rowvocab import CLEAN, ELEMENTWISE, MIXED, NROWS, ROWS, Kind, _fold, _join, axes_of

__all__ = ["Turns"]

# functions that stack one-dimensional rows as the rows of a new two-dimensional value
STACKS = frozenset({"vstack", "row_stack", "stack", "array", "asarray", "atleast_2d"})


class Turns:
    """What a walker does with a transpose of a value that holds the rows on its last
    axis; it gives ``expr``, ``mix``, ``quiet`` and ``xp``."""

    quiet: Callable[[ast.expr, dict[str, Kind]], Kind]
    xp: set[str]

    def expr(self, node: ast.expr | None, env: dict[str, Kind]) -> Kind:
        raise NotImplementedError

    def turn_back(self, node: ast.expr, env: dict[str, Kind]) -> Kind | None:
        """The kind of ``node`` where it is ``E.T``, ``np.transpose(E)`` or
        ``E.transpose()`` of an ``E`` with the rows on its last axis (``None``: it is not;
        nothing recorded then)."""
        inner: ast.expr | None = None
        if isinstance(node, ast.Attribute) and node.attr == "T":
            inner = node.value
        elif isinstance(node, ast.Call) and not node.keywords:
            path = attr_path(node.func)
            if len(path) == 2 and path[0] in self.xp and path[1] == "transpose" and \
                    len(node.args) == 1:
                inner = node.args[0]
            elif isinstance(node.func, ast.Attribute) and node.func.attr == "transpose" \
                    and not node.args:
                inner = node.func.value
        if inner is None or not self.turned(inner, env):
            return None
        got = self.walk_turned(inner, env)
        return (ROWS, 2) if got[0] == ROWS else got

    def turned(self, node: ast.expr, env: dict[str, Kind]) -> bool:
        """Whether ``node`` is two-dimensional with the rows on its last axis, by its form
        (records nothing)."""
        if isinstance(node, ast.Attribute) and node.attr == "T":
            return self.quiet(node.value, env) == (ROWS, 2)
        if isinstance(node, ast.UnaryOp):
            return self.turned(node.operand, env)
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.MatMult):  # w @ x.T: a small matrix times the columns
                return self.quiet(node.left, env)[0] == CLEAN and self.turned(node.right, env)
            return self.alongside([node.left, node.right], env)
        if isinstance(node, ast.Compare):
            return self.alongside([node.left, *node.comparators], env)
        if not isinstance(node, ast.Call):
            return False
        path = attr_path(node.func)
        name = path[-1] if len(path) == 2 and path[0] in self.xp else ""
        if name in STACKS:
            return self.stacked(node, name, env)
        if (name in ELEMENTWISE and name != "where") or (name == "where" and
                                                       len(node.args) == 3):
            return not node.keywords and self.alongside(node.args, env)
        return False

    def stacked(self, node: ast.Call, name: str, env: dict[str, Kind]) -> bool:
        """``np.vstack([a, b])``, ``np.stack([a, b])`` (axis 0), ``np.array([a, b])``,
        ``np.atleast_2d(v)`` of one-dimensional rows."""
        words = {k.arg: k.value for k in node.keywords}
        if len(node.args) != 1 or any(k not in ("dtype", "axis") for k in words) or \
                ("axis" in words and (name != "stack" or axes_of(words["axis"], None) != (0,))):
            return False
        arg = node.args[0]
        if name == "atleast_2d":
            return self.quiet(arg, env) == (ROWS, 1)
        return isinstance(arg, (ast.List, ast.Tuple)) and bool(arg.elts) and all(
            self.quiet(e, env) == (ROWS, 1) for e in arg.elts)

    def alongside(self, operands: list[ast.expr], env: dict[str, Kind]) -> bool:
        """Whether element-wise operands keep the rows on the last axis: one of them does,
        and each other is a small table, one-dimensional rows (broadcast along the last
        axis) or a value over the rows (a certain mix, recorded when walked)."""
        turned = [self.turned(o, env) for o in operands]
        return any(turned) and all(
            t or self.quiet(o, env)[0] in (CLEAN, MIXED, NROWS) or
            self.quiet(o, env) == (ROWS, 1) for o, t in zip(operands, turned, strict=True))

    def walk_turned(self, node: ast.expr, env: dict[str, Kind]) -> Kind:
        """Walk a value :meth:`turned` accepted, recording the places in it; the rows it
        holds count as two-dimensional rows."""
        if isinstance(node, ast.Attribute):
            return self.expr(node.value, env)
        if isinstance(node, ast.UnaryOp):
            return self.walk_turned(node.operand, env)
        if isinstance(node, ast.BinOp):
            parts = [node.left, node.right]
        elif isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
        else:
            assert isinstance(node, ast.Call)
            arg = node.args[0]
            stack = isinstance(arg, (ast.List, ast.Tuple)) and attr_path(node.func)[-1] in STACKS
            parts = list(arg.elts) if stack else node.args  # type: ignore[union-attr]
            for k in node.keywords:
                self.expr(k.value, env)
            if stack or attr_path(node.func)[-1] == "atleast_2d":
                got = _fold([self.expr(p, env) for p in parts], node, self)
                return (ROWS, 2) if got[0] == ROWS else got
        kinds = [self.walk_turned(p, env) if self.turned(p, env) else self.expr(p, env)
                 for p in parts]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            return kinds[1]
        out: Kind = (CLEAN, None)
        for k in kinds:
            out = _join(out, k, node, self)
        return out
