"""What a cell's source says about names: what it reads, assigns, deletes and mutates."""

from __future__ import annotations

import ast
import functools
import symtable
from dataclasses import dataclass, field

from ..syncs.values import imported
from .fresh import BINDS_ANY, bound_fresh

__all__ = ["SCOPES", "CellNames", "analyse", "cell_names", "module_escapes", "parents",
           "written_args"]

SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)  # a scope of its own
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
# Methods and functions that change their array argument in place (NumPy and CuPy alike).
# the array methods that change the array in place (heldwrites adds their dunder forms)
MUTATING_METHODS = frozenset({"sort", "fill", "put", "partition", "itemset", "resize",
                              "setfield"})
_MUTATING_FUNCTIONS = {"copyto", "put", "place", "putmask", "fill_diagonal", "put_along_axis",
                       "shuffle"}


def written_args(call: ast.Call) -> list[ast.expr]:
    """The arguments ``call`` writes into: ``out=`` (``np.add(a, b, out=x)``, also ``out=(x,
    y)``) and the first of a function that changes it (``np.copyto(x, ...)``,
    ``np.put(x, ...)``)."""
    written = [t for kw in call.keywords if kw.arg == "out"
               for t in (kw.value.elts if isinstance(kw.value, ast.Tuple) else [kw.value])]
    if isinstance(call.func, ast.Attribute) and call.func.attr in _MUTATING_FUNCTIONS \
            and call.args:
        written.insert(0, call.args[0])
    return written


@dataclass
class CellNames:
    """Names found in a cell, from its AST."""

    loaded: set[str] = field(default_factory=set)
    assigned: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    mutated: set[str] = field(default_factory=set)
    written_first: set[str] = field(default_factory=set)
    augmented: set[str] = field(default_factory=set)  # x += 1: in place where x is an array
    # changed in place (augmented or mutated) by a top-level statement before any top-level
    # statement rebound the name (x += 1; x = 0, not x = x * 2; x += 1), or through a name
    # a top-level `y = x` bound to it before that (y = x; y += 1; del x, y)
    in_place_first: set[str] = field(default_factory=set)
    # of those, the ones a top-level statement changes whenever the cell runs to its end
    # (`X += 1`, `X[0] = 1`, `X.sort()`, `np.copyto(X, a)`), not under an `if`, in a loop,
    # a `with` or `try`, or inside an expression that may skip it (`c and X.sort()`)
    in_place_sure: set[str] = field(default_factory=set)
    # last bound by a top-level statement whenever the cell runs to its end, to a new object
    # (`X = X * 2`, `X = np.log(X)`, `def X(): ...`), not to a value that may be the name's
    # old one (`X = Y`, `X = np.asarray(X)`, `X = a if c else X`, `X = L[0]`) nor under an
    # `if` or in a loop
    bound_fresh: set[str] = field(default_factory=set)
    # a call of .sort() or .partition() anywhere in the cell (np.sort(x) counts too: a
    # name may be the array module); CuPy sorts only contiguous arrays
    sorts_in_place: bool = False


class _Visitor(ast.NodeVisitor):
    def __init__(self) -> None:
        self.names = CellNames()
        self.depth = 0  # >0 inside a function, lambda or class body
        self.nested_mutated: set[str] = set()  # kept only if global where they are mutated

    def _store(self, name: str) -> None:
        if self.depth == 0:
            self.names.assigned.add(name)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store):
            self._store(node.id)
        elif isinstance(node.ctx, ast.Del) and self.depth == 0:
            self.names.deleted.add(node.id)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name) and self.depth == 0:
            self.names.loaded.add(node.target.id)
            self.names.augmented.add(node.target.id)
        self.generic_visit(node)

    def _mutation_root(self, target: ast.expr) -> None:
        while isinstance(target, (ast.Subscript, ast.Attribute)):
            target = target.value
        if isinstance(target, ast.Name):
            (self.names.mutated if self.depth == 0 else self.nested_mutated).add(target.id)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute):
            if func.attr in ("sort", "partition"):
                self.names.sorts_in_place = True
            if func.attr in MUTATING_METHODS:
                self._mutation_root(func.value)  # x.sort(), x.fill(0)
        for target in written_args(node):
            self._mutation_root(target)
        self.generic_visit(node)

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
        for bound, _, name in imported(node):
            if name != "*":
                self._store(bound)

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


@functools.lru_cache(maxsize=256)
def cell_names(source: str) -> CellNames:
    """The names of a cell's source, analysed once per source text (a re-run cell, and every
    part that asks about the same cell, skips the analysis). Treat the result as read-only."""
    return analyse(ast.parse(source))


def _binds(stmt: ast.stmt) -> set[str]:
    """The names a statement may bind anywhere in it (``for``, ``with ... as``, a walrus,
    an import, a ``def`` or ``class``, ``except ... as``, a ``match`` capture, a nested
    assignment), a function's own names included: a superset is safe here; not the
    target of an augmented assignment."""
    found: set[str] = set()
    augmented = {id(n.target) for n in ast.walk(stmt) if isinstance(n, ast.AugAssign)}
    for node in ast.walk(stmt):
        if id(node) in augmented:  # y += 1 changes an array in place: y is still it
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            found.add(node.id)
        elif isinstance(node, ast.alias):
            found.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                               ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            found.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            found.add(node.rest)
    return found


def _surely_changes(stmt: ast.stmt) -> bool:
    """Whether ``stmt``, run, always makes the change in place the visitor found in it: an
    augmented assignment (``X += 1``, ``X[0] += 1``), an assignment to an item or attribute
    (``X[0] = 1``), or a call that is the whole statement (``X.sort()``, ``np.copyto(X, a)``,
    ``np.add(a, b, out=X)``), none of them holding a lambda, comprehension, conditional
    expression or short-circuit operator (which may skip it or run it elsewhere)."""
    if isinstance(stmt, ast.AugAssign):
        ok = True
    elif isinstance(stmt, ast.Assign):
        ok = all(isinstance(t, (ast.Subscript, ast.Attribute)) for t in stmt.targets)
    elif isinstance(stmt, ast.Expr):
        ok = isinstance(stmt.value, ast.Call)
    else:
        return False
    return ok and not any(isinstance(n, (ast.Lambda, ast.IfExp, ast.BoolOp, *_COMPREHENSIONS))
                          for n in ast.walk(stmt))


def _pairs(stmt: ast.stmt) -> list[tuple[str, str]]:
    """``(target, source)`` names an assignment binds one to another: ``Y = X``,
    ``Y = Z = X``, ``Y, Z = X, W`` (the right side read before any binding)."""
    if not isinstance(stmt, ast.Assign):
        return []
    pairs: list[tuple[str, str]] = []
    for target in stmt.targets:
        if isinstance(target, ast.Name) and isinstance(stmt.value, ast.Name):
            pairs.append((target.id, stmt.value.id))
        elif isinstance(target, (ast.Tuple, ast.List)) \
                and isinstance(stmt.value, (ast.Tuple, ast.List)) \
                and len(target.elts) == len(stmt.value.elts) \
                and not any(isinstance(e, ast.Starred) for e in target.elts):
            pairs += [(t.id, v.id) for t, v in zip(target.elts, stmt.value.elts, strict=True)
                      if isinstance(t, ast.Name) and isinstance(v, ast.Name)]
    return pairs


def analyse(tree: ast.Module) -> CellNames:
    """Collect the names a cell reads, binds at module level, deletes and mutates.

    Comprehension variables are local to the comprehension in Python 3 and are not counted
    as assigned.
    """
    visitor = _Visitor()
    names = visitor.names
    rebound: set[str] = set()  # by an assignment of the cell's straight-line top level
    aliases: dict[str, str] = {}  # Y: X after a top-level `Y = X` made before X was rebound
    for stmt in tree.body:
        before = names.augmented | names.mutated
        visitor.visit(stmt)
        changed = (names.augmented | names.mutated) - before
        binds = _binds(stmt)  # a name bound anywhere in it may no longer be the alias
        # X changed in place through its own name, or through a name still bound to it
        found = (changed - rebound) | {aliases[n] for n in changed
                                       if n in aliases and n not in binds}
        names.in_place_first |= found
        if _surely_changes(stmt):
            names.in_place_sure |= found
        names.bound_fresh = (names.bound_fresh - binds) | bound_fresh(stmt)  # the last
        # what each name an assignment binds to another name holds: the input that name
        # holds (itself, or the one it is an alias of), read before any binding
        origins = {t: aliases.get(v, None if v in rebound else v) for t, v in _pairs(stmt)}
        for name in binds:
            aliases.pop(name, None)
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            rebound |= {n.id for t in targets for n in ast.walk(t)
                        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for name, origin in origins.items():
            if origin is None:
                continue
            if name == origin:  # Y = X; X = Y: X holds the input again
                rebound.discard(name)
            else:
                aliases[name] = origin
    nested = _nested_global_reads(tree)
    names.loaded |= _module_reads(tree) | nested
    names.mutated |= visitor.nested_mutated & nested
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
    # a function the cell calls may rebind a global anywhere (`def f(): global X; X = Y`),
    # and globals() or exec any name
    if any(isinstance(n, ast.Name) and n.id in BINDS_ANY for n in ast.walk(tree)):
        names.bound_fresh.clear()
    names.bound_fresh -= {n for node in ast.walk(tree) if isinstance(node, ast.Global)
                          for n in node.names}
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
        if isinstance(child, (*SCOPES, ast.comprehension)):
            continue
        yield from _walk_module_scope(child)


def _module_reads(tree: ast.Module) -> set[str]:
    """Names the module level of the cell reads (comprehension variables are their own)."""
    reads: set[str] = set()

    def visit(node: ast.AST, bound: frozenset[str]) -> None:
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load) and node.id not in bound:
                reads.add(node.id)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            for expr in [*getattr(node, "decorator_list", []), *args.defaults,
                         *(d for d in args.kw_defaults if d is not None)]:
                visit(expr, bound)  # evaluated where the function is defined
            return
        if isinstance(node, ast.ClassDef):
            for expr in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
                visit(expr, bound)
            return
        if isinstance(node, _COMPREHENSIONS):
            inner = set(bound)
            for i, gen in enumerate(node.generators):
                # The first iterable is evaluated in the enclosing scope, the rest inside.
                visit(gen.iter, bound if i == 0 else frozenset(inner))
                inner |= {n.id for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
                for cond in gen.ifs:
                    visit(cond, frozenset(inner))
            parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
            for part in parts:
                visit(part, frozenset(inner))
            return
        for child in ast.iter_child_nodes(node):
            visit(child, bound)

    visit(tree, frozenset())
    return reads


def _nested_global_reads(tree: ast.Module) -> set[str]:
    """Names that functions, lambdas and classes of the cell read as module globals."""
    try:
        top = symtable.symtable(ast.unparse(tree), "<cell>", "exec")
    except SyntaxError:  # e.g. a misplaced nonlocal: the cell's run reports it
        return set()
    reads: set[str] = set()
    stack = list(top.get_children())
    while stack:
        table = stack.pop()
        stack.extend(table.get_children())
        for sym in table.get_symbols():
            if sym.is_referenced() and sym.is_global():
                reads.add(sym.get_name())
    return reads



def parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    """Each node of ``tree`` but the root, to the node it is in."""
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


@functools.lru_cache(maxsize=256)
def module_escapes(source: str, modules: frozenset[str]) -> bool:
    """Whether the cell may keep the array module, or one of its functions or types, as a
    value (``mods = {"n": np}``, ``ops = (np.sqrt,)``, ``f = lambda a, m=np: ...``): a
    name of ``modules`` read other than as the start of an attribute, or an attribute chain
    on one that is not called (``np.float32`` passed as a dtype counts: the check is cheap,
    the walk it asks for bounded). Calls (``np.sqrt(x)``, ``np.linalg.inv(a)``) do not."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    parent = parents(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Name) and node.id in modules
                and isinstance(node.ctx, ast.Load)):
            continue
        top: ast.AST = node
        while isinstance(up := parent.get(top), ast.Attribute) and up.value is top:
            top = up
        if top is node or not (isinstance(up, ast.Call) and up.func is top):
            return True
    return False
