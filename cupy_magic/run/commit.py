"""Writing a successful cell's names back into the user namespace.

Shared by the plain and the batched run: which names changed, bringing arrays to the host
when asked, re-homing functions and classes the cell defined, and the report's output rows.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from itertools import compress, repeat
from operator import is_not
from typing import TYPE_CHECKING, Any

import numpy as np

from ..backend import Backend
from ..compat.cupyonly import host_copy
from ..compat.scope import host_value
from ..units import dtype_text
from .overlap import host_together
from .rehome import Rehomer, cell_codes, makes_functions
from .report import OutputInfo, RunReport

if TYPE_CHECKING:
    from .homes import Homes
    from .plan import CellPlan

__all__ = ["ShownOnHost", "commit", "describe_value", "leave_copy"]


def describe_value(value: Any, be: Backend) -> tuple[str, str, int]:
    """A committed value's kind, where it lives and its bytes, as the report's outputs say
    (:class:`~.report.OutputInfo`): a NumPy scalar apart from other Python objects."""
    if be.is_device_array(value):
        where = "device" if be.is_gpu else "device (CPU fallback: host RAM)"
        kind = f"{type(value).__module__.split('.')[0]}.ndarray"
        return f"{kind} {dtype_text(value.dtype)} {value.shape}", where, int(value.nbytes)
    if issubclass(type(value), np.ndarray):  # not isinstance: it may ask value.__class__
        return f"numpy.ndarray {dtype_text(value.dtype)} {value.shape}", "host", \
            int(value.nbytes)
    if issubclass(type(value), np.generic):  # a NumPy reduction's result on the CPU fallback
        return f"numpy.{type(value).__name__}", "python", 0
    return type(value).__name__, "python", 0


class ShownOnHost:
    """Under ``--to-host``, what a cell shows mid-cell (``ast_node_interactivity = "all"``)
    is the host array, as a plain NumPy cell shows it: a device array bound to a name brought
    to the host is shown as the host array that name then becomes (``Out[n]``, ``_`` and
    ``y`` one array, as in a plain cell); under ``--to-host`` alone, one bound to no name as
    :func:`~.whole.shown_value` brings the last expression's.

    Parameters
    ----------
    to_host
        ``True`` (every name the cell stores) or the names brought to the host.
    stored
        The names the cell stores.
    work
        The cell's namespace, read as each value is shown.
    namespace
        The user's namespace before the commit: what each name held.
    be
        The live backend.
    """

    def __init__(self, to_host: bool | Iterable[str], stored: Iterable[str],
                 work: dict[str, Any], namespace: dict[str, Any], be: Backend) -> None:
        self.every = to_host is True
        self.names = set(stored if to_host is True else to_host or ())
        self.work, self.namespace, self.be = work, namespace, be
        self.kept: dict[int, tuple[Any, np.ndarray]] = {}

    def __call__(self, value: Any) -> Any:
        """What to show for ``value``."""
        if not self.be.is_device_array(value):
            return value
        name = next((n for n in self.names if self.work.get(n) is value), None)
        if name is not None:  # what the name becomes
            host = host_form(value, self.be, self.namespace.get(name))
            if isinstance(host, np.ndarray):
                self.kept[id(value)] = (value, host)
            return host
        return host_form(value, self.be) if self.every else value

    def reuse(self, value: Any) -> np.ndarray | None:
        """The host array shown for ``value``, holding what ``value`` holds now (the cell
        may have changed it in place since); ``None`` when none was shown."""
        kept = self.kept.get(id(value))
        if kept is None or kept[0] is not value:
            return None
        host = kept[1]
        if host.shape != value.shape or host.dtype != value.dtype:
            return None
        if host is not value:
            self.be.to_host_into(value, host)
        return host


def commit(plan: CellPlan, work: dict[str, Any], namespace: dict[str, Any],
           to_host: bool | Iterable[str], be: Backend, report: RunReport,
           shown: ShownOnHost | None = None, homes: Homes | None = None) -> None:
    """Write the names the cell bound into ``namespace``; ``shown``: the host arrays shown
    mid-cell for names brought to the host, which those names become; ``homes``: the
    user's arrays the inputs' device copies hold (:mod:`.homes`), which a name brought to
    the host that lies in one becomes (or a view of it)."""
    host_names = None if isinstance(to_host, bool) else set(to_host)
    updates: dict[str, Any] = {}
    together: dict[str, Any] = {}  # device arrays brought to the host, by name
    homed: dict[str, str] = {}  # names that became the user's arrays (homes), and how
    made: dict[int, np.ndarray] = {}  # the results' arrays, by id: the device's if the cell's
    # one walk: `g = f` stays the same function; containers only if the cell makes functions
    # (or the array module or the cell's globals may be kept in one, plan.escapes)
    # each device array the user's array (or a view of it) it stands for, once: two names,
    # or a name and a list's item, bound to one device array stay one array (`R = [X]`)
    homed_values: dict[int, tuple[Any, Any]] = {}
    hosted_values: dict[int, tuple[Any, Any]] = {}  # likewise what _to_host made of each

    def home_of(value: Any) -> Any:
        hit = homed_values.get(id(value))
        if hit is None and homes is not None:  # kept with it: its id is not reused meanwhile
            hit = homed_values[id(value)] = (value, homes.host_of(value, plan.stored))
        return None if hit is None else hit[1]

    rehome = Rehomer(plan.code.co_filename, namespace,
                     deep=plan.escapes or makes_functions(plan.code),
                     work=work)
    for name in _rebound(work, namespace):
        value = work[name]
        if name == "__builtins__" and name not in namespace:
            continue
        original = plan.overrides.get(name, namespace.get(name, _MISSING))
        if name in plan.inputs:
            original = _MISSING if name in plan.stored else value
        if value is original:
            continue
        if name in plan.overrides and value is plan.overrides[name]:
            continue
        wants_host = to_host is True or (host_names is not None and name in host_names)
        if not wants_host and be.notes_device_arrays:  # the GPU needs no walk
            _held_arrays(value, made)
        if wants_host:
            home = None if homes is None or (shown is not None and id(value) in shown.kept) \
                else home_of(value)
            if home is not None:
                updates[name] = home
                homed[name] = "host (the user's array, changed in place, as in a plain cell)" \
                    if home is namespace.get(name) else "host (a view of the user's array)"
                continue
            if _together(value, be, shown):  # with the other views of its allocation
                updates[name] = together[name] = value
                continue
            hit = hosted_values.get(id(value))  # `X = Y = [a]`: one list, as in NumPy
            if hit is None:
                hit = hosted_values[id(value)] = (value, _to_host(
                    value, be, shown, namespace.get(name), None if homes is None else home_of))
            value = hit[1]
        stuck = len(rehome.stuck)
        updates[name] = rehome(host_value(value))
        report.notes.extend(_stuck_note(name, g, value) for g in rehome.stuck[stuck:])
    if together:  # views of one device array come back as views of one host copy
        hosted = host_together(together, be) if len(together) > 1 else {}
        for name, value in together.items():
            updates[name] = hosted[name] if name in hosted else \
                _to_host(value, be, shown, namespace.get(name))
    if homes is not None:  # changed in place, then rebound or deleted: the user's array
        for name, how in homes.write_changed(work, plan.stored):  # X -= 1; X = 0 keeps it
            if how:
                report.notes.append(f"{name!r} was changed in place before the cell {how} "
                                    "it: the change is in the user's array, as in a plain "
                                    "cell")
    if made:
        _keep_on_device(made, namespace, be)
    if rehome.deep:  # the user's lists and dicts the cell may have put a function in
        _rehome_held(plan, work, namespace, updates, rehome, report)
    # names the cell deleted (a scan in C that stops at the first, and allocates nothing)
    removed = [] if all(map(work.__contains__, namespace)) else \
        _deleted(work, namespace, plan.last_name)
    namespace.update(updates)
    for name in removed:
        del namespace[name]
        report.outputs.append(OutputInfo(name, "deleted", "deleted"))
    for name, value in updates.items():
        if name in _BOOKKEEPING:  # committed, as a plain cell leaves it, but not the cell's
            continue
        kind, where, nbytes = describe_value(value, be)
        report.outputs.append(OutputInfo(name, kind, homed.get(name, where), nbytes))
    if to_host is True or host_names:
        be.synchronize()


def _rehome_held(plan: CellPlan, work: dict[str, Any], namespace: dict[str, Any],
                 updates: dict[str, Any], rehome: Rehomer, report: RunReport) -> None:
    """Re-home, in place, what the user's lists, sets and dicts hold: those bound to a name
    the cell's code names and does not rebind (``log.append(lambda: x)``); a tuple of them
    is walked into but not made again (the name keeps its object)."""
    names = set().union(*(c.co_names for c in cell_codes(plan.code)))
    for name in names - updates.keys():
        value = namespace.get(name, _MISSING)
        if value is not _MISSING and work.get(name, _MISSING) is value:
            stuck = len(rehome.stuck)
            rehome(value)
            report.notes.extend(_stuck_note(name, g, value) for g in rehome.stuck[stuck:])


_HOLDERS = (list, tuple, dict, set, frozenset)  # what a result's arrays are kept in
_HELD_DEPTH = 4  # containers nested deeper are not looked into
_HELD_ITEMS = 10_000  # items of one result's containers looked at one by one, at most
_ARRAY_OR_HOLDER = (np.ndarray, *_HOLDERS)
_USER_ITEMS = 100_000  # items of the user's containers looked at, at most, to tell arrays apart


def _held_arrays(value: Any, found: dict[int, np.ndarray], depth: int = 0,
                 left: int = _HELD_ITEMS) -> int:
    """Put into ``found`` (by id) the arrays ``value`` is or holds in lists, tuples, dicts
    and sets (``results = [y, z]``; a few levels deep). A container whose items hold neither
    an array nor a container is not walked item by item (its item types are collected in
    C), nor one whose items would take the walk past ``left`` items (``pairs = list(zip(a,
    b))`` walked tuple by tuple cost a second per million at every commit). Returns how many
    items the walk may still look at."""
    kind = type(value)  # not isinstance: it asks an object's own __class__, which may raise
    if issubclass(kind, np.ndarray):
        found[id(value)] = value
        return left
    if depth >= _HELD_DEPTH or not issubclass(kind, _HOLDERS) or len(value) > left:
        return left  # (a million-item list: not even copied, 50 ms a commit)
    items = list(value.values()) if issubclass(kind, dict) else list(value)
    kinds = set(map(type, items))
    if len(items) > left or not any(issubclass(k, _ARRAY_OR_HOLDER) for k in kinds):
        return left
    left -= len(items)
    for item in items:
        left = _held_arrays(item, found, depth + 1, left)
    return left


def _keep_on_device(made: dict[int, np.ndarray], namespace: dict[str, Any],
                    be: Backend) -> None:
    """Note as living on the device the results' arrays ``made`` that the cell's run made
    (on the CPU fallback they then count as the device's: ``%vram_who``, the budget), as
    CuPy arrays would on a GPU; not the user's own arrays from before the cell that a result
    holds (``d = {'a': arrays[0]}``, ``g = old_dict``), which on a GPU stay NumPy's: those
    the namespace reaches as :func:`_held_arrays` walks, before the commit (an array the cell
    put into a list the user had counts as the user's); nor ``cp.asnumpy``'s host copies."""
    made = {k: a for k, a in made.items() if not be.is_device_array(a) and not host_copy(a)}
    if not made:
        return
    theirs: dict[int, np.ndarray] = {}
    left = _USER_ITEMS
    # the arrays and containers among thousands of names (``_i12``...), picked in C; one
    # object under several names (``In`` and ``_ih``) walked once
    values = namespace.values()
    kinds = {t for t in set(map(type, values)) if issubclass(t, _ARRAY_OR_HOLDER)}
    picked = {id(v): v for v in compress(values, map(kinds.__contains__, map(type, values)))}
    for value in picked.values():
        left = _held_arrays(value, theirs, 0, left)
    for key, array in made.items():
        if theirs.get(key) is not array:
            be.keep_on_device(array)


def _stuck_note(name: str, made: Any, value: Any) -> str:
    """The report's note on a generator (a coroutine) the cell made, bound to ``name``
    (``value``) or held in it, which reads the cell's namespace for as long as it runs."""
    code = getattr(made, "gi_code", None) or getattr(made, "cr_code", None) or made.ag_code
    what = type(made).__name__.replace("_", " ")
    where = f"{name} {'is' if made is value else 'holds'} a {what}"
    again = "" if code.co_name.startswith("<") else \
        f", or call {code.co_name}(...) again in a later cell ({code.co_name} is re-homed)"
    return (f"{where} made in this %%gpu cell: it reads the names as the cell left them, not "
            "what later cells change (its frame keeps the cell's namespace); make it in a "
            f"plain cell{again}")


def _deleted(work: dict[str, Any], namespace: dict[str, Any],
             last_name: str | None) -> list[str]:
    """The names the cell deleted: in the namespace but not in the cell's copy of it. Names
    put into the namespace while the cell ran (``get_ipython().push``, ``get_ipython().user_ns
    [...] = ...``) are not in the copy either; they come after ``last_name``, the last name
    it had when the cell was planned (a dict keeps its order), and are kept, as after a plain
    cell."""
    names = list(namespace)
    if last_name is not None:
        names = names[:names.index(last_name) + 1] if last_name in namespace else \
            [] if last_name == "" else names
    return [n for n in names if n not in work and n != "__builtins__"]


def leave_copy(work: dict[str, Any], namespace: dict[str, Any]) -> None:
    """After the commit, make the cell's copy of the namespace (``work``) the user namespace
    as the cell left it, when something still reads it: a generator the cell made, or a
    function kept where the re-homing does not reach (an object's attribute, a dict's key;
    :class:`~.rehome.Rehomer`). They then find ``np`` as NumPy,
    the committed values and the user's arrays, as a plain cell's would, rather than the
    array module and the device copies of the inputs (which they would keep alive); a name
    changed by a later cell they still read as the cell left it. No name the namespace has
    is missing from ``work`` meanwhile (a thread the cell started may be reading it)."""
    if sys.getrefcount(work) > _HELD_BY_CALLERS:
        work.update(namespace)
        for name in [n for n in list(work) if n not in namespace]:
            work.pop(name, None)


_HELD_BY_CALLERS = 3  # the caller's variable, this function's argument, getrefcount's
_MISSING = object()
# names Python itself binds in a module's namespace (``warnings.warn`` records what it
# showed; an annotated name at the top level makes ``__annotations__``)
_BOOKKEEPING = frozenset({"__warningregistry__", "__annotations__"})


def _rebound(work: dict[str, Any], namespace: dict[str, Any]) -> list[str]:
    """The names whose value in ``work`` is not the namespace's (new ones included), in
    ``work``'s order. A notebook's namespace grows by a few names a cell (``_i12``, ``_12``),
    so the scan runs in C (``map``/``compress``), not as a Python loop over every name
    (``benchmarks/cell_overhead.py`` times a cell among 3,000 more names)."""
    keys = work.keys()
    return list(compress(keys, map(is_not, work.values(),
                                   map(namespace.get, keys, repeat(_MISSING)))))


def _together(value: Any, be: Backend, shown: ShownOnHost | None) -> bool:
    """Whether ``value`` comes to the host with the other device arrays of the cell's names
    (:func:`~.overlap.host_together`): an array of one element or more
    on a GPU, not shown mid-cell (which the name becomes)."""
    return be.is_gpu and be.is_device_array(value) and value.ndim > 0 and value.size > 0 \
        and (shown is None or id(value) not in shown.kept)


def host_form(value: Any, be: Backend, was: Any = None) -> Any:
    """The device array ``value`` brought to the host as a NumPy cell holds it.

    On a GPU a 0-d array becomes the NumPy scalar NumPy's reductions and indexing give
    (``np.float32``), where CuPy gives a 0-d array; it stays a 0-d array when ``was`` (what
    the name held before the cell) is one, as NumPy's ``a += 1`` keeps it. The CPU fallback's
    arrays are NumPy's own and keep their form.
    """
    host = be.to_host(value)
    if host.ndim == 0 and be.is_gpu and not (isinstance(was, np.ndarray) and was.ndim == 0):
        return host[()]
    return host


def _to_host(value: Any, be: Backend, shown: ShownOnHost | None = None,
             was: Any = None, home: Callable[[Any], Any] | None = None) -> Any:
    """``value`` with its device arrays brought to the host (:func:`host_form`; ``was``: what
    the name held), also those in a tuple, a list or a named tuple (``np.diag_indices``,
    ``np.unique_all``, ``np.linalg.svd``) or the values of a dict; the same object when it
    holds none. ``home``: the user's array an item that is an input's device copy stands for
    (``R = [X, W]``: ``R[1] is W`` as in a plain cell), else ``None``."""
    if be.is_device_array(value):
        kept = None if shown is None else shown.reuse(value)
        return host_form(value, be, was) if kept is None else kept
    def item(v: Any) -> Any:
        found = None if home is None else home(v)
        return _to_host(v, be, shown, home=home) if found is None else found

    kind = type(value)  # not isinstance: it asks an object's __class__, which may raise
    if kind in (list, tuple) or (issubclass(kind, tuple) and hasattr(value, "_fields")):
        items = [item(v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if kind is dict:  # D = {"x": X}: D["x"] is X, as in a plain cell
        found = {k: item(v) for k, v in value.items()}
        return value if all(found[k] is v for k, v in value.items()) else found
    return value
