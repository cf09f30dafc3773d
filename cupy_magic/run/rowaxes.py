"""Reductions and scans along an axis as :mod:`.rowwise` reads them: along the rows
(``x.sum(axis=0)``: a value over them, joined by a ``--reduce`` rule; ``np.sort(v)``,
``x.argmax(axis=0)``: a batch's order, a mix) or along a row's own axes (``x.sum(axis=1)``,
``np.sort(x, axis=1)``, ``np.fft.rfft(x, axis=1)``: rows kept), and a ufunc's ``reduce``."""

from __future__ import annotations

import ast
from collections.abc import Callable

from . import rowvocab as vocab
from .rowvocab import MIXED, ROWS, Kind, _fold

__all__ = ["Axes"]


class Axes:
    """What a walker does with reductions; it gives ``expr``, ``mix`` and ``listed``
    (:class:`.rowshapes.Shapes`)."""

    listed: Callable[[ast.expr, dict[str, Kind]], int | None]

    def expr(self, node: ast.expr | None, env: dict[str, Kind]) -> Kind:
        raise NotImplementedError

    def mix(self, node: ast.AST, why: str, certain: bool = True) -> Kind:
        raise NotImplementedError

    def reduction(self, node: ast.Call, name: str, operand: Kind, at: int) -> Kind:
        axis: ast.expr | None = next((k.value for k in node.keywords if k.arg == "axis"), None)
        if axis is None and len(node.args) > at and at:
            axis = node.args[at]
        elif axis is None and not at and node.args and name not in ("percentile", "quantile"):
            axis = node.args[0]
        default = vocab.REDUCTIONS[name][1]
        axes = vocab.axes_of(axis, default)
        ndim = operand[1]
        if name == "stack":  # a new axis: with rows (one dimension or more), -1 is not axis 0
            ndim = ndim + 1 if ndim is not None else (2 if axes == (-1,) else None)
        if axes is None:  # not a literal: cannot tell
            return self.mix(node, f"{name} over an axis the check cannot read", certain=False)
        if not axes or any(a == 0 or (a < 0 and ndim is not None and a + ndim == 0)
                           for a in axes):  # over the rows
            where = "all elements" if not axes else "the leading axis"
            if name in vocab.SCANS or name.startswith(("arg", "nanarg")):
                return self.mix(node, f"{name} over {where} of a batched input: a batch's "
                                f"{name}, not the input's")
            return (MIXED, None)  # no row axis: joined by a --reduce rule
        if any(a < 0 for a in axes) and ndim is None:
            return self.mix(node, f"{name} along axis {axes[0]}: the leading axis when the "
                            "value has one dimension", certain=False)
        keeps = name in vocab.SCANS or any(
            k.arg == "keepdims" and isinstance(k.value, ast.Constant) and k.value.value
            for k in node.keywords)
        if name == "stack" and operand[1] is None:
            return (ROWS, None)
        return (ROWS, ndim if keeps or ndim is None else ndim - len(axes))

    def ufunc_reduce(self, node: ast.Call, operand: Kind, env: dict[str, Kind]) -> Kind:
        """``np.maximum.reduce(a, axis=1)`` (axis 0 by default): a reduction along that
        axis; of a literal list of rows (``np.maximum.reduce([a, b])``), along the list."""
        words = {k.arg: k.value for k in node.keywords}
        axis = words.get("axis", node.args[1] if len(node.args) > 1 else None)
        listed = node.args[0]
        if isinstance(listed, (ast.List, ast.Tuple)):
            if self.listed(listed, env) is not None and vocab.axes_of(axis, 0) == (0,):
                return _fold([self.expr(e, env) for e in listed.elts], node, self)
            return self.mix(node, "reduces a list with rows along an axis the check does not "
                            "follow", certain=False)
        fake = ast.copy_location(ast.Call(node.func, node.args[:1], [ast.keyword(
            "axis", axis if axis is not None else ast.Constant(0))]), node)
        return self.reduction(fake, "sum", operand, 0)
