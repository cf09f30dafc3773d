"""``%%gpu`` as a function: run a cell as a transaction, and keep its report."""

from __future__ import annotations

import ast
import codeop
import contextlib
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from .. import backend as _backend
from ..compat.blame import cell_warnings
from ..config import settings
from ..holders import account as _holders
from ..run import progress
from ..run.batching import DEFAULT_STREAMS, BatchOptions
from ..run.cell import CellOutcome
from ..run.cell import run_cell as _run_cell
from ..run.errors import CellError
from ..run.options import cast_name, check_options, check_unknown, to_host_names
from ..run.report import RunReport
from ..view import panel as _panel
from ..view import progressbar
from .cluster import cluster_remote

__all__ = ["forget_last", "last_report", "run_cell", "run_cell_outcome"]

_last: list[RunReport] = []  # the last report, kept here only


def last_report() -> RunReport | None:
    """The report of the last ``%%gpu`` cell (or :func:`run_cell`) that succeeded."""
    return _last[-1] if _last else None


def forget_last() -> None:
    """Forget the last report (at unload)."""
    _last.clear()


def run_cell(source: str, namespace: dict[str, Any], **options: Any) -> RunReport:
    """Run ``source`` on the GPU against ``namespace``, as a transaction (``%%gpu``).

    Parameters
    ----------
    source
        The cell's code.
    namespace
        The user namespace: read for inputs, written only if the cell succeeds.
    to_host
        ``True`` brings every device array the cell assigns back as NumPy; a list of names
        (or ``"y,total"``, as ``--to-host`` writes them; ``"*"`` is ``True``) brings back
        those; ``False`` (default) leaves results on the device.
    dtype
        ``"float32"`` downcasts float64 (and complex128) inputs on the way in; ``"float16"``
        downcasts float64 and float32 inputs. A NumPy type or dtype of them
        (``np.float32``, ``np.dtype("float16")``) means the same.
    warmup
        Run the cell once on the first rows of its longest inputs first (kernel compilation,
        pool growth), and time only the real run. The warm-up commits nothing and its
        prints (stdout, stderr, the cell's own warnings) are not shown (unless it fails; a
        library's warning is, as the real run would not show it again), but the cell runs
        twice: what it does to objects outside it (a list it appends to, a file it writes)
        happens twice.
    syncs
        ``"warn"`` reports the host syncs found before the run (static check) and, on the
        GPU, those counted while it ran; ``"error"`` stops at the first one, naming its
        line (on the CPU fallback: at the first one the static check finds, before running);
        ``"off"`` looks for none. ``None``: the session's mode (:func:`set_sync_mode`).
    batch
        How to batch the cell over the leading axis of its inputs
        (:class:`~cupy_magic.run.batching.BatchOptions`); without it a cell is batched only
        when its NumPy inputs do not fit the VRAM budget.
    fallback
        Run with NumPy on the host the calls CuPy cannot run (a name it lacks, an option or
        dtype it has not), their copies and time in the report, instead of stopping the
        cell with the CuPy way to write them. ``None``: the session's setting
        (:func:`set_fallback`, ``c.CupyMagic.fallback``).
    panel
        Show a live VRAM panel above the cell's output while it runs (in a notebook).
    filename
        The name the cell's code is compiled under (tracebacks show it with the cell's lines).
    label
        What the panel and the progress bar call the cell (``In [3]``).
    lines
        Record where the cell's time goes, line by line (``%%gpu --lines``): a table after
        the report and ``report.lines``, one
        :class:`~cupy_magic.run.lines.LineStat` per line that ran (its runs, GPU and host
        time, bytes moved, syncs and their wait, compile time, share); each line is also an
        NVTX range on the GPU.
    nvtx
        Make each line an NVTX range named ``In[3]:L2 <code>`` for Nsight Systems, without
        the table (``%%gpu --nvtx``).
    cluster
        Run on the cluster in use (:func:`~cupy_magic.session.cluster.use_cluster`) also
        when the cell reads no Dask array (``%%gpu --cluster``): its NumPy inputs are cut
        into blocks along the leading axis and scattered first. A cell that reads a Dask
        array always runs there, one task per block.
    devices
        Deal the cell's batches over several GPUs of this host (``%%gpu --devices 0,1``):
        ``"all"``, ``"0,1"``, ``[0, 1]`` or ``1``. The cell is batched (as with ``batch``);
        each device runs batches on its own streams and pool, under its own budget
        (:func:`set_budget` with ``device=``), and gets batches by its measured throughput;
        row results are gathered in row order and ``--reduce`` partials joined on the
        kernel's device. ``report.devices`` has a
        :class:`~cupy_magic.run.report.DeviceStat` per device. Not with ``cluster``,
        ``lines`` or the ``timeline`` of ``batch``. ``None`` (default): one device.
    compiler
        A :class:`codeop.Compile` whose ``from __future__`` flags the cell compiles under (on
        the cluster's workers too) and which keeps the cell's own, as a plain cell does with
        its shell's (``%%gpu`` passes IPython's ``shell.compile``). ``None`` (default): no
        flags are inherited, not even those of the caller's or cupy_magic's modules.
    shows
        Which expression statements' values the cell shows, as IPython's
        ``InteractiveShell.ast_node_interactivity`` (``%%gpu`` passes the shell's):
        ``"last_expr"`` (default) the last one's, also with ``"last_expr_or_assign"`` the
        name a last ``x = ...`` binds, ``"all"`` every one's (the others through
        ``sys.displayhook`` as they run), ``"none"`` none. A batched or cluster run shows
        none (the report says so).
    ast_transform
        What the parsed cell goes through before it is compiled, as IPython runs a plain
        cell's through its ``InteractiveShell.ast_transformers`` (``%%gpu`` passes
        ``shell.transform_ast`` while the shell has any). ``None`` (default): none. A
        cluster's workers run the cell as written (the report says so).

    Returns
    -------
    RunReport
        What moved, how long the device worked, peak pool bytes, and what was committed;
        also kept as :func:`last_report`.

    Raises
    ------
    TypeError
        For an option ``run_cell`` does not take, a source that is no string or a namespace
        that is no dict, before anything runs.
    cupy_magic.run.errors.CellError
        For any option value it cannot take, of the wrong kind or out of range
        (``fallback='off'``, ``warmup='yes'``, ``syncs=True``, ``batch`` that is no
        :class:`~cupy_magic.run.batching.BatchOptions`, a ``dtype`` other than float32 or
        float16), before anything runs; for inputs CuPy cannot hold or options that do not
        fit the cell (a device that is not visible, ``devices`` with ``cluster``). Its
        message names the fix in both forms (``--to-host y (to_host=['y'] from Python)``).
    cupy_magic.backend.BudgetExceeded
        When the inputs or the cell's allocations do not fit the VRAM budget (of a device,
        with ``devices``).
    BaseException
        Whatever the cell raised, with a traceback that starts at the cell's own lines
        (with ``devices``, a note names the batch, its rows and its device).
    """
    __tracebackhide__ = True
    check_unknown(options, run_cell.__signature__.parameters)  # type: ignore[attr-defined]
    return run_cell_outcome(source, namespace, **options).report


def run_cell_outcome(
    source: str,
    namespace: dict[str, Any],
    *,
    to_host: bool | str | Iterable[str] = False,
    dtype: str | None = None,
    warmup: bool = False,
    syncs: str | None = None,
    batch: BatchOptions | None = None,
    fallback: bool | None = None,
    panel: bool = False,
    filename: str | None = None,
    label: str | None = None,
    lines: bool = False,
    nvtx: bool = False,
    cluster: bool = False,
    devices: str | int | Iterable[int] | None = None,
    compiler: codeop.Compile | None = None,
    shows: str = "last_expr",
    ast_transform: Callable[[ast.Module], ast.Module] | None = None,
) -> CellOutcome:
    """:func:`run_cell`, also returning the value of the cell's last expression.

    ``%%gpu`` returns that value, so IPython shows it and sets ``Out``/``_`` as for a plain
    cell. The parameters and errors are :func:`run_cell`'s (this signature is the one both
    have: ``run_cell`` shows it as its own).

    Returns
    -------
    CellOutcome
        ``.report`` (also kept as :func:`last_report`) and ``.value`` (``None`` when the
        cell ends with a statement or ran in batches).
    """
    __tracebackhide__ = True
    check_options(source, namespace, batch=batch, fallback=fallback, syncs=syncs,
                  filename=filename, label=label, compiler=compiler, shows=shows,
                  ast_transform=ast_transform, warmup=warmup,
                  panel=panel, lines=lines, nvtx=nvtx, cluster=cluster)
    to_host, dtype = to_host_names(to_host), cast_name(dtype)
    syncs = settings().syncs if syncs is None else syncs
    if batch is None and settings().streams != DEFAULT_STREAMS:
        batch = BatchOptions(streams=settings().streams, streams_given=False)
    fallback = settings().fallback if fallback is None else fallback
    if devices is not None and cluster is True:
        raise CellError(f"--devices {_text(devices)} and --cluster both say where the cell runs "
                        "(this host's GPUs, or the Dask cluster's workers); drop one, e.g. "
                        f"%%gpu --devices {_text(devices)}")
    # None: in this kernel
    remote = cluster_remote(source, namespace, cluster, batch, fallback, syncs)
    progress.start(label or filename or "%%gpu cell")
    try:
        with _panel.cell_panel() if panel else contextlib.nullcontext() as shown, \
                progressbar.for_cell(), cell_warnings():  # warnings at the cell's lines
            outcome = _run_cell(source, namespace, to_host=to_host, dtype=dtype,
                                warmup_run=warmup, syncs=syncs,
                                fallback=fallback, filename=filename, batch=batch, lines=lines,
                                nvtx=nvtx, label=label or "", remote=remote,
                                devices=devices, compiler=compiler, shows=shows,
                                transform=ast_transform)
    finally:
        progress.finish()
    if panel and shown is None:  # not silently ignored: where the panel's figures are
        outcome.report.notes.append("--panel: a live panel needs a notebook's widgets, none "
                                    "here; the mem lines above are its figures, and "
                                    "%vram_panel prints them now")
    _last[:] = [outcome.report]
    _holders.note_cell(label or filename or "a %%gpu cell", source,
                       [o.name for o in outcome.report.outputs], namespace, outcome.value,
                       _backend.current(), value_on_device=to_host is not True)
    return outcome


def _text(devices: Any) -> str:
    """``devices`` as ``--devices`` writes it."""
    if isinstance(devices, (str, int)):
        return str(devices)
    return ",".join(map(str, devices)) if isinstance(devices, Iterable) else repr(devices)


# run_cell forwards its options here: one signature, shown by help(run_cell) and IPython's `?`
run_cell.__signature__ = inspect.signature(run_cell_outcome).replace(  # type: ignore[attr-defined]
    return_annotation=RunReport)
