"""What a cell needs before it runs: its code, its NumPy inputs and the names it binds (the
copies of its inputs on the device: :mod:`.inputmoves`).

Shared by the whole and the batched run (:mod:`cupy_magic.run.whole`,
:mod:`cupy_magic.run.batched`).
"""

from __future__ import annotations
import __future__

import codeop
import contextlib
import linecache
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from types import CodeType, ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from ..backend import Backend
from ..compat.generator import checked_generator
from ..compat.proxy import array_module
from ..compat.record import CompatRecord
from ..compat.scope import cell_builtins
from ..compat.spec import input_refusal
from ..syncs.record import uncharged
from ..units import dtype_name, short_repr
from .aliases import MODULE_NAMES, numpy_names, only_read, read_until_rebound
from .compiled import Transform, compile_cell, ends_quiet
from .errors import CellError
from .globalreads import stale_global
from .lines import off_the_lines
from .mainmod import as_main
from .names import CellNames, cell_names, module_escapes
from .overlap import overlapping, refuse_overlaps
from .readers import reader_args
from .staleguard import InPlaceFirst

if TYPE_CHECKING:  # a cell's plan only carries them (cell.py makes them)
    from .heldwrites import Held

__all__ = ["CAST_TARGETS", "CellPlan", "cast_target", "plan_cell", "register_source"]

CAST_TARGETS = {"float32": {"float64": "float32", "complex128": "complex64"},
                "float16": {"float64": "float16", "float32": "float16"}}
# compile()'s flags of every ``from __future__`` feature (a code object's co_flags has them)
_FUTURE_FLAGS = sum(getattr(__future__, n).compiler_flag for n in __future__.all_feature_names)


@dataclass(frozen=True)
class CellPlan:
    """A cell ready to run: its compiled code, its NumPy inputs, the names it binds.

    Attributes
    ----------
    code
        The cell compiled under its filename (tracebacks show the cell's lines).
    body, last
        The same cell split as a plain cell runs it: ``body`` all but a last expression
        statement, ``last`` that expression compiled to evaluate (``None`` when the cell
        does not end with an expression). Run through :meth:`run`.
    inputs
        The NumPy arrays the cell reads, by name; they move to the device for the cell.
    overrides
        Names that mean the backend's array module inside the cell (``np``, ``cp``, ...):
        one :class:`~cupy_magic.compat.ArrayModule` in front of it.
    stored, deleted
        Names the cell assigns (or changes in place), and names it deletes.
    compat
        The array module's record: lists moved to the device, calls run with NumPy.
    displays
        Whether ``body`` or ``last`` hands the values of expression statements to
        ``sys.displayhook`` as they run (``shows="all"``).
    last_name
        The namespace's last name when the cell was planned (``""``: it had none; ``None``:
        not known); names put into it after, while the cell ran, are not the cell's deletions.
    over_rows
        In a batched run, the names the row check found holding a value over a batch's rows
        without a ``--reduce`` rule (:func:`~.batching.check_rows`): none of them is kept,
        even where every batch gives the same number.
    row_free
        In a batched run, the names the row check found bound to values that depend on no
        batched row (``eps = np.float32(1e-3)``): a NumPy scalar among them is kept where
        every batch gives the same, as a Python value is.
    graph_refusal
        In a batched run on a GPU, why its batches may not be replayed as CUDA graphs
        (:func:`~.graphscan.refusal`): ``""`` nothing refuses, ``None`` not checked.
    escapes
        Whether the cell may keep the array module or its own namespace as a value in a
        container (:func:`~.names.module_escapes`, ``globals()``): the commit then walks them.
    only_read
        The inputs the cell's source can only read (:func:`~.aliases.only_read`): their copies
        need no watch for changes through other names; none of a group in ``overlaps`` where
        the cell may change one of it.
    overlaps
        The groups of inputs whose memory overlaps (:func:`~.overlap.overlapping`).
    in_place
        The inputs the source changes in place through their own name before rebinding it,
        or through a name ``y = x`` bound to them (``x += 1``, ``x[0] = 1``, ``x.sort()``,
        ``out=x``, ``y += 1``; :class:`~.names.CellNames`); ``in_place_sure``: those a
        top-level statement changes whenever the cell runs to its end (not ``if c: x += 1``).
    may_keep
        The inputs the source may change in place or rebind and need not, so that the run
        may leave the name holding its copy as it was (``if c: x += 1``, ``if c: x = x * 2``,
        ``for`` loops, ``x = np.asarray(x)``): ``in_place`` less ``in_place_sure``, and all
        it stores but those a top-level statement surely changes in place or last binds to a
        new object (``x = x * 2``; :attr:`~.names.CellNames.bound_fresh`). The run watches
        their copies (:class:`~.inputwrites.InputWatch`) and leaves the user's array where it
        did nothing.
    unseen
        The inputs the cell stores that it may change in place first through another name
        than their own, unseen by its source, before their names let the copies go:
        ``X = f(X)`` where ``f`` changes its argument, ``R = [X]; R[0] += 1; X = X + 1``
        (:func:`~.aliases.read_until_rebound`); not ``X = X * 2; X += 1``. Under
        ``--to-host`` their copies are held to the commit and watched
        (:func:`~.homes.input_homes`), so that such a change reaches the user's array.
    held
        The changes a top-level statement makes to inputs through an object from outside
        that holds them, or a function from outside (:func:`~.heldwrites.held_sure`; a
        whole run's only).
    held_maybe
        Such changes the cell may make and need not (under an ``if``, in a loop), each with
        the checksum of the user's array it reaches, taken before the run (a run that
        changed that array made it), and whether the cell then reads the input's copy
        (:func:`~.heldwrites.stale_read`: refused where the change was made).
    held_kept
        Such changes (each with the checksum of ``held_maybe``, or ``None`` where the change
        is sure) of an input the cell then reads into a rebinding it may not make
        (``if c: X = X * 2``, ``X = np.ascontiguousarray(X)``): refused where the change was
        made and the name, after the run, no longer holds its copy.
    held_reads
        The reads of inputs through an object from outside that holds them after a
        statement that may change their device copy (``X += 1`` then ``L[0] * 2``;
        :func:`~.heldreads.held_reads`): refused after the run where the copy changed.
    sorts_in_place
        Whether the cell calls ``.sort()`` or ``.partition()`` anywhere (CuPy sorts only a
        contiguous array, so strided inputs keep contiguous copies: :mod:`.inputmoves`).
    in_place_first
        The inputs the cell changes in place before it binds them, with where
        (:class:`~.staleguard.InPlaceFirst`), for :class:`~.staleguard.StaleGuard`.
    """

    code: CodeType
    inputs: dict[str, np.ndarray]
    overrides: dict[str, Any]
    stored: set[str]
    deleted: set[str]
    body: CodeType | None = None
    last: CodeType | None = None
    compat: CompatRecord | None = None
    displays: bool = False
    last_name: str | None = None
    over_rows: frozenset[str] = frozenset()
    row_free: frozenset[str] = frozenset()
    graph_refusal: str | None = None
    escapes: bool = False
    only_read: frozenset[str] = frozenset()
    overlaps: tuple[tuple[str, ...], ...] = ()
    in_place: frozenset[str] = frozenset()
    in_place_sure: frozenset[str] = frozenset()
    may_keep: frozenset[str] = frozenset()
    unseen: frozenset[str] = frozenset()
    held: tuple[Held, ...] = ()
    held_maybe: tuple[tuple[Held, Any, bool], ...] = ()
    held_kept: tuple[tuple[Held, Any], ...] = ()
    held_reads: tuple[Held, ...] = ()
    sorts_in_place: bool = False
    in_place_first: InPlaceFirst | None = None

    def group_of(self, name: str) -> tuple[str, ...]:
        """The inputs sharing memory with ``name`` (its group of ``overlaps``, or itself)."""
        return next((g for g in self.overlaps if name in g), (name,))

    @property
    def changed_overlaps(self) -> list[tuple[str, ...]]:
        """The groups of ``overlaps`` the cell may change one of (a batched run cannot keep)."""
        return [g for g in self.overlaps if not set(g) <= self.only_read]

    @property
    def may_rebind(self) -> frozenset[str]:
        """Of ``may_keep``, the inputs the source never changes in place through a name
        (``if c: X = X * 2``, ``X = np.asarray(X)``): left as they were unless rebound, but
        for a change through another name (those of ``unseen``)."""
        return self.may_keep - self.in_place

    def run(self, namespace: dict[str, Any], user: dict[str, Any] | None = None,
            show: Callable[[Any], Any] | None = None) -> Any:
        """Run the cell in ``namespace``; return its last expression's value (or ``None``).

        ``user``: the user namespace. Expression statements a ``"single"`` mode part shows
        (``ast_node_interactivity = "all"``) go to ``sys.displayhook``, which writes the
        output names (``_``, ``__``, ``___``, ``_12``) there; they are copied into
        ``namespace`` too, so that the commit keeps them instead of undoing them.
        ``show``: what goes to the hook for each such value (``--to-host``: the host array).
        """
        __tracebackhide__ = True
        with as_main(namespace, user, self.stored):  # pickle finds what the cell defines
            if self.last is None:
                exec(self.code, namespace)
                return None
            with _outputs_kept(namespace, user, show) if self.displays \
                    else contextlib.nullcontext():
                if self.body is not None:
                    exec(self.body, namespace)
                return eval(self.last, namespace)

    @property
    def future_flags(self) -> int:
        """The ``from __future__`` flags the cell compiled under (inherited and its own)."""
        return self.code.co_flags & _FUTURE_FLAGS

    @property
    def module_names(self) -> tuple[str, ...]:
        """The names that mean the array module in the cell (``np``, ``cp``, ...)."""
        return tuple(n for n, v in self.overrides.items()
                     if isinstance(v, ModuleType) and n != "__builtins__")

    def with_inputs(self, inputs: dict[str, np.ndarray]) -> CellPlan:
        """The same cell over other inputs (a warm-up slice, the shared inputs of a batch)."""
        return replace(self, inputs=inputs, overlaps=tuple(overlapping(inputs)))


@contextlib.contextmanager
def _outputs_kept(namespace: dict[str, Any], user: dict[str, Any] | None,
                  show: Callable[[Any], Any] | None) -> Iterator[None]:
    """While the cell shows values through ``sys.displayhook``, copy the output names it
    sets in ``user`` (``_``, ``__``, ``___``, ``_12``) into the cell's ``namespace``."""
    hook = sys.displayhook

    def shown(value: Any) -> None:
        # shown for the user, as a plain cell shows it: no sync of the cell, no time of a line
        with uncharged(), off_the_lines():
            value = value if show is None else show(value)
            hook(value)
        if value is None or user is None:
            return
        count = getattr(hook, "prompt_count", None)  # IPython's: the value is also _<count>
        for name in (*_UNDERSCORES, f"_{count}"):
            if name in user:
                namespace[name] = user[name]

    sys.displayhook = shown
    try:
        yield
    finally:
        sys.displayhook = hook


_UNDERSCORES = ("_", "__", "___")


def cast_target(arr: np.ndarray, dtype: str | None) -> np.dtype:
    """The dtype ``arr`` has on the device under ``--dtype`` (its own when not cast)."""
    if not dtype:  # the common case, without reading the dtype's name (about 10 us)
        return arr.dtype
    target = CAST_TARGETS.get(dtype, {}).get(dtype_name(arr.dtype))
    return np.dtype(target) if target else arr.dtype


def _check_input(name: str, arr: np.ndarray) -> None:
    if isinstance(arr, np.matrix):
        raise CellError(
            f"input {name!r} is a np.matrix, whose * is the matrix product; CuPy has no "
            f"matrix class, so {name} * {name} would silently become element-wise: pass "
            f"{name} = np.asarray({name}) and write {name} @ {name} for the matrix product")
    refusal = input_refusal(name, arr.dtype)  # objects, strings, records, dates, float128
    if refusal:
        raise CellError(refusal)
    if isinstance(arr, np.ma.MaskedArray):
        raise CellError(f"input {name!r} is a masked array; CuPy has none: pass "
                        f"{name}.filled(fill_value) and a separate mask")


def _check_to_host(to_host: bool | Iterable[str], names: CellNames) -> None:
    if isinstance(to_host, bool):
        return
    missing = [n for n in to_host if n not in names.assigned | names.mutated]
    if missing:
        assigned = sorted(names.assigned)
        fix = (f"name one it assigns ({', '.join(assigned)}), e.g. --to-host {assigned[0]} "
               f"(to_host=['{assigned[0]}'] from Python)" if assigned
               else "the cell assigns nothing: drop --to-host (to_host from Python)")
        raise CellError(f"--to-host names {', '.join(missing)}, which the cell never assigns; "
                        f"{fix}")


def plan_cell(source: str, namespace: dict[str, Any], filename: str,
              to_host: bool | Iterable[str], dtype: str | None, be: Backend,
              fallback: bool = False, compiler: codeop.Compile | None = None,
              shows: str = "last_expr", transform: Transform | None = None) -> CellPlan:
    """Compile the cell and find its NumPy inputs; raise :class:`CellError` for bad options.

    ``fallback``: calls CuPy cannot run run with NumPy (``--fallback``) instead of stopping.
    ``compiler``: what compiles the cell (IPython's ``shell.compile`` for ``%%gpu``): the
    cell gets its ``from __future__`` flags and leaves its own future imports in it for later
    cells, as a plain cell does; ``None``: a fresh one, so no flags are inherited
    (``dont_inherit``), not even this module's. ``shows``: which expression statements'
    values the cell shows, IPython's ``ast_node_interactivity`` (:data:`~.compiled.SHOWS`);
    a trailing ``;`` shows none. ``transform``: what the parsed cell goes through first
    (IPython's AST transformers, :func:`~.compiled.compile_cell`). A syntax error is raised
    before any option is checked, as a plain cell reports it first.
    """
    compiler = codeop.Compile() if compiler is None else compiler
    compiled = compile_cell(source, filename, compiler, split=not ends_quiet(source),
                            shows=shows, transform=transform)
    names = cell_names(source)
    if dtype is not None and dtype not in CAST_TARGETS:
        raise CellError(f"--dtype {short_repr(dtype)} is not supported; use "
                        f"{' or '.join('--dtype ' + d for d in CAST_TARGETS)} "
                        "(dtype='float32' or np.float32 from Python)")
    _check_to_host(to_host, names)
    # the names bound to NumPy, scanned in C (a notebook's namespace holds thousands)
    bound_np = numpy_names(namespace)
    record = CompatRecord(filename, source, fallback=fallback, host=not be.is_gpu)
    module = array_module(be.xp, record, be.uncounted)
    overrides: dict[str, Any] = {k: module for k in bound_np}
    overrides["__builtins__"] = cell_builtins(module)  # import numpy in the cell: the same
    if "cp" not in namespace or isinstance(namespace.get("cp"), ModuleType):
        overrides["cp"] = module
    inputs: dict[str, np.ndarray] = {}
    generator = getattr(getattr(be.xp, "random", None), "Generator", None)
    for name in sorted((names.loaded | names.mutated) - names.written_first):
        value = namespace.get(name)
        kind = type(value)  # not isinstance: it asks an object's __class__, which may raise
        if (issubclass(kind, np.ndarray) and name not in bound_np
                and not be.is_device_array(value)):
            _check_input(name, value)
            inputs[name] = value
        elif generator is not None and issubclass(kind, generator):
            overrides[name] = checked_generator(module, value)  # rng from an earlier cell
    stale = stale_global(source, namespace, inputs)  # X = X * 2, then g() reading X
    if stale:
        raise CellError(stale)
    modules = frozenset({*bound_np, *MODULE_NAMES})
    readers = reader_args(source, namespace, modules) if inputs else frozenset()
    only = only_read(source, frozenset(inputs), modules, readers)
    overlaps = overlapping(inputs)
    for group in overlaps:  # a change through one shows through the others: watch them all
        if not set(group) <= only:
            only -= set(group)
    refuse_overlaps(overlaps, only, "the cell's copies", inputs,
                    casts=lambda a: cast_target(a, dtype) != a.dtype)
    return CellPlan(compiled.code, inputs, overrides, names.assigned | names.mutated,
                    names.deleted, compiled.body, compiled.last, record, compiled.displays,
                    next(reversed(namespace.keys()), ""),
                    escapes="globals" in names.loaded or module_escapes(source, modules),
                    only_read=only, overlaps=tuple(overlaps),
                    in_place=frozenset(names.in_place_first & inputs.keys()),
                    in_place_sure=frozenset(names.in_place_sure & inputs.keys()),
                    may_keep=frozenset(((names.in_place_first - names.in_place_sure)
                                        | (names.assigned | names.mutated)
                                        - names.in_place_sure - names.bound_fresh)
                                       & inputs.keys()),
                    unseen=_unseen(source, names, inputs, only, modules),
                    sorts_in_place=names.sorts_in_place,
                    in_place_first=InPlaceFirst.of(source, inputs) if names.in_place_first
                    & inputs.keys() else None)


def _unseen(source: str, names: CellNames, inputs: dict[str, np.ndarray],
            only: frozenset[str], modules: frozenset[str]) -> frozenset[str]:
    """:attr:`CellPlan.unseen`: the stored inputs not shown changing in place through their
    names, that the source may change otherwise before it rebinds them."""
    maybe = ((names.assigned | names.mutated | names.deleted) & inputs.keys()) \
        - names.in_place_first - only
    return maybe - read_until_rebound(source, frozenset(maybe), modules) if maybe \
        else frozenset()


def register_source(source: str, filename: str) -> None:
    """Let tracebacks and messages quote the cell's lines (``linecache``)."""
    if filename not in linecache.cache:
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
