"""What in a batched cell's text, or in the run's options, keeps its batches from being
replayed as CUDA graphs (:mod:`.graphs`), read before anything runs.

A replayed batch runs none of the cell's Python: the graph repeats the device work one
captured batch queued, on the addresses it used. So the cell must leave nothing to its
Python that differs from batch to batch or reaches outside it: no prints, no calls on
objects from outside the cell (``log.append(x)``), no writes into them, no iterators from
outside it (``next(counter)``: each batch would take the next value), no calls into modules
whose values change from call to call (``random``, ``time``, ``np.random``), no functions
whose code cannot be read or whose defaults hold an object a call may change, no host data
moved (``np.asarray(a_list)``, ``x.get()``: a graph would keep one batch's host address), no
host sync the static check sees, and no place the row check cannot follow. Conservative:
what this refuses still runs batched, launched op by op.
"""

from __future__ import annotations

import ast
import builtins
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..syncs.values import attr_path
from .batching import _definition

__all__ = ["WRITES_FILE", "outside_effect", "refusal"]

# builtins whose calls change nothing outside the cell (a host sync among them, float(x),
# fails the capture itself)
_PURE = frozenset({
    "abs", "all", "any", "bool", "complex", "dict", "divmod", "enumerate", "filter", "float",
    "frozenset", "getattr", "hasattr", "int", "isinstance", "iter", "len", "list", "map", "max",
    "min", "next", "pow", "range", "repr", "reversed", "round", "set", "slice", "sorted", "str",
    "sum", "tuple", "type", "zip"})
# calls that move host data to or from the device
_HOST_DATA = frozenset({
    "array", "asanyarray", "asarray", "ascontiguousarray", "asfortranarray", "asnumpy",
    "copy_from_host", "copy_from_host_async", "copy_to_host", "copy_to_host_async",
    "frombuffer", "fromfunction", "fromiter", "get", "item", "load", "loadtxt", "save",
    "savetxt", "savez", "set", "tolist"})
_VALUES = (np.ndarray, np.generic, int, float, complex, bool, str, bytes)
# modules whose calls give another value at every call, whatever the cell passes them
_CHANGING = frozenset({"random", "secrets", "time", "uuid"})
MAX_DEPTH = 3
# modules whose calls write outside the cell: a figure, a log, a file, the display
_WRITERS = frozenset({"matplotlib", "seaborn", "plotly", "logging", "os", "sys", "shutil",
                      "json", "pickle", "csv", "subprocess", "IPython", "tqdm"})


_FILES = frozenset({"save", "savez", "savez_compressed", "savetxt", "tofile"})
WRITES_FILE = "which writes a file"


def outside_effect(source: str, namespace: Mapping[str, Any], xp: Iterable[str],
                   is_device: Callable[[Any], bool] = lambda v: False) -> str:
    """What in the cell may act on something outside it (a call on an object from outside,
    a write into one, a plot, a log, a file), which a batched run repeats once per batch:
    the first such place as a phrase (``"calls hist.append on an object from outside the
    cell"``; one that writes an array to a file has :data:`WRITES_FILE`: each batch would
    write its own rows over the last's), or ``""``. Its prints are not counted (a batched
    run shows them once), nor its random draws or host data (the row check and the static
    sync check see those)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ""
    return _Scan(namespace, set(xp), is_device, 0, effects=True).tree(tree)


def refusal(source: str, namespace: Mapping[str, Any], xp: Iterable[str], *,
            found: Sequence[Any] = (), syncs: Sequence[Any] = (), traced: bool = False,
            timeline: bool = False, devices: bool = False,
            is_device: Callable[[Any], bool] = lambda v: False,
            reduce: Mapping[str, str] | None = None) -> str:
    """Why the cell's batches may not be replayed as CUDA graphs (``""``: nothing here).

    Parameters
    ----------
    source
        The cell's code.
    namespace
        The user namespace (what the names the cell reads but does not assign hold).
    xp
        Names of the array modules in the cell (``np``, ``cp``, ...).
    found
        The row check's places (:class:`.rowwise.RowMix`): any, certain or not, refuses.
    syncs
        The static sync check's findings (:class:`~cupy_magic.syncs.lint.SyncFinding`).
    traced
        ``--lines`` or ``--nvtx``: the tracer follows the cell's Python in every batch.
    timeline
        ``--timeline``: each batch's own timing events.
    devices
        ``--devices``: batches dealt over several devices.
    is_device
        Whether a value is a device array (the backend's).
    reduce
        The ``--reduce`` rules: a ``concat`` partial is kept as each batch left it, where a
        replay would write the next batch's over it (the other rules' partials are copied
        to a host row per batch).
    """
    concat = sorted(n for n, rule in (reduce or {}).items() if rule == "concat")
    if concat:
        return (f"the --reduce partial {concat[0]!r} (concat) is kept as each batch leaves it, "
                "and a replay would write the next batch's into the same device array")
    if devices:
        return "batches dealt over several devices are launched op by op"
    if traced:
        return "--lines and --nvtx follow the cell's Python in every batch, which a replay " \
            "does not run"
    if timeline:
        return "--timeline records each batch's own timing events, which a replay does not"
    if syncs:
        first = syncs[0]
        return (f"the cell may wait for the device at line {first.line} (`{first.code}`), "
                "which a graph cannot hold")
    if found:
        return (f"the row check cannot follow the cell at {found[0].describe()}, so its "
                "Python may differ from batch to batch, which a replay does not run")
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "the cell's text could not be read"
    outside = {n for n in xp}
    why = _Scan(namespace, outside, is_device, 0).tree(tree)
    return f"the cell {why}, which a replayed batch would not repeat" if why else ""


class _Scan:
    """One pass over a cell (or a function it calls): the first reason, or ``""``."""

    def __init__(self, namespace: Mapping[str, Any], xp: set[str],
                 is_device: Callable[[Any], bool], depth: int,
                 seen: set[int] | None = None, effects: bool = False) -> None:
        self.ns, self.xp, self.is_device, self.depth = namespace, xp, is_device, depth
        self.effects = effects  # only what acts outside the cell (outside_effect)
        self.seen = seen if seen is not None else set()
        self.bound: set[str] = set()
        self.assigned: set[str] = set()  # names a plain assignment of the code binds
        self.imported: dict[str, str] = {}

    def tree(self, tree: ast.AST) -> str:
        self.bound, self.imported = _bound(tree), _imported(tree)
        self.assigned = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign)
                         for t in n.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            why = self.node(node)
            if why:
                return why
        return ""

    def node(self, node: ast.AST) -> str:
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return f"writes names outside its functions ({', '.join(node.names)})"
        if (isinstance(node, ast.Name) and node.id not in self.bound
                and isinstance(self.ns.get(node.id), Iterator)):
            return f"reads {node.id}, an iterator from outside it that moves on at every batch"
        if (isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name)
                and isinstance(self.ns.get(node.target.id), (list, dict, set, bytearray))
                and node.target.id not in self.assigned):
            return f"changes {node.target.id}, a {type(self.ns[node.target.id]).__name__} " \
                "from outside the cell, in place"
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) \
                else [node.target]
            for target in targets:
                for part in ast.walk(target):
                    if isinstance(part, (ast.Subscript, ast.Attribute)):
                        root = _root(part)
                        if root and not self.local(root):
                            return f"changes {root}, an object from outside the cell"
        if isinstance(node, ast.Call):
            return self.call(node)
        return ""

    def local(self, name: str) -> bool:
        """Whether ``name`` holds something a batch may touch: bound in the cell, an array
        module, or an array or plain value from the namespace."""
        if name in self.bound or name in self.xp:
            return True
        value = self.ns.get(name)
        return isinstance(value, (*_VALUES, types.ModuleType)) or self.is_device(value)

    def call(self, node: ast.Call) -> str:
        path = attr_path(node.func)
        if not path:
            return ""  # a method of an expression's value: its parts are calls checked here
        name, dotted = path[-1], ".".join(path)
        if self.effects:
            if name in _FILES and len(path) > 1:  # np.save(...), y.tofile(...)
                return f"calls {dotted}, {WRITES_FILE}"
            held = self.ns.get(path[0]) if path[0] not in self.bound else None
            module = self.origin(path[0]) or getattr(held, "__module__", None) or ""
            if module.split(".")[0] in _WRITERS:  # plt.plot, a display imported as dp
                return f"calls {dotted}, which writes outside it (a figure, a log, a file)"
            if name == "print" or name in _HOST_DATA:
                return ""
        elif self.origin(path[0]).split(".")[0] in _CHANGING or "random" in path[:-1]:
            return f"calls {dotted}, which gives another value at every call"
        elif name in _HOST_DATA:
            return f"calls {dotted}, which moves host data to or from the device"
        if len(path) > 1:
            return "" if self.local(path[0]) else f"calls {dotted} on an object from outside " \
                "the cell"
        if name == "print":
            return "prints"
        if name in self.bound or name in self.xp:
            return ""
        if name in self.ns:
            return self.function(name, self.ns[name])
        return "" if name in _PURE or not hasattr(builtins, name) else \
            f"calls {name}, which may change something outside it"

    def origin(self, name: str) -> str:
        """The module ``name`` comes from: imported by the cell, or a module it reads."""
        if name in self.imported:
            return self.imported[name]
        value = self.ns.get(name) if name not in self.bound else None
        return value.__name__ if isinstance(value, types.ModuleType) else ""

    def function(self, name: str, value: Any) -> str:
        module = (getattr(value, "__module__", None) or "").split(".")[0]
        if module in ("numpy", "cupy", "cupyx") or type(value).__name__ == "ufunc":
            return ""
        if id(value) in self.seen:
            return ""
        definition = _definition(value)
        if definition is None or self.depth >= MAX_DEPTH:  # a library's: not an effect known
            return "" if self.effects else f"calls {name}, whose code the check cannot read"
        self.seen.add(id(value))
        defaults = (*(getattr(value, "__defaults__", None) or ()),
                    *(getattr(value, "__kwdefaults__", None) or {}).values())
        if not self.effects and not all(d is None or isinstance(d, (*_VALUES, tuple))
                                        for d in defaults):
            return f"calls {name}, whose defaults hold an object each call may change"
        ns = {**getattr(value, "__globals__", {}), **self.ns}
        return _Scan(ns, self.xp, self.is_device, self.depth + 1, self.seen,
                     self.effects).tree(definition)


def _bound(tree: ast.AST) -> set[str]:
    """Every name the code binds: assigned, a parameter, a function, class or import."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _imported(tree: ast.AST) -> dict[str, str]:
    """The names the code's imports bind, and the module each comes from."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update({(a.asname or a.name).split(".")[0]: a.name for a in node.names})
        elif isinstance(node, ast.ImportFrom):
            names.update({a.asname or a.name: node.module or "" for a in node.names})
    return names


def _first(node: ast.AST) -> tuple[str, Any]:
    """The name a chain of items and attributes starts from, and the first item's key or
    attribute's name where the source gives it as a constant (``None`` otherwise)."""
    key: Any = None
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        key = node.attr if isinstance(node, ast.Attribute) else \
            node.slice.value if isinstance(node.slice, ast.Constant) else None
        node = node.value
    return (node.id, key) if isinstance(node, ast.Name) else ("", None)


def _root(node: ast.AST) -> str:
    return _first(node)[0]
