"""Whether a batched cell keeps its rows apart: the promise batching relies on, read from the
cell's code before it runs.

A batched cell runs once per batch of rows, so a value read across the rows of a batched
input (``x.mean()``, ``len(x)``, ``x[0]``, ``w @ x``) is the batch's, not the input's. Kept
as a result it has no row axis, and the batched run joins it by its ``--reduce`` rule (or
asks for one); combined with the rows (``x - x.mean()``), written into them, or reordering
them (``np.sort(x, axis=0)``, ``x[::-1]``, ``argmax``) it gives results NumPy would not.
:func:`row_mixing` follows which names carry the batched rows (the inputs, then names
assigned from them, through functions the cell defines) and which hold values over the rows,
and returns those places: ``certain`` where the operation is known, not certain where the
check cannot see (a function from elsewhere, a branch on a batch's total). A cell batched on
its own (its inputs exceed the budget) runs only when nothing is found; one batched on
request stops only at a certain place.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ..syncs.values import attr_path, names, parameters
from . import rowvocab as vocab

__all__ = ["RowMix", "row_mixing"]

CLEAN, ROWS, SHAPE, MIXED = "clean", "rows", "shape", "mixed"
MAX_DEPTH = 4


@dataclass(frozen=True)
class RowMix:
    """One place in a cell where a batch would read across rows."""

    line: int  # 1-based line in the cell source
    code: str  # the stripped source line
    why: str  # what it does to the rows
    certain: bool  # known to mix rows (False: the check cannot see into it)

    def describe(self) -> str:
        """The place as one line for an error or a report."""
        return f"line {self.line} `{self.code}` {self.why}"


def row_mixing(source: str, batched: Mapping[str, int],
               xp: Iterable[str] = ("np", "numpy", "cp", "cupy"),
               ufunc: Callable[[str], bool] = lambda name: False,
               definition: Callable[[str], ast.FunctionDef | None] = lambda name: None,
               ) -> list[RowMix]:
    """Where the cell reads across the rows of its batched inputs, in line order.

    Parameters
    ----------
    source
        The cell's code.
    batched
        The batched inputs' names and their numbers of dimensions.
    xp
        Names of the array modules in the cell.
    ufunc
        Whether a name the cell calls but does not define is an element-wise function (a
        NumPy or CuPy ufunc bound by an earlier cell).
    definition
        A function's definition, for a name the cell calls but does not define (one an
        earlier cell defined): followed as the cell's own functions are.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    walker = _Walker(source.splitlines(), set(xp), ufunc, definition)
    walker.block(tree.body, {n: (ROWS, d) for n, d in batched.items()})
    seen: dict[int, RowMix] = {}
    for mix in walker.found:  # one per line: the first certain one, else the first
        kept = seen.get(mix.line)
        if kept is None or (mix.certain and not kept.certain):
            seen[mix.line] = mix
    return sorted(seen.values(), key=lambda m: m.line)


Kind = tuple[str, int | None]  # (CLEAN|ROWS|SHAPE|MIXED, number of dimensions if known)


class _Walker:
    def __init__(self, lines: list[str], xp: set[str], ufunc: Callable[[str], bool],
                 definition: Callable[[str], ast.FunctionDef | None]) -> None:
        self.lines, self.xp = lines, xp
        self.ufunc, self.definition = ufunc, definition
        self.aliases: dict[str, str] = {}  # from numpy import sqrt as s: s -> sqrt
        self.found: list[RowMix] = []
        self.functions: dict[str, ast.FunctionDef] = {}
        self.depth = 0
        self.node: ast.AST | None = None

    def mix(self, node: ast.AST, why: str, certain: bool = True) -> Kind:
        """Record a place that mixes rows (inside a function the cell defines: its call's
        line); the value it gives is over all rows."""
        line = getattr(self.node if self.depth else node, "lineno", 1)
        code = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        self.found.append(RowMix(line, code, why, certain))
        return (MIXED, None)

    # statements --------------------------------------------------------------------------
    def block(self, body: list[ast.stmt], env: dict[str, Kind]) -> Kind:
        back: Kind = (CLEAN, None)
        for stmt in body:
            if self.depth == 0:
                self.node = stmt
            got = self.stmt(stmt, env)
            if got is not None:
                back = _join(back, got)
        return back

    def stmt(self, s: ast.stmt, env: dict[str, Kind]) -> Kind | None:
        if isinstance(s, ast.FunctionDef):
            self.functions[s.name] = s
        elif isinstance(s, (ast.Import, ast.ImportFrom)):
            module = s.module or "" if isinstance(s, ast.ImportFrom) else ""
            for alias in s.names:
                bound = alias.asname or alias.name.split(".")[0]
                if module.split(".")[0] in vocab.ARRAY_MODULES:
                    self.aliases[bound] = alias.name  # from numpy import sqrt
                elif alias.name.split(".")[0] in vocab.ARRAY_MODULES:
                    self.xp.add(bound)  # import numpy as np, import scipy.special
                env.pop(bound, None)
        elif isinstance(s, ast.Assign):
            kind = self.expr(s.value, env)
            for target in s.targets:
                self.bind(target, kind, env)
        elif isinstance(s, ast.AnnAssign) and s.value is not None:
            self.bind(s.target, self.expr(s.value, env), env)
        elif isinstance(s, ast.AugAssign):
            kind = _join(self.expr(s.target, env), self.expr(s.value, env), node=s, walker=self)
            self.bind(s.target, kind, env)
        elif isinstance(s, ast.Return):
            return self.expr(s.value, env) if s.value is not None else (CLEAN, None)
        elif isinstance(s, ast.Expr):
            self.expr(s.value, env)
        elif isinstance(s, (ast.For, ast.AsyncFor)):
            it = self.expr(s.iter, env)
            if it[0] == ROWS:
                self.mix(s, "loops over the rows of a batched input: a batch's loop sees only "
                         "its rows", certain=False)
            self.bind(s.target, (CLEAN, None), env)
            for _ in range(2):  # twice: a name the loop carries to its next turn
                self.block(s.body, env)
            self.block(s.orelse, env)
        elif isinstance(s, (ast.If, ast.While)):
            if self.expr(s.test, env)[0] == MIXED:
                self.mix(s, "decides by a value over the batch's rows, which the whole input "
                         "may not share", certain=False)
            for _ in range(2 if isinstance(s, ast.While) else 1):
                self.block(s.body, env)
            self.block(s.orelse, env)
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                self.expr(item.context_expr, env)
            self.block(s.body, env)
        elif isinstance(s, ast.Try):
            for part in (s.body, *(h.body for h in s.handlers), s.orelse, s.finalbody):
                self.block(part, env)
        return None

    def bind(self, target: ast.expr, kind: Kind, env: dict[str, Kind]) -> None:
        if isinstance(target, ast.Subscript):
            base = self.expr(target.value, env)
            if base[0] == ROWS:
                self.subscript(target, base, env)
                if kind[0] == MIXED:
                    self.mix(target, "writes a value over all rows into a batch's rows")
            elif kind[0] == ROWS and isinstance(target.value, ast.Name):
                env[target.value.id] = (ROWS, None)  # rows written into a host buffer
            return
        for name in names(target):
            env[name] = kind if isinstance(target, ast.Name) else (
                (kind[0], None) if kind[0] != ROWS else (ROWS, None))

    # expressions -------------------------------------------------------------------------
    def expr(self, node: ast.expr | None, env: dict[str, Kind]) -> Kind:
        if node is None or isinstance(node, ast.Constant):
            return (CLEAN, None)
        if isinstance(node, ast.Name):
            return env.get(node.id, (CLEAN, None))
        if isinstance(node, ast.BinOp):
            left, right = self.expr(node.left, env), self.expr(node.right, env)
            if isinstance(node.op, ast.MatMult):
                if right[0] == ROWS:
                    return (MIXED, None)  # sums over the rows: no row axis (a --reduce rule)
                return (ROWS, None) if left[0] == ROWS else _join(left, right)
            return _join(left, right, node=node, walker=self)
        if isinstance(node, ast.UnaryOp):
            return self.expr(node.operand, env)
        if isinstance(node, (ast.Compare, ast.BoolOp)):
            parts = [node.left, *node.comparators] if isinstance(node, ast.Compare) \
                else node.values
            return _fold([self.expr(p, env) for p in parts], node, self)
        if isinstance(node, ast.IfExp):  # one branch or the other: nothing combined
            if self.expr(node.test, env)[0] == MIXED:
                self.mix(node, "decides by a value over the batch's rows, which the whole "
                         "input may not share", certain=False)
            kinds = {self.expr(node.body, env)[0], self.expr(node.orelse, env)[0]}
            return (next((k for k in (MIXED, ROWS, SHAPE) if k in kinds), CLEAN), None)
        if isinstance(node, ast.Attribute):
            return self.attribute(node, env)
        if isinstance(node, ast.Subscript):
            base = self.expr(node.value, env)
            if base[0] == ROWS:
                return self.subscript(node, base, env)
            if base[0] == SHAPE:
                return self.shape_index(node)
            self.expr(node.slice, env)
            return base
        if isinstance(node, ast.Call):
            return self.call(node, env)
        if isinstance(node, (ast.Tuple, ast.List)):
            kinds = [self.expr(e, env) for e in node.elts]
            return (ROWS, None) if any(k[0] == ROWS for k in kinds) else _fold(kinds, node, self)
        if isinstance(node, ast.Starred):
            return self.expr(node.value, env)
        for child in ast.iter_child_nodes(node):  # comprehensions, f-strings, lambdas...
            if isinstance(child, ast.expr) and self.expr(child, env)[0] == ROWS:
                return self.mix(node, "uses a batched input where the check cannot follow "
                                "its rows", certain=False)
        return (CLEAN, None)

    def attribute(self, node: ast.Attribute, env: dict[str, Kind]) -> Kind:
        base = self.expr(node.value, env)
        if base[0] != ROWS:
            return (base[0], None)
        if node.attr in vocab.CLEAN_ATTRS:
            return (CLEAN, None)
        if node.attr == "shape":
            return (SHAPE, base[1])
        if node.attr in vocab.ROW_ATTRS:
            return base
        if node.attr in ("T", "mT"):  # rows become columns: no row axis (a --reduce rule)
            return base if base[1] == 1 else (MIXED, None)
        if node.attr in ("size", "nbytes"):
            return (MIXED, None)  # a batch's
        return self.mix(node, f"reads .{node.attr} of a batched input, which the check does "
                        "not know", certain=False)

    def shape_index(self, node: ast.Subscript) -> Kind:
        idx = node.slice
        if isinstance(idx, ast.Constant) and isinstance(idx.value, int) and idx.value != 0:
            return (CLEAN, None)  # a negative index of a 1-d input is caught by the run
        return (MIXED, None)  # a batch's rows

    def subscript(self, node: ast.Subscript, base: Kind, env: dict[str, Kind]) -> Kind:
        idx = node.slice
        first = idx.elts[0] if isinstance(idx, ast.Tuple) and idx.elts else idx
        rest = idx.elts[1:] if isinstance(idx, ast.Tuple) else []
        if isinstance(first, ast.Slice) and first.lower is None and first.upper is None \
                and first.step is None:
            for e in rest:
                self.expr(e, env)
            return (ROWS, None)
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

    def call(self, node: ast.Call, env: dict[str, Kind]) -> Kind:
        args = [self.expr(a, env) for a in node.args]
        kwargs = {k.arg: self.expr(k.value, env) for k in node.keywords}
        rows = [k for k in (*args, *kwargs.values()) if k[0] == ROWS]
        func = node.func
        if isinstance(func, ast.Attribute):
            owner = self.expr(func.value, env)
            if owner[0] == ROWS:  # a method of a batched value
                return self.method(node, func.attr, owner, args)
        path = attr_path(func)
        name = path[-1] if path else ""
        from_xp = len(path) >= 2 and (path[0] in self.xp or path[0] in vocab.ARRAY_MODULES)
        if isinstance(func, ast.Name) and func.id not in self.functions:
            if func.id in self.aliases:
                name, from_xp = self.aliases[func.id], True
            elif rows and self.ufunc(func.id):
                return (ROWS, None)
            elif rows and (found := self.definition(func.id)) is not None:
                self.functions[func.id] = found  # an earlier cell's function, followed
        if isinstance(func, ast.Name) and func.id in self.functions and rows:
            return self.inline(self.functions[func.id], node, args, env)
        if not rows and not any(k[0] in (MIXED, SHAPE) for k in (*args, *kwargs.values())):
            return (CLEAN, None)
        if isinstance(func, ast.Name) and name in ("len", "int", "float", "complex", "bool"):
            return (MIXED, None)  # a batch's
        if isinstance(func, ast.Name) and name in ("abs", "round"):
            return _fold([*args], node, self)
        if from_xp and name in vocab.REDUCTIONS and args and args[0][0] == ROWS:
            return self.reduction(node, name, args[0], vocab.REDUCTIONS[name][0])
        if from_xp and (name in vocab.ELEMENTWISE or name in ("dot", "matmul")):
            if name in ("dot", "matmul") and len(args) > 1 and args[1][0] == ROWS:
                return (MIXED, None)  # sums over the rows: no row axis
            if name == "where" and len(node.args) == 1:
                return self.mix(node, "np.where(cond) gives positions within a batch")
            return (ROWS, None) if rows else _fold([*args, *kwargs.values()], node, self)
        if from_xp and any(k[0] == SHAPE for k in args) and not rows:
            return (ROWS, None)  # np.zeros(x.shape): an array with the batch's rows
        return self.mix(node, f"passes a batched value to {'.'.join(path) or 'a call'}, "
                        "which the check cannot see into", certain=False)

    def method(self, node: ast.Call, attr: str, owner: Kind, args: list[Kind]) -> Kind:
        if attr in vocab.REDUCTIONS:
            return self.reduction(node, attr, owner, 0)
        if attr in vocab.ELEMENTWISE or attr in vocab.ROW_METHODS:
            if attr == "dot" and args and args[0][0] == ROWS:
                return (MIXED, None)  # sums over the rows: no row axis
            return (ROWS, owner[1] if attr != "dot" else None)
        if attr in ("item", "tolist"):
            return (MIXED, None)  # a batch's
        return self.mix(node, f"calls .{attr}() of a batched input, which the check does not "
                        "know", certain=False)

    def reduction(self, node: ast.Call, name: str, operand: Kind, at: int) -> Kind:
        axis: ast.expr | None = next((k.value for k in node.keywords if k.arg == "axis"), None)
        if axis is None and len(node.args) > at and at:
            axis = node.args[at]
        elif axis is None and not at and node.args and name not in ("percentile", "quantile"):
            axis = node.args[0]
        default = vocab.REDUCTIONS[name][1]
        axes = vocab.axes_of(axis, default)
        ndim = operand[1]
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
        keeps = name in vocab.SCANS
        return (ROWS, ndim if keeps or ndim is None else ndim - len(axes))

    def inline(self, func: ast.FunctionDef, node: ast.Call, args: list[Kind],
               env: dict[str, Kind]) -> Kind:
        """A function the cell defines, followed with its arguments' kinds."""
        if self.depth >= MAX_DEPTH:
            return self.mix(node, f"calls {func.name}, nested too deep to follow",
                            certain=False)
        local = {n: k for n, k in env.items() if n not in parameters(func)}
        local.update(zip(parameters(func), args, strict=False))
        self.depth += 1
        try:
            back = self.block(func.body, local)
        finally:
            self.depth -= 1
        return back


def _join(a: Kind, b: Kind, node: ast.AST | None = None, walker: _Walker | None = None) -> Kind:
    kinds = {a[0], b[0]}
    if MIXED in kinds and ROWS in kinds and walker is not None and node is not None:
        return walker.mix(node, "combines a value over the rows (a total, a length, one row) "
                          "with a batch's rows: each batch would use its own")
    if MIXED in kinds:
        return (MIXED, None)
    if SHAPE in kinds and walker is not None and node is not None:
        return walker.mix(node, "computes with the shape of a batched input: a batch's "
                          "shape, not the input's", certain=False)
    if ROWS in kinds:
        dims = [k[1] for k in (a, b) if k[0] == ROWS]
        return (ROWS, None if None in dims else max(d for d in dims if d is not None))
    return (CLEAN, None)


def _fold(kinds: list[Kind], node: ast.AST, walker: _Walker) -> Kind:
    out: Kind = (CLEAN, None)
    for k in kinds:
        out = _join(out, k, node, walker)
    return out

