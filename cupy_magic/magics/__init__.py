"""The IPython magics: parsers in front of :mod:`cupy_magic.session`, and nothing else.

``%%gpu`` (``run_cell``), ``%vram_budget`` (``set_budget``, ``budget_status``,
``estimate``), ``%vram_panel`` (``show_panel``), ``%vram_who`` (``vram_holders``,
``vram_free``), ``%gpu_syncs`` (``set_sync_mode``), ``%gpu_fallback`` (``set_fallback``),
``%gpu_backend`` (``use_backend``) and ``%gpu_cluster`` (``use_cluster``), all of
:mod:`cupy_magic.session`. Every default in their help is read from the constant the code
uses.
"""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display

from .. import session
from ..cluster.connect import CONNECT_TIMEOUT, LOCAL_CPU_WORKERS, ClusterError
from ..config import BACKENDS, FALLBACK_DEFAULT
from ..holders.free import FREE_TARGETS, FreeError
from ..monitor.sampler import DEFAULT_INTERVAL, MAX_INTERVAL, MIN_INTERVAL
from ..run.batching import BatchOptions
from ..run.cell import SYNC_MODES
from ..run.errors import CellError
from .arguments import cell_usage, parse_argstring, ran_in, syntax_message
from .cellshell import magics_see_the_cell, shown, transformed
from .gpuoptions import gpu_options
from .postmortem import freed_once_shown, from_the_cell, kept_for_pdb
from .values import device_number, estimate_words, interval, modes, on_off, panel_action

__all__ = ["GpuMagics", "parse_argstring", "syntax_message"]


@magics_class
class GpuMagics(Magics):
    """``%%gpu`` and the line magics of the module docstring."""

    @cell_usage
    @magic_arguments()
    @gpu_options
    @cell_magic
    def gpu(self, line: str, cell: str) -> Any:
        """Run the cell on the GPU with CuPy; NumPy inputs move to the device for the cell.

        Inside the cell every name bound to the numpy module means cupy, and ``cp`` is cupy.
        Names the cell assigns are written back only if it succeeds; device arrays stay on
        the device unless ``--to-host`` is given. A report follows the cell; the last one is
        ``cupy_magic.last_report()``. From Python: ``cupy_magic.run_cell``.

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

        In [5]: %%gpu --devices all --reduce total=sum  # the batches over every GPU
           ...: total = np.sqrt(x).sum()

        In [6]: %%gpu --lines                         # where the time goes, line by line
           ...: y = np.sqrt(x) * 2 + 1
           ...: total = float(y.sum())
        """
        __tracebackhide__ = True
        args = parse_argstring(self.gpu, line)
        if not cell.strip():  # as a plain empty cell, it stops nothing (Run All); it says so
            return print("cupy_magic: the %%gpu cell is empty; nothing ran")
        shell = self.shell
        assert shell is not None
        # the running cell's number, from its ExecutionResult (IPython 9 counts up before, 8 after)
        running = getattr(shell.displayhook, "exec_result", None)
        number = getattr(running, "execution_count", None) or shell.execution_count
        source = transformed(shell, cell)  # %magics, !cmd, x? as in a plain cell
        filename = shell.compile.cache(source, number, raw_code=cell)
        try:
            batch = BatchOptions.parse(args.batch, args.batch_rows, args.batch_bytes,
                                       args.streams, args.reduce, args.timeline,
                                       default_streams=session.settings().streams,
                                       graph=not args.no_graph)
            with magics_see_the_cell(shell), kept_for_pdb(shell), \
                    freed_once_shown(shell, running):
                outcome = session.run_cell_outcome(
                    source, shell.user_ns, dtype=args.dtype,
                    to_host=False if args.to_host is None else args.to_host, warmup=args.warmup,
                    syncs=args.syncs, batch=batch, fallback=args.fallback,
                    panel=args.panel,
                    filename=filename,
                    label=f"In [{number}]", lines=args.lines, nvtx=args.nvtx,
                    cluster=args.cluster, devices=args.devices, compiler=shell.compile,
                    shows=shown(shell, running),
                    ast_transform=shell.transform_ast if shell.ast_transformers else None)
        except SyntaxError as exc:
            if ran_in(exc, filename):  # raised by the cell's own code (eval, compile)
                from_the_cell(exc, filename)
                raise
            raise UsageError(syntax_message(exc, source)) from None
        except (CellError, ClusterError) as exc:
            raise UsageError(str(exc)) from None
        except BaseException as exc:
            from_the_cell(exc, filename)  # its traceback starts at the cell's frame
            raise
        if not args.quiet:
            display(outcome.report)
        # Returned, IPython's displayhook shows it and sets Out and _ (not after a `;`).
        return outcome.value

    @magic_arguments()
    @argument("budget", nargs="*", default=None,
              help="8GB, 1.5GiB, 512MB, 50%%, 0.5 (a fraction of the device), or off")
    @argument("--estimate", nargs="+", default=None, metavar="SHAPE_OR_NAME",
              help="estimate an array: SHAPE DTYPE (e.g. 20000x20000 float32), or a "
                   "variable (x, or x float32: its shape in float32)")
    @argument("--device", default=None, metavar="N",
              help="the device whose budget to set or show (default: every device)")
    @line_magic
    def vram_budget(self, line: str) -> Any:
        """Set, show or remove the VRAM budget (of every device, or one with ``--device``),
        or estimate what an array takes.

        Examples
        --------
        In [1]: %vram_budget 8GB            # also 8GiB, 512MB, 50%, 0.5

        In [2]: %vram_budget                # budget, pool used/held, device used/total

        In [3]: %vram_budget --estimate 20000x20000 float32   # 1.49 GiB

        In [4]: %vram_budget --estimate x   # a variable (x float32: as --dtype float32)

        In [5]: %vram_budget 8GB --device 1   # one device's budget

        In [6]: %vram_budget off
        """
        words = line.split()
        if words and words[0].startswith("-") and not words[0].startswith("--"):
            raise UsageError(f"a budget cannot be negative ({line.strip()!r}); write e.g. "
                             "%vram_budget 8GB, or %vram_budget off")
        if len(words) > 1 and words[0] == "--estimate" and words[1].startswith("-"):
            raise UsageError(f"a shape cannot have negative lengths, got {words[1]!r}; "
                             "e.g. --estimate 20000x20000 float32")
        args = parse_argstring(self.vram_budget, line)
        budget = " ".join(args.budget) if args.budget else None
        device = device_number(args.device)
        try:
            if args.estimate is not None:
                if budget is not None or device is not None:
                    given = budget if budget is not None else f"--device {device}"
                    raise UsageError(f"give either a budget ({given}) or --estimate "
                                     f"{' '.join(args.estimate)}, not both; e.g. "
                                     f"%vram_budget {budget or '8GB'}")
                assert self.shell is not None
                return estimate_words(args.estimate, self.shell.user_ns)
            if budget is None:
                return session.budget_status(device)
            return session.set_budget(budget, device)
        except ValueError as exc:  # SizeError, or a device that is not visible
            raise UsageError(str(exc)) from None

    @magic_arguments()
    @argument("device", nargs="?", type=int, default=None,
              help="the CuPy device index to show first (default 0)")
    @argument("--interval", default=None, metavar="SECONDS",
              help=f"seconds between samples, {MIN_INTERVAL:g} to {MAX_INTERVAL:g} "
                   f"(default {DEFAULT_INTERVAL}, c.CupyMagic.panel_interval, or what the "
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
        args = parse_argstring(self.vram_panel, line)
        actions = [name for name in ("pause", "resume", "stop") if getattr(args, name)]
        if len(actions) > 1:
            raise UsageError(f"give one of --pause, --resume, --stop, got "
                             f"{' '.join('--' + a for a in actions)}; e.g. "
                             f"%vram_panel --{actions[-1]}")
        if actions:
            panel_action(actions[0], line, args)
            session.act_on_panels(actions[0])
            return
        try:
            session.show_panel(interval=interval(args.interval),
                               device=0 if args.device is None else args.device, text=args.text)
        except ValueError as exc:
            raise UsageError(f"{exc}; e.g. %vram_panel 0") from None

    @magic_arguments()
    @argument("mode", nargs="?", default=None, type=str.lower,
              help=f"on or off (default {on_off(FALLBACK_DEFAULT)}); none: show the setting")
    @line_magic
    def gpu_fallback(self, line: str) -> str:
        """Show or set whether ``%%gpu`` cells run with NumPy the calls CuPy cannot run.

        On, such a call copies its device arrays to the host, runs NumPy, copies the array
        results back, and the report has a row for it (calls, bytes each way, time, what to
        write instead); off, the cell stops at it with that advice. ``%%gpu --fallback``
        turns it on for one cell.

        Examples
        --------
        In [1]: %gpu_fallback on

        In [2]: %gpu_fallback       # show the setting
        """
        args = parse_argstring(self.gpu_fallback, line)
        if args.mode is not None and args.mode not in ("on", "off"):
            raise UsageError(f"%gpu_fallback takes on or off, got {args.mode!r}; e.g. "
                             "%gpu_fallback on")
        note = session.unchecked_note()  # without CuPy no call is found to stop or fall back
        return on_off(session.set_fallback(args.mode)) + (f" (CuPy is not installed: {note})"
                                                          if note else "")

    @magic_arguments()
    @argument("--free", default=None, metavar="WHAT",
              help=f"drop holders, then release the pool's cached blocks and show the bytes "
                   f"the device got back: your NAMES (comma-separated), "
                   f"{', '.join(FREE_TARGETS)}")
    @line_magic
    def vram_who(self, line: str) -> Any:
        """Who holds the VRAM: every device array you can reach, largest first, by the path
        that holds it (``y``, ``Out[12]``, ``results[3]``, ``f.__closure__ (w)``, the last
        traceback), then the rest of the device memory, each part measured.

        On the CPU fallback it lists the arrays cells made, in host memory. The panel's
        "held by" section shows the largest. From Python: ``cupy_magic.vram_holders()`` and
        ``cupy_magic.vram_free("Out")``.

        Examples
        --------
        In [1]: %vram_who

        In [2]: %vram_who --free Out          # the output cache entries holding arrays

        In [3]: %vram_who --free y,traceback  # also: all-unnamed (Out and traceback)
        """
        args = parse_argstring(self.vram_who, line)
        if args.free is None:
            return session.vram_holders(self.shell.user_ns if self.shell else None)
        try:
            return session.vram_free(args.free, self.shell.user_ns if self.shell else None)
        except FreeError as exc:
            raise UsageError(str(exc)) from None

    @magic_arguments()
    @argument("mode", nargs="?", default=None, type=str.lower,
              help=f"{modes(SYNC_MODES)}; none: show the mode")
    @line_magic
    def gpu_syncs(self, line: str) -> str:
        """Show or set the default ``--syncs`` mode of ``%%gpu`` cells for this session.

        Examples
        --------
        In [1]: %gpu_syncs error    # stop a cell at its first host sync

        In [2]: %gpu_syncs          # show the mode
        """
        args = parse_argstring(self.gpu_syncs, line)
        try:
            return session.set_sync_mode(args.mode)
        except ValueError as exc:
            raise UsageError(str(exc)) from None

    @magic_arguments()
    @argument("backend", nargs="?", default=None, type=str.lower,
              help=f"{modes(BACKENDS)}; none: show the backend")
    @line_magic
    def gpu_backend(self, line: str) -> None:
        """Show or choose the backend: ``cupy`` (GPU) or ``host`` (NumPy on the CPU).

        Examples
        --------
        In [1]: %gpu_backend host     # compare: the same cells on the CPU

        In [2]: %gpu_backend cupy
        """
        args = parse_argstring(self.gpu_backend, line)
        if args.backend is not None:
            if args.backend not in BACKENDS:
                raise UsageError(f"unknown backend {args.backend!r}; use "
                                 f"{' or '.join('%gpu_backend ' + b for b in BACKENDS)}")
            try:
                session.use_backend(args.backend)
            except RuntimeError as exc:
                raise UsageError(f"{exc}; stay on %gpu_backend host") from None
        print(session.describe_device())

    @magic_arguments()
    @argument("target", nargs="?", default="show",
              help="local, a scheduler address (tcp://HOST:8786), off, or show (default)")
    @argument("--workers", type=int, default=None, metavar="N",
              help=f"workers of a local cluster: processes on the CPU fallback (default "
                   f"{LOCAL_CPU_WORKERS}, at most the cores), GPUs on a GPU (default all)")
    @argument("--timeout", type=float, default=None, metavar="SECONDS",
              help=f"seconds to reach a scheduler at an address (default {CONNECT_TIMEOUT})")
    @line_magic
    def gpu_cluster(self, line: str) -> Any:
        """Start, join, show or leave the Dask cluster that ``%%gpu`` cells over Dask arrays
        (and ``%%gpu --cluster`` cells) run on, one task per block along the leading axis.

        ``local`` starts dask-cuda's LocalCUDACluster (one worker per GPU) on a GPU, and a
        LocalCluster of worker processes on loopback on the CPU fallback. Each worker gets
        the budget (on a GPU, its CuPy pool's limit). From Python:
        ``cupy_magic.use_cluster('local')`` or ``use_cluster(client)``.

        Examples
        --------
        In [1]: %gpu_cluster local

        In [2]: %gpu_cluster show                 # workers, their devices, memory, budget

        In [3]: %gpu_cluster tcp://10.0.0.5:8786  # join a running scheduler

        In [4]: %gpu_cluster off
        """
        args = parse_argstring(self.gpu_cluster, line)
        target = args.target.strip()
        try:
            return session.use_cluster(target, n_workers=args.workers, timeout=args.timeout)
        except ClusterError as exc:
            raise UsageError(str(exc)) from None
