"""What CuPy takes from the pool for a full reduction, by input length, and the cell that
showed it (issue 20; the probe behind ``cupy_magic/run/inflight.py``).

1. Installs an allocator that records each size asked of CuPy's pool, and runs
   ``d.max()`` and ``(d * 2).sum()`` over the first ``n`` rows of a 21,000 x 4 float64
   array: the bytes CuPy asks for beyond the result (CUB's temporary storage).
2. Runs ``mx = x.max()`` (``--to-host --reduce mx=max``) under ``%vram_budget 160KB`` in a
   real IPython shell, with graphs, with ``--no-graph`` and with ``--streams 1``, and prints
   the plan: first batch, rows per batch, measured bytes per row, batches in flight, the bytes
   a full batch took beyond its rows, the pool's peak and the released cached blocks.

Run on a GPU from the repository root, with IPython importable::

    python3 benchmarks/cub_workspace.py > benchmarks/results/cub-workspace-<stamp>-<gpu>.txt

On an H100 (CuPy 14.2, 2026-12-07, at 934ae54): ``d.max()`` asked for 1 byte up to 512 rows
(2,048 elements) and 42,495 bytes from 513 rows on; the cell kept 1 of 3 batches in flight,
a full batch of 1,178 rows taking 38,367 bytes beyond its rows, never refused
(``results/cub-workspace-2026-12-07T1314-h100.txt``). That file is the output of the probe
this script was written from (the same steps in one flat file, run after gpu-check shard 1/4
in one device call); this script itself has not run on a GPU yet.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import cupy as cp
import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))

from _shell import ipython_shell  # noqa: E402


def pool_sizes() -> None:
    """Print the sizes CuPy asks of the pool for ``d.max()`` and ``(d * 2).sum()`` over the
    first ``n`` rows, for lengths on both sides of one tile of CUB's reduction."""
    sizes: list[int] = []
    pool = cp.get_default_memory_pool()

    def alloc(n: int) -> cp.cuda.MemoryPointer:
        sizes.append(n)
        return pool.malloc(n)

    x = np.random.default_rng(0).random((21_000, 4))
    cp.cuda.set_allocator(alloc)
    for n in (100, 312, 512, 513, 1000, 1178, 3000, 21000):
        d = cp.asarray(x[:n])
        sizes.clear()
        d.max()
        cp.cuda.Device().synchronize()
        print("max rows", n, "allocs", sizes)
        sizes.clear()
        (d * 2).sum()
        print("  (d*2).sum allocs", sizes)
    cp.cuda.set_allocator(pool.malloc)
    print("accelerators", cp._core.get_reduction_accelerators(),
          cp._core.get_routine_accelerators())


def the_cell() -> None:
    """Print the plan, report and released blocks of ``mx = x.max()`` batched under
    ``%vram_budget 160KB`` (test_batched_parity's cupy-68 cell), seven times."""
    from parity_check import inputs

    import cupy_magic
    from cupy_magic.backend import current

    ip = ipython_shell()
    if ip is None:
        print("the cell: not run (IPython is not installed)")
        return
    lines = (["--to-host --reduce mx=max"] * 4 + ["--to-host --reduce mx=max --no-graph"] * 2
             + ["--to-host --reduce mx=max --streams 1"])
    for attempt, line in enumerate(lines):
        ip.user_ns.update(inputs())
        ip.run_line_magic("vram_budget", "160KB")
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                ip.run_cell_magic("gpu", line, "mx = x.max()")
            report = cupy_magic.last_report()
            bp = report.batch
            print(attempt, line, "OK", ip.user_ns["mx"] == inputs()["x"].max(), "first",
                  bp.first_rows, "rows", bp.rows, "peak_row", bp.peak_row_bytes, "in_flight",
                  bp.in_flight, "fixed", bp.batch_fixed, "peak", report.peak_pool_bytes)
        except BaseException as e:  # a refusal is the finding
            print(attempt, line, "REFUSED", type(e).__name__, e)
        finally:
            ip.run_line_magic("vram_budget", "off")
        print(out.getvalue()[-3000:])
        print("releases", current().releases)


if __name__ == "__main__":
    pool_sizes()
    the_cell()
