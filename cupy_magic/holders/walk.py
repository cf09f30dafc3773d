"""Walking what the user can reach, to find the arrays it keeps alive and by which path.

The roots, in the order their paths are preferred: the user's own names (``y``,
``results[3]``, ``model.weights``, ``f.__closure__ (w)``), IPython's output cache (``Out[12]``,
then ``_``, ``__``, ``___`` and ``_12``), and the frames of the last traceback
(``sys.last_traceback``). The namespace is always passed in: this module knows no IPython.
It runs on the main thread only (the panel's sampler thread never walks the namespace).
"""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["IPYTHON_NAMES", "MAX_DEPTH", "MAX_ITEMS", "Found", "Walk", "is_output_name",
           "last_tracebacks", "reaches", "user_names", "walk"]

MAX_DEPTH = 8  # containers inside containers deeper than this are not opened
MAX_ITEMS = 100_000  # items of one container looked at; the rest is named in the notes

# Names IPython puts in the user namespace; never user names (the output cache is a root).
IPYTHON_NAMES = frozenset({"In", "Out", "_oh", "_ih", "_dh", "_i", "_ii", "_iii", "exit",
                           "quit", "get_ipython", "__builtins__", "__builtin__", "__name__",
                           "__doc__", "__package__", "__loader__", "__spec__"})
_OUTPUT = re.compile(r"_+|_\d+")
_INPUT = re.compile(r"_i+|_i\d+")
_SCALARS = (str, bytes, bytearray, int, float, complex, bool, type(None), range, memoryview)
_SKIP = (types.ModuleType, types.BuiltinFunctionType, types.CodeType, types.FrameType)


@dataclass
class Found:
    """One array the walk reached, with every path that reaches it (the first preferred).

    ``roots`` are the ``%vram_who --free`` arguments that drop each path's holder: a user
    name, ``Out`` or ``traceback``.
    """

    array: Any
    paths: list[str] = field(default_factory=list)
    roots: list[str] = field(default_factory=list)


@dataclass
class Walk:
    """What a walk found: arrays by ``id``, in the order first reached, and its notes."""

    found: dict[int, Found] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def is_output_name(name: str) -> bool:
    """``_``, ``__``, ``___`` and ``_12``: IPython's output cache in the namespace."""
    return bool(_OUTPUT.fullmatch(name))


def user_names(namespace: dict[str, Any]) -> list[str]:
    """The names the user bound (not IPython's, not modules), in namespace order."""
    return [n for n in namespace if n not in IPYTHON_NAMES and not is_output_name(n)
            and not _INPUT.fullmatch(n) and not isinstance(namespace[n], types.ModuleType)]


def last_tracebacks() -> list[types.TracebackType]:
    """The last traceback Python and IPython keep (``sys.last_traceback``, and that of
    ``sys.last_value`` and ``sys.last_exc`` where they differ)."""
    found: list[types.TracebackType] = []
    tb = getattr(sys, "last_traceback", None)
    for exc in (getattr(sys, "last_value", None), getattr(sys, "last_exc", None)):
        for item in (tb, getattr(exc, "__traceback__", None)):
            if isinstance(item, types.TracebackType) and all(item is not t for t in found):
                found.append(item)
    return found


def _frames(namespace: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(path, local value) for the locals of every traceback frame that is not the
    namespace itself (a cell's module frame's locals are the user's names)."""
    seen: set[int] = set()
    for tb in last_tracebacks():
        entry: types.TracebackType | None = tb
        while entry is not None:
            frame = entry.tb_frame
            if id(frame) not in seen and frame.f_locals is not namespace \
                    and frame.f_globals is not frame.f_locals:
                seen.add(id(frame))
                where = f"the last traceback's frame {frame.f_code.co_name}, line {entry.tb_lineno}"
                for name, value in list(frame.f_locals.items()):
                    yield f"{where}: {name}", value
            entry = entry.tb_next


class _Walker:
    def __init__(self, is_array: Callable[[Any], bool], namespace: dict[str, Any]) -> None:
        self.is_array = is_array
        self.namespace = namespace
        self.result = Walk()
        self.opened: set[int] = {id(namespace)}

    def visit(self, obj: Any, path: str, root: str, depth: int = 0) -> None:
        if isinstance(obj, (*_SCALARS, *_SKIP)) or (isinstance(obj, type)
                                                    and obj.__module__ != "__main__"):
            return  # library classes are not the user's holders; the notebook's own are
        if self.is_array(obj):
            found = self.result.found.setdefault(id(obj), Found(obj))
            found.paths.append(path)
            if root not in found.roots:
                found.roots.append(root)
            return
        if id(obj) in self.opened:
            return
        if depth >= MAX_DEPTH:
            self.result.notes.append(f"{path}: not opened (more than {MAX_DEPTH} levels deep)")
            return
        self.opened.add(id(obj))
        for sub, value in self.children(obj, path):
            self.visit(value, sub, root, depth + 1)

    def children(self, obj: Any, path: str) -> Iterator[tuple[str, Any]]:
        if isinstance(obj, dict):
            items: Any = ((f"{path}[{k!r}]", v) for k, v in obj.items())
        elif isinstance(obj, (list, tuple)):
            items = ((f"{path}[{i}]", v) for i, v in enumerate(obj))
        elif isinstance(obj, (set, frozenset)):
            items = ((f"{path} (an item of the set)", v) for v in obj)
        elif isinstance(obj, types.FunctionType):
            items = _function_parts(obj, path)
        elif isinstance(obj, type):  # a class the notebook defined: its class attributes
            items = ((f"{path}.{k}", v) for k, v in list(vars(obj).items())
                     if not k.startswith("__"))
        elif isinstance(obj, types.MethodType):
            items = iter([(f"{path}.__self__", obj.__self__)])
        elif type(obj).__module__.split(".")[0] in ("numpy", "IPython", "ipykernel"):
            return  # host arrays that stand for nothing on the device, and the shell itself
        else:
            items = _attributes(obj, path)
        for count, item in enumerate(items):
            if count == MAX_ITEMS:
                self.result.notes.append(f"{path}: only its first {MAX_ITEMS:,} items looked at")
                return
            yield item


def _function_parts(func: types.FunctionType, path: str) -> Iterator[tuple[str, Any]]:
    """A function's closure cells (``f.__closure__ (w)``) and default values."""
    for name, cell in zip(func.__code__.co_freevars, func.__closure__ or (), strict=False):
        try:
            yield f"{path}.__closure__ ({name})", cell.cell_contents
        except ValueError:  # an empty cell: the variable was never bound
            continue
    for i, value in enumerate(func.__defaults__ or ()):
        yield f"{path}.__defaults__[{i}]", value
    for key, value in (func.__kwdefaults__ or {}).items():
        yield f"{path}.__kwdefaults__[{key!r}]", value


def _attributes(obj: Any, path: str) -> Iterator[tuple[str, Any]]:
    """An object's instance attributes (``__dict__`` and ``__slots__``)."""
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict):
        yield from ((f"{path}.{k}", v) for k, v in list(attrs.items()))
    for klass in type(obj).__mro__:
        for slot in getattr(klass, "__slots__", ()):
            if isinstance(slot, str) and slot not in ("__dict__", "__weakref__") \
                    and hasattr(obj, slot):
                yield f"{path}.{slot}", getattr(obj, slot)


def walk(namespace: dict[str, Any], is_array: Callable[[Any], bool]) -> Walk:
    """Every array ``is_array`` accepts that the user can reach, with its paths.

    Parameters
    ----------
    namespace
        The user namespace (IPython's ``user_ns``, or a script's ``globals()``).
    is_array
        Whether an object is an array to list (the backend's device arrays).
    """
    walker = _Walker(is_array, namespace)
    for name in user_names(namespace):
        walker.visit(namespace[name], name, name)
    out = namespace.get("Out")
    if isinstance(out, dict):
        walker.opened.add(id(out))
        for key, value in list(out.items()):
            walker.visit(value, f"Out[{key}]", "Out")
    for name in [n for n in namespace if is_output_name(n)]:
        walker.visit(namespace[name], name, "Out")
    for path, value in _frames(namespace):
        walker.visit(value, path, "traceback")
    return walker.result


def reaches(obj: Any, is_array: Callable[[Any], bool]) -> bool:
    """Whether ``obj`` is, or holds, an array ``is_array`` accepts."""
    walker = _Walker(is_array, {})
    walker.visit(obj, "", "")
    return bool(walker.result.found)
