"""A cell run whole: its inputs moved once, its code run once, timed on the device."""

from __future__ import annotations

import contextlib
import io
import math
import sys
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import replace
from numbers import Number
from typing import Any

import numpy as np

from ..backend import Backend
from ..backend.writes import host_changed
from .commit import ShownOnHost, commit, host_form, leave_copy
from .errors import CellError, fail
from .heldreads import read_message
from .heldwrites import by_its_name, stale_message
from .homes import in_device_memory, input_homes
from .inputmoves import check_budget, has_rows, move_inputs
from .inputwrites import InputWatch
from .mainmod import as_main
from .overlap import MAY_HOLD, whole_groups
from .plan import CellPlan
from .reduce import combine
from .report import RunReport
from .staleguard import StaleGuard, guarding

__all__ = ["WARMUP_ELEMENTS", "run_whole", "shown_value", "warmup", "warmup_rows"]

# The --warmup slice: at least this many elements of each cut input (and 2 rows). CuPy compiles
# a reduction for the block size it picks from the reduced length, up to 512 threads once more
# than 1,024 elements are reduced (its CUB path): a 2-element slice compiled other kernels
# than the full run, which then compiled its own inside the timed run (4-5 s each on the H200).
WARMUP_ELEMENTS = 4096


def run_whole(plan: CellPlan, namespace: dict[str, Any], report: RunReport, *,
              to_host: Any, dtype: str | None, warm: bool, recorder: Any,
              filename: str, be: Backend) -> Any:
    """Run the planned cell once over device copies of its inputs; commit if it succeeds.

    Returns
    -------
    Any
        The value of the cell's last expression (``None`` when it ends with a statement):
        the committed value when it is one of the names the cell assigned, otherwise as the
        cell left it, brought to the host under ``to_host=True``.
    """
    __tracebackhide__ = True
    wall0 = time.perf_counter()
    work: dict[str, Any] = {}
    mem = watch = homes = guard = None
    still: frozenset[str] = frozenset()  # inputs left as the user's arrays (InputWatch.unmade)
    try:
        check_budget(plan, dtype, be)
        if warm:
            report.warmup_seconds, report.warmup_rows = warmup(plan, dtype, be, namespace)
        with be.track_memory(filename) as mem:
            report.start_pool_bytes = mem.start_bytes
            moved, report.inputs = move_inputs(plan, dtype, be)
            unseen = plan.unseen if to_host is not False else frozenset()
            homes = input_homes(plan, moved, dtype, be, to_host if to_host is True
                                else set(to_host), unseen) if to_host is not False else None
            watch = InputWatch(plan.inputs, plan.stored, moved, be, plan.only_read,
                               plan.overlaps, plan.may_keep | unseen)
            work = {**namespace, **plan.overrides, **moved}
            copies = {n: weakref.ref(moved[n]) for n in plan.in_place_sure & moved.keys()} \
                if to_host is False else {}
            del moved
            shown = ShownOnHost(to_host, plan.stored, work, namespace, be) \
                if plan.displays and to_host is not False else None
            guard = StaleGuard.of_plan(plan, namespace, work, filename)
            with be.time_device() as timing, recorder, guarding(guard, work):
                value = plan.run(work, namespace, shown)
            seen = plan.stored
            plan = watch.commit_plan(plan)  # inputs changed through other names too
            # `if c: X += 1` or `if c: X = X * 2` that did not run: X's copy is not written
            # back, nor committed where X still holds it (the user's X, as before the cell)
            unmade, still = watch.unmade(work)
            _refuse_kept(plan, still)
            # the copies the run may have changed: the source's own changes in place and
            # those the watch saw; one only read, then rebound (`Xtr = Xtr * 2`, `X = X.T`),
            # is not written over a change made meanwhile through the host (the watch reads
            # its copy, held weakly, as changed once it is gone)
            made = (((seen & (plan.in_place | unseen)) - unmade)
                    | (watch.changed() - ((plan.may_rebind - unseen) & watch.gone())))
            _refuse_both_sides(plan, made)
            for held in plan.held_reads:  # X += 1 then L[0] * 2, where X's copy changed
                if made.intersection(plan.group_of(held.name)):
                    raise CellError(read_message(held, after_run=True))
            report.notes += _let_go(plan.stored & plan.in_place_sure, work, copies)
            if homes is not None:
                homes.settle(plan.stored - seen, made)
            plan = replace(plan, stored=whole_groups(
                plan.stored - still if still else plan.stored, plan.overlaps,
                lambda name: allocation_key(work.get(name), be)))
            still -= plan.stored  # a view into a device array the commit keeps comes along
            watch = None
        report.gpu_seconds = timing.seconds
        report.peak_pool_bytes = mem.peak_bytes
    except BaseException as exc:
        if guard is not None:  # (fit() wrote M = 7, then the cell raised: your M as it was)
            guard.put_back()
        watch = homes = guard = None  # their copies go now: this frame outlives a failed cell
        new = fail(exc, be, mem.peak_bytes if mem is not None else 0, filename,
                   namespace=namespace, batchable=mem is not None and has_rows(plan.inputs),
                   work=work)
        if new is exc:  # the cell's own error: its cause and context as the cell raised it
            raise  # with the traceback fail() gave it
        raise new from None
    bound = [n for n, v in work.items() if v is value] if value is not None else []
    if guard is not None:
        # what the notebook's functions wrote as globals, the commit writes as the cell's own
        # (brought to the host under --to-host, named in the report: `_center = a.mean(axis=0)`
        # of the cell's device X); not an input (the commit keeps one the cell did not bind as
        # it is: what such a function wrote stays, as in a plain cell), nor a name one deleted
        # (put back, it would come after the cell's last name, which the commit keeps)
        guard.put_back([n for n in guard.synced if n not in plan.inputs and n in namespace])
    commit(plan, work, namespace, to_host, be, report, shown, homes)
    leave_copy(work, namespace)
    report.wall_seconds = time.perf_counter() - wall0
    committed = {o.name for o in report.outputs}
    # a name committed first: `Z = X; X = X; Z` shows Z, which the commit keeps
    return shown_value(value, [n for n in bound if n in committed]
                       or [n for n in bound if n in still], namespace, to_host is True, be,
                       None if homes is None else lambda v: homes.host_of(v, plan.stored))


def _refuse_both_sides(plan: CellPlan, changed: set[str] | frozenset[str]) -> None:
    """Refuse, before the commit, a run that changed an input through an object from
    outside that holds it (:attr:`~.plan.CellPlan.held`: the user's array) and also changed
    its device copy, or a copy sharing its memory (``changed``): ``if c: X += 1`` then
    ``L[0][:] = -1``. A plain cell makes both changes in the one array; here one is in the
    user's array and one in the copy, and committing either loses the other. The change
    through the holder stays made (README: a container's change stays, even if the cell
    fails). A change the cell may make and need not (:attr:`~.plan.CellPlan.held_maybe`,
    ``if c: L[0][:] = -1``) counts where the user's array changed in the run."""
    made = []  # of the changes the cell may make (`if c: L[0][:] = -1`), those it made
    for held, mark, stale in plan.held_maybe:
        if (stale or changed.intersection(plan.group_of(held.name))) and \
                host_changed(plan.inputs[held.name], mark):
            if stale:  # then read the name's copy, made before the change
                raise CellError(stale_message(held, after_run=True))
            made.append(held)
    for held in [*plan.held, *made]:
        name = held.name
        hit = sorted(changed.intersection(plan.group_of(name)))
        if hit:
            raise CellError(
                f"the cell changed the input {name!r} (or a view of it) both through "
                f"{held.how} (in the user's array) and in the device copy of {hit[0]!r}: a "
                f"plain cell makes both changes in the one array, %%gpu can keep only one "
                f"(the change through {held.who} stays made in the user's array; the cell is "
                f"not committed); {by_its_name(name)}")


def _refuse_kept(plan: CellPlan, still: frozenset[str]) -> None:
    """Refuse a run that read an input's copy into a rebinding of its name after changing the
    input through an object from outside (:attr:`~.plan.CellPlan.held_kept`): ``L[0][:] =
    -1`` then ``if c: X = X * 2``, where the change was made (sure, or the user's array
    changed in the run) and the rebinding ran (the name no longer holds its copy, ``still``):
    the new ``X`` is the old values doubled, a plain cell's the -1s. Where it did not run,
    ``X`` is the user's array, which has the change."""
    for held, mark in plan.held_kept:
        if held.name not in still and (mark is None
                                       or host_changed(plan.inputs[held.name], mark)):
            raise CellError(stale_message(held, after_run=True))


def _let_go(changed: set[str], work: dict[str, Any],
            copies: dict[str, weakref.ref]) -> list[str]:
    """Notes for a device run (``copies``: the inputs' device copies, weakly): an input the
    cell surely changed in place (a top-level statement) and then rebound or deleted (``X -=
    1; X = 0``; not ``if c: X += 1``, whose copy no watch follows). The change was
    in its device copy, which a device run does not write into the user's array (README),
    and the name no longer holds it: a plain cell's change is in the user's array."""
    notes = []
    for name in sorted(changed & copies.keys()):
        copy = copies[name]()
        if copy is not None and name in work and work[name] is copy:
            continue  # X -= 1: X is the changed copy
        how = "rebound" if name in work else "deleted"
        notes.append(f"{name!r} was changed in place before the cell {how} it: without "
                     "--to-host the change reached only its device copy, not the user's "
                     "array (a plain cell changes the user's array, which earlier views and "
                     "lists holding it show); run with --to-host to have it written there")
    return notes


def allocation_key(value: Any, be: Backend) -> int | None:
    """The device allocation ``value`` lies in (:meth:`~cupy_magic.backend.Backend.
    allocation`; the CPU fallback's copies are NumPy arrays), for
    :func:`~.overlap.whole_groups`: ``None`` where it holds none (a number, a host array on a
    GPU, an array of references on the CPU fallback, which no copy is), ``MAY_HOLD`` where
    it may hold a view of any (a list, an object)."""
    if in_device_memory(value, be):
        return be.allocation(value)[0]
    if value is None or isinstance(value, (np.ndarray, np.generic, Number, str, bytes)):
        return None
    return MAY_HOLD


def shown_value(value: Any, names: list[str], namespace: dict[str, Any], to_host: bool,
                be: Backend, home: Callable[[Any], Any] | None = None) -> Any:
    """The last expression's value as the user namespace now holds it.

    A value bound to a committed name, or to an input the cell left as the user's array
    (``if c: X = X * 2`` that did not run), is what the name now holds (so ``_`` and the name
    agree); under ``to_host`` a device array is brought to the host, and a 0-d array becomes
    the NumPy scalar a NumPy cell shows (``np.int64(45)``), and an input's copy or a view of
    it the user's array or a view of it (``home``: :meth:`~.homes.Homes.host_of`).
    """
    for name in names:
        if name in namespace:
            return namespace[name]
    if to_host and home is not None and (found := home(value)) is not None:
        return found  # an input's copy (a read input shown last: `Xtr`): the user's array
    if to_host and be.is_device_array(value):
        return host_form(value, be)
    return value


def warmup_rows(cut: list[np.ndarray]) -> int:
    """Rows of the ``--warmup`` slice of ``cut`` (arrays of one leading length): 2, or enough
    for :data:`WARMUP_ELEMENTS` elements of each, so that CuPy compiles the kernels the
    full-size run uses; all rows if there are fewer."""
    if not cut:
        return 0
    per_row = min(max(1, math.prod(a.shape[1:])) for a in cut)
    return min(cut[0].shape[0], max(2, -(-WARMUP_ELEMENTS // per_row)))


def _longest(plan: CellPlan) -> set[str]:
    """The inputs batching would cut: those with the largest leading length. Smaller ones,
    such as weights, keep their shape so that the cell's shapes still agree."""
    longest = max((a.shape[0] for a in plan.inputs.values() if a.ndim), default=0)
    return {n for n, a in plan.inputs.items() if a.ndim and a.shape[0] == longest}


def warmup(plan: CellPlan, dtype: str | None, be: Backend, namespace: dict[str, Any],
           cut: set[str] | None = None,
           reduce: dict[str, str] | None = None) -> tuple[float, int]:
    """Run the cell once on the first rows of the inputs it would cut, commit nothing, and
    apply the ``reduce`` rules to its results once (their kernels compile too).

    What it prints (``sys.stdout``, ``sys.stderr``, the cell's own warnings) is dropped, so
    that the cell's output shows once, from the real run; when it fails, it is shown before
    the error. A warning from elsewhere (a library's) is shown: its module noted it as shown
    once, so the real run would not show it again. What
    it does to objects outside the cell (a list it appends to, a file it writes) stays done:
    it happens twice.

    Returns
    -------
    tuple
        The seconds it took and its rows.
    """
    __tracebackhide__ = True
    cut = _longest(plan) if cut is None else cut
    rows = warmup_rows([plan.inputs[n] for n in sorted(cut)])
    slim = plan.with_inputs({n: (a[:rows] if n in cut else a) for n, a in plan.inputs.items()})
    t0 = time.perf_counter()
    scratch: dict[str, Any] = {}
    held: _Held | None = None
    try:
        moved, _ = move_inputs(slim, dtype, be)
        scratch = {**namespace, **plan.overrides, **moved}
        # pickle finds what the cell defines, as in the run; what it prints is held; the
        # calls of earlier cells' functions are guarded as in the run, and the globals they
        # write on the slice are put back after it (`_mu = a.mean()`, which the run reads)
        guard = StaleGuard.of_plan(plan, namespace, scratch, plan.code.co_filename)
        with as_main(scratch, namespace), _held_output() as held, \
                guarding(guard, scratch, undo=True):
            exec(plan.code, scratch)
        for name, rule in (reduce or {}).items():
            if name in scratch:
                combine(rule, [(scratch[name], rows), (scratch[name], rows)], be.xp)
        be.synchronize()
    except Exception as exc:
        if held is not None:
            held.show()
        what = f"the first {rows:,} rows of {', '.join(sorted(cut))}" if rows else "the cell"
        raise CellError(
            f"the --warmup run on {what} failed with "
            f"{type(exc).__name__}: {exc}; run without --warmup, or make the cell work on "
            "any number of rows"
        ) from exc
    except BaseException:  # Ctrl-C in the warm-up: what it printed so far is shown too
        if held is not None:
            held.show()
        raise
    finally:
        scratch.clear()
    held.show(but=plan.code.co_filename)
    return time.perf_counter() - t0, rows


class _Held:
    """What a block printed (``sys.stdout``, ``sys.stderr``) and the warnings it showed."""

    def __init__(self) -> None:
        self.out, self.err = io.StringIO(), io.StringIO()
        self.warned: list[tuple[Any, ...]] = []  # showwarning's arguments, in order

    def show(self, but: str | None = None) -> None:
        """Write it to the streams it was meant for; with ``but``, only the warnings raised
        from elsewhere than that file."""
        if but is None:
            sys.stdout.write(self.out.getvalue())
            sys.stderr.write(self.err.getvalue())
        for message, category, filename, lineno, line in self.warned:
            if filename != but:
                warnings.showwarning(message, category, filename, lineno, line=line)


@contextlib.contextmanager
def _held_output() -> Iterator[_Held]:
    """``sys.stdout``, ``sys.stderr`` and the warnings shown (``warnings.showwarning``) held
    while the block runs; the warning filters are left as they are."""
    held, previous = _Held(), warnings.showwarning

    def hold(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        held.warned.append((message, category, filename, lineno, line))

    warnings.showwarning = hold
    try:
        with contextlib.redirect_stdout(held.out), contextlib.redirect_stderr(held.err):
            yield held
    finally:
        if warnings.showwarning is hold:
            warnings.showwarning = previous
