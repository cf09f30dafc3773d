"""Static host-sync lint for ``%%gpu`` cells.

Before a cell runs, :func:`lint_cell` reads its AST, follows which names hold device arrays
(the moved inputs, then names assigned from device expressions, through simple functions
defined in the cell) and reports the lines where harmless-looking Python makes the GPU stop
and hand data back (guide section 4A). It needs neither CuPy nor a GPU, so the CPU fallback
teaches the same lessons. The runtime side is :mod:`cupy_magic.syncs.record`.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from dataclasses import dataclass

from . import rules
from .cellfuncs import CellFunctions
from .values import attr_path

__all__ = ["SyncFinding", "format_findings", "lint_cell"]

_Comprehension = ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp


@dataclass(frozen=True)
class SyncFinding:
    """One place in a cell where the host waits for the device."""

    line: int  # 1-based line in the cell source
    code: str  # the stripped source line
    kind: str  # "print", "format", "truth-value", "scalar-conversion", "get", "mask-index",
    # "sync-function", "iteration", "loop-index" or "plot"
    why: str  # one sentence: why it syncs
    fix: str  # what to write instead
    in_loop: bool  # inside a Python loop, or in a function called from one

    def describe(self) -> str:
        """Return the finding as one plain-text line for a report."""
        loop = " (inside a loop)" if self.in_loop else ""
        return f"line {self.line} `{self.code}`: {self.why}{loop}; instead: {self.fix}"


def lint_cell(source: str, device_names: Iterable[str],
              xp_names: Iterable[str] = ("np", "numpy", "cp", "cupy")) -> list[SyncFinding]:
    """Find the lines of a cell that are likely to synchronise the GPU with the host.

    Parameters
    ----------
    source : str
        The cell's Python source.
    device_names, xp_names : iterable of str
        Names that hold device arrays when the cell starts; names bound to the array module
        inside the cell (calls through them that create arrays return device values).

    Returns
    -------
    list of SyncFinding
        By line, then kind; empty if the source does not parse; cached by source and names.
    """
    return list(_lint(source, frozenset(device_names), frozenset(xp_names)))


@functools.lru_cache(maxsize=128)
def _lint(source: str, device_names: frozenset[str],
          xp_names: frozenset[str]) -> tuple[SyncFinding, ...]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ()
    linter = _Linter(source.splitlines(), set(device_names), set(xp_names))
    linter.block(tree.body)
    linter.lint_uncalled_functions()
    return tuple(sorted(linter.findings.values(), key=lambda f: (f.line, f.kind)))


def format_findings(findings: Iterable[SyncFinding]) -> str:
    """Return one plain-text line per finding, or an empty string when there are none."""
    return "\n".join(f.describe() for f in findings)


class _Linter(CellFunctions):
    """Walks one cell in order and records its host syncs."""

    def __init__(self, lines: list[str], device: set[str], xp: set[str]) -> None:
        super().__init__(device, xp)
        self.lines = lines
        self.returns: dict[tuple[str, frozenset[int], bool], bool] = {}
        self.findings: dict[tuple[int, str], SyncFinding] = {}
        self.loop_depth = 0
        self.call_depth = 0

    # -- findings ------------------------------------------------------------------------
    def flag(self, node: ast.AST, kind: str) -> None:
        line = getattr(node, "lineno", 1)
        in_loop = self.loop_depth > 0
        old = self.findings.get((line, kind))
        if old is not None and (old.in_loop or not in_loop):
            return
        code = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        why, fix = rules.ADVICE[kind]
        self.findings[(line, kind)] = SyncFinding(line, code, kind, why, fix, in_loop)

    # -- statements ----------------------------------------------------------------------
    def block(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self.statement(stmt)

    def loop_body(self, body: list[ast.stmt], orelse: list[ast.stmt]) -> None:
        self.loop_depth += 1
        # Twice, so that names which become device values late in the body are known at the
        # top of the next iteration; findings are keyed by line, so nothing is reported twice.
        self.block(body)
        self.block(body)
        self.loop_depth -= 1
        self.block(orelse)

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.functions[node.name] = node
            self.device.discard(node.name)
        elif isinstance(node, ast.Assign):
            self.check(node.value)
            for target in node.targets:
                self.check_target(target, node.value)
                self.bind(target, node.value)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            if node.value is not None:
                self.check(node.value)
            self.check_target(node.target, node.value)
            if isinstance(node, ast.AnnAssign):
                self.bind(node.target, node.value)
            elif isinstance(node.target, ast.Name):
                grow = self.is_device(node.target) or self.is_device(node.value)
                self.bind(node.target, node.value, device=grow)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self.check(node.iter)
            if self.iterates_device(node.iter):
                self.flag(node.iter, "iteration")
            self.bind_loop_target(node.target, node.iter)
            self.loop_body(node.body, node.orelse)
        elif isinstance(node, ast.While):
            self.loop_depth += 1
            self.check(node.test, truth=True)
            self.loop_depth -= 1
            self.loop_body(node.body, node.orelse)
        elif isinstance(node, ast.If):
            self.check(node.test, truth=True)
            self.block(node.body)
            self.block(node.orelse)
        elif isinstance(node, ast.Assert):
            self.check(node.test, truth=True)
            self.check(node.msg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            self.imports(node)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                self.check(item.context_expr)
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, None, device=False)
            self.block(node.body)
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                self.bind(target, None, device=False)
        elif not isinstance(node, ast.ClassDef):
            # Expressions, returns, raises, try and match blocks: their expressions in order,
            # then their nested statements.
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.check(child)
            for field in ("body", "handlers", "cases", "orelse", "finalbody"):
                for child in getattr(node, field, ()):
                    self.block(
                        child.body
                        if hasattr(child, "pattern") or isinstance(child, ast.ExceptHandler)
                        else [child]
                    )

    def check_target(self, target: ast.AST, value: ast.AST | None) -> None:
        """Check stores: mask assignment and unpacking a device array."""
        if isinstance(target, ast.Subscript):
            self.subscript(target)
            self.children(target)
        elif isinstance(target, (ast.Tuple, ast.List)):
            plain = isinstance(value, (ast.Name, ast.Attribute, ast.Subscript))
            if plain and self.is_device(value):
                self.flag(target, "iteration")
            for elt in target.elts:
                self.check_target(elt, None)

    # -- expressions ---------------------------------------------------------------------
    def check(self, node: ast.AST | None, truth: bool = False) -> None:
        """Flag the syncs inside an expression; `truth` says it is used as a condition."""
        if node is None:
            return
        if truth:
            if isinstance(node, ast.BoolOp):
                for value in node.values:
                    self.check(value, truth=True)
                return
            if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
                self.check(node.operand, truth=True)
                return
            if self.is_device(node):
                self.flag(node, "truth-value")
        if isinstance(node, ast.BoolOp):
            for value in node.values[:-1]:
                self.check(value, truth=True)
            self.check(node.values[-1])
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            self.check(node.operand, truth=True)
        elif isinstance(node, ast.IfExp):
            self.check(node.test, truth=True)
            self.check(node.body)
            self.check(node.orelse)
        elif isinstance(node, ast.Compare):
            if len(node.ops) > 1 and self.is_device(node):
                self.flag(node, "truth-value")
            self.children(node)
        elif isinstance(node, ast.Call):
            self.call(node)
            self.children(node)
        elif isinstance(node, ast.Subscript):
            self.subscript(node)
            self.children(node)
        elif isinstance(node, ast.FormattedValue):
            if self.is_device(node.value):
                self.flag(node.value, "format")
            self.children(node)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            if isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
                values = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
                if any(self.is_device(v) for v in values):
                    self.flag(node, "format")
            self.children(node)
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            self.comprehension(node)
        elif isinstance(node, ast.NamedExpr):
            self.check(node.value)
            self.bind(node.target, node.value)
        elif not isinstance(node, ast.Lambda):
            self.children(node)

    def children(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.check(child)
            elif isinstance(child, ast.keyword):
                self.check(child.value)

    def comprehension(self, node: _Comprehension) -> None:
        saved = (set(self.device), set(self.masks), set(self.loop_ints))
        for gen in node.generators:
            self.check(gen.iter)
            if self.iterates_device(gen.iter):
                self.flag(gen.iter, "iteration")
            self.bind_loop_target(gen.target, gen.iter)
            self.loop_depth += 1
            for cond in gen.ifs:
                self.check(cond, truth=True)
        parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        for part in parts:
            self.check(part)
        self.loop_depth -= len(node.generators)
        self.device, self.masks, self.loop_ints = saved

    def subscript(self, node: ast.Subscript) -> None:
        if not self.is_device(node.value):
            return
        index = node.slice
        parts = index.elts if isinstance(index, ast.Tuple) else [index]
        for part in parts:
            if self.is_mask(part):
                self.flag(node, "mask-index")
            elif isinstance(part, ast.Slice) and any(
                self.is_device(b) for b in (part.lower, part.upper, part.step)
            ):
                self.flag(node, "scalar-conversion")
        uses_index = any(
            isinstance(n, ast.Name) and n.id in self.loop_ints for p in parts for n in ast.walk(p)
        )
        if (
            self.loop_depth > 0
            and uses_index
            and isinstance(node.ctx, ast.Load)
            and not any(isinstance(p, ast.Slice) for p in parts)
        ):
            self.flag(node, "loop-index")

    def call(self, node: ast.Call) -> None:
        func = node.func
        args = [*node.args, *(k.value for k in node.keywords)]
        any_device = any(self.is_device(a) for a in args)
        first = self.is_device(node.args[0]) if node.args else False
        path = self.xp_function(func)
        if path is not None:
            self.xp_call(node, path, first)
        elif isinstance(func, ast.Name):
            self.builtin_call(node, func.id, any_device, first)
        elif isinstance(func, ast.Attribute):
            if self.is_device(func.value):
                self.method_call(node, func.attr, any_device)
            elif self.is_plot_object(func) and any_device:
                self.flag(node, "plot")
            elif isinstance(func.value, ast.Constant) and isinstance(func.value.value, str):
                if func.attr == "format" and any_device:
                    self.flag(node, "format")
            elif attr_path(func)[:1] == ["math"] and any_device:
                self.flag(node, "scalar-conversion")

    def xp_call(self, node: ast.Call, path: list[str], first: bool) -> None:
        name = path[-1]
        if set(path[1:-1]) & rules.HOST_XP_SUBMODULES:
            return
        qualified = f"{path[-2]}.{name}" if len(path) > 2 else name
        syncs = (
            name in rules.SYNC_FUNCTIONS
            or qualified in rules.SYNC_FUNCTIONS
            or (name == "where" and len(node.args) == 1 and not node.keywords)
            or rules.SYNC_WITH_KEYWORD.get(name) in {k.arg for k in node.keywords}
        )
        if name == "asnumpy":
            self.flag(node, "get")
        elif syncs:
            self.flag(node, "sync-function")
        elif name in rules.SCALAR_TYPES and first:  # np.float64(total) is float(total)
            self.flag(node, "scalar-conversion")
        elif name in rules.SHAPE_FUNCTIONS and node.args:
            shape = node.args[0]
            parts = shape.elts if isinstance(shape, (ast.Tuple, ast.List)) else [shape]
            if any(self.is_device(p) for p in parts):
                self.flag(node, "scalar-conversion")

    def builtin_call(self, node: ast.Call, name: str, any_device: bool, first: bool) -> None:
        if name in self.functions:
            self.call_function(node, name)
            return
        later = any(self.is_device(a) for a in node.args[1:])  # map(f, x), filter(f, x)
        kinds = (
            ("print", name in rules.PRINT_CALLS and any_device),
            ("format", name in rules.FORMAT_BUILTINS and first),
            ("scalar-conversion", name in rules.SCALAR_BUILTINS and first),
            ("scalar-conversion", name == "range" and any_device),
            ("truth-value", name in {"max", "min"} and len(node.args) > 1 and any_device),
            ("iteration", name in rules.ITERATING_BUILTINS and first),
            ("iteration", name in rules.ITERATING_ALL_ARGS and any_device),
            ("iteration", name in rules.ITERATING_LATER_ARGS and later),
        )
        kind = next((k for k, hit in kinds if hit), None)
        if kind is not None:
            self.flag(node, kind)

    def method_call(self, node: ast.Call, name: str, any_device: bool) -> None:
        if name in rules.COPYING_METHODS:
            blocking = next((k.value for k in node.keywords if k.arg == "blocking"), None)
            if not (isinstance(blocking, ast.Constant) and blocking.value is False):
                self.flag(node, "get")
        elif name == "nonzero":
            self.flag(node, "sync-function")
        elif name in rules.SHAPE_METHODS and any_device:
            self.flag(node, "scalar-conversion")
