"""Indexing as :mod:`.rowwise` reads it: a batched value's rows picked or kept
(``x[:, 0]``, ``x[mask]``, ``x[np.arange(len(x)), i]``, ``x[0]``), its shape read
(``x.shape[1]``), and a small table indexed by a batch's rows (``cen[lab]``)."""

from __future__ import annotations

import ast
from collections.abc import Callable

from ..syncs.values import attr_path
from . import rowvocab as vocab
from .rowvocab import CLEAN, MIXED, NROWS, ROWS, Kind, _fold

__all__ = ["Indexing"]


class Indexing:
    """What a walker does with subscripts; it gives ``expr``, ``mix`` and ``numbers_rows``
    (:class:`.rowshapes.Shapes`)."""

    numbers_rows: Callable[[ast.expr, ast.expr], bool]

    def expr(self, node: ast.expr | None, env: dict[str, Kind]) -> Kind:
        raise NotImplementedError

    def mix(self, node: ast.AST, why: str, certain: bool = True) -> Kind:
        raise NotImplementedError

    def shape_index(self, node: ast.Subscript, base: Kind) -> Kind:
        at = vocab.axes_of(node.slice, None)
        ndim = base[1]
        if at and len(at) == 1 and at[0] != 0 and (at[0] > 0 or (ndim is not None
                                                                 and at[0] + ndim != 0)):
            return (CLEAN, None)
        if at and len(at) == 1 and at[0] < 0 and ndim is None:
            return self.mix(node, f"reads .shape[{at[0]}], the row count when the value has "
                            "one dimension", certain=False)
        return (NROWS, None)  # a batch's row count

    def subscript(self, node: ast.Subscript, base: Kind, env: dict[str, Kind]) -> Kind:
        idx = node.slice
        first = idx.elts[0] if isinstance(idx, ast.Tuple) and idx.elts else idx
        rest = idx.elts[1:] if isinstance(idx, ast.Tuple) else []
        whole = isinstance(first, ast.Slice) and first.lower is None and \
            first.upper is None and first.step is None
        if whole or self.numbers_rows(first, node.value):  # x[:, 0], x[np.arange(len(x)), i]
            kinds = [self.expr(e, env)[0] for e in rest]
            if MIXED in kinds or NROWS in kinds or (whole and ROWS in kinds):
                return self.mix(node, "indexes the columns of a batched input by a value over "
                                "the batch's rows: each batch would pick its own")
            return (ROWS, _indexed(base[1], rest) if whole else None)
        if isinstance(first, ast.Constant) and first.value is Ellipsis:
            if base[1] is not None and base[1] > len(rest):
                return (ROWS, None)
            return self.mix(node, "indexes a batched input after `...`: on one dimension "
                            "that picks rows", certain=base[1] is not None)
        picked = self.expr(first, env)
        if picked[0] == ROWS:  # a mask or index of the batch's own rows
            return (ROWS, None)
        if isinstance(first, ast.Slice):
            return self.mix(node, "slices the rows of a batched input: a batch's slice is not "
                            "the input's")
        if isinstance(first, (ast.Constant, ast.UnaryOp)):
            return (MIXED, None)  # one row of the batch: no row axis
        return self.mix(node, "picks rows of a batched input by an index the check cannot "
                        "read: a batch's row i is not the input's", certain=False)

    def table(self, node: ast.Subscript, base: Kind, env: dict[str, Kind]) -> Kind:
        """A value without rows indexed: by a batch's rows first (``cen[lab]``,
        ``np.eye(3)[lab]``) it has them; by a value over the rows, it is one."""
        idx = node.slice
        parts = list(idx.elts) if isinstance(idx, ast.Tuple) else [idx]
        kinds = [self.expr(p, env)[0] for p in parts]
        maker = attr_path(node.value)[-1:]  # np.c_[x, v]: columns side by side; np.r_: rows
        if ROWS in kinds and maker in (["c_"], ["r_"]) and not any(
                isinstance(p, (ast.Slice, ast.Constant)) for p in parts):
            return _fold([(k, None) for k in kinds], node, self) if maker == ["c_"] else \
                self.mix(node, "np.r_ joins a batch's rows end to end, not the input's")
        if ROWS in kinds[1:] or (ROWS in kinds and MIXED in kinds):
            return self.mix(node, "indexes a value by a batch's rows other than by its first "
                            "index: the rows do not stay on the leading axis", certain=False)
        if ROWS in kinds and base[0] in (MIXED, NROWS):  # a total's entries by the rows
            return self.mix(node, "picks from a value over the rows by a batch's rows: each "
                            "batch would pick from its own")
        if kinds and kinds[0] == ROWS:
            return (ROWS, None)
        return (MIXED, None) if MIXED in kinds or NROWS in kinds else base


def _indexed(ndim: int | None, rest: list[ast.expr]) -> int | None:
    """The number of dimensions of ``a[:, *rest]`` for ``a`` of ``ndim`` by basic indexing
    (``None``: not known, or an index array among ``rest``)."""
    if ndim is None:
        return None
    out = ndim
    for e in rest:
        if isinstance(e, ast.Constant) and e.value is None:
            out += 1
        elif (isinstance(e, ast.Constant) and type(e.value) is int) or \
                (isinstance(e, ast.UnaryOp) and isinstance(e.operand, ast.Constant)):
            out -= 1
        elif not isinstance(e, ast.Slice) and not (isinstance(e, ast.Attribute)
                                                   and e.attr == "newaxis"):
            return None
        elif isinstance(e, ast.Attribute):
            out += 1
    return out
