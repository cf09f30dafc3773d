"""Which names of a cell hold device values: the bookkeeping behind :mod:`cupy_magic.syncs`.

:class:`DeviceNames` classifies expressions (device array, device boolean mask, plot object)
and updates its name sets as assignments, imports and loops bind names. It knows nothing
about findings; :class:`cupy_magic.syncs._Linter` walks the cell and reports.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from . import rules

_PLOT_NAME = re.compile(rules.PLOT_NAME_PATTERN)
_DEVICE_ATTRIBUTES = frozenset({"T", "mT", "real", "imag", "flat"})
_HOST_ONLY_COMPARE = (ast.Is, ast.IsNot, ast.In, ast.NotIn)
Function = ast.FunctionDef | ast.AsyncFunctionDef


def lambda_function(name: str, node: ast.Lambda) -> ast.FunctionDef:
    """``name = lambda ...: body`` as the function ``def name(...): return body``, at the
    lambda's line, so that its body is linted as a cell function's is."""
    body = ast.copy_location(ast.Return(value=node.body), node.body)
    func = ast.FunctionDef(name=name, args=node.args, body=[body], decorator_list=[])
    return ast.fix_missing_locations(ast.copy_location(func, node))


def names(target: ast.AST) -> Iterator[str]:
    """Yield the plain names bound by an assignment target."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from names(elt)
    elif isinstance(target, ast.Starred):
        yield from names(target.value)


def imported(node: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, str, str | None]]:
    """Yield ``(bound, module, name)`` for each name an import statement binds.

    Parameters
    ----------
    node : ast.Import or ast.ImportFrom
        The statement.

    Yields
    ------
    tuple of (str, str, str or None)
        The name the cell can use now, the module named, and the name imported from it
        (None for ``import``): ``import numpy as np`` gives ``("np", "numpy", None)``,
        ``import numpy.linalg`` ``("numpy", "numpy.linalg", None)`` (it binds ``numpy``),
        ``from numpy import sqrt as s`` ``("s", "numpy", "sqrt")`` (``"*"`` for a star
        import, which binds no one name).
    """
    for alias in node.names:
        bound = alias.asname or alias.name.split(".")[0]
        if isinstance(node, ast.Import):
            yield bound, alias.name, None
        else:
            yield bound, node.module or "", alias.name


def _root(node: ast.AST) -> ast.AST:
    """Return the innermost object of an attribute/subscript/call chain (`a` in `a.b[0].c()`)."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def attr_path(node: ast.AST) -> list[str]:
    """Return `["np", "random", "rand"]` for `np.random.rand`; [] for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return []


def parameters(func: Function) -> list[str]:
    """Return the positional parameter names of a function, in order."""
    return [a.arg for a in (*func.args.posonlyargs, *func.args.args)]


class DeviceNames:
    """Name sets of one cell as it is read in order, and expression classification."""

    def __init__(self, device: set[str], xp: set[str]) -> None:
        self.device = set(device)
        self.masks: set[str] = set()
        self.loop_ints: set[str] = set()
        self.plots: set[str] = set()
        self.xp = set(xp) | {"cupyx"}
        self.xp_funcs: dict[str, str] = {}
        self.functions: dict[str, Function] = {}

    def call_function(self, node: ast.Call, name: str) -> bool:
        """Return whether a call of a function defined in the cell returns a device value."""
        raise NotImplementedError

    def array_parameters(self, func: Function) -> frozenset[int]:
        """Positions of the parameters that a function body uses as arrays: it reads an array
        attribute or method of them, or passes them to the array module."""
        used: set[str] = set()
        for n in ast.walk(func):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
                if n.attr in rules.ARRAY_VOCABULARY:
                    used.add(n.value.id)
            elif isinstance(n, ast.Call) and self.xp_function(n.func) is not None:
                used.update(a.id for a in n.args if isinstance(a, ast.Name))
        return frozenset(i for i, p in enumerate(parameters(func)) if p in used)

    # -- classification ------------------------------------------------------------------
    def xp_function(self, func: ast.AST) -> list[str] | None:
        """Return the attribute path of an array-module function, or None."""
        if isinstance(func, ast.Name) and func.id in self.xp_funcs:
            return ["np", self.xp_funcs[func.id]]
        path = attr_path(func)
        if len(path) >= 2 and path[0] in self.xp and path[0] not in self.device:
            return path
        return None

    def is_device(self, node: ast.AST | None) -> bool:
        """Whether an expression evaluates to a device value (an array or a 0-d array)."""
        if isinstance(node, ast.Name):
            return node.id in self.device
        if isinstance(node, ast.Attribute):
            return node.attr in _DEVICE_ATTRIBUTES and self.is_device(node.value)
        if isinstance(node, ast.Subscript):
            return self.is_device(node.value)
        if isinstance(node, ast.Call):
            return self.call_is_device(node)
        if isinstance(node, ast.BinOp):
            if isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
                return False
            return self.is_device(node.left) or self.is_device(node.right)
        if isinstance(node, ast.UnaryOp):
            return not isinstance(node.op, ast.Not) and self.is_device(node.operand)
        if isinstance(node, ast.Compare):
            if any(isinstance(op, _HOST_ONLY_COMPARE) for op in node.ops):
                return False
            return any(self.is_device(v) for v in (node.left, *node.comparators))
        if isinstance(node, ast.BoolOp):
            return any(self.is_device(v) for v in node.values)
        if isinstance(node, ast.IfExp):
            return self.is_device(node.body) or self.is_device(node.orelse)
        if isinstance(node, (ast.NamedExpr, ast.Starred, ast.Await)):
            return self.is_device(node.value)
        return False

    def call_is_device(self, node: ast.Call) -> bool:
        path = self.xp_function(node.func)
        if path is not None:
            return not (set(path[1:-1]) & rules.HOST_XP_SUBMODULES) and (
                path[-1] not in rules.HOST_XP_FUNCTIONS
            )
        func = node.func
        if isinstance(func, ast.Attribute) and self.is_device(func.value):
            return func.attr not in rules.COPYING_METHODS | rules.HOST_METHODS
        if isinstance(func, ast.Name):
            if func.id in self.functions:
                return self.call_function(node, func.id)
            if func.id in {"abs", "pow", "divmod", "sum", "max", "min"}:
                return any(self.is_device(a) for a in node.args)
        return False

    def is_mask(self, node: ast.AST) -> bool:
        """Whether an expression is a device boolean array (a mask)."""
        if isinstance(node, ast.Name):
            return node.id in self.masks
        if isinstance(node, ast.Compare):
            return self.is_device(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
            return self.is_mask(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
            return self.is_mask(node.left) or self.is_mask(node.right)
        if isinstance(node, ast.Call):
            path = self.xp_function(node.func)
            return path is not None and path[-1] in rules.BOOL_XP_FUNCTIONS
        return False

    def iterates_device(self, it: ast.AST) -> bool:
        """Whether a Python loop over `it` walks a device array element by element."""
        if not self.is_device(it):
            return False
        if isinstance(it, ast.Call):
            path = self.xp_function(it.func)
            if path is not None and path[-1] in rules.SEQUENCE_XP_FUNCTIONS:
                return False
            if isinstance(it.func, ast.Attribute) and it.func.attr == "nonzero":
                return False
        return True

    def is_plot_object(self, func: ast.AST) -> bool:
        root = _root(func)
        if not isinstance(root, ast.Name):
            return False
        return (
            root.id in rules.PLOT_MODULES
            or root.id in self.plots
            or bool(_PLOT_NAME.match(root.id))
        )

    # -- binding -------------------------------------------------------------------------
    def bind(self, target: ast.AST, value: ast.AST | None, device: bool | None = None) -> None:
        """Record what an assignment binds: device values, masks, plot objects."""
        pairs = (ast.Tuple, ast.List)
        if (
            isinstance(target, pairs)
            and isinstance(value, pairs)
            and len(target.elts) == len(value.elts)
        ):
            for t, v in zip(target.elts, value.elts, strict=True):
                self.bind(t, v)
            return
        is_dev = self.is_device(value) if device is None else device
        mask = value is not None and isinstance(target, ast.Name) and self.is_mask(value)
        plot = (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr in rules.PLOT_FACTORIES
            and self.is_plot_object(value.func)
        )
        for name in names(target):
            self.device.discard(name)
            self.masks.discard(name)
            self.loop_ints.discard(name)
            self.functions.pop(name, None)
            if isinstance(target, ast.Name) and isinstance(value, ast.Lambda):
                self.functions[name] = lambda_function(name, value)
            if is_dev:
                self.device.add(name)
            if mask:
                self.masks.add(name)
            if plot:
                self.plots.add(name)

    def imports(self, node: ast.Import | ast.ImportFrom) -> None:
        for bound, module, name in imported(node):
            self.device.discard(bound)
            if name is None and module in {"numpy", "cupy"}:
                self.xp.add(bound)
            elif name is None and module == "matplotlib.pyplot":
                self.plots.add(bound)
            elif name is not None and module in {"numpy", "cupy"}:
                self.xp_funcs[bound] = name

    def bind_loop_target(self, target: ast.AST, it: ast.AST) -> None:
        func = it.func.id if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) else ""
        if func == "range":
            self.bind(target, None, device=False)
            self.loop_ints.update(names(target))
        elif func == "enumerate" and isinstance(target, ast.Tuple) and len(target.elts) == 2:
            self.bind(target.elts[0], None, device=False)
            self.loop_ints.update(names(target.elts[0]))
            self.bind(target.elts[1], None, device=self.is_device(it.args[0]) if it.args else False)
        elif func == "zip" and isinstance(target, ast.Tuple):
            for t, a in zip(target.elts, it.args, strict=False):
                self.bind(t, None, device=self.is_device(a))
        else:
            self.bind(target, None, device=self.is_device(it))
