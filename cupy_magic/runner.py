"""Run one cell on the live backend, as a transaction.

The cell runs in a shallow copy of the user namespace in which every name bound to the
NumPy module means the backend's array module (CuPy on a GPU) and every NumPy array the cell
reads is replaced by a device copy. Only when the cell succeeds are the names it bound
written back; when it fails, the copy is dropped, so the user's variables and the pool are
as they were.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import gc
import itertools
import linecache
import math
import re
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from types import CodeType, ModuleType, TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from . import backend as _backend

if TYPE_CHECKING:
    from .planner import BatchOptions
from .budget import format_bytes
from .cellcode import CellNames, analyse
from .commit import commit
from .report import InputMove, RunReport
from .sync_record import HostSyncError, SyncRecorder, merge
from .syncs import lint_cell

__all__ = ["SYNC_MODES", "CellError", "run_cell"]

SYNC_MODES = ("warn", "error", "off")

CAST_TARGETS = {"float32": {"float64": "float32", "complex128": "complex64"},
                "float16": {"float64": "float16", "float32": "float16"}}
# The --warmup slice: at least this many elements of each cut input (and 2 rows). CuPy compiles
# a reduction for the block size it picks from the reduced length, up to 512 threads once more
# than 1,024 elements are reduced (its CUB path): a 2-element slice compiled other kernels
# than the full run, which then compiled its own inside the timed run (4-5 s each on the H200).
_WARMUP_ELEMENTS = 4096
_counter = itertools.count(1)


class CellError(ValueError):
    """The cell or its options cannot be run as given; the message says the fix."""


@dataclass(frozen=True)
class _Plan:
    code: CodeType
    inputs: dict[str, np.ndarray]
    overrides: dict[str, Any]
    stored: set[str]
    deleted: set[str]


def cast_target(arr: np.ndarray, dtype: str | None) -> np.dtype:
    """The dtype ``arr`` has on the device under ``--dtype`` (its own when not cast)."""
    target = CAST_TARGETS.get(dtype or "", {}).get(arr.dtype.name)
    return np.dtype(target) if target else arr.dtype


def _check_input(name: str, arr: np.ndarray) -> None:
    if arr.dtype.kind in "OUSVMm":
        raise CellError(
            f"input {name!r} is a NumPy array of dtype {arr.dtype}, which CuPy cannot hold; "
            f"convert it first (e.g. {name} = {name}.astype(float)) or keep it out of the "
            "%%gpu cell"
        )
    if isinstance(arr, np.ma.MaskedArray):
        raise CellError(f"input {name!r} is a masked array; CuPy has none: pass "
                        f"{name}.filled(fill_value) and a separate mask")


@functools.lru_cache(maxsize=256)
def _names(source: str) -> CellNames:
    """The cell's names, analysed once per source text (a re-run cell skips the analysis)."""
    return analyse(ast.parse(source))


def _plan(source: str, namespace: dict[str, Any], filename: str, to_host: bool | Iterable[str],
          dtype: str | None, be: _backend.Backend) -> _Plan:
    tree = ast.parse(source, filename, "exec")
    names = _names(source)
    if dtype is not None and dtype not in CAST_TARGETS:
        raise CellError(f"--dtype {dtype} is not supported; use --dtype float32 (or float16)")
    if not isinstance(to_host, bool):
        wanted = list(to_host)
        missing = [n for n in wanted if n not in names.assigned | names.mutated]
        if missing:
            bound = ", ".join(sorted(names.assigned)) or "nothing"
            raise CellError(
                f"--to-host names {', '.join(missing)}, which the cell never assigns; "
                f"it assigns: {bound}"
            )
    numpy_names = {k for k, v in namespace.items() if v is np}
    overrides: dict[str, Any] = {k: be.xp for k in numpy_names}
    if "cp" not in namespace or isinstance(namespace.get("cp"), ModuleType):
        overrides["cp"] = be.xp
    inputs: dict[str, np.ndarray] = {}
    for name in sorted((names.loaded | names.mutated) - names.written_first):
        value = namespace.get(name)
        if (isinstance(value, np.ndarray) and name not in numpy_names
                and not be.is_device_array(value)):
            _check_input(name, value)
            inputs[name] = value
    code = compile(tree, filename, "exec")
    return _Plan(code, inputs, overrides, names.assigned | names.mutated, names.deleted)


def _register_source(source: str, filename: str) -> None:
    if filename not in linecache.cache:
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)


def _move_inputs(plan: _Plan, dtype: str | None, be: _backend.Backend) -> tuple[dict, list]:
    moved: dict[str, Any] = {}
    moves: list[InputMove] = []
    for name, arr in plan.inputs.items():
        cast_from, saved, host = "", 0, arr
        target = cast_target(arr, dtype)
        if target != arr.dtype:
            t0 = time.perf_counter()
            host = arr.astype(target)
            cast_from, saved = arr.dtype.name, arr.nbytes - host.nbytes
            cast_s = time.perf_counter() - t0
        else:
            cast_s = 0.0
        t = be.to_device(host)
        moved[name] = t.array
        moves.append(InputMove(name, t.nbytes, t.seconds + cast_s, t.pinned, host.dtype.name,
                               cast_from, saved))
    return moved, moves


def input_shortfall(inputs: dict[str, np.ndarray], dtype: str | None,
                    be: _backend.Backend) -> tuple[int, int] | None:
    """``(bytes the inputs need, bytes the budget leaves)`` when they do not fit, else None."""
    if be.limit is None or not inputs:
        return None
    need = sum(a.size * cast_target(a, dtype).itemsize for a in inputs.values())
    free = be.limit - be.pool_used()
    return (need, free) if need > free else None


def _check_budget(plan: _Plan, dtype: str | None, be: _backend.Backend) -> None:
    limit = be.limit
    short = input_shortfall(plan.inputs, dtype, be)
    if short is not None and limit is not None:
        need, free = short
        sizes = ", ".join(f"{n} ({format_bytes(a.nbytes)})" for n, a in plan.inputs.items())
        hint = "" if dtype else ", --dtype float32 to halve float64 inputs"
        err = _backend.BudgetExceeded(
            f"the cell's inputs {sizes} need {format_bytes(need)} but the VRAM budget "
            f"{format_bytes(limit)} leaves {format_bytes(max(free, 0))}; try batching the "
            f"data{hint}, a larger %vram_budget, or releasing cached blocks "
            "(cupy_magic.free_cached())"
        )
        err.explained = True  # type: ignore[attr-defined]
        raise err


_CUPY_OOM = re.compile(
    r"Out of memory allocating ([\d,]+) bytes \(allocated so far: ([\d,]+) bytes")


def _last_cell_entry(tb: TracebackType | None, filename: str | None) -> TracebackType | None:
    """The innermost entry of ``tb`` in the cell's own code, or None."""
    last = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            last = tb
        tb = tb.tb_next
    return last


def _cell_line(tb: TracebackType | None, filename: str | None) -> str:
    """``line N `code` `` for the cell's innermost frame in ``tb``, or ``""``."""
    last = _last_cell_entry(tb, filename)
    if last is None:
        return ""
    code = linecache.getline(filename or "", last.tb_lineno).strip()
    return f"line {last.tb_lineno} `{code}` " if code else f"line {last.tb_lineno} "


def _explain_oom(exc: BaseException, be: _backend.Backend, peak: int,
                 filename: str | None = None) -> BaseException:
    """Turn an out-of-memory error into one that says what was asked and what to try."""
    if not isinstance(exc, MemoryError) or getattr(exc, "explained", False):
        return exc
    limit = be.limit
    where = (f"the VRAM budget of {format_bytes(limit)} (set with %vram_budget)"
             if limit else "the device's free memory")
    first = str(exc).splitlines()[0].rstrip(".") if str(exc) else type(exc).__name__
    asked = _CUPY_OOM.search(first)
    if hasattr(exc, "line"):
        head = f"over the budget: {first}"
    elif asked:
        size, held = (int(g.replace(",", "")) for g in asked.groups())
        head = (f"{_cell_line(exc.__traceback__, filename)}asked the pool for "
                f"{format_bytes(size)} ({size:,} bytes) while it held {format_bytes(held)}: "
                f"over {where}; the cell had reached {format_bytes(peak)} in the pool")
    else:
        head = (f"out of memory: {first}; the cell reached {format_bytes(peak)} in the pool, "
                f"against {where}")
    release = ", or cupy_magic.free_cached() to release cached blocks" if be.is_gpu else ""
    new = _backend.BudgetExceeded(
        f"{head}. Try batching the data (smaller slices per cell), --dtype float32, deleting "
        f"arrays earlier cells left on the device, a larger %vram_budget{release}"
    )
    new.explained = True  # type: ignore[attr-defined]
    return new


def _cell_traceback(tb: TracebackType | None, filename: str, *,
                    trim_below: bool = False) -> TracebackType | None:
    """Keep the frames from the cell's first frame on (and, if asked, up to its last)."""
    cur = tb
    while cur is not None and cur.tb_frame.f_code.co_filename != filename:
        cur = cur.tb_next
    if cur is None:
        return None if trim_below else tb
    if trim_below:
        _last_cell_entry(cur, filename).tb_next = None
    return cur


def run_cell(
    source: str,
    namespace: dict[str, Any],
    *,
    to_host: bool | Iterable[str] = False,
    dtype: str | None = None,
    warmup: bool = False,
    syncs: str = "warn",
    filename: str | None = None,
    batch: BatchOptions | None = None,
) -> RunReport:
    """Run ``source`` on the live backend against ``namespace``, as a transaction.

    Parameters
    ----------
    source
        The cell's code.
    namespace
        The user namespace: read for inputs, written only if the cell succeeds.
    to_host
        ``True`` brings every device array the cell assigns back as NumPy; a list of names
        brings back those; ``False`` (default) leaves results on the device.
    dtype
        ``"float32"`` downcasts float64 (and complex128) inputs on the way in.
    warmup
        Run the cell once on the first rows of its longest inputs first (kernel compilation,
        pool growth), and time only the real run. The cell runs twice, so its side effects
        (prints, appends to outside lists) happen twice; the warm-up commits nothing.
    syncs
        ``"warn"`` reports the host syncs found before the run (static check) and, on the
        GPU, those counted while it ran; ``"error"`` stops at the first one, naming its
        line (on the CPU fallback: at the first one the static check finds, before running);
        ``"off"`` looks for none.
    filename
        The name the cell's code is compiled under (tracebacks show it with the cell's lines).
    batch
        How to batch the cell over the leading axis of its inputs
        (:class:`cupy_magic.planner.BatchOptions`); without it a cell is batched only when
        its NumPy inputs do not fit the VRAM budget.

    Returns
    -------
    RunReport
        What moved, how long the device worked, peak pool bytes, and what was committed.

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
    _register_source(source, filename)
    if syncs not in SYNC_MODES:
        raise CellError(f"--syncs {syncs} is not a mode; use warn, error or off")
    plan = _plan(source, namespace, filename, to_host, dtype, be)
    findings = [] if syncs == "off" else lint_cell(
        source, [*plan.inputs, *(k for k, v in namespace.items() if be.is_device_array(v))],
        {*plan.overrides, "np", "numpy", "cp", "cupy"})
    if syncs == "error" and findings and not be.is_gpu:
        first = findings[0]
        raise HostSyncError(first.line, first.code)
    from . import pipeline, planner  # they import this module: keep them out of its top

    reason = pipeline.batch_reason(plan.inputs, batch, be, dtype)
    if reason:
        warm = None
        if warmup:  # unbatched on a slice of the batched inputs, then the --reduce rules once
            opts = batch or planner.BatchOptions()
            names, _ = planner.select_inputs(plan.inputs, opts)
            warm = _warmup(plan, dtype, be, namespace, set(names), opts.reduce)
        recorder = _recorder(be, filename, source, syncs)
        with recorder:
            report = pipeline.run_batched(plan, namespace, batch, reason, to_host=to_host,
                                          dtype=dtype, filename=filename, be=be)
        _attach_syncs(report, syncs, findings, recorder)
        if warm is not None:
            report.warmup_seconds, report.warmup_rows = warm
        return report
    _check_budget(plan, dtype, be)
    info = be.info()
    report = RunReport(backend=be.name, device=info.name, budget_bytes=be.limit)
    if batch is not None and batch.batch_only():
        report.notes.append(f"{' '.join(batch.batch_only())}: for batched runs only, and this "
                            "cell ran whole (its inputs fit the budget); add --batch to batch it")
    wall0 = time.perf_counter()
    work: dict[str, Any] = {}
    moved: dict[str, Any] = {}
    mem = None
    try:
        if warmup:
            report.warmup_seconds, report.warmup_rows = _warmup(plan, dtype, be, namespace)
        with be.track_memory(filename) as mem:
            report.start_pool_bytes = mem.start_bytes
            moved, report.inputs = _move_inputs(plan, dtype, be)
            work = dict(namespace)
            work.update(plan.overrides)
            work.update(moved)
            recorder = _recorder(be, filename, source, syncs)
            with be.time_device() as timing, recorder:
                exec(plan.code, work)
        report.gpu_seconds = timing.seconds
        report.peak_pool_bytes = mem.peak_bytes
    except BaseException as exc:
        peak = mem.peak_bytes if mem is not None else 0
        work.clear()
        moved.clear()
        traceback.clear_frames(exc.__traceback__)
        gc.collect()
        new = _explain_oom(exc, be, peak, filename)
        # Our own errors end at the cell's line: the frames below it (CuPy's, the recorder's
        # hook) say nothing to the user.
        cell_tb = _cell_traceback(exc.__traceback__, filename,
                                  trim_below=new is not exc or isinstance(exc, HostSyncError))
        raise new.with_traceback(cell_tb) from None
    _attach_syncs(report, syncs, findings, recorder)
    commit(plan, work, namespace, to_host, be, report)
    report.wall_seconds = time.perf_counter() - wall0
    return report


def _recorder(be: _backend.Backend, filename: str, source: str,
              syncs: str) -> SyncRecorder | contextlib.nullcontext:
    """The runtime sync record: on the GPU only (the CPU fallback has no device to wait for).

    It also times how long the host waits at each sync: the recorder finishes the current
    stream's queued work itself, which the sync that follows would have waited for anyway.
    """
    if be.is_gpu and syncs != "off":
        return SyncRecorder(filename, source, syncs, measure_wait=True)
    return contextlib.nullcontext()


def _attach_syncs(report: RunReport, syncs: str, findings: list,
                  recorder: SyncRecorder | contextlib.nullcontext) -> None:
    if syncs == "off":
        return
    counts = recorder.counts if isinstance(recorder, SyncRecorder) and recorder.available \
        else None
    report.syncs = merge(findings, counts)


def _warmup_rows(cut: list[np.ndarray]) -> int:
    """Rows of the ``--warmup`` slice of ``cut`` (arrays of one leading length): 2, or enough
    for ``_WARMUP_ELEMENTS`` elements of each, so that CuPy compiles the kernels the full-size
    run uses; all rows if there are fewer."""
    if not cut:
        return 0
    per_row = min(max(1, math.prod(a.shape[1:])) for a in cut)
    return min(cut[0].shape[0], max(2, -(-_WARMUP_ELEMENTS // per_row)))


def _warmup(plan: _Plan, dtype: str | None, be: _backend.Backend, namespace: dict[str, Any],
            cut: set[str] | None = None,
            reduce: dict[str, str] | None = None) -> tuple[float, int]:
    """Run the cell once on the first rows of the inputs it would cut (by default those with
    the largest leading length), commit nothing, and apply the ``reduce`` rules to its
    results once (their kernels compile too). Returns the seconds it took and its rows."""
    __tracebackhide__ = True
    from . import planner  # imports this module

    # Only the inputs with the largest leading length are cut (the ones batching would cut):
    # smaller ones, such as weights, keep their shape so that the cell's shapes still agree.
    if cut is None:
        longest = max((a.shape[0] for a in plan.inputs.values() if a.ndim), default=0)
        cut = {n for n, a in plan.inputs.items() if a.ndim and a.shape[0] == longest}
    rows = _warmup_rows([plan.inputs[n] for n in sorted(cut)])
    small = {n: (a[:rows] if n in cut else a) for n, a in plan.inputs.items()}
    slim = _Plan(plan.code, small, plan.overrides, plan.stored, plan.deleted)
    t0 = time.perf_counter()
    scratch: dict[str, Any] = {}
    try:
        moved, _ = _move_inputs(slim, dtype, be)
        scratch = {**namespace, **plan.overrides, **moved}
        exec(plan.code, scratch)
        for name, rule in (reduce or {}).items():
            if name in scratch:
                planner.combine(rule, [(scratch[name], rows), (scratch[name], rows)], be.xp)
        be.synchronize()
    except Exception as exc:
        what = f"the first {rows:,} rows of {', '.join(sorted(cut))}" if rows else "the cell"
        raise CellError(
            f"the --warmup run on {what} failed with "
            f"{type(exc).__name__}: {exc}; run without --warmup, or make the cell work on "
            "any number of rows"
        ) from exc
    finally:
        scratch.clear()
    return time.perf_counter() - t0, rows
