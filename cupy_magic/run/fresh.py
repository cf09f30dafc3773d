"""Which names a top-level statement of a cell surely binds to a new object.

``X = X * 2`` at the top level leaves ``X`` a new array whenever the cell runs to its end; so
the run need not watch whether ``X`` still holds its device copy at the end
(:attr:`~.plan.CellPlan.may_keep`). ``X = np.asarray(X)``, ``X = Y`` or ``if c: X = X * 2``
may leave it holding the copy: those are watched.
"""

from __future__ import annotations

import ast

from ..syncs.values import imported

__all__ = ["BINDS_ANY", "bound_fresh"]

_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
# expressions whose value is always a new object (a NumPy or CuPy operator makes a new array)
_FRESH = (ast.BinOp, ast.UnaryOp, ast.Compare, ast.Constant, ast.List, ast.Tuple, ast.Dict,
          ast.Set, ast.JoinedStr, ast.Lambda, *_COMPREHENSIONS)
# calls that may give back an argument itself (``np.asarray(X)`` is ``X``, so may be
# ``max(X, Y)``, ``d.get(k)``); any other call is taken for one that makes a new object, as
# NumPy's functions and methods do but where ``copy=`` says otherwise
# (``X.astype(t, copy=False)``, ``np.array(X, copy=None)``)
_SAME_CALLS = {"asarray", "asanyarray", "ascontiguousarray", "asfortranarray",
               "asarray_chkfinite", "require", "asnumpy", "atleast_1d", "atleast_2d",
               "atleast_3d", "squeeze", "conj", "conjugate", "real", "__array__", "get", "pop",
               "setdefault", "max", "min", "next", "getattr", "reduce"}
# names through which a cell may bind any global (``globals()["X"] = Y``, ``exec("X = Y")``)
BINDS_ANY = {"globals", "exec", "eval", "vars", "locals", "setattr", "__import__"}


def _fresh(value: ast.expr) -> bool:
    """Whether ``value`` is always a new object: a :data:`_FRESH` expression, or a call
    other than :data:`_SAME_CALLS` with no ``copy=`` but ``copy=True``, holding no walrus."""
    if isinstance(value, ast.Call):
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else \
            func.id if isinstance(func, ast.Name) else None
        if name is None or name in _SAME_CALLS or any(
                k.arg is None or (k.arg == "copy" and not (
                    isinstance(k.value, ast.Constant) and k.value.value is True))
                for k in value.keywords):
            return False
    elif not isinstance(value, _FRESH):
        return False
    return not any(isinstance(n, ast.NamedExpr) for n in ast.walk(value))


def bound_fresh(stmt: ast.stmt) -> set[str]:
    """The names a top-level statement binds to a new object whenever it runs to its end
    (:attr:`~.names.CellNames.bound_fresh`): an assignment's name targets where the value is
    :func:`_fresh` (a tuple target takes a tuple's items one by one), an undecorated ``def``
    or ``class``, or an import."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return set() if stmt.decorator_list else {stmt.name}  # a decorator gives anything
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {bound for bound, _, name in imported(stmt) if name != "*"}
    if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        pairs = [(stmt.target, stmt.value)]
    elif isinstance(stmt, ast.Assign):
        pairs = [(t, stmt.value) for t in stmt.targets]
    else:
        return set()
    found: set[str] = set()
    while pairs:
        target, value = pairs.pop()
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
                and len(target.elts) == len(value.elts) \
                and not any(isinstance(e, ast.Starred) for e in (*target.elts, *value.elts)):
            pairs += zip(target.elts, value.elts, strict=True)
        elif isinstance(target, ast.Name) and _fresh(value):
            found.add(target.id)
    return found
