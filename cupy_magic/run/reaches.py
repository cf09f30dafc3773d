"""What using an object from an earlier cell may run of the notebook's own functions (its
methods, what it holds, its class's ``__init__``), looked up without running any of its
code: :mod:`.globalreads` checks their globals against what the cell bound first.
"""

from __future__ import annotations

import collections
import dis
import functools
import inspect
import itertools
import types
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

__all__ = ["method_of", "notebook_functions", "of_notebook", "of_notebook_class", "self_methods",
           "static_attr"]

_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement


def method_of(obj: Any, attr: str, namespace: Mapping[str, Any]) -> Any:
    """The notebook's function ``obj.attr`` runs, looked up without running any code of
    ``obj``'s (``__getattr__``): a method, a static or class method, a property's getter;
    one an object holds as its own attribute (``ns.g`` of a ``types.SimpleNamespace``,
    ``h.fn = g``); else None. Classes are looked into only where the notebook wrote them (a
    heap type whose ``__module__`` is the namespace's ``__name__``, ``builtins`` where it has
    none): an array's, a list's, a module's or a library's methods are skipped at once
    (each lookup takes ~2 us)."""
    try:
        if obj is None or isinstance(obj, _LEAVES):
            return None
        if not of_notebook_class(obj if isinstance(obj, type) else type(obj), namespace):
            own = vars(obj).get(attr) if not isinstance(obj, type) else None
            return next(iter(notebook_functions(own, namespace)), None)
        found = inspect.getattr_static(obj, attr, None)
        if found is None and not isinstance(obj, type):  # k.a through its class's __getattr__
            found = inspect.getattr_static(type(obj), "__getattr__", None)
    except Exception:  # no __dict__, or an odd object's own error
        return None
    if isinstance(found, (staticmethod, classmethod)):
        found = found.__func__
    elif isinstance(found, property):
        found = found.fget
    return found if of_notebook(found, namespace) else \
        next(iter(notebook_functions(found, namespace)), None)


def static_attr(obj: Any, attr: str) -> Any:
    """``obj.attr`` as the class or object holds it (a property, a function), or None."""
    try:
        return inspect.getattr_static(obj, attr)
    except Exception:  # no such attribute, or an odd object's own error
        return None


def of_notebook_class(cls: type, namespace: Mapping[str, Any]) -> bool:
    """Whether the notebook wrote ``cls`` (a class statement in one of its cells)."""
    return bool(cls.__flags__ & _HEAP_TYPE) \
        and cls.__module__ == namespace.get("__name__", "builtins")


def of_notebook(fn: Any, namespace: Mapping[str, Any]) -> bool:
    """Whether ``fn`` is a Python function written in the notebook (its globals are it)."""
    return isinstance(fn, types.FunctionType) and fn.__globals__ is namespace


def self_methods(fn: Any, obj: Any, namespace: Mapping[str, Any]) -> list[Any]:
    """``fn``, a method of ``obj`` (or of its class), and the methods of it that it loads on
    itself (``self.build()`` in ``__init__``), in turn."""
    found, todo, seen = [], [fn], set()
    while todo and len(seen) < _VISITS:
        f = todo.pop()
        if id(f) in seen or not isinstance(f, types.FunctionType):
            continue
        seen.add(id(f))
        found.append(f)
        todo += [m for n in _self_attrs(f.__code__) if (m := method_of(obj, n, namespace))
                 is not None]
    return found


@functools.lru_cache(maxsize=1024)
def _self_attrs(code: types.CodeType) -> frozenset[str]:
    """The attributes a method's code loads on its first parameter (``self.forward``)."""
    if not code.co_argcount:
        return frozenset()
    me, found, last = code.co_varnames[0], set(), None
    for instr in dis.get_instructions(code):
        if last is not None and last.opname == "LOAD_FAST" and last.argval == me \
                and instr.opname in ("LOAD_ATTR", "LOAD_METHOD"):
            found.add(instr.argval)
        last = instr
    return frozenset(found)


_HELD = 64  # a container's items looked into, at most (a list of arrays: none of them runs)
_VISITS = 128  # objects looked into for one name the cell uses, at most
_LEAVES = (types.ModuleType, np.ndarray, np.generic, str, bytes, int, float, complex,
           type(None))  # nothing of the notebook's runs through them


def notebook_functions(obj: Any, namespace: Mapping[str, Any]) -> list[types.FunctionType]:
    """The notebook's functions (globals ``namespace``) that using ``obj`` may run: itself;
    those its closure or defaults hold (``w = deco(g)``); a bound method's; a
    ``functools.partial``'s (``gp = partial(g, 1)``); a class's ``__init__`` (``C()``);
    those a list, tuple, set, dict or an object's own attributes hold (``fns["g"]()``,
    ``np.vectorize(g)``), two levels deep, at most :data:`_VISITS` objects. (An object's
    methods, properties and operators are looked at where the cell uses them: ``k.m()``,
    ``k.p``, ``k + 1``, :func:`method_of`.)"""
    found: list[types.FunctionType] = []
    try:
        if isinstance(obj, _LEAVES):
            return found
    except Exception:  # an odd object's own error (a dead weakref.proxy): nothing
        return found
    todo, seen = collections.deque([(obj, 0)]), set()
    while todo and len(seen) < _VISITS:
        item, depth = todo.popleft()
        if id(item) in seen:
            continue
        seen.add(id(item))
        try:
            fns, held = _reaches(item, namespace)
            found += fns
            if depth < 2:
                todo.extend((h, depth + 1) for h in itertools.islice(held, _HELD)
                            if not isinstance(h, _LEAVES))
        except Exception:  # (no __dict__, or an odd object's own error: nothing)
            continue
    return found


def _reaches(obj: Any, namespace: Mapping[str, Any]) -> tuple[list[Any], Iterable[Any]]:
    """The notebook's functions ``obj`` is or has as its own (a class's, an object's class's
    properties and operators), and the objects it holds that may hold more."""
    if isinstance(obj, types.FunctionType):
        if obj.__globals__ is not namespace:
            return [], ()
        held = [c.cell_contents for c in obj.__closure__ or () if _filled(c)]
        return [obj], [*held, *(obj.__defaults__ or ()), *(obj.__kwdefaults__ or {}).values()]
    if isinstance(obj, types.MethodType):
        return [], (obj.__func__,)
    if isinstance(obj, functools.partial):
        return [], (obj.func, *obj.args, *obj.keywords.values())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [], obj
    if isinstance(obj, dict):
        return [], obj.values()
    if isinstance(obj, type):  # a class of the notebook: C() runs its __init__ (a
        if not of_notebook_class(obj, namespace):  # dataclass's __post_init__), and what
            return [], ()  # they call on the object (self.build())
        made = [method_of(obj, n, namespace) for n in ("__init__", "__post_init__")]
        return [f for m in made if m is not None for f in self_methods(m, obj, namespace)], ()
    own = vars(obj)  # an object's own attributes: h.fn = g, a SimpleNamespace's, a
    return [], own.values() if isinstance(own, dict) else ()  # np.vectorize's pyfunc


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True
