"""Build CuPy's kernel cache ahead of time: run notebooks' ``%%gpu`` cells once on small slices.

A workshop machine runs ``scripts/warm-cache notebooks/*.ipynb`` (or :func:`warm_cache`)
before the workshop, so that each notebook's first ``%%gpu`` cells load their kernels from
CuPy's cache instead of compiling them (issue 20). Each notebook runs top to bottom in a
fresh namespace of an IPython shell of its own process: its other cells as written (they
make the inputs), its ``%%gpu`` cells on the first rows of their largest NumPy inputs (the
rows ``--warmup`` uses), whose small results later cells then read.

    python -m cupy_magic.session.warm NOTEBOOK... [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .. import backend as _backend
from ..run.errors import CellError
from ..run.warm import CellWarm, NotebookCell, WarmReport, read_cells, slice_inputs
from .cells import last_report

__all__ = ["main", "warm_cache"]

_MODULE_KEYS = ("__spec__", "__file__", "__loader__", "__package__", "__cached__")


def warm_cache(notebooks: Iterable[str | Path], timeout: float | None = None) -> WarmReport:
    """Run the ``%%gpu`` cells of ``notebooks`` once on small slices; say what was compiled.

    Inside IPython (a notebook, a terminal) the notebooks run in a new Python process, so
    the caller's namespace is left alone; elsewhere they run in this process's shell.

    Parameters
    ----------
    notebooks
        The ``.ipynb`` files, run in the order given.
    timeout
        Seconds the new process may take (inside IPython only; default: no limit). Past
        them it stops and :class:`RuntimeError` says where each of its threads was.

    Returns
    -------
    WarmReport
        Per ``%%gpu`` cell: the rows it ran on, kernels compiled and loaded; where CuPy's
        cache lives. On the CPU fallback there is nothing to compile, and it says so.
    """
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout={timeout!r}: give seconds above 0, e.g. timeout=600")
    paths = [Path(p) for p in notebooks]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"no notebook at {', '.join(missing)}; give .ipynb files, "
                                "e.g. scripts/warm-cache notebooks/*.ipynb")
    from IPython.core.interactiveshell import InteractiveShell

    if InteractiveShell.initialized():
        return WarmReport.from_json(_in_another_process(paths, timeout))
    return _warm_here(InteractiveShell.instance(), paths)


def _in_another_process(paths: list[Path], timeout: float | None) -> str:
    """The JSON report's line of ``python -m`` this module over ``paths``. Past ``timeout``
    the process prints its threads' stacks and ends itself (``--timeout``, Python's fault
    handler), which the error then quotes; its process group is killed if it still holds
    the pipes 30 s later (a local cluster's workers)."""
    limit = ["--timeout", f"{timeout:g}"] if timeout is not None else []
    child = subprocess.Popen([sys.executable, "-m", __name__, "--json", *limit,
                              *map(str, paths)], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        out, err = child.communicate(timeout=None if timeout is None else timeout + 30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        try:
            out, err = child.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            out, err = "", "(nothing: the process did not stop)"
    if timeout is not None and child.returncode != 0 and "Timeout (" in err:
        raise RuntimeError(f"warm-cache ran past its timeout of {timeout:g} s and was "
                           f"stopped; pass a larger timeout=; where it was: "
                           f"{err.strip()[-6000:]}")
    last = (out.strip().splitlines() or [""])[-1]
    if not last.startswith("{"):  # no report: what it said before it stopped
        raise RuntimeError(f"warm-cache stopped: {err.strip()[-2000:]}")
    return last


def _warm_here(shell: Any, paths: list[Path]) -> WarmReport:
    # A plain InteractiveShell has no GUI event loop to switch, so a notebook's setup cell
    # with `%matplotlib inline` would fail there ("Implement enable_gui in a subclass"), and
    # every cell after it with a NameError; the warm run shows no figures: nothing to switch.
    shell.enable_gui = lambda gui=None: None
    shell.run_line_magic("load_ext", "cupy_magic")
    be = _backend.current()
    report = WarmReport(be.name, be.info().name, "", notebooks=[str(p) for p in paths])
    caches: list[str] = []  # where the cells' compile records said the cache is
    main = sys.modules["__main__"]  # a plain shell's namespace is this module's own dict:
    kept = {k: v for k, v in vars(main).items() if k in _MODULE_KEYS}  # reset empties it
    for path in paths:
        shell.reset(new_session=False)
        for key, value in kept.items():  # without __spec__ no process can be spawned (a
            vars(main).setdefault(key, value)  # local Dask cluster's workers)
        for cell in read_cells(path):
            if cell.gpu:
                report.cells.append(_gpu_cell(shell, str(path), cell, caches))
                continue
            error = _run(shell, cell.source)
            if error and not cell.fails:  # a cell tagged raises-exception is meant to fail
                report.plain_errors.append(f"{path} cell {cell.number} (not %%gpu): failed, "
                                           f"{error}")
    report.cache = next((c for c in caches if c), "") if be.is_gpu else ""
    if be.is_gpu and not report.cache:
        import importlib

        from ..backend.compiles import cache_place

        report.cache = cache_place(importlib.import_module("cupy.cuda.compiler"))
    return report


def _gpu_cell(shell: Any, path: str, cell: NotebookCell, caches: list[str]) -> CellWarm:
    """Run one ``%%gpu`` cell on small slices of its inputs; put the inputs back after."""
    before = last_report()
    full: dict[str, Any] = {}
    rows = 0
    try:
        small, rows = slice_inputs(shell.transform_cell(cell.body), shell.user_ns,
                                   _backend.current())
    except (CellError, SyntaxError):  # run whole: the cell itself says what is wrong
        small = {}
    for name, part in small.items():
        full[name] = shell.user_ns[name]
        shell.user_ns[name] = part
    t0 = time.perf_counter()
    try:
        error = _run(shell, cell.source)
    finally:
        for name, value in full.items():
            if shell.user_ns.get(name) is small[name]:  # the cell did not rebind it
                shell.user_ns[name] = value
    if error and small and not cell.fails:  # a cell made for its inputs' shapes (a reshape
        error, rows = _run(shell, cell.source), 0  # to a fixed shape): as written, whole
    warm = CellWarm(path, cell.number, cell.first_line, rows, time.perf_counter() - t0,
                    error=error, meant_to_fail=cell.fails)
    after = last_report()
    rec = after.compiles if after is not None and after is not before else None
    if rec is not None and rec.applies and rec.available:
        warm.compiled, warm.loaded = len(rec.compiled), len(rec.loaded)
        warm.compile_seconds = rec.seconds
        caches.append(rec.cache)
    return warm


def _run(shell: Any, source: str) -> str:
    """Run a cell in the shell with its output captured; ``""`` or what went wrong."""
    from IPython.utils.capture import capture_output

    with capture_output(display=True):
        result = shell.run_cell(source, store_history=False)
    exc = result.error_before_exec or result.error_in_exec
    if exc is None:
        return ""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}".rstrip(": ")


def main(argv: list[str] | None = None) -> int:
    """``scripts/warm-cache``: print the report; exit 1 if a ``%%gpu`` cell failed on a GPU."""
    ap = argparse.ArgumentParser(prog="warm-cache", description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="+", type=Path, help=".ipynb files")
    ap.add_argument("--json", action="store_true", help="print the report as one JSON line")
    ap.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                    help="past it, print where each thread is and exit 1 (default: no limit)")
    args = ap.parse_args(argv)
    if args.timeout is not None and not args.timeout > 0:
        ap.error(f"--timeout {args.timeout:g}: give seconds above 0, e.g. --timeout 600")
    from IPython.core.interactiveshell import InteractiveShell

    if not InteractiveShell.initialized():  # a process of its own: no one types into it
        _unattended()
    if args.timeout is not None:
        faulthandler.dump_traceback_later(args.timeout, exit=True)
    try:
        report = warm_cache(args.notebooks)
    except FileNotFoundError as exc:
        print(f"warm-cache: {exc}", file=sys.stderr)
        return 2
    finally:
        faulthandler.cancel_dump_traceback_later()
    print(report.to_json() if args.json else str(report))
    return 0 if report.ok else 1


def _unattended() -> None:
    """Read standard input from ``/dev/null``: the notebooks run unattended, so a cell (or a
    library under it) that reads input gets end-of-file instead of waiting for a terminal,
    or for a pipe its caller keeps open, forever."""
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)


if __name__ == "__main__":
    sys.exit(main())
