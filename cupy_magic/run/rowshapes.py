"""Calls :mod:`.rowwise` reads by their literal arguments, which keep a batch's rows on the
leading axis for certain: reshapes to the batch's own row count (``x.reshape(len(x), -1)``),
axis moves that leave axis 0 (``np.moveaxis(a, -1, 1)``, ``np.transpose(a, (0, 2, 1))``,
``np.expand_dims(x, 1)``), ``np.hstack`` of arrays of two or more dimensions, ``np.einsum``
whose output starts with the rows' letter, ``np.take_along_axis`` along a column axis, and
functions element-wise in one argument (``np.digitize(v, [0.5, 1])``, ``np.interp``,
``np.polyval``, ``np.searchsorted``). Anything else is left to the walker
(:class:`.rowwise._Walker`), which cannot see into it."""

from __future__ import annotations

import ast
from collections.abc import Callable

from ..syncs.values import attr_path
from .rowsizes import literal_dims
from .rowvocab import CLEAN, MIXED, NROWS, ROWS, Kind, _fold, axes_of

__all__ = ["Shapes"]

# the argument that is element-wise (the rest are small tables: bins, knots, coefficients)
ELEMENTWISE_IN = {"digitize": 0, "interp": 0, "polyval": 1, "searchsorted": 1, "isin": 0}
MOVES = frozenset({"moveaxis", "swapaxes", "transpose", "expand_dims", "squeeze",
                   "take_along_axis"})


class Shapes:
    """What a walker does with calls known by their literal arguments; it gives ``expr``,
    ``mix`` and ``quiet`` (:class:`.rowstmts.Statements`)."""

    quiet: Callable[[ast.expr, dict[str, Kind]], Kind]
    regrouped: Callable[[ast.expr, list[int]], bool | None]
    squeezed: Callable[[ast.expr], int | None]
    xp: set[str]
    assigned: dict[str, int]
    batched: frozenset[str]
    counts: dict[str, str]  # n = len(x): n -> x

    def expr(self, node: ast.expr | None, env: dict[str, Kind]) -> Kind:
        raise NotImplementedError

    def mix(self, node: ast.AST, why: str, certain: bool = True) -> Kind:
        raise NotImplementedError

    def shaped(self, node: ast.Call, name: str, operand: ast.expr, rest: list[ast.expr],
               kinds: list[Kind], env: dict[str, Kind]) -> Kind | None:
        """The kind of ``name(operand, *rest)`` (a function of the array module, or a method
        of ``operand``; ``kinds``: the operand's then the rest's), or ``None`` where its
        arguments do not show the rows stay on the leading axis."""
        words = {k.arg: k.value for k in node.keywords}
        if name in ELEMENTWISE_IN:
            at = ELEMENTWISE_IN[name]
            others = [k for i, k in enumerate(kinds) if i != at]
            others += [self.quiet(v, env) for v in words.values()]
            if kinds[at][0] != ROWS or any(k[0] == ROWS for k in others):
                return None
            return _fold([*kinds, *others], node, self)  # bins over the rows: a mix
        if name == "einsum":
            return self.einsum(node, kinds)
        if name == "hstack" and not rest:
            ndim = self.listed(operand, env)
            if ndim == 1:
                return self.mix(node, "hstack of one-dimensional rows joins them end to end: "
                                "a batch's rows, not the input's")
            return (ROWS, ndim) if ndim else None
        own = kinds[0]
        if own[0] != ROWS:
            return None
        if name == "reshape":
            return self.reshape(operand, rest, words, own)
        if name == "squeeze" and not rest and not words:  # np.squeeze(a): every axis of 1
            ndim = self.squeezed(operand)
            return None if ndim is None else (ROWS, ndim)
        if name == "repeat":
            return self.repeated(rest, words, kinds, own)
        if name in MOVES:
            return self.moved(name, rest, words, kinds, own[1])
        return None

    def listed(self, node: ast.expr, env: dict[str, Kind]) -> int | None:
        """The number of dimensions of the arrays of a literal list with rows in it (``None``:
        not known, or not the same for all)."""
        if not isinstance(node, (ast.List, ast.Tuple)):
            return None
        dims = {k[1] for k in (self.quiet(e, env) for e in node.elts) if k[0] == ROWS}
        return dims.pop() if len(dims) == 1 else None

    def reshape(self, operand: ast.expr, rest: list[ast.expr], words: dict[str | None, ast.expr],
                own: Kind) -> Kind | None:
        """``x.reshape(len(x), ...)``, ``np.reshape(x, (x.shape[0], ...))``: each row's
        elements stay in its row (C order) when the leading size is the operand's own rows."""
        shape = rest or [v for k, v in words.items() if k in ("shape", "newshape")]
        if len(shape) == 1 and isinstance(shape[0], (ast.Tuple, ast.List)):
            shape = list(shape[0].elts)
        order = words.get("order")
        if not shape or (order is not None and not (isinstance(order, ast.Constant)
                                                    and order.value == "C")):
            return None
        dims = literal_dims(ast.Tuple(shape, ast.Load()))
        if dims and dims[0] == -1 and self.regrouped(operand, dims[1:]):
            return (ROWS, len(shape))  # x.reshape(-1, 2, 2): a row's 4 elements, each row
        return (ROWS, len(shape)) if self.own_rows(shape[0], operand) else None

    def repeated(self, rest: list[ast.expr], words: dict[str | None, ast.expr],
                 kinds: list[Kind], own: Kind) -> Kind | None:
        """``np.repeat(v[:, None], 4, axis=1)``: each row's elements repeated within it, by
        a count that is not a batch's value, along a literal axis other than the rows'."""
        axis = words.get("axis", rest[1] if len(rest) > 1 else None)
        axes = axes_of(axis, None) if axis is not None else None
        if not axes or len(axes) != 1 or any(k[0] != CLEAN for k in kinds[1:]) or \
                axes[0] == 0 or (axes[0] < 0 and (own[1] is None or axes[0] + own[1] == 0)):
            return None
        return own

    def own_rows(self, count: ast.expr, base: ast.expr | None) -> bool:
        """Whether ``count`` is ``len(N)`` or ``N.shape[0]``, with ``N`` the indexed or
        reshaped array itself (``base``) or a batched input the cell does not rebind: the
        batch's own row count, whatever rows the cell dropped elsewhere."""
        if isinstance(count, ast.Name) and count.id in self.counts:
            of: ast.expr = ast.Name(self.counts[count.id], ast.Load())  # n = len(x) before
        elif isinstance(count, ast.Call) and attr_path(count.func) == ["len"] and \
                len(count.args) == 1 and not count.keywords:
            of = count.args[0]
        elif isinstance(count, ast.Subscript) and isinstance(count.value, ast.Attribute) and \
                count.value.attr == "shape" and axes_of(count.slice, None) == (0,):
            of = count.value.value
        else:
            return False
        if not isinstance(of, ast.Name):
            return False
        return (isinstance(base, ast.Name) and base.id == of.id) or (
            of.id in self.batched and of.id not in self.assigned)

    def numbers_rows(self, index: ast.expr, base: ast.expr) -> bool:
        """Whether ``index`` is ``np.arange(len(N))`` (:meth:`own_rows`): beside a row's
        column index it picks each row's own element, in a batch as in the whole."""
        path = attr_path(index.func) if isinstance(index, ast.Call) else []
        return len(path) == 2 and path[0] in self.xp and path[1] == "arange" and \
            isinstance(index, ast.Call) and len(index.args) == 1 and not index.keywords and \
            self.own_rows(index.args[0], base)

    def moved(self, name: str, rest: list[ast.expr], words: dict[str | None, ast.expr],
              kinds: list[Kind], ndim: int | None) -> Kind | None:
        """Axis moves by literal axes that leave axis 0 where it is."""
        given = [*rest, *(v for k, v in words.items() if k in ("axis", "axes", "source",
                                                                 "destination", "axis1",
                                                                 "axis2"))]
        if name == "take_along_axis":
            given = given[1:]
            if len(kinds) < 2 or kinds[1][0] != ROWS:
                return None
        if name == "transpose":
            if len(given) == 1 and isinstance(given[0], (ast.Tuple, ast.List)):
                given = list(given[0].elts)
            axes = [axes_of(a, None) for a in given]
            return (ROWS, ndim) if axes and axes[0] == (0,) else None
        out = None if ndim is None else ndim + (name == "expand_dims") - (name == "squeeze")
        span = (ndim if name != "expand_dims" else out)
        axes = [axes_of(a, None) for a in given]
        if not axes or any(a is None or not a for a in axes):
            return None
        flat = [i for a in axes if a is not None for i in a]
        if any(i == 0 or (i < 0 and (span is None or i + span == 0)) for i in flat):
            if name == "expand_dims" and flat == [-1]:
                return (ROWS, out)  # a new last axis: never the leading one
            return None
        return (ROWS, out)

    def einsum(self, node: ast.Call, kinds: list[Kind]) -> Kind | None:
        """``np.einsum('ij,jk->ik', x, w)``: rows kept where every operand with rows has the
        same first letter, no other operand has it, and the output starts with it."""
        spec = node.args[0] if node.args else None
        if not (isinstance(spec, ast.Constant) and isinstance(spec.value, str)):
            return None
        text = spec.value.replace(" ", "")
        if "->" not in text or "." in text:
            return None
        ins, out = text.split("->")
        terms, ops = ins.split(","), kinds[1:]
        if len(terms) != len(ops) or any(k[0] == NROWS for k in ops):
            return None
        rows = [t for t, k in zip(terms, ops, strict=True) if k[0] == ROWS]
        letters = {t[:1] for t in rows}
        if len(letters) != 1:
            return None
        first = letters.pop()
        if not first or not out.startswith(first) or any(first in t[1:] for t in rows) or \
                any(first in t for t, k in zip(terms, ops, strict=True) if k[0] != ROWS):
            return None
        got = _fold(ops, node, self)  # a total among the operands: a mix
        return (ROWS, len(out)) if got[0] == ROWS else (MIXED, None)
