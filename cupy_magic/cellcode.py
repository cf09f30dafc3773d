"""What a cell's source says about names: what it reads, assigns, deletes and mutates."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

__all__ = ["CellNames", "analyse"]

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


@dataclass
class CellNames:
    """Names found in a cell, from its AST."""

    loaded: set[str] = field(default_factory=set)
    assigned: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    mutated: set[str] = field(default_factory=set)
    written_first: set[str] = field(default_factory=set)


class _Visitor(ast.NodeVisitor):
    def __init__(self) -> None:
        self.names = CellNames()
        self.depth = 0  # >0 inside a function, lambda or class body

    def _store(self, name: str) -> None:
        if self.depth == 0:
            self.names.assigned.add(name)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self.names.loaded.add(node.id)
        elif isinstance(node.ctx, ast.Store):
            self._store(node.id)
        elif isinstance(node.ctx, ast.Del) and self.depth == 0:
            self.names.deleted.add(node.id)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name):
            self.names.loaded.add(node.target.id)
        self.generic_visit(node)

    def _mutation_root(self, target: ast.expr) -> None:
        while isinstance(target, (ast.Subscript, ast.Attribute)):
            target = target.value
        if isinstance(target, ast.Name):
            self.names.mutated.add(target.id)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._mutation_root(node.value)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._mutation_root(node.value)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        self.names.assigned.update(node.names)

    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name != "*":
                self._store(alias.asname or alias.name.split(".")[0])

    visit_Import = _import
    visit_ImportFrom = _import

    def _scope(self, node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self._store(node.name)
            for deco in node.decorator_list:
                self.visit(deco)
            if not isinstance(node, ast.ClassDef):
                for default in [*node.args.defaults, *node.args.kw_defaults]:
                    if default is not None:
                        self.visit(default)
            body = node.body
        else:
            assert isinstance(node, ast.Lambda)
            body = [node.body]
        self.depth += 1
        for stmt in body:
            self.visit(stmt)
        self.depth -= 1

    visit_FunctionDef = _scope
    visit_AsyncFunctionDef = _scope
    visit_ClassDef = _scope
    visit_Lambda = _scope

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        # A walrus in a comprehension binds in the enclosing scope: at module level here.
        if isinstance(node.target, ast.Name):
            self._store(node.target.id)
        self.visit(node.value)


def analyse(tree: ast.Module) -> CellNames:
    """Collect the names a cell reads, binds at module level, deletes and mutates.

    Comprehension variables are local to the comprehension in Python 3 and are not counted
    as assigned.
    """
    visitor = _Visitor()
    for stmt in tree.body:
        visitor.visit(stmt)
    names = visitor.names
    comp_targets = {
        n.id
        for node in ast.walk(tree)
        if isinstance(node, ast.comprehension)
        for n in ast.walk(node.target)
        if isinstance(n, ast.Name)
    }
    module_level_stores = {
        n.id
        for stmt in tree.body
        for n in _walk_module_scope(stmt)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    names.assigned -= comp_targets - module_level_stores
    names.written_first = _written_first(tree)
    return names


def _written_first(tree: ast.Module) -> set[str]:
    """Names whose first mention is a plain top-level assignment that does not read them.

    Their old values are never read, so the runner need not move them to the device.
    """
    seen: set[str] = set()
    first: set[str] = set()
    for stmt in tree.body:
        mentioned = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            read = {n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name)}
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            plain = {t.id for t in targets if isinstance(t, ast.Name)}
            first |= plain - read - seen
        seen |= mentioned
    return first


def _walk_module_scope(node: ast.AST):
    """Walk a node without entering function, class, lambda or comprehension scopes."""
    yield node
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (*_SCOPES, ast.comprehension)):
            continue
        yield from _walk_module_scope(child)
