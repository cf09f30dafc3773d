"""The cell's code with the builtins of :mod:`cupy_magic.compat.views` in front of the places
where CuPy gives a view and NumPy a copy (or CuPy refuses what NumPy reads), on the same
lines and columns:

- ``v.ravel(...)`` becomes ``RAVEL_NAME(v)(...)``.
- ``x[i, j]`` (an index of no slice, ``...`` or ``None``: an item where ``x`` is an array)
  becomes ``ITEM_NAME(x[i, j])`` where the cell may keep the value: anywhere but as an
  operand (``x[i] * 2``, ``-x[i]``, ``x[i] < 0``), the right side of ``s += x[i]``, an
  index or slice bound, a test (``if``, ``while``, ``assert``, a conditional expression's),
  an f-string's value, the object of an attribute other than a view or a change in place
  (``x[i].item()``, not ``x[i].reshape(1)`` or ``x[i].fill(0)``), or an argument of a call
  that makes a new value (``float``, ``int``, ``abs``, ``print``, ``math.*``, and the array
  module's functions but those that may return their argument, ``np.asarray``, ``np.ravel``).
- ``np.float32(v, ...)`` (any NumPy scalar type of the array module's names) becomes
  ``SCALAR_NAME(np.float32, v, ...)``.
- ``for v in x`` (a statement's or a comprehension's) runs over ``ITER_NAME(x)``, and so do
  the builtins that iterate their arguments (``list(x)``, ``max(x)``, ``zip(x, y)``,
  ``enumerate(x)``, ...) and an unpacking (``a, b = x``); ``reversed(x)`` becomes
  ``REVERSED_NAME(reversed, x)``.

In the cell's own code each is a plain name (found in the cell's builtins). In the body of a
function or lambda the cell defines, each is looked up in Python's ``builtins`` when it runs,
with plain Python where it is missing: such a function may be pickled by value (cloudpickle,
``client.submit(f)``) into a process where no cell ran, where the names raised NameError.
"""

from __future__ import annotations

import ast

import numpy as np

from ..compat.views import ITEM_NAME, ITER_NAME, RAVEL_NAME, REVERSED_NAME, SCALAR_NAME
from .names import parents

__all__ = ["device_semantics"]

# attributes of an item whose result is still it or a view of it, or change it in place
_VIEW_ATTRS = frozenset({
    "view", "reshape", "ravel", "T", "mT", "real", "imag", "squeeze", "transpose", "swapaxes",
    "base", "flat", "data", "fill", "sort", "put", "itemset", "setfield", "resize",
    "__array__", "__dlpack__", "__setitem__", "__iadd__", "__isub__", "__imul__",
    "__itruediv__"})
_SAFE_CALLS = frozenset({"float", "int", "bool", "complex", "str", "repr", "print", "abs",
                         "round", "format", "len", "hash", "divmod", "pow", "isinstance"})
# the names the array module goes by in cells, and modules whose functions make new values
_MODULES = frozenset({"np", "numpy", "cp", "cupy", "xp", "math", "cmath"})
# the array module's functions that may return their argument, or a view of it
_VIEW_FUNCS = frozenset({
    "asarray", "asanyarray", "ascontiguousarray", "asfortranarray", "atleast_1d",
    "atleast_2d", "atleast_3d", "ravel", "reshape", "squeeze", "expand_dims", "broadcast_to",
    "broadcast_arrays", "transpose", "moveaxis", "swapaxes", "rollaxis", "require", "real",
    "imag", "flip", "copyto", "asarray_chkfinite", "asmatrix", "array", "nan_to_num"})


# NumPy's scalar types by name (np.float32, np.int64, np.bool_, np.double, ...)
_SCALAR_TYPES = frozenset(n for n, v in vars(np).items()
                          if isinstance(v, type) and issubclass(v, np.generic))


# builtins whose arguments (from the given one on) are iterated, their items kept
# (reversed needs a sequence, not the builtin's generator: it has a builtin of its own)
_ITERATING = {"list": 0, "tuple": 0, "sorted": 0, "max": 0, "min": 0, "zip": 0,
              "enumerate": 0, "iter": 0, "map": 1, "filter": 1}


# what each builtin does where it is missing (in a function body: see _Rewrite.builtin)
_WITHOUT = {ITEM_NAME: "lambda v: v", ITER_NAME: "lambda v: v", RAVEL_NAME: "lambda v: v.ravel",
            SCALAR_NAME: "lambda k, *a, **kw: k(*a, **kw)", REVERSED_NAME: "lambda f, v: f(v)"}


def _located(tree: ast.expr, at: ast.AST) -> ast.expr:
    for node in ast.walk(tree):
        if "lineno" in node._attributes:
            ast.copy_location(node, at)
    return tree


def _item_index(node: ast.Subscript) -> bool:
    """Whether ``node``'s index may take one item of every axis (no slice, ``...``,
    ``None`` or ``np.newaxis``, which give views in NumPy too)."""
    parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    for part in parts:
        if isinstance(part, (ast.Slice, ast.Starred)):
            return False
        if isinstance(part, ast.Constant) and (part.value is None or part.value is Ellipsis):
            return False
        if isinstance(part, ast.Attribute) and part.attr == "newaxis":
            return False
    return True


def _makes_new(call: ast.Call) -> bool:
    """Whether ``call``'s result is a new value, never its argument or a view of it."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in _SAFE_CALLS
    root = func
    while isinstance(root, ast.Attribute):
        root = root.value
    return isinstance(func, ast.Attribute) and isinstance(root, ast.Name) \
        and root.id in _MODULES and func.attr not in _VIEW_FUNCS


def _used_at_once(node: ast.expr, up: ast.AST | None, above: ast.AST | None) -> bool:
    """Whether the value of ``node`` (in ``up``, itself in ``above``) is used where it
    stands and not kept."""
    if isinstance(up, (ast.BinOp, ast.UnaryOp, ast.Compare, ast.Slice, ast.FormattedValue)):
        return True
    if isinstance(up, ast.AugAssign):
        return up.value is node
    if isinstance(up, ast.Subscript):
        return True  # an index, or the array a further index reads (`x[0][()]` is wrapped)
    if isinstance(up, ast.Attribute):
        return up.attr not in _VIEW_ATTRS
    if isinstance(up, (ast.If, ast.While, ast.Assert, ast.IfExp)):
        return up.test is node
    if isinstance(up, ast.Call):
        return any(a is node for a in up.args) and _makes_new(up)
    if isinstance(up, ast.keyword) and isinstance(above, ast.Call):
        return _makes_new(above)
    return False


class _Rewrite(ast.NodeTransformer):
    def __init__(self, tree: ast.AST) -> None:
        self.up = parents(tree)
        self.depth = 0  # functions (and lambdas) the visit is in

    def builtin(self, name: str, at: ast.AST) -> ast.expr:
        """The builtin ``name``, at ``at``'s place. In the cell's own code a plain name; in a
        function's body one looked up when it runs, with plain Python where it is missing: a
        function a cell defined may be pickled by value (cloudpickle, ``client.submit(f)``)
        into a process where no cell ran, whose builtins lack it (it raised NameError)."""
        if not self.depth:
            return ast.copy_location(ast.Name(name, ast.Load()), at)
        text = f"getattr(__import__('builtins'), {name!r}, None) or ({_WITHOUT[name]})"
        return _located(ast.parse(text, mode="eval").body, at)

    def _iter_call(self, node: ast.expr) -> ast.Call:
        return ast.copy_location(ast.Call(self.builtin(ITER_NAME, node), [node], []), node)

    # annotations stay as written (under `from __future__ import annotations` their text is
    # what the program sees)
    def visit_arg(self, node: ast.arg) -> ast.AST:
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        node.target = self.visit(node.target)
        if node.value is not None:
            node.value = self.visit(node.value)
        return node

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
        returns, node.returns = node.returns, None
        node.decorator_list = [self.visit(d) for d in node.decorator_list]  # run at the def
        node.args = self.visit(node.args)
        self.depth += 1
        node.body = [self.visit(stmt) for stmt in node.body]
        self.depth -= 1
        node.returns = returns
        return node

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        node.args = self.visit(node.args)
        self.depth += 1
        node.body = self.visit(node.body)
        self.depth -= 1
        return node

    def _iterated(self, node: ast.For | ast.comprehension) -> ast.AST:
        self.generic_visit(node)
        node.iter = self._iter_call(node.iter)
        return node

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        self.generic_visit(node)
        if any(isinstance(t, (ast.Tuple, ast.List)) for t in node.targets) \
                and not isinstance(node.value, (ast.Tuple, ast.List)):
            node.value = self._iter_call(node.value)  # a, b = x
        return node

    visit_For = _iterated
    visit_comprehension = _iterated

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Name) and func.id in _ITERATING:
            first = _ITERATING[func.id]
            node.args = [a if k < first or isinstance(a, ast.Starred) else self._iter_call(a)
                         for k, a in enumerate(node.args)]
        elif isinstance(func, ast.Name) and func.id == "reversed" and len(node.args) == 1 \
                and not node.keywords and not isinstance(node.args[0], ast.Starred):
            node.args = [func, node.args[0]]
            node.func = self.builtin(REVERSED_NAME, func)
        if isinstance(func, ast.Attribute) and func.attr == "ravel":
            name = self.builtin(RAVEL_NAME, func)
            node.func = ast.copy_location(ast.Call(name, [func.value], []), func)
        elif isinstance(func, ast.Attribute) and func.attr in _SCALAR_TYPES and node.args \
                and isinstance(func.value, ast.Name) and func.value.id in _MODULES:
            node.args = [func, *node.args]
            node.func = self.builtin(SCALAR_NAME, func)
        return node

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load) or not _item_index(node):
            return node
        up = self.up.get(node)
        if _used_at_once(node, up, self.up.get(up) if up is not None else None):
            return node
        name = self.builtin(ITEM_NAME, node)
        return ast.copy_location(ast.Call(name, [node], []), node)


def device_semantics(tree: ast.Module, source: str) -> ast.Module:
    """``tree`` (the cell's, parsed from ``source``) rewritten as the module says (once per
    cell text: :mod:`.compiled` keeps the code)."""
    return ast.fix_missing_locations(_Rewrite(tree).visit(tree))
