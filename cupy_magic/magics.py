"""The IPython magics: thin parsers in front of :mod:`cupy_magic.session` and the runner."""

from __future__ import annotations

import contextlib
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from . import monitor, progress, progressbar, session
from .budget import SizeError, estimate
from .planner import RULES, BatchOptions
from .runner import CAST_TARGETS, SYNC_MODES, CellError, run_cell

__all__ = ["GpuMagics"]


def _names(text: str | None) -> list[str]:
    return [n.strip() for n in (text or "").split(",") if n.strip()]


@magics_class
class GpuMagics(Magics):
    """``%%gpu``, ``%vram_budget`` and ``%gpu_backend``."""

    @magic_arguments()
    @argument("--to-host", nargs="?", const="*", default=None, metavar="NAMES",
              help="bring the arrays the cell assigns back as NumPy: all of them, or the "
                   "comma-separated NAMES")
    @argument("--dtype", default=None, metavar="DTYPE",
              help=f"downcast float64 inputs on the way in; one of {', '.join(CAST_TARGETS)}")
    @argument("--warmup", action="store_true",
              help="run once on the first rows of the inputs (at least 4,096 elements) first, then "
                   "time the real run")
    @argument("--quiet", action="store_true", help="show no report")
    @argument("--panel", action="store_true",
              help="show a live VRAM panel above the cell's output while it runs")
    @argument("--syncs", default=None, metavar="MODE",
              help="host syncs: warn (report them), error (stop at the first), off; "
                   "the default is set with %%gpu_syncs")
    @argument("--batch", nargs="?", const="*", default=None, metavar="NAMES",
              help="run batch by batch over the leading axis: of the largest inputs, or of "
                   "the comma-separated NAMES (default: only when the inputs exceed the budget)")
    @argument("--batch-rows", default=None, metavar="N", help="rows per batch")
    @argument("--batch-bytes", default=None, metavar="SIZE",
              help="input bytes per batch, e.g. 512MB")
    @argument("--streams", default=None, metavar="K", help="CUDA streams (batches in flight), 3")
    @argument("--reduce", action="append", default=None, metavar="NAME=RULE",
              help=f"join a result without a row axis over the batches; rules: {', '.join(RULES)}")
    @argument("--timeline", action="store_true",
              help="record each batch's start and end on the device (report.batch.timeline) "
                   "and the run's phases; slows the overlap of streams a little")
    @cell_magic
    def gpu(self, line: str, cell: str) -> None:
        """Run the cell on the GPU with CuPy; NumPy inputs move to the device for the cell.

        Inside the cell every name bound to the numpy module means cupy, and ``cp`` is cupy.
        Names the cell assigns are written back only if it succeeds; device arrays stay on
        the device unless ``--to-host`` is given. A report follows the cell; the last one is
        ``cupy_magic.last_report()``.

        Examples
        --------
        In [1]: %load_ext cupy_magic

        In [2]: x = np.random.rand(10_000_000)

        In [3]: %%gpu --to-host y
           ...: y = np.sqrt(x) * 2 + 1
           ...: total = y.sum()

        In [4]: %%gpu --batch --reduce total=sum      # row by row: y is gathered on the host
           ...: y = np.sqrt(x) * 2 + 1
           ...: total = y.sum()
        """
        __tracebackhide__ = True
        args = parse_argstring(self.gpu, line)
        if args.to_host is None:
            to_host: bool | list[str] = False
        elif args.to_host == "*":
            to_host = True
        else:
            to_host = _names(args.to_host)
            bad = [n for n in to_host if not n.isidentifier()]
            if bad or not to_host:
                raise UsageError(f"--to-host takes comma-separated variable names, got "
                                 f"{args.to_host!r}; e.g. %%gpu --to-host y,total")
        if args.dtype is not None and args.dtype not in CAST_TARGETS:
            raise UsageError(f"--dtype {args.dtype} is not supported; use "
                             f"{' or '.join('--dtype ' + d for d in CAST_TARGETS)}")
        syncs = args.syncs or session.set_sync_mode()
        if syncs not in SYNC_MODES:
            raise UsageError(f"--syncs {syncs} is not a mode; use --syncs warn, error or off")
        if not cell.strip():
            raise UsageError("the %%gpu cell is empty; write the code to run below %%gpu")
        try:
            batch = BatchOptions.parse(args.batch, args.batch_rows, args.batch_bytes,
                                       args.streams, args.reduce, args.timeline)
        except CellError as exc:
            raise UsageError(str(exc)) from None
        shell = self.shell
        assert shell is not None
        filename = shell.compile.cache(cell, shell.execution_count)
        progress.start(f"In [{shell.execution_count}]")
        try:
            with _cell_panel() if args.panel else contextlib.nullcontext(), \
                    progressbar.for_cell(shell):
                report = run_cell(cell, shell.user_ns, to_host=to_host, dtype=args.dtype,
                                  warmup=args.warmup, syncs=syncs, filename=filename,
                                  batch=batch)
        except SyntaxError as exc:
            raise UsageError(
                f"syntax error in the %%gpu cell, line {exc.lineno}: {exc.msg} "
                f"({(exc.text or '').strip()!r}); fix the line and run the cell again"
            ) from None
        except CellError as exc:
            raise UsageError(str(exc)) from None
        finally:
            progress.finish()
        session.record(report)
        if not args.quiet:
            display(report)

    @magic_arguments()
    @argument("budget", nargs="*", default=None,
              help="8GB, 1.5GiB, 512MB, 50%%, 0.5 (a fraction of the device), or off")
    @argument("--estimate", nargs="+", default=None, metavar="SHAPE_OR_NAME",
              help="estimate an array: SHAPE DTYPE (e.g. 20000x20000 float32) or a variable")
    @line_magic
    def vram_budget(self, line: str) -> Any:
        """Set, show or remove the VRAM budget, or estimate what an array takes.

        Examples
        --------
        In [1]: %vram_budget 8GB            # also 8GiB, 512MB, 50%, 0.5

        In [2]: %vram_budget                # budget, pool used/held, device used/total

        In [3]: %vram_budget --estimate 20000x20000 float32   # 1.49 GiB

        In [4]: %vram_budget --estimate x   # a variable

        In [5]: %vram_budget off
        """
        words = line.split()
        if words and words[0].startswith("-") and not words[0].startswith("--"):
            raise UsageError(f"a budget cannot be negative ({line.strip()!r}); write e.g. "
                             "%vram_budget 8GB, or %vram_budget off")
        if len(words) > 1 and words[0] == "--estimate" and words[1].startswith("-"):
            raise UsageError(f"a shape cannot have negative lengths, got {words[1]!r}; "
                             "e.g. --estimate 20000x20000 float32")
        args = parse_argstring(self.vram_budget, line)
        args.budget = " ".join(args.budget) if args.budget else None
        try:
            if args.estimate is not None:
                if args.budget is not None:
                    raise UsageError("give either a budget or --estimate, not both")
                return self._estimate(args.estimate)
            if args.budget is None:
                return session.budget_status()
            return session.set_budget(args.budget)
        except SizeError as exc:
            raise UsageError(str(exc)) from None

    def _estimate(self, words: list[str]) -> Any:
        if len(words) == 1 and words[0].isidentifier():
            assert self.shell is not None
            return session.estimate_name(words[0], self.shell.user_ns)
        if len(words) > 2:
            raise UsageError(f"--estimate takes SHAPE [DTYPE], got {' '.join(words)!r}; "
                             "e.g. --estimate 20000x20000 float32")
        return estimate(words[0], words[1] if len(words) == 2 else "float64")

    @magic_arguments()
    @argument("device", nargs="?", type=int, default=0,
              help="the CuPy device index to show first (default 0)")
    @argument("--interval", type=float, default=None, metavar="SECONDS",
              help=f"seconds between samples (default {monitor.DEFAULT_INTERVAL}, or what the "
                   "running panels use)")
    @argument("--text", action="store_true", help="print a one-shot text summary instead")
    @argument("--pause", action="store_true", help="pause every panel")
    @argument("--resume", action="store_true", help="resume every panel")
    @argument("--stop", action="store_true", help="close every panel and stop sampling")
    @line_magic
    def vram_panel(self, line: str) -> None:
        """Show a live panel of VRAM, the CuPy pool, utilisation and PCIe.

        It updates while cells run; in a terminal it prints a one-shot summary instead.

        Examples
        --------
        In [1]: %vram_panel                  # device 0, a sample every 0.5 s

        In [2]: %vram_panel 1 --interval 2   # device 1, every 2 s

        In [3]: %vram_panel --pause          # also --resume, --stop, --text
        """
        from . import panel as _panel

        args = parse_argstring(self.vram_panel, line)
        actions = [name for name in ("pause", "resume", "stop") if getattr(args, name)]
        if len(actions) > 1:
            raise UsageError(f"give one of --pause, --resume, --stop, got "
                             f"{' '.join('--' + a for a in actions)}")
        if actions:
            {"pause": _panel.pause, "resume": _panel.resume, "stop": _panel.close_all}[
                actions[0]]()
            return
        if args.interval is not None and not args.interval > 0:
            raise UsageError(f"--interval must be a positive number of seconds, got "
                             f"{args.interval}; e.g. %vram_panel --interval 0.5")
        try:
            _panel.show_panel(interval=args.interval, device=args.device, text=args.text)
        except ValueError as exc:
            raise UsageError(f"{exc}; e.g. %vram_panel 0") from None

    @line_magic
    def gpu_syncs(self, line: str) -> str:
        """Show or set the default ``--syncs`` mode of ``%%gpu`` cells for this session.

        Examples
        --------
        In [1]: %gpu_syncs error    # stop a cell at its first host sync

        In [2]: %gpu_syncs          # show the mode
        """
        choice = line.strip().lower() or None
        if choice is not None and choice not in SYNC_MODES:
            raise UsageError(f"unknown sync mode {line.strip()!r}; use %gpu_syncs warn, error "
                             "or off")
        return session.set_sync_mode(choice)

    @line_magic
    def gpu_backend(self, line: str) -> Any:
        """Show or choose the backend: ``cupy`` (GPU) or ``host`` (NumPy on the CPU).

        Examples
        --------
        In [1]: %gpu_backend host     # compare: the same cells on the CPU

        In [2]: %gpu_backend cupy
        """
        choice = line.strip().lower()
        if not choice:
            print(session.describe_device())
            return None
        if choice not in ("cupy", "host"):
            raise UsageError(f"unknown backend {line.strip()!r}; use %gpu_backend cupy or "
                             "%gpu_backend host")
        try:
            session.use_backend(choice)
        except RuntimeError as exc:
            raise UsageError(f"{exc}; stay on %gpu_backend host") from None
        print(session.describe_device())
        return None


def _cell_panel() -> Any:
    from . import panel as _panel

    return _panel.cell_panel()
