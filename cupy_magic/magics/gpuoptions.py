"""The options of ``%%gpu``, in the groups its help shows them; every default and bound in
their help is read from the constant the code uses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from IPython.core.magic_arguments import argument, argument_group

from ..config import FALLBACK_DEFAULT
from ..run.batching import COST_SHARE, DEFAULT_STREAMS, MAX_STREAMS
from ..run.cell import SYNC_MODES
from ..run.plan import CAST_TARGETS
from ..run.reduce import RULES
from ..run.whole import WARMUP_ELEMENTS
from .values import modes, on_off

__all__ = ["gpu_options"]

F = TypeVar("F", bound=Callable[..., Any])

_OPTIONS = [  # top to bottom, as they would stand as decorators over the magic
    argument_group("transfer"),
    argument("--to-host", nargs="?", const="*", default=None, metavar="NAMES",
             help="bring the arrays the cell assigns back as NumPy: all of them, or the "
                  "comma-separated NAMES"),
    argument("--dtype", default=None, metavar="DTYPE",
             help=f"downcast inputs on the way in: {modes(tuple(CAST_TARGETS))}"),
    argument_group("timing"),
    argument("--warmup", action="store_true",
             help=f"run once first on the first rows of the longest inputs (2 rows, or enough "
                  f"for {WARMUP_ELEMENTS:,} elements of each, or all rows if fewer), then time "
                  "the real run; the warm-up's prints are not shown, but what the cell does "
                  "to objects outside it (a list it appends to, a file it writes) happens twice"),
    argument("--timeline", action="store_true",
             help="record each batch's start and end on the device (report.batch.timeline) "
                  "and the run's phases; slows the overlap of streams a little"),
    argument("--lines", action="store_true",
             help="a table of where the time went, line by line: runs, GPU and host time, "
                  "bytes moved, syncs, compile time, share; the hottest line marked (each "
                  "line also an NVTX range on the GPU)"),
    argument("--nvtx", action="store_true",
             help="make each line an NVTX range In[n]:L<line> <code> for Nsight Systems"),
    argument_group("host syncs"),
    argument("--syncs", default=None, metavar="MODE", type=str.lower,
             help=f"{modes(SYNC_MODES)}: report the host syncs, stop at the first, or look "
                  "for none; the default is set with %%gpu_syncs"),
    argument_group("CuPy's limits"),
    argument("--fallback", action="store_const", const=True, default=None,
             help="run with NumPy on the host the calls CuPy cannot run (names it lacks, "
                  "options and dtypes it has not), their copies and time in the report; "
                  f"default {on_off(FALLBACK_DEFAULT)} (%%gpu_fallback, c.CupyMagic.fallback)"),
    argument_group("batching"),
    argument("--batch", nargs="?", const="*", default=None, metavar="NAMES",
             help="run batch by batch over the leading axis: of the largest inputs, or of "
                  "the comma-separated NAMES (default: only when the inputs exceed the budget)"),
    argument("--batch-rows", default=None, metavar="N", help="rows per batch"),
    argument("--batch-bytes", default=None, metavar="SIZE",
             help="input bytes per batch, e.g. 512MB"),
    argument("--streams", default=None, metavar="K",
             help=f"CUDA streams (batches in flight), 1 to {MAX_STREAMS}; default "
                  f"{DEFAULT_STREAMS} (c.CupyMagic.streams)"),
    argument("--reduce", action="append", default=None, metavar="NAME=RULE",
             help=f"join a result without a row axis over the batches; rules: "
                  f"{', '.join(RULES)}"),
    argument("--no-graph", action="store_true",
             help="launch every batch op by op: no replay of the batches' work as CUDA "
                  "graphs (used on a GPU where the batches' launches cost more than "
                  f"{COST_SHARE * 100:.0f}%% of their transfer, checked bit for bit first)"),
    argument_group("devices"),
    argument("--devices", default=None, metavar="LIST",
             help="batch the cell and deal its batches over GPUs of this host (0,1 or all) "
                  "by their measured throughput, each under its own budget"),
    argument_group("cluster"),
    argument("--cluster", action="store_true",
             help="run on the cluster in use (%%gpu_cluster): NumPy inputs are cut into "
                  "blocks along the leading axis and scattered first (a cell that reads a "
                  "Dask array always runs there)"),
    argument_group("display"),
    argument("--quiet", action="store_true", help="show no report"),
    argument("--panel", action="store_true", help="a live VRAM panel above the output as it runs"),
]


def gpu_options(func: F) -> F:
    """``func`` with ``%%gpu``'s options, for ``magic_arguments()`` over it to read."""
    for option in reversed(_OPTIONS):
        func = option(func)
    return func
