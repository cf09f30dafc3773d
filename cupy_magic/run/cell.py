"""Run one cell on the live backend, as a transaction.

The cell runs in a shallow copy of the user namespace in which every name bound to the
NumPy module means the backend's array module (CuPy on a GPU) and every NumPy array the cell
reads is replaced by a device copy. Only when the cell succeeds are the names it bound
written back; when it fails, the copy is dropped, so the user's variables and the pool are
as they were. This module decides how the cell runs (whole or in batches) and attaches the
host-sync findings; :mod:`~cupy_magic.run.whole` and :mod:`~cupy_magic.run.batched` run it.
"""

from __future__ import annotations

import ast
import builtins
import codeop
import contextlib
import dataclasses
import itertools
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .. import backend as _backend
from ..backend import Backend
from ..backend.writes import host_mark
from ..syncs.lint import SyncFinding, lint_cell
from ..syncs.record import HostSyncError, SyncRecorder, merge
from .batched import run_batched
from .batching import BatchOptions, check_rows, relied_on, select_inputs
from .compiled import Transform
from .devices import device_run, devices_reason, for_devices, resolve_devices
from .echo import effect_note
from .errors import CellError, at_cell_line
from .graphscan import WRITES_FILE, outside_effect
from .graphscan import refusal as graph_refusal
from .heldreads import held_reads, read_message
from .heldwrites import (
    by_its_name,
    held_changes,
    held_sure,
    holder_changed,
    rebound_after,
    stale_message,
    stale_read,
)
from .homes import view_kinds
from .inputmoves import batch_reason, check_budget
from .lines import LineRecord
from .names import cell_names
from .options import SYNC_MODES
from .overlap import refuse_overlaps
from .plan import CellPlan, plan_cell, register_source
from .report import RunReport
from .sizes import check_sizes
from .whole import run_whole, warmup

__all__ = ["SYNC_MODES", "CellOutcome", "run_cell"]

_counter = itertools.count(1)


@dataclass(frozen=True)
class CellOutcome:
    """What a cell gave: its report, and the value of its last expression.

    Attributes
    ----------
    report
        What moved, how long the device worked, peak pool bytes, what was committed.
    value
        The value of the cell's last expression statement, as a plain cell would show it
        (``None`` when the cell ends with a statement, or ran in batches).
    """

    report: RunReport
    value: Any = None


def run_cell(
    source: str,
    namespace: dict[str, Any],
    *,
    to_host: bool | Iterable[str] = False,
    dtype: str | None = None,
    warmup_run: bool = False,
    syncs: str = "warn",
    filename: str | None = None,
    batch: BatchOptions | None = None,
    fallback: bool = False,
    lines: bool = False,
    nvtx: bool = False,
    label: str = "",
    remote: Any = None,
    devices: Any = None,
    compiler: codeop.Compile | None = None,
    shows: str = "last_expr",
    transform: Transform | None = None,
) -> CellOutcome:
    """Run ``source`` on the live backend against ``namespace``, as a transaction.

    The engine under :func:`cupy_magic.run_cell`, which documents the parameters (there
    ``warmup_run`` is ``warmup``); this one records no report and drives no progress, and
    also returns the value of the cell's last expression (:class:`CellOutcome`).

    ``devices``: the devices to deal the cell's batches over (``"all"``, ``"0,1"``, ``[0, 1]``;
    :mod:`cupy_magic.run.devices`); the cell is then batched.

    ``compiler``: what compiles the cell, under its ``from __future__`` flags; it keeps the
    cell's own for later cells (:func:`~cupy_magic.run.plan.plan_cell`). ``None``: a fresh
    one, so the cell inherits no flags.

    ``transform``: what the parsed cell goes through before it is compiled (IPython's
    ``shell.transform_ast``); a cluster's workers run the cell as written (a note says so).

    ``remote``: an executor of a layer above (the cluster's,
    :class:`cupy_magic.cluster.execute.ClusterExecutor`) that runs the planned cell instead
    of the whole or batched run, after the static sync check; its ``names`` are the inputs
    it distributes, which that check treats as device arrays.

    Raises
    ------
    CellError
        For inputs CuPy cannot hold or options that do not fit the cell.
    BudgetExceeded
        When the inputs or the cell's allocations do not fit the VRAM budget.
    BaseException
        Whatever the cell raised, with a traceback that starts at the cell's own lines.
    """
    __tracebackhide__ = True
    be = _backend.current()
    filename = filename or f"<gpu-cell-{next(_counter)}>"
    register_source(source, filename)
    chosen = None if devices is None else resolve_devices(devices, be)
    if chosen is not None:
        batch = for_devices(devices, batch, remote, lines)
    plan = plan_cell(source, namespace, filename, to_host, dtype, be, fallback=fallback,
                     compiler=compiler, shows=shows, transform=transform)
    findings = _lint(source, plan, namespace, syncs, be, filename,
                     getattr(remote, "names", ()))
    if remote is not None:  # a cluster runs the blocks; nothing was sent before the check
        refuse_overlaps(list(plan.overlaps), plan.only_read, "a cluster run", plan.inputs)
        outcome = _run_remote(remote, plan, namespace, findings, be, to_host=to_host,
                              dtype=dtype, filename=filename, syncs=syncs,
                              unsupported=_not_on_clusters(warmup_run, lines, nvtx, batch))
        outcome.report.notes += _last_not_shown(source, plan, namespace, "cluster", "block")
        if transform is not None:
            outcome.report.notes.append("the workers ran the cell as written: the shell's AST "
                                        "transformers (ast_transformers) are not applied there")
        return outcome
    return _run_here(source, plan, namespace, findings, be, to_host=to_host, dtype=dtype,
                     warmup_run=warmup_run, syncs=syncs, filename=filename, batch=batch,
                     lines=lines, nvtx=nvtx, label=label, devices=chosen)


def _run_here(source: str, plan: CellPlan, namespace: dict[str, Any],
              findings: list[SyncFinding], be: Backend, *, to_host: Any, dtype: str | None,
              warmup_run: bool, syncs: str, filename: str, batch: BatchOptions | None,
              lines: bool, nvtx: bool, label: str,
              devices: tuple[int, ...] | None = None) -> CellOutcome:
    """Run the planned cell in this kernel: whole, or in batches when its inputs do not fit."""
    __tracebackhide__ = True
    recorder = _recorder(be, filename, source, syncs)
    liner = _line_record(be, plan, filename, source, lines, nvtx, label)
    watch = _both(recorder, liner)
    reason = batch_reason(plan, batch, be, dtype)
    if devices is not None:
        reason = devices_reason(plan.inputs, devices, batch_reason(plan, None, be, dtype))
    opts, cut, total = batch or BatchOptions(), [], 0
    if reason:  # the promise batching relies on, checked before anything moves
        if devices is None and not opts.requested and plan.changed_overlaps:
            check_budget(plan, dtype, be)  # not batchable: refused as a whole cell is
        refuse_overlaps(list(plan.overlaps), plan.only_read, "a run over several devices"
                        if devices is not None else "a batched run", plan.inputs)
        cut, total = select_inputs(plan.inputs, opts)
        check = check_rows(source, plan.inputs, cut, namespace, plan.module_names, reason,
                           asked=devices is not None or (batch is not None and batch.requested),
                           rules=opts.reduce)
        plan = dataclasses.replace(plan, over_rows=check.over_rows, row_free=check.row_free,
                                   graph_refusal=graph_refusal(
                                       source, namespace, plan.module_names, found=check.found,
                                       syncs=findings, traced=lines or nvtx,
                                       timeline=opts.timeline, devices=devices is not None,
                                       is_device=be.is_device_array, reduce=opts.reduce)
                                   if be.is_gpu else None)
        effect = outside_effect(source, namespace, plan.module_names, be.is_device_array)
        held = holder_changed(source, namespace, {n: plan.inputs[n] for n in cut})
        if held:  # L[0][:] = -1 with L[0] the user's X, or f() writing X: later batches' rows
            raise CellError(
                f"the cell changes the batched input {held.name!r} (or a view of it) in place "
                f"through {held.how}: a batched run uploads {held.name}'s rows as the batches "
                f"go, so the change would reach the later batches' rows only; "
                f"{by_its_name(held.name)}, or run the cell whole (no --batch, a larger budget)")
        if WRITES_FILE in effect:  # each batch's rows over the last's: wrong for certain
            raise CellError(f"the cell {effect}, which a batched run would do once per batch, "
                            "each batch writing its own rows over the last's; write the "
                            "gathered result in a cell of its own after this one, or run "
                            "this one whole (a larger budget, no --batch)")
    changes = () if reason else held_changes(source, namespace, plan.inputs)
    sure = held_sure(source, changes) if changes else ()
    # a name the cell stores is left to the run where it may change it in place (the
    # both-sides refusal) or may leave it holding its copy (the watch: `if c: X = X * 2`);
    # one it surely rebinds to new memory after reading it (`L[0][:] = -1; X = X * 2`)
    # read the old copy: refused here where the change is sure, after the run where made
    left = plan.stored & (plan.in_place | plan.may_keep)
    views = view_kinds(plan, dtype) if changes and to_host is not False else {}
    rebinds = {hit for hit in changes  # read, then rebound to new memory
               if stale_read(source, [hit], left, plan.in_place_sure, views, fresh=True)}
    stale = (stale_read(source, changes, plan.stored, plan.in_place_sure, views)
             or next((hit for hit in sure if hit in rebinds), None)) if changes else None
    if stale:  # L[0][:] = -1; y = x + 0 with L = [x]: x in the cell is the copy from before
        raise CellError(stale_message(stale))
    if changes:  # those under an `if` or in a loop count where the user's array changed in
        # the run (whole.py): a stale read is refused then, as is a change on both sides,
        # and a read into a rebinding that may not run (`if c: X = X * 2`) where it ran
        marks = {hit: host_mark(plan.inputs[hit.name]) for hit in changes if hit not in sure}
        kept = [hit for hit in changes if hit not in rebinds and hit.name in left
                and rebound_after(source, hit)
                and stale_read(source, [hit], left - {hit.name}, (), views, fresh=True)]
        plan = dataclasses.replace(
            plan, held=sure, held_maybe=tuple((hit, marks[hit], hit in rebinds) for hit in marks),
            held_kept=tuple((hit, marks.get(hit)) for hit in kept))
    reads = held_reads(source, namespace, plan.inputs)  # X += 1, then L[0] * 2
    first = next((held for held, sure in reads if sure or reason), None)
    if first:  # L's item is the user's array, which the change of X's copy does not reach
        raise CellError(read_message(first))
    plan = dataclasses.replace(plan, held_reads=tuple(h for h, _ in reads)) if reads else plan
    check_sizes(plan.inputs, dtype, be, batched=bool(reason))
    report = RunReport(backend=be.name, device=be.info().name, budget_bytes=be.limit)
    value = None
    with be.watch_compiles(filename) as report.compiles:  # kernels CuPy builds, per line
        if reason:
            _run_batched(plan, namespace, report, opts, (cut, total), reason, watch,
                         to_host=to_host, dtype=dtype, warm=warmup_run, filename=filename,
                         be=be, make=None if devices is None else device_run(devices))
            report.notes += _last_not_shown(source, plan, namespace, "batched", "batch")
            report.notes += relied_on(check, "--batch" if devices is None else "--devices")
            if report.batch is not None and effect_note(effect, report):
                report.notes.append(effect_note(effect, report))
        else:
            if batch is not None and batch.batch_only():
                report.notes.append(f"{' '.join(batch.batch_only())}: for batched runs only, and "
                                    "this cell ran whole (its inputs fit the budget); add --batch "
                                    "to batch it")
            value = run_whole(plan, namespace, report, to_host=to_host, dtype=dtype,
                              warm=warmup_run, recorder=watch, filename=filename, be=be)
    _attach_records(report, plan, syncs, findings, recorder, liner)
    return CellOutcome(report, value)


def _run_batched(plan: CellPlan, namespace: dict[str, Any], report: RunReport,
                 opts: BatchOptions, cut: tuple[list[str], int], reason: str, watch: Any, *,
                 to_host: Any,
                 dtype: str | None, warm: bool, filename: str, be: Backend,
                 make: Any = None) -> None:
    """The batched branch: the warm-up on a slice (then --reduce once), then the batches.
    ``cut`` is :func:`~.batching.select_inputs`'s choice: the inputs cut and their rows."""
    __tracebackhide__ = True
    wall0 = time.perf_counter()
    if warm:  # unbatched on a slice of the batched inputs, then --reduce once
        report.warmup_seconds, report.warmup_rows = warmup(
            plan, dtype, be, namespace, set(cut[0]), opts.reduce)
    warm_wall = time.perf_counter() - wall0
    with watch:
        run_batched(plan, namespace, opts, cut, reason, report, to_host=to_host, dtype=dtype,
                    filename=filename, be=be, make=make)
    report.wall_seconds += warm_wall  # what the user waited for, as in an unbatched run


def _attach_records(report: RunReport, plan: CellPlan, syncs: str,
                    findings: list[SyncFinding], recorder: Any,
                    liner: LineRecord | None) -> None:
    """What the records saw, into the report: compat counts, syncs, per-line rows."""
    report.compat = plan.compat  # lists moved to the device, calls run with NumPy
    if syncs != "off":
        counts = recorder.counts if isinstance(recorder, SyncRecorder) and recorder.available \
            else None
        report.syncs = merge(findings, counts)
    if liner is not None:  # per line, from the tracer and the sync and compile records
        report.lines = liner.rows(report.syncs, report.compiles)
        report.notes.extend(liner.notes)


def _line_record(be: Backend, plan: CellPlan, filename: str, source: str, lines: bool,
                 nvtx: bool, label: str) -> LineRecord | None:
    """``--lines`` and ``--nvtx`` (None without either)."""
    if not (lines or nvtx):
        return None
    return LineRecord(be, (plan.code, plan.body, plan.last), filename, source,
                      lines=lines, nvtx=nvtx, label=label)


@contextlib.contextmanager
def _both(recorder: Any, liner: LineRecord | None) -> Any:
    """The sync record, and the line record inside it when there is one."""
    with recorder, liner if liner is not None else contextlib.nullcontext():
        yield


def _run_remote(remote: Any, plan: CellPlan, namespace: dict[str, Any],
                findings: list[SyncFinding], be: Backend, *, to_host: bool | Iterable[str],
                dtype: str | None, filename: str, syncs: str,
                unsupported: dict[str, str]) -> CellOutcome:
    """Hand the planned cell to ``remote`` (a cluster); the report keeps the static findings.
    ``unsupported``: the options asked for that a cluster run has no use for, each with its
    Python form of the fix; refused before anything is sent."""
    __tracebackhide__ = True
    asked = list(unsupported)
    if asked:
        keywords = ", ".join(unsupported.values())
        raise CellError(f"{' '.join(asked)} is not available on a cluster run; drop it "
                        f"({keywords} from Python), or run the cell in this kernel with "
                        "%gpu_cluster off (cupy_magic.use_cluster('off'))")
    report = RunReport(backend=be.name, device=be.info().name, budget_bytes=be.limit)
    remote(plan, namespace, report, to_host=to_host, dtype=dtype, filename=filename, be=be)
    report.compat = plan.compat
    if syncs != "off":
        report.syncs = merge(findings, None)
    return CellOutcome(report)


def _last_not_shown(source: str, plan: CellPlan, namespace: dict[str, Any], run: str,
                    part: str) -> list[str]:
    """The note that a ``run`` (batched, cluster) does not show the cell's last expression,
    where a plain cell would show its value: none after a ``;``, or for a call that gives
    ``None`` whatever its arguments (``print(...)``, ``display(...)``)."""
    if plan.last is None or _gives_none(source, plan, namespace):
        return []
    return [f"the cell's last expression is not shown in a {run} run (each {part} has its "
            "own); assign it and join it with --reduce"]


def _gives_none(source: str, plan: CellPlan, namespace: dict[str, Any]) -> bool:
    """Whether the cell's last expression calls ``print`` or IPython's ``display`` (without
    ``display_id``, which returns a handle), as the namespace or the builtins bind them."""
    call = _last_call(source)
    if call is None or not isinstance(call.func, ast.Name) or call.func.id in plan.stored:
        return False
    func = namespace.get(call.func.id, getattr(builtins, call.func.id, None))
    display = getattr(sys.modules.get("IPython.core.display_functions"), "display", None)
    return func is builtins.print or (func is display and display is not None and not any(
        k.arg == "display_id" for k in call.keywords))


def _last_call(source: str) -> ast.Call | None:
    """The call the cell's last statement is, if it is one."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return None
    last = body[-1].value if body and isinstance(body[-1], ast.Expr) else None
    return last if isinstance(last, ast.Call) else None


def _not_on_clusters(warmup_run: bool, lines: bool, nvtx: bool,
                     batch: BatchOptions | None) -> dict[str, str]:
    """The options asked for that a cluster run cannot honour (the workers run the blocks:
    no warm-up, line record or stream count in this kernel; batches' timeline is this
    kernel's), each with the Python form of dropping it."""
    batch = batch or BatchOptions()
    asked = {"--warmup": (warmup_run, "warmup=False"), "--lines": (lines, "lines=False"),
             "--nvtx": (nvtx, "nvtx=False"),
             "--timeline": (batch.timeline, "BatchOptions(timeline=False)"),
             "--streams": (batch.streams_typed, "BatchOptions() without streams="),
             "--no-graph": (not batch.graph, "BatchOptions() without graph=False")}
    return {flag: fix for flag, (on, fix) in asked.items() if on}


def _lint(source: str, plan: CellPlan, namespace: dict[str, Any], syncs: str,
          be: Backend, filename: str, distributed: Iterable[str] = ()) -> list[SyncFinding]:
    """The static sync check, before anything runs; ``--syncs error`` stops at the first
    finding here on the CPU fallback (the GPU's record stops at the first real sync), with a
    traceback that ends at that line of the cell."""
    __tracebackhide__ = True
    if syncs == "off":
        return []
    # device arrays among the names the cell reads (the check reads the cell's text only;
    # a notebook's namespace holds thousands of names)
    names = cell_names(source)
    device_names = [*plan.inputs, *distributed,
                    *(k for k in names.loaded | names.mutated
                      if be.is_device_array(namespace.get(k)))]
    findings = lint_cell(source, device_names, {*plan.overrides, "np", "numpy", "cp", "cupy"})
    if syncs == "error" and findings and not be.is_gpu:
        first = findings[0]
        raise at_cell_line(HostSyncError(first.line, first.code), filename, first.line)
    return findings


def _recorder(be: Backend, filename: str, source: str,
              syncs: str) -> SyncRecorder | contextlib.nullcontext:
    """The runtime sync record: on the GPU only (the CPU fallback has no device to wait for).

    It also times how long the host waits at each sync: the recorder finishes the current
    stream's queued work itself, which the sync that follows would have waited for anyway.
    """
    if be.is_gpu and syncs != "off":
        return SyncRecorder(filename, source, syncs, measure_wait=True)
    return contextlib.nullcontext()
