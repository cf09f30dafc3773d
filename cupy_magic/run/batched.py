"""The streamed batch executor: a ``%%gpu`` cell run batch by batch over the leading axis.

Batch ``i`` goes to slot ``i % K`` (a CUDA stream each; the host waits for one only to reuse
it): rows uploaded, the cell run on its stream, row results copied into full-length host
arrays, ``--reduce`` partials into a host row per batch (:class:`~.batchjoin.BatchJoin`). The
small first batch measures pool bytes per row (:mod:`~.batching` sizes the rest); nothing is
committed unless every batch succeeds.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ..backend import Backend
from ..backend.compiles import timed
from ..backend.streams import make_engine
from . import progress
from .batching import (
    BatchCost,
    BatchOptions,
    BatchPlan,
    budget_to_pay,
    probe_held_small,
    probe_rows,
    size_rows,
)
from .batchjoin import BatchJoin
from .batchwatch import BatchWatch
from .commit import commit
from .echo import BatchEcho
from .errors import CellError, fail, frames_freed, unawaited_quiet
from .firstbatch import measure_first
from .gathered import rows_on_host
from .graphs import GraphReplay, graph_replay
from .inflight import fit_in_flight
from .inputmoves import inputs_need, move_inputs, streamed_rows
from .inputwrites import InputWatch
from .mainmod import as_main
from .plan import CellPlan, cast_target
from .reduce import check_names
from .report import RunReport
from .staleguard import StaleGuard, guarding

__all__ = ["BatchRun", "run_batched"]


def _row_len(arr: np.ndarray) -> int:
    return int(np.prod(arr.shape[1:], dtype=np.int64))


def _empty_output(shape: tuple[int, ...], dtype: np.dtype,
                  empty: Callable[..., np.ndarray] = np.empty) -> np.ndarray:
    """A full-length host array for a gathered result, from the engine's ``empty`` (tests
    replace this function to poison the array, so an unwritten row shows)."""
    return empty(shape, dtype)


class BatchRun(BatchJoin):
    """The state of one batched run: inputs, slots, gathered rows, partial results (joined
    as :class:`~.batchjoin.BatchJoin` says)."""

    fits_in_flight = True  # batches in flight fitted to a full batch's need (run.inflight)

    def __init__(self, plan: CellPlan, namespace: dict[str, Any], opts: BatchOptions,
                 names: list[str], total: int, dtype: str | None, be: Backend,
                 filename: str) -> None:
        self.plan, self.namespace, self.opts, self.be = plan, namespace, opts, be
        self.filename, self.dtype, self.total = filename, dtype, total
        self.inputs = {n: plan.inputs[n] for n in names}
        self.dtypes = {n: cast_target(a, dtype) for n, a in self.inputs.items()}
        self.row_bytes = sum(_row_len(a) * self.dtypes[n].itemsize
                             for n, a in self.inputs.items())
        self.fixed = opts.fixed_rows(self.row_bytes)  # refused here if under one row
        self.eng = self.engine()
        self.in_flight, self.batch_fixed, self.resized = self.eng.slots, 0, ""  # run.inflight
        self.clock = [("", time.perf_counter())]  # (phase that ended, when)
        self.base: dict[str, Any] = {}
        self.guard: StaleGuard | None = None  # its batches' calls of earlier cells' functions
        self.specs: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        self.out: dict[str, np.ndarray] = {}
        self.written: dict[str, int] = {}
        self.constants: dict[str, tuple[Any, int]] = {}  # Python values: (value, first batch)
        self.partials: dict[str, list[tuple[Any, int]]] = {}
        self.partial_rows: dict[str, np.ndarray] = {}  # --reduce partials: a row per batch
        self.first_slot = 0
        self.last_work: dict[str, Any] = {}
        self.first: list[tuple[str, Any]] = []
        # inputs the cell may rebind and never changes in place through its name
        # (`if c: X = X * 2`, `X = np.asarray(X)`): those the batches leave as they got them
        # stay the user's arrays (BatchJoin.collect); one the source may change through
        # another name (plan.unseen) is watched in the first batch, and gathered if changed
        self.may_leave = plan.may_rebind
        self.left: set[str] = set()
        self.touched: set[str] = set()
        # an input it may change in place and need not (`if c: X += 1`): gathered, and
        # watched in every batch; the user's array where no batch changed or rebound it
        self.maybe_in_place = plan.in_place & plan.may_keep
        self.moved_in_place: set[str] = set()
        # the batched inputs each batch left as its copy of their rows (`X += 1`, `X[0] = 5`,
        # a function that changes it): written into the user's arrays at the commit
        self.changeable = [n for n in self.inputs if n in plan.stored]  # those it may
        self.uploads: dict[str, Any] = {}  # this batch's copies of them, weakly
        self.in_place_rows: set[str] = set()
        self.current, self.n_batches, self.peak = (0, 0, 0), 0, be.pool_used()
        self.sized_for = 0  # the batches in flight the resized batches were sized for
        self.cost: BatchCost | None = None  # measured on the first batch
        self.replay: GraphReplay | None = None  # CUDA graphs of the full batches (rest)
        self.echo = BatchEcho()  # what the batches print: shown once
        self.later = BatchWatch.of(be, plan, self.inputs, "a batched run")  # (`f(x)`)

    # --- what a run over several devices changes (cupy_magic.run.devices) ----------------
    def engine(self) -> Any:
        return make_engine(self.be, self.opts.streams, _empty_output, self.opts.timeline)

    def slot_for(self, i: int, a: int, b: int) -> int:
        """The slot batch ``i`` (rows ``a:b``) runs on: the slots in turn (those in flight)."""
        return i % self.in_flight

    def budget_left(self) -> int | None:
        return self.be.budget_left()

    def tracked(self) -> Any:
        """Follow the pool's peak (and enforce the budget) over a stretch of batches."""
        return self.be.track_memory(self.filename)

    # --- one batch ----------------------------------------------------------------------
    def batch(self, i: int, a: int, b: int) -> None:
        __tracebackhide__ = True
        self.current = (i, a, b)
        slot = self.slot_for(i, a, b)
        if i == 0:
            self.first_slot = slot  # the measuring batch's (another device's if measured again)
        self.waited(slot)
        self.eng.start(slot)
        work = dict(self.base)
        t0 = time.perf_counter()
        with self.eng.on(slot), timed() as built:
            for name, arr in self.inputs.items():
                work[name] = self.eng.upload(slot, name, arr, a, b, self.dtypes[name])
            if i == 0:  # the first batch measures its upload apart from the rest (issue 20)
                self.eng.record(slot)
                self.eng.wait(slot)
            watch = self.watch_first(work) if i == 0 else None
            later = self.later.start(self.at(), work, self.left)
            given, watched, token = self.given(i, work)
            self.uploads = {n: weakref.ref(work[n]) for n in self.changeable}
            t1 = time.perf_counter()
            try:
                with as_main(work, self.namespace, self.plan.stored), self.echo.batch(), \
                        guarding(self.guard, work):  # (as_main: pickle finds its defs)
                    exec(self.plan.code, work)
                if watch is not None:
                    watch.refuse_unseen("a batched run")
                    watch = None
            except BaseException:  # the cell frame's globals: emptied, the arrays freed
                watch = None  # (and the copies it watched)
                if frames_freed():  # (unless %pdb on: its post-mortem reads them)
                    with unawaited_quiet():
                        work.clear()
                raise
            self.refuse_later(self.later.end(slot, later))
            later = None  # the copies it held: freed with the rows below
            if watched:
                self.take_watch(watched, token, given, work)
            self.collect(i, a, b, slot, work, given)
        if i == 0:
            self.cost = BatchCost(max(0.0, time.perf_counter() - t1 - built.seconds), t1 - t0,
                                  (b - a) * self.row_bytes, host=not self.be.is_gpu)
        self.eng.record(slot)

    def waited(self, slot: int) -> None:
        """Wait for the slot's last batch, and refuse a change it made unseen (BatchWatch)."""
        self.eng.wait(slot)
        self.refuse_later(self.later.check(slot))

    def at(self) -> tuple[tuple[int, int, int], Any]:
        return self.current, getattr(self, "device", None)  # (a run over several devices')

    def refuse_later(self, found: tuple[Any, str] | None) -> None:
        if found is not None:  # the failure names the batch (and device) that changed it
            self.current, self.device = found[0] or self.at()
            raise CellError(found[1])

    def given(self, i: int, work: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any],
                                                             Any]:
        """Weak references to batch ``i``'s copies of the inputs it may leave as they were
        (a batch that rebinds one frees its copy, as a whole run does); and one watch (the
        backend's fingerprints, weakly) of those the source may change through another name
        (in the first batch) and of those it may change in place (in every batch, until one
        did): their weak references, and the watch's token."""
        given = {n: weakref.ref(work[n]) for n in self.may_leave - self.touched if n in work}
        watched = {n: given[n] for n in given if n in self.plan.unseen} if i == 0 else {}
        watched |= {n: weakref.ref(work[n]) for n in self.maybe_in_place - self.moved_in_place
                    if n in work}
        return given, watched, self.be.watch([r() for r in watched.values()],
                                             [True] * len(watched)) if watched else None

    def take_watch(self, watched: dict[str, Any], token: Any, given: dict[str, Any],
                   work: dict[str, Any]) -> None:
        """What the watch of :meth:`given` saw after the batch: an input changed through
        another name is gathered from then on; one the cell may change in place counts as
        moved where the batch changed or rebound it (its copy gone, or not the name's)."""
        for (name, ref), changed in zip(watched.items(), self.be.changed(token), strict=True):
            if name in self.maybe_in_place:
                if changed or ref() is None or work.get(name) is not ref():
                    self.moved_in_place.add(name)
            elif changed and ref() is not None:
                self.touched.add(name)
                del given[name]

    def watch_first(self, work: dict[str, Any]) -> InputWatch:
        """Watch the first batch's rows of the batched inputs and the shared inputs' copies,
        which the source does not show changing (see :meth:`InputWatch.refuse_unseen`)."""
        names = [*self.inputs, *(n for n in self.plan.inputs if n not in self.inputs)]
        return InputWatch(self.plan.inputs, self.plan.stored, {n: work[n] for n in names},
                          self.be, self.plan.only_read)

    # --- the whole run ------------------------------------------------------------------
    def execute(self, report: RunReport, reason: str) -> tuple[dict[str, Any], BatchPlan]:
        """Run every batch; return the results to commit and the plan followed."""
        __tracebackhide__ = True
        shared = self.upload_shared(report)
        with timed() as building:  # kernels CuPy compiles between the batches' launches
            first, peak_row = self.first_batch(shared)
            free = self.budget_left()
            rows, sized_by = size_rows(self.total, self.row_bytes, peak_row, free,
                                       self.opts.streams, self.opts, self.cost)
            bounds = [(a, min(a + rows, self.total)) for a in range(first, self.total, rows)]
            self.n_batches = 1 + len(bounds)
            self.rows_for_partials(self.n_batches)
            rows = self.rest(first, rows, peak_row, bounds)
            bp = BatchPlan(tuple(self.inputs), tuple(shared), self.total, self.row_bytes,
                           self.opts.streams, reason, first, rows if bounds else first,
                           self.n_batches, peak_row, self.resized or sized_by, tuple(self.specs),
                           dict(self.opts.reduce), cost=self.cost, batch_fixed=self.batch_fixed,
                           sized_for=self.sized_for)
            whole = None if self.opts.forced else (  # (batched anyway: no budget holds it)
                report.start_pool_bytes + inputs_need(self.plan, self.dtype))
            if self.cost is not None and self.opts.rows is None and self.opts.nbytes is None:
                bp.full_speed = budget_to_pay(rows, self.total - first, self.row_bytes, peak_row,
                                              self.opts.streams, self.cost, free, self.be.limit,
                                              whole, self.batch_fixed)
        # from the first batch to the drain, less the host's compiling (the report says so)
        seconds = max(0.0, self.clock[-1][1] - self.clock[1][1] - building.seconds)
        final = self.results()
        bp.staged_batches, bp.staged = self.eng.staged_batches, dict(self.eng.staged_why)
        bp.in_flight = self.in_flight if self.fits_in_flight else 0  # (devices: their streams)
        bp.timeline = tuple(self.eng.timeline())
        bp.graph = self.replay.record if self.replay is not None else None
        report.inputs += streamed_rows(self.inputs, self.dtypes, self.eng.direct, seconds)
        report.gpu_seconds = seconds
        return final, bp

    def upload_shared(self, report: RunReport) -> dict[str, np.ndarray]:
        """Upload the inputs every batch shares, once; finish page-locking the batched ones."""
        shared = {n: a for n, a in self.plan.inputs.items() if n not in self.inputs}
        moved, report.inputs = move_inputs(self.plan.with_inputs(shared), self.dtype, self.be)
        self.base = {**self.namespace, **self.plan.overrides, **moved}
        self.guard = StaleGuard.of_plan(self.plan, self.namespace, self.base, self.filename)
        for arr in self.inputs.values():
            self.eng.finish_locking(arr)  # one a previous run started
        return shared

    def first_batch(self, shared: dict[str, np.ndarray]) -> tuple[int, float]:
        """Run the small first batch, measure its pool bytes per row, allocate the outputs."""
        __tracebackhide__ = True
        eng = self.eng
        avoid = {d for a in self.plan.inputs.values() for d in a.shape[1:]}
        avoid |= {a.shape[0] for a in shared.values() if a.ndim}
        free = self.budget_left()
        first = probe_rows(self.total, self.row_bytes, avoid, self.fixed, free)
        self.tick("setup")
        first, mem = measure_first(self, first, avoid, free)  # again smaller if over budget
        if self.cost and probe_held_small(first, self.total, self.row_bytes, self.fixed, free):
            self.cost = self.cost.with_large_rate(self.be.upload_rate())  # a batch too small
        peak_row = max(0, mem.peak_bytes - mem.start_bytes) / first
        self.peak = max(self.peak, mem.peak_bytes)
        slot = self.first_slot
        with eng.on(slot):
            for name, value in self.first:
                self.out[name] = eng.allocate((self.total, *self.specs[name][0]),
                                              self.specs[name][1])
                eng.download(slot, name, value, self.out[name], 0, first)
        self.first.clear()
        eng.record(slot)
        return first, peak_row

    def rest(self, first: int, rows: int, peak_row: float, bounds: list[tuple[int, int]]) -> int:
        """Warm the streams and buffers, run the other batches, drain: a full batch's rows."""
        __tracebackhide__ = True
        running = progress.current()
        progress.start(running.cell_label if running else self.filename, self.n_batches,
                       self.total * self.row_bytes)
        progress.step(1, first * self.row_bytes)
        buffers = {f"in:{n}": (a, self.dtypes[n].itemsize * _row_len(a), self.dtypes[n])
                   for n, a in self.inputs.items()}
        buffers.update({f"out:{n}": (a, a.itemsize * _row_len(a), a.dtype)
                        for n, a in self.out.items()})
        self.tick("first batch")
        done, rows, bounds = fit_in_flight(self, first, rows, peak_row, bounds, size_rows(
            self.total, self.row_bytes, peak_row, None, 1, self.opts, self.cost)[0])  # alone
        if done:  # (under a budget)
            self.tick("full batch")
        self.eng.warm(rows, peak_row + self.batch_fixed / rows, buffers,  # (slot 0's arena:
                      range(1, self.in_flight) if done else None)  # as those batches left it)
        self.tick("warm-up")
        replay = self.replay = graph_replay(self, rows, bounds)
        with self.tracked() as mem:
            for i, (a, b) in enumerate(bounds, start=1 + done):
                if not replay.batch(i, a, b):  # a full batch its slot's graph replays
                    self.batch(i, a, b)
                progress.step(1, (b - a) * self.row_bytes)
            self.eng.drain()
            self.refuse_later(self.later.check())
        replay.finish()
        self.tick("batches")
        self.peak = max(self.peak, mem.peak_bytes)
        return rows

    def tick(self, phase: str) -> None:
        """Note the end of a phase of the run (BatchPlan.phases; a report line with --timeline)."""
        self.clock.append((phase, time.perf_counter()))

    def phases(self) -> dict[str, float]:
        """Host seconds of each phase noted with :meth:`tick`."""
        return {name: t - self.clock[k][1] for k, (name, t) in enumerate(self.clock[1:])}

    def settle(self) -> None:
        """Start page-locking the inputs and the fresh result blocks for the next cell over
        them, as the run's very last step: a ``cudaHostRegister`` on another thread seems to
        hold up this thread's CUDA calls (0.4 s for 8 GiB on the H200; staged copies slowed
        from 26.5 to 20.7 GB/s), so nothing of the run calls CUDA after it."""
        for name, arr in self.inputs.items():
            self.eng.settle(arr, self.dtypes[name])
        for arr in self.out.values():
            self.eng.settle(arr, arr.dtype)

    def where(self, exc: BaseException) -> str:
        i, a, b = self.current
        of = f" of {self.n_batches}" if self.n_batches else ""
        then = "; streams drained, buffers released, nothing committed"
        if isinstance(exc, KeyboardInterrupt):
            return f"interrupted after batch {i + 1}{of} (rows up to {b:,}){then}"
        return f"batch {i + 1}{of} (rows {a:,}:{b:,}) failed{then}"

    def abort(self) -> None:
        self.eng.drain(quiet=True)
        self.first.clear()
        graphs = self.replay.graphs if self.replay is not None else {}
        for table in (graphs, self.partials, self.partial_rows, self.out, self.last_work,
                      self.base, self.later):
            table.clear()  # the graphs first, then the buffers they write (and the watch's)


def run_batched(plan: CellPlan, namespace: dict[str, Any], opts: BatchOptions,
                cut: tuple[list[str], int], reason: str, report: RunReport, *, to_host: Any,
                dtype: str | None, filename: str, be: Backend,
                make: Callable[..., BatchRun] | None = None) -> None:
    """Run a planned cell batch by batch (:func:`~.inputmoves.batch_reason` gave a reason); commit
    its results only if every batch succeeds. ``cut``: the inputs to cut and their length,
    as :func:`~.batching.select_inputs` chose them. Fills ``report`` (its ``batch``: the
    :class:`~.batching.BatchPlan` followed); ``make`` builds the run (over several devices)."""
    __tracebackhide__ = True
    names, total = cut
    if total == 0:
        raise CellError(f"the batched inputs {', '.join(names)} have 0 rows; nothing to batch, "
                        "remove --batch")
    check_names(opts.reduce, plan.stored)
    report.start_pool_bytes = be.pool_used()
    wall0 = time.perf_counter()
    run = (make or BatchRun)(plan, namespace, opts, names, total, dtype, be, filename)
    if progress.current() is None:
        progress.start(filename, 0)
    try:
        final, bp = run.execute(report, reason)
        bp.in_place = tuple(run.write_in_place(final))  # the last step that may fail
    except BaseException as exc:
        run.abort()
        new = fail(exc, be, run.peak, filename, run.where(exc), namespace=namespace)
        if new is exc:  # the cell's own error: its cause and context as the cell raised it
            raise  # with the traceback fail() gave it
        raise new from None
    finally:
        progress.finish()
        run.eng.close()
    report.peak_pool_bytes, report.batch_runs = run.peak, run.echo.runs
    report.notes += [run.echo.note()] if run.echo.dropped else []
    commit(plan, final, namespace, to_host, be, report)
    rows_on_host(bp, namespace, report, be)
    report.batch = bp
    report.wall_seconds = time.perf_counter() - wall0
    run.tick("finish")
    bp.phases = run.phases()
    run.settle()

