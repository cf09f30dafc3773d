"""The sizes of a row, where :mod:`.rowwise` can read them: a batched input's trailing
shape (``x`` of shape ``(N, 4)``: ``(4,)``), carried through what keeps it (``x * 2``,
``np.log1p(x)``, ``x.astype(np.float32)``), what picks columns by literals (``x[:, :1]``,
``x[:, [0, 2]]``, ``x[:, 0, None]``), reshapes and squeezes.

A reshape ``x.reshape(-1, 2, 2)`` keeps each row in a row of its own only where the fixed
dimensions hold a row's elements exactly (``2 * 2 == 4``), and ``np.squeeze(a)`` keeps the
rows only where it is known which of a row's dimensions are 1. Known for a name only where
the cell binds it at its top level, outside branches and loops, by ``name = value``.
"""

from __future__ import annotations

import ast
import math

from ..syncs.values import attr_path
from .rowvocab import ELEMENTWISE, axes_of

__all__ = ["Sizes", "literal_dims"]

Shape = tuple[int, ...]
# methods that keep their array's shape when their other arguments are literals
KEEP_METHODS = frozenset({"astype", "copy", "round", "clip", "conj", "conjugate"})


def literal_dims(node: ast.expr) -> list[int] | None:
    """The integers of a literal dimension or tuple of them (``-1`` included); ``None``
    where one is not a literal integer."""
    elts = node.elts if isinstance(node, (ast.Tuple, ast.List)) else [node]
    out = []
    for e in elts:
        axes = axes_of(e, None)
        if isinstance(e, ast.Constant) and type(e.value) is int:
            out.append(e.value)
        elif axes is not None and len(axes) == 1 and isinstance(e, ast.UnaryOp):
            out.append(axes[0])
        else:
            return None
    return out


def _number(node: ast.expr) -> bool:
    """A literal number (``2``, ``-0.5``): it broadcasts without adding a dimension."""
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float, complex)) \
        and not isinstance(node.value, bool)


def _plain_arg(node: ast.expr) -> bool:
    """A literal or a dtype name (``np.float32``, ``'f4'``): no array of its own."""
    return isinstance(node, ast.Constant) or _number(node) or bool(attr_path(node))


class Sizes:
    """What a walker knows of its values' trailing shapes; it gives ``xp``."""

    xp: set[str]
    sizes: dict[str, Shape]  # a name's trailing shape, where known

    def trailing(self, node: ast.expr) -> Shape | None:
        """The shape of one row of ``node``'s value (``None``: not known)."""
        if isinstance(node, ast.Name):
            return self.sizes.get(node.id)
        if isinstance(node, ast.UnaryOp):
            return self.trailing(node.operand)
        if isinstance(node, ast.BinOp) and not isinstance(node.op, ast.MatMult):
            left, right = self.trailing(node.left), self.trailing(node.right)
            if left is not None and (right == left or _number(node.right)):
                return left
            return right if right is not None and _number(node.left) else None
        if isinstance(node, ast.Subscript):
            return self.picked(node)
        if not isinstance(node, ast.Call) or (node.keywords and not all(
                _plain_arg(k.value) for k in node.keywords)):
            return None
        func = node.func
        path = attr_path(func)
        if isinstance(func, ast.Attribute) and func.attr in KEEP_METHODS and \
                all(_plain_arg(a) for a in node.args):
            return self.trailing(func.value)
        method = isinstance(func, ast.Attribute) and func.attr == "reshape"
        if method or (len(path) == 2 and path[0] in self.xp and path[1] == "reshape"):
            return self.reshaped(func.value if method else node.args[0],  # type: ignore[union-attr]
                                 node.args if method else node.args[1:])
        if len(path) == 2 and path[0] in self.xp and path[1] in ELEMENTWISE and node.args and \
                all(_plain_arg(a) for a in node.args[1:]) and path[1] != "where":
            return self.trailing(node.args[0])
        return None

    def reshaped(self, operand: ast.expr, shape: list[ast.expr]) -> Shape | None:
        """A row's shape after ``operand.reshape(-1, *dims)`` that keeps the rows."""
        if len(shape) == 1 and isinstance(shape[0], (ast.Tuple, ast.List)):
            shape = list(shape[0].elts)
        dims = literal_dims(ast.Tuple(shape, ast.Load())) if shape else None
        if not dims or dims[0] != -1 or not self.regrouped(operand, dims[1:]):
            return None
        return tuple(dims[1:])

    def regrouped(self, operand: ast.expr, dims: list[int]) -> bool | None:
        """Whether ``operand.reshape(-1, *dims)`` keeps each row in a row of its own: the
        fixed dimensions hold exactly a row's elements (``None``: a row's size not known)."""
        row = self.trailing(operand)
        if row is None or any(d < 1 for d in dims):
            return None
        return math.prod(dims) == math.prod(row)

    def squeezed(self, operand: ast.expr) -> int | None:
        """The number of dimensions ``np.squeeze(operand)`` leaves, rows counted, where a
        row's shape is known (``None``: not known)."""
        row = self.trailing(operand)
        return None if row is None else 1 + sum(d != 1 for d in row)

    def picked(self, node: ast.Subscript) -> Shape | None:
        """A row's shape after ``a[:, ...]`` by literal ints, slices, ``None`` and lists of
        ints (``None``: anything else)."""
        row = self.trailing(node.value)
        idx = node.slice
        parts = list(idx.elts) if isinstance(idx, ast.Tuple) else [idx]
        first = parts[0] if parts else None
        if row is None or not (isinstance(first, ast.Slice) and first.lower is None
                               and first.upper is None and first.step is None):
            return None
        out: list[int] = []
        dims = list(row)
        for part in parts[1:]:
            if isinstance(part, ast.Constant) and part.value is None:
                out.append(1)
                continue
            if not dims:
                return None
            dim = dims.pop(0)
            if literal_dims(part) is not None and not isinstance(part, ast.List):
                continue  # an integer: that dimension dropped
            if isinstance(part, ast.List) and literal_dims(part) is not None:
                out.append(len(part.elts))
            elif isinstance(part, ast.Slice):
                ends: list[int | None] = []
                for bound in (part.lower, part.upper, part.step):
                    lit = None if bound is None else literal_dims(bound)
                    if bound is not None and (lit is None or len(lit) != 1):
                        return None
                    ends.append(None if lit is None else lit[0])
                out.append(len(range(*slice(*ends).indices(dim))))
            else:
                return None
        return (*out, *dims)
