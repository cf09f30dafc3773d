"""The special methods a statement may run on the objects it names: ``k + 1`` runs
``k.__add__``, ``len(k)`` ``k.__len__``, ``k[0]`` ``k.__getitem__``, ``k()`` ``k.__call__``,
``for v in k`` ``k.__iter__``. :mod:`.globalreads` looks at those a class of the notebook
defines, as it looks at ``k.m()``: one that reads a global the cell rebound would read the
value from before the cell.
"""

from __future__ import annotations

import ast

__all__ = ["dunder_uses"]

_OPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.MatMult: "matmul",
        ast.Div: "truediv", ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.Pow: "pow",
        ast.LShift: "lshift", ast.RShift: "rshift", ast.BitOr: "or", ast.BitXor: "xor",
        ast.BitAnd: "and"}
_COMPARE = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt",
            ast.GtE: "ge", ast.In: "contains", ast.NotIn: "contains"}
_REFLECTED = {"lt": "gt", "gt": "lt", "le": "ge", "ge": "le"}
_UNARY = {ast.USub: "neg", ast.UAdd: "pos", ast.Invert: "invert", ast.Not: "bool"}
_BUILTINS = {"len": "len", "bool": "bool", "abs": "abs", "float": "float", "int": "int",
             "iter": "iter", "list": "iter", "tuple": "iter", "set": "iter", "sorted": "iter",
             "sum": "iter", "min": "iter", "max": "iter", "enumerate": "iter", "zip": "iter",
             "next": "next", "reversed": "reversed", "hash": "hash", "str": "str",
             "repr": "repr", "format": "format", "round": "round", "divmod": "divmod",
             "print": "str"}
_ITEM = {ast.Load: "getitem", ast.Store: "setitem", ast.Del: "delitem"}


def dunder_uses(node: ast.AST) -> list[tuple[str, str]]:
    """``(name, "__op__")`` for each plain name ``node`` applies an operator, a builtin, an
    index, a call, a loop or a ``with`` to (``k + 1``: ``("k", "__add__")``)."""
    found: list[tuple[str, str]] = []

    def on(value: ast.AST, *ops: str) -> None:
        if isinstance(value, ast.Name):
            found.extend((value.id, f"__{op}__") for op in ops)

    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        on(node.left, _OPS[type(node.op)])
        on(node.right, "r" + _OPS[type(node.op)])
    elif isinstance(node, ast.AugAssign) and type(node.op) in _OPS:
        on(node.target, "i" + _OPS[type(node.op)], _OPS[type(node.op)])
        on(node.value, "r" + _OPS[type(node.op)])
    elif isinstance(node, ast.Compare):  # a < b < c: a < b and b < c; b in k: k's contains
        lefts = [node.left, *node.comparators[:-1]]
        for left, op, right in zip(lefts, node.ops, node.comparators, strict=True):
            name = _COMPARE.get(type(op))
            if name == "contains":  # x in k: k's __contains__; k in L: k's __eq__
                on(right, name)
                on(left, "eq")
            elif name is not None:
                on(left, name)
                on(right, _REFLECTED.get(name, name))
    elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        on(node.operand, _UNARY[type(node.op)], "len")
    elif isinstance(node, ast.Subscript):
        on(node.value, _ITEM[type(node.ctx)])
    elif isinstance(node, ast.Call):
        on(node.func, "call")
        if isinstance(node.func, ast.Name) and node.func.id in _BUILTINS:
            for arg in node.args:
                on(arg, _BUILTINS[node.func.id])
    elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
        on(node.iter, "iter")
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        for item in node.items:
            on(item.context_expr, "enter", "exit")
    elif isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
        on(node.test, "bool", "len")
    elif isinstance(node, ast.BoolOp):  # k and 1
        for value in node.values:
            on(value, "bool", "len")
    elif isinstance(node, ast.FormattedValue):  # f"{k}"
        on(node.value, "format", "str", "repr")
    return found
