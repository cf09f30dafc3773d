"""The statements of a cell as :mod:`.rowwise` walks them: assignments bind kinds to names,
branches are walked on copies and joined, loops twice (a name carried to the next turn),
writes into rows checked. The expressions are the walker's (:class:`.rowwise._Walker`)."""

from __future__ import annotations

import ast

from ..syncs.values import attr_path, imported, names
from . import rowvocab as vocab
from .rowrules import Tag, tag_of
from .rowvocab import CLEAN, MIXED, NROWS, ROWS, SHAPE, Kind, RowMix, _join, _pairs

ROWS_TAG = frozenset({"=rows"})  # a value with a row axis: gathered, joined by no rule
__all__ = ["Statements"]


class Statements:
    """What a walker does with statements; it gives ``expr``, ``subscript`` and ``mix``."""

    node: ast.AST | None
    depth: int
    functions: dict[str, ast.FunctionDef]
    aliases: dict[str, str]
    xp: set[str]
    random_modules: set[str]
    found: list[RowMix]
    tags: dict[str, Tag]
    assigned: dict[str, int]
    nested: int
    sizes: dict[str, tuple[int, ...]]
    counts: dict[str, str]

    def trailing(self, node: ast.expr) -> tuple[int, ...] | None:
        raise NotImplementedError

    def expr(self, node: ast.expr | None, env: dict[str, Kind]) -> Kind:
        raise NotImplementedError

    def subscript(self, node: ast.Subscript, base: Kind, env: dict[str, Kind]) -> Kind:
        raise NotImplementedError

    def mix(self, node: ast.AST, why: str, certain: bool = True) -> Kind:
        raise NotImplementedError

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
        if isinstance(s, (ast.For, ast.AsyncFor, ast.While, ast.If, ast.Try, ast.Match)):
            self.nested += 1  # what a name holds after a branch or a loop: not followed
            try:
                return self.flow(s, env)
            finally:
                self.nested -= 1
        if isinstance(s, ast.FunctionDef):
            self.functions[s.name] = s
        elif isinstance(s, (ast.Import, ast.ImportFrom)):
            for bound, module, name in imported(s):
                if "random" in (*module.split("."), name) and \
                        module.split(".")[0] in vocab.ARRAY_MODULES:
                    if name is None or name == "random":
                        self.random_modules.add(bound)  # import numpy.random as npr
                    else:
                        self.aliases[bound] = f"random.{name}"  # from numpy.random import rand
                elif name is not None and module.split(".")[0] in vocab.ARRAY_MODULES:
                    self.aliases[bound] = name  # from numpy import sqrt
                elif (name or module).split(".")[0] in vocab.ARRAY_MODULES:
                    self.xp.add(bound)  # import numpy as np, import scipy.special
                env.pop(bound, None)
        elif isinstance(s, ast.Assign):
            self.lambdas(s)
            pairs = _pairs(s.targets, s.value)
            target = s.targets[0]
            if len(s.targets) == 1 and isinstance(target, (ast.Tuple, ast.List)) and \
                    self.columns(s.value, env):  # a, b, c, d = x.T: each a column with rows
                for elt in target.elts:
                    self.remember(elt, s.value, (ROWS, 1), None, env)
                    self.bind(elt, (ROWS, 1), env)
                return None
            if pairs:  # a, b = x.mean(axis=0), x * 2: each its own
                for target, value in pairs:
                    self.assign(target, value, value, env)
                return None
            kind = self.assign(s.targets[0], s.value, s.value, env)
            for target in s.targets[1:]:
                self.bind(target, kind, env)
        elif isinstance(s, ast.AnnAssign) and s.value is not None:
            self.assign(s.target, s.value, s.value, env)
        elif isinstance(s, ast.AugAssign):
            load = ast.Name(s.target.id, ast.Load()) if isinstance(s.target, ast.Name) else None
            both = s.value if load is None else ast.copy_location(
                ast.BinOp(load, s.op, s.value), s)
            before = len(self.found)
            kind = _join(self.expr(s.target, env), self.expr(s.value, env), node=s, walker=self)
            self.remember(s.target, both, kind, before, env)
            self.bind(s.target, kind, env)
        elif isinstance(s, ast.Return):
            return self.expr(s.value, env) if s.value is not None else (CLEAN, None)
        elif isinstance(s, ast.Expr):
            self.expr(s.value, env)
        elif isinstance(s, ast.Delete):  # del n: no longer a result the run could keep
            for target in s.targets:
                for name in names(target) if isinstance(target, (ast.Name, ast.Tuple)) else ():
                    env.pop(name, None)
                    self.sizes.pop(name, None)
                    self.counts.pop(name, None)
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                self.expr(item.context_expr, env)
            self.block(s.body, env)
        return None

    def flow(self, s: ast.stmt, env: dict[str, Kind]) -> Kind | None:
        """A loop, a branch, a ``try`` or a ``match``."""
        if isinstance(s, (ast.For, ast.AsyncFor)):
            it = self.expr(s.iter, env)
            if it[0] == ROWS:
                self.mix(s, "loops over the rows of a batched input: a batch's loop sees only "
                         "its rows", certain=False)
            counted = isinstance(s.iter, ast.Call) and attr_path(s.iter.func) == ["range"] and \
                any(self.quiet(a, env)[0] == NROWS for a in s.iter.args)
            if self.columns(s.iter, env):  # for col in x.T: a column with rows
                self.bind(s.target, (ROWS, 1), env)
            else:  # range(len(x)): a batch's row numbers; over a total: its entries
                self.bind(s.target, (NROWS if counted else MIXED if it[0] in (MIXED, NROWS)
                                     else CLEAN, None), env)
            self.remember(s.target, s.iter, (CLEAN, None), None, env)  # no tag
            for _ in range(2):  # twice: a name the loop carries to its next turn
                self.block(s.body, env)
            self.block(s.orelse, env)
        elif isinstance(s, (ast.If, ast.While)):
            if self.expr(s.test, env)[0] in (MIXED, NROWS):
                self.mix(s, "decides by a value over the batch's rows, which the whole input "
                         "may not share", certain=False)
            if isinstance(s, ast.While):
                for _ in range(2):
                    self.block(s.body, env)
                self.block(s.orelse, env)
            else:
                self.branches([s.body, s.orelse], env)
        elif isinstance(s, ast.Try):
            self.branches([s.body + s.orelse, *(h.body for h in s.handlers)], env)
            self.block(s.finalbody, env)
        elif isinstance(s, ast.Match):
            self.expr(s.subject, env)
            self.branches([c.body for c in s.cases] + [[]], env)
        return None

    def columns(self, node: ast.expr, env: dict[str, Kind]) -> bool:
        """Whether ``node`` is ``a.T`` of a two-dimensional value with rows: its columns,
        one by one, keep the rows."""
        return isinstance(node, ast.Attribute) and node.attr == "T" and \
            self.quiet(node.value, env) == (ROWS, 2)

    def lambdas(self, s: ast.Assign) -> None:
        """``f = lambda a: ...`` defines ``f`` as ``def`` would; a name bound to anything else
        is no longer the function the cell defined."""
        for target in s.targets:
            if not isinstance(target, ast.Name):
                continue
            if isinstance(s.value, ast.Lambda):
                body = [ast.copy_location(ast.Return(s.value.body), s.value)]
                self.functions[target.id] = ast.copy_location(ast.FunctionDef(
                    name=target.id, args=s.value.args, body=body, decorator_list=[]), s)
            else:
                self.functions.pop(target.id, None)

    def branches(self, bodies: list[list[ast.stmt]], env: dict[str, Kind]) -> None:
        """One of ``bodies`` runs: each walked on its own copy of the names, then a name
        holds the widest kind any branch gave it (over the rows, then rows)."""
        ends = []
        for body in bodies:
            local = dict(env)
            self.block(body, local)
            ends.append(local)
        for name in {n for e in ends for n in e}:
            kinds = [e.get(name, (CLEAN, None)) for e in ends]
            env[name] = next((k for rank in (MIXED, NROWS, ROWS, SHAPE) for k in kinds
                              if k[0] == rank), (CLEAN, None))

    def assign(self, target: ast.expr, node: ast.expr, value: ast.expr,
               env: dict[str, Kind]) -> Kind:
        """``target = value``: its kind bound, and at the cell's top level the rules that
        join it (:mod:`.rowrules`) and its line remembered."""
        before = len(self.found)
        kind = self.expr(value, env)
        self.remember(target, node, kind, before, env)
        row = self.trailing(value) if kind[0] == ROWS else None
        self.bind(target, kind, env)
        if self.depth or self.nested:
            return kind
        if isinstance(target, ast.Name) and row is not None:
            self.sizes[target.id] = row  # y = x[:, :1]: its rows of (1,)
        counted = _counted(value)  # n = len(x), n = x.shape[0]; n, d = x.shape
        if isinstance(target, ast.Name) and counted is not None:
            self.counts[target.id] = counted
        elif isinstance(target, ast.Tuple) and target.elts and \
                isinstance(target.elts[0], ast.Name) and isinstance(value, ast.Attribute) \
                and value.attr == "shape" and isinstance(value.value, ast.Name):
            self.counts[target.elts[0].id] = value.value.id
        return kind

    def remember(self, target: ast.expr, node: ast.expr, kind: Kind, before: int | None,
                 env: dict[str, Kind]) -> None:
        """A top-level name's line and tag; ``before``: the places found before its value
        was read (a doubt in it leaves its tag unknown; ``None``: unknown anyway)."""
        if self.depth:
            return
        doubt = before is None or any(not m.certain for m in self.found[before:])
        for name in names(target):
            self.assigned[name] = getattr(target, "lineno", 1)
            if doubt or not isinstance(target, ast.Name):
                self.tags[name] = None
            elif kind[0] == ROWS:
                self.tags[name] = ROWS_TAG
            else:
                self.tags[name] = tag_of(node, env, self.tags, lambda n: self.quiet(n, env))

    def quiet(self, node: ast.expr, env: dict[str, Kind]) -> Kind:
        """``node``'s kind, recording no place and binding no name."""
        before = len(self.found)
        try:
            return self.expr(node, dict(env))
        finally:
            del self.found[before:]

    def bind(self, target: ast.expr, kind: Kind, env: dict[str, Kind]) -> None:
        if isinstance(target, (ast.Tuple, ast.List)) and kind[0] == SHAPE and \
                not any(isinstance(e, ast.Starred) for e in target.elts):
            for i, elt in enumerate(target.elts):  # rows, cols = x.shape
                self.bind(elt, (NROWS if i == 0 else CLEAN, None), env)
            return
        if isinstance(target, (ast.Subscript, ast.Attribute)):
            base = self.expr(target.value, env)
            if base[0] == ROWS and isinstance(target, ast.Subscript):
                if self.subscript(target, base, env)[0] == MIXED:
                    self.mix(target, "writes to rows picked by position: each batch would "
                             "write its own")
                elif kind[0] in (MIXED, NROWS):
                    self.mix(target, "writes a value over all rows into a batch's rows")
            elif kind[0] != CLEAN and isinstance(target.value, ast.Name):
                # a total or rows kept in a dict, list or object: it holds them now
                env[target.value.id] = kind if kind[0] != SHAPE else (CLEAN, None)
            return
        for name in names(target):
            self.sizes.pop(name, None)
            self.counts.pop(name, None)
            env[name] = kind if isinstance(target, ast.Name) else (
                (kind[0], None) if kind[0] != ROWS else (ROWS, None))


def _counted(value: ast.expr) -> str | None:
    """The array whose row count ``value`` is (``len(x)``, ``x.shape[0]``: ``x``)."""
    if isinstance(value, ast.Call) and attr_path(value.func) == ["len"] and \
            len(value.args) == 1 and not value.keywords and isinstance(value.args[0], ast.Name):
        return value.args[0].id
    if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Attribute) and \
            value.value.attr == "shape" and isinstance(value.value.value, ast.Name) and \
            vocab.axes_of(value.slice, None) == (0,):
        return value.value.value.id
    return None
