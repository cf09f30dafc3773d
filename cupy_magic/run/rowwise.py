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

from ..syncs.values import attr_path, parameters
from . import rowvocab as vocab
from .rowaxes import Axes
from .rowcalls import Calls
from .rowfree import row_free
from .rowindex import Indexing
from .rowrules import Tag, rule_problem
from .rowshapes import Shapes
from .rowsizes import Sizes
from .rowstmts import Statements
from .rowturns import Turns
from .rowvocab import (
    CLEAN,
    CONSTRUCTORS,
    MIXED,
    NROWS,
    RNG,
    ROWS,
    SHAPE,
    XP_NAMES,
    Kind,
    RowMix,
    _fold,
    _join,
)

__all__ = ["RowCheck", "RowMix", "check_cell", "row_mixing"]

MAX_DEPTH = 4


def row_mixing(source: str, batched: Mapping[str, int],
               xp: Iterable[str] = XP_NAMES,
               ufunc: Callable[[str], bool] = lambda name: False,
               definition: Callable[[str], ast.FunctionDef | None] = lambda name: None,
               ) -> list[RowMix]:
    """Where the cell reads across the rows of its batched inputs, in line order
    (:func:`check_cell`'s places, for a cell without ``--reduce`` rules)."""
    return check_cell(source, batched, {}, xp, ufunc, definition).found


@dataclass(frozen=True)
class RowCheck:
    """What the row check found in a cell: the places that mix rows (``found``, in line
    order), the names left holding a value over a batch's rows without a ``--reduce``
    rule (``over_rows``: a batched run may keep none of them, not even a number every batch
    agrees on, as ``n = len(x)`` is in equal batches), and the names bound to values that
    certainly depend on no batched row (``row_free``, :func:`.rowfree.row_free`: a NumPy
    scalar among them is kept as a Python value is, where every batch agrees)."""

    found: list[RowMix]
    over_rows: frozenset[str]
    row_free: frozenset[str] = frozenset()


def check_cell(source: str, batched: Mapping[str, int], rules: Mapping[str, str],
               xp: Iterable[str] = XP_NAMES,
               ufunc: Callable[[str], bool] = lambda name: False,
               definition: Callable[[str], ast.FunctionDef | None] = lambda name: None,
               generator: Callable[[str], bool] = lambda name: False,
               plain: Callable[[str], bool] = lambda name: False,
               trailing: Mapping[str, tuple[int, ...]] | None = None) -> RowCheck:
    """Where the cell reads across the rows of its batched inputs, and what it keeps.

    Parameters
    ----------
    source
        The cell's code.
    batched
        The batched inputs' names and their numbers of dimensions.
    rules
        The ``--reduce`` rules, ``{result name: rule}``: a rule that does not join its
        result as NumPy computes it over all rows is a place found (:mod:`.rowrules`).
    xp
        Names of the array modules in the cell.
    ufunc
        Whether a name the cell calls but does not define is an element-wise function (a
        NumPy or CuPy ufunc bound by an earlier cell).
    definition
        A function's definition, for a name the cell calls but does not define (one an
        earlier cell defined): followed as the cell's own functions are.
    generator
        Whether a name the cell reads but does not assign is a random generator (each
        batch would draw its own numbers from it).
    plain
        Whether a name the cell reads but does not assign holds a plain value (not a
        function, a module or a generator): one that depends on no batched row.
    trailing
        The batched inputs' shapes less their leading axis, where known (``x.reshape(-1,
        2, 2)`` keeps the rows of an ``x`` of 4 columns, :mod:`.rowsizes`).
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return RowCheck([], frozenset())
    walker = _Walker(source.splitlines(), set(xp), ufunc, definition, generator)
    walker.batched = frozenset(batched)
    walker.sizes = {n: tuple(s) for n, s in (trailing or {}).items() if n in batched}
    env: dict[str, Kind] = {n: (ROWS, d) for n, d in batched.items()}
    walker.block(tree.body, env)
    for name, rule in rules.items():
        if name in walker.assigned:
            problem = rule_problem(name, rule, env.get(name, (CLEAN, None)),
                                   walker.tags.get(name))
            if problem is not None:
                line = walker.assigned[name]
                walker.found.append(RowMix(line, walker.code(line), *problem))
    seen: dict[int, RowMix] = {}
    for mix in walker.found:  # one per line: the first certain one, else the first
        kept = seen.get(mix.line)
        if kept is None or (mix.certain and not kept.certain):
            seen[mix.line] = mix
    over = frozenset(n for n, k in env.items() if k[0] in (MIXED, NROWS)
                     and n in walker.assigned and n not in rules)
    free = frozenset(n for n in row_free(tree, batched, walker.xp, plain)
                     if env.get(n, (CLEAN, None))[0] == CLEAN and n not in over)
    return RowCheck(sorted(seen.values(), key=lambda m: m.line), over, free)


class _Walker(Indexing, Shapes, Sizes, Turns, Axes, Statements, Calls):
    def __init__(self, lines: list[str], xp: set[str], ufunc: Callable[[str], bool],
                 definition: Callable[[str], ast.FunctionDef | None],
                 generator: Callable[[str], bool]) -> None:
        self.lines, self.xp = lines, xp
        self.ufunc, self.definition, self.generator = ufunc, definition, generator
        self.random_modules: set[str] = set()  # import numpy.random as npr
        self.aliases: dict[str, str] = {}  # from numpy import sqrt as s: s -> sqrt
        self.found: list[RowMix] = []
        self.functions: dict[str, ast.FunctionDef] = {}
        self.tags: dict[str, Tag] = {}  # the --reduce rules that join a name's value
        self.assigned: dict[str, int] = {}  # a name's last assignment in the cell: its line
        self.depth = 0
        self.nested = 0  # inside a branch or a loop: what a name holds there is not followed
        self.sizes: dict[str, tuple[int, ...]] = {}  # a name's row shape (.rowsizes)
        self.counts: dict[str, str] = {}  # n = len(x): n -> x, a batch's own row count
        self.batched: frozenset[str] = frozenset()  # the batched inputs' names
        self.node: ast.AST | None = None

    def mix(self, node: ast.AST, why: str, certain: bool = True) -> Kind:
        """Record a place that mixes rows (inside a function the cell defines: its call's
        line). A certain one gives a value over all rows; one the check cannot see into is
        taken to keep rows, so that nothing after it turns the doubt into a certain refusal."""
        line = getattr(self.node if self.depth else node, "lineno", 1)
        self.found.append(RowMix(line, self.code(line), why, certain))
        return (MIXED, None) if certain else (ROWS, None)

    def code(self, line: int) -> str:
        """The cell's stripped line ``line`` (1-based)."""
        return self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""

    # expressions -------------------------------------------------------------------------
    def expr(self, node: ast.expr | None, env: dict[str, Kind]) -> Kind:
        if node is None or isinstance(node, ast.Constant):
            return (CLEAN, None)
        if isinstance(node, ast.Name):
            return env.get(node.id, (RNG if self.generator(node.id) else CLEAN, None))
        if isinstance(node, ast.BinOp):
            left, right = self.expr(node.left, env), self.expr(node.right, env)
            if isinstance(node.op, ast.MatMult):
                return self.product(node, left, right)
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
                return self.shape_index(node, base)
            return self.table(node, base, env)
        if isinstance(node, ast.Call):
            return self.call(node, env)
        if isinstance(node, (ast.Tuple, ast.List)):
            kinds = [self.expr(e, env) for e in node.elts]
            if any(k[0] == ROWS for k in kinds):
                return (ROWS, None)
            return (NROWS, None) if any(k[0] == NROWS for k in kinds) \
                else _fold(kinds, node, self)
        if isinstance(node, ast.Starred):
            return self.expr(node.value, env)
        if isinstance(node, ast.NamedExpr):  # (m := x.mean())
            kind = self.expr(node.value, env)
            self.bind(node.target, kind, env)
            return kind
        kinds = [self.expr(c, env)[0] for c in ast.iter_child_nodes(node)
                 if isinstance(c, ast.expr)]  # comprehensions, f-strings, lambdas...
        if ROWS in kinds or (MIXED in kinds and len(kinds) > 1):
            return self.mix(node, "uses a batched input where the check cannot follow "
                            "its rows", certain=False)
        return (MIXED, None) if MIXED in kinds else (CLEAN, None)

    def product(self, node: ast.AST, left: Kind, right: Kind) -> Kind:
        """``left @ right``: rows of a batched left operand stay rows; a batched right
        operand is summed over (no row axis: a --reduce rule joins it)."""
        if right[0] == ROWS:
            return (MIXED, None)
        if left[0] == ROWS and right[0] in (MIXED, NROWS):
            return _join(left, right, node, self)
        return (ROWS, None) if left[0] == ROWS else _join(left, right)

    def attribute(self, node: ast.Attribute, env: dict[str, Kind]) -> Kind:
        inner = node.value
        if node.attr in ("T", "mT") and isinstance(inner, ast.Attribute) and \
                inner.attr == node.attr and self.quiet(inner.value, env)[0] == ROWS:
            return self.expr(inner.value, env)  # x.T.T: x
        back = self.turn_back(node, env)  # np.vstack([a, b]).T, (x.T * b[:, None]).T
        if back is not None:
            return back
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

    def call(self, node: ast.Call, env: dict[str, Kind]) -> Kind:
        back = self.turn_back(node, env)  # np.transpose(np.vstack([a, b]))
        if back is not None:
            return back
        args = [self.expr(a, env) for a in node.args]
        kwargs = {k.arg: self.expr(k.value, env) for k in node.keywords}
        rows = [k for k in (*args, *kwargs.values()) if k[0] == ROWS]
        func = node.func
        if isinstance(func, ast.Attribute):
            owner = self.expr(func.value, env)
            if owner[0] == ROWS:  # a method of a batched value
                return self.method(node, func.attr, owner, args, env)
            if owner[0] in (MIXED, NROWS):  # x.mean(axis=0).clip(...): still over the rows
                if func.attr == "reshape" and NROWS in {k[0] for k in args}:
                    return self.mix(node, "reshapes a value without the rows on its leading "
                                    "axis (a total, x.T) to the batch's row count: its rows "
                                    "are not the batch's rows")
                return _fold([(MIXED, None), *args, *kwargs.values()], node, self)
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
        special = self.special(node, path, from_xp, args, kwargs, env)
        if special is not None:
            return special
        if isinstance(func, ast.Name) and func.id in self.functions and (
                rows or self.reads_rows(self.functions[func.id], env, set())):
            return self.inline(self.functions[func.id], node, args, kwargs, env)
        if len(path) == 3 and path[0] in self.xp and path[2] == "reduce" and rows and \
                (path[1] in vocab.ELEMENTWISE or self.ufunc(path[1])):
            return self.ufunc_reduce(node, args[0], env)
        if from_xp and rows and node.args:
            shaped = self.shaped(node, name, node.args[0], node.args[1:], args, env)
            if shaped is not None:
                return shaped
        if not rows and not any(k[0] in (MIXED, SHAPE, NROWS)
                                for k in (*args, *kwargs.values())):
            return (CLEAN, None)
        if isinstance(func, ast.Name) and name == "len" and rows:
            return (NROWS, None)  # a batch's row count
        if name == "len" and node.args and isinstance(node.args[0], ast.Subscript):
            return (CLEAN, None)  # len(x[0]): a row's length, the columns
        if isinstance(func, ast.Name) and name in ("len", "int", "float", "complex", "bool"):
            return (MIXED, None) if rows else _fold([*args], node, self)  # a batch's
        if from_xp and name in CONSTRUCTORS and args and args[0][0] in (NROWS, SHAPE):
            shape = node.args[0]  # np.zeros(len(x)), np.empty((x.shape[0], 3)): the batch's rows
            return (ROWS, len(shape.elts) if isinstance(shape, ast.Tuple) else
                    1 if args[0][0] == NROWS else args[0][1])
        if from_xp and name in vocab.NUMBERINGS and any(k[0] == NROWS for k in args) \
                and not rows:  # np.arange(len(x)): 0, 1, ... again in every batch
            return self.mix(node, f"numbers rows with {'.'.join(path) or name} over a batch's "
                            "row count: each batch counts its own rows from the start again, "
                            "not the input's row numbers")
        if isinstance(func, ast.Name) and name in ("abs", "round"):
            return _fold([*args], node, self)
        if from_xp and name in vocab.REDUCTIONS and args and args[0][0] == ROWS:
            listed = self.listed(node.args[0], env)  # np.stack([x, x ** 2], axis=-1)
            operand = args[0] if listed is None else (ROWS, listed)
            return self.reduction(node, name, operand, vocab.REDUCTIONS[name][0])
        if from_xp and name in ("dot", "matmul") and len(args) > 1:
            return self.product(node, args[0], args[1])
        if from_xp and name in vocab.ELEMENTWISE:
            if name == "where" and len(node.args) == 1:
                return self.mix(node, "np.where(cond) gives positions within a batch")
            return _fold([*args, *kwargs.values()], node, self)  # a total among them mixes
        if from_xp and any(k[0] == SHAPE for k in args) and not rows:
            return (ROWS, None)  # np.zeros(x.shape): an array with the batch's rows
        return self.mix(node, f"passes a batched value to {'.'.join(path) or 'a call'}, "
                        "which the check cannot see into", certain=False)

    def method(self, node: ast.Call, attr: str, owner: Kind, args: list[Kind],
               env: dict[str, Kind]) -> Kind:
        if attr in vocab.REDUCTIONS:  # x.sort(axis), but x.partition(kth, axis)
            return self.reduction(node, attr, owner, int(attr in vocab.AXIS_SECOND))
        if attr == "dot" and args:
            return self.product(node, owner, args[0])
        if attr in ("reshape", "transpose", "swapaxes", "squeeze", "repeat"):
            func = node.func
            assert isinstance(func, ast.Attribute)
            shaped = self.shaped(node, attr, func.value, node.args, [owner, *args], env)
            if shaped is not None:
                return shaped
        if attr in vocab.ELEMENTWISE or attr in vocab.ROW_METHODS:
            return _fold([owner, *args], node, self)
        if attr in ("item", "tolist"):
            return (MIXED, None)  # a batch's
        return self.mix(node, f"calls .{attr}() of a batched input, which the check does not "
                        "know", certain=False)

    def reads_rows(self, func: ast.FunctionDef, env: dict[str, Kind], seen: set[str]) -> bool:
        """Whether a function the cell defines reads a name that holds rows or a value over
        them from outside (``def center(): return x - x.mean(axis=0)``), or calls one that
        does: called without arguments with rows, it is followed all the same."""
        seen.add(func.name)
        for node in ast.walk(func):
            if not isinstance(node, ast.Name) or not isinstance(node.ctx, ast.Load):
                continue
            if env.get(node.id, (CLEAN, None))[0] not in (CLEAN,) or (
                    node.id in self.functions and node.id not in seen and
                    self.reads_rows(self.functions[node.id], env, seen)):
                return True
        return False

    def inline(self, func: ast.FunctionDef, node: ast.Call, args: list[Kind],
               kwargs: dict[str | None, Kind], env: dict[str, Kind]) -> Kind:
        """A function the cell defines, followed with its arguments' kinds."""
        if self.depth >= MAX_DEPTH:
            return self.mix(node, f"calls {func.name}, nested too deep to follow",
                            certain=False)
        local = {n: k for n, k in env.items() if n not in parameters(func)}
        local.update(zip(parameters(func), args, strict=False))
        local.update({k: v for k, v in kwargs.items() if k is not None})
        if None in kwargs or any(isinstance(a, ast.Starred) for a in node.args):
            return self.mix(node, f"calls {func.name} with *args or **kwargs the check cannot "
                            "pair with its parameters", certain=False)
        self.depth += 1
        try:
            back = self.block(func.body, local)
        finally:
            self.depth -= 1
        return back
