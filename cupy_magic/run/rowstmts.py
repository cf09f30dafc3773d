"""The statements of a cell as :mod:`.rowwise` walks them: assignments bind kinds to names,
branches are walked on copies and joined, loops twice (a name carried to the next turn),
writes into rows checked. The expressions are the walker's (:class:`.rowwise._Walker`)."""

from __future__ import annotations

import ast

from ..syncs.values import imported, names
from . import rowvocab as vocab
from .rowvocab import CLEAN, MIXED, NROWS, ROWS, SHAPE, Kind, _join, _pairs

__all__ = ["Statements"]


class Statements:
    """What a walker does with statements; it gives ``expr``, ``subscript`` and ``mix``."""

    node: ast.AST | None
    depth: int
    functions: dict[str, ast.FunctionDef]
    aliases: dict[str, str]
    xp: set[str]

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
        if isinstance(s, ast.FunctionDef):
            self.functions[s.name] = s
        elif isinstance(s, (ast.Import, ast.ImportFrom)):
            for bound, module, name in imported(s):
                if name is not None and module.split(".")[0] in vocab.ARRAY_MODULES:
                    self.aliases[bound] = name  # from numpy import sqrt
                elif (name or module).split(".")[0] in vocab.ARRAY_MODULES:
                    self.xp.add(bound)  # import numpy as np, import scipy.special
                env.pop(bound, None)
        elif isinstance(s, ast.Assign):
            pairs = _pairs(s.targets, s.value)
            if pairs:  # a, b = x.mean(axis=0), x * 2: each its own
                for target, value in pairs:
                    self.bind(target, self.expr(value, env), env)
                return None
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
            if self.expr(s.test, env)[0] in (MIXED, NROWS):
                self.mix(s, "decides by a value over the batch's rows, which the whole input "
                         "may not share", certain=False)
            if isinstance(s, ast.While):
                for _ in range(2):
                    self.block(s.body, env)
                self.block(s.orelse, env)
            else:
                self.branches([s.body, s.orelse], env)
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                self.expr(item.context_expr, env)
            self.block(s.body, env)
        elif isinstance(s, ast.Try):
            self.branches([s.body + s.orelse, *(h.body for h in s.handlers)], env)
            self.block(s.finalbody, env)
        elif isinstance(s, ast.Match):
            self.expr(s.subject, env)
            self.branches([c.body for c in s.cases] + [[]], env)
        return None

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

    def bind(self, target: ast.expr, kind: Kind, env: dict[str, Kind]) -> None:
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
            env[name] = kind if isinstance(target, ast.Name) else (
                (kind[0], None) if kind[0] != ROWS else (ROWS, None))
