"""One batched cell run several times in a row: where a run right after another spends its time.

Issue 15's ``cluster_bench.py`` compares the cluster with the kernel's batched path on a
second ("again") run; since session 17 that run of the kernel measured 14.6 to 15.8 GB/s
where session 16 had measured 44.9 to 49.3. This runs the bench's cell (``y = np.sqrt(x * x
+ 1)`` over 16 GiB of float32 under a 4 GiB budget, batches of 128 MiB, results to the host)
five times in one process, with the machine's own copy rates first (128 MiB pieces between
page-locked host memory and the GPU, one way and both at once), and prints each run's
phases (``BatchPlan.phases``), its report's batch lines, and for runs 2 and 3 a profile of
the host's time (cProfile, by own time). Runs: 1 (first touch), 2 (right after), 3
(``--no-graph``), 4 (``--timeline``), 5 (two streams). Prints only; the log is kept under
``results/`` by hand (``again-profile-2026-12-05T0410.log``: this script's first form,
which also printed run 4's timeline).

Run on the GPU machine: ``python3 benchmarks/back_to_back.py``.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time

import numpy as np

from cupy_magic import BatchOptions, run_cell, set_budget, use_backend

CELL = "y = np.sqrt(x * x + 1)\n"
PIECE = 128 << 20


def raw_rates() -> None:
    """Copy rates of 128 MiB pieces between page-locked host memory and the GPU."""
    import cupy as cp

    host = np.frombuffer(cp.cuda.alloc_pinned_memory(PIECE * 8), np.uint8, PIECE * 8)
    host[:] = 1
    dev = [cp.empty(PIECE, cp.uint8) for _ in range(4)]
    up, down = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    for label, h2d, d2h in (("H2D", True, False), ("D2H", False, True), ("both", True, True)):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for k in range(16):
            if h2d:
                dev[k % 2].set(host[(k % 4) * PIECE:(k % 4 + 1) * PIECE], stream=up)
            if d2h:
                dev[2 + k % 2].get(stream=down, out=host[(4 + k % 4) * PIECE:(5 + k % 4) * PIECE],
                                   blocking=False)
        up.synchronize()
        down.synchronize()
        seconds = time.perf_counter() - t0
        print(f"raw {label}: {16 * PIECE * (h2d + d2h) / seconds / 1e9:.1f} GB/s", flush=True)


def _gpu() -> bool:
    try:
        import cupy

        return bool(cupy.cuda.is_available())
    except Exception:  # no CuPy, no driver: either way no GPU to measure
        return False


def main() -> None:
    if not _gpu():
        print("back_to_back: no GPU visible; nothing measured (run on the H200)")
        return
    use_backend("cupy")
    budget = set_budget("4GiB")
    nbytes = 4 * budget.budget_bytes
    x = np.random.default_rng(0).random((nbytes // 4096, 1024), dtype=np.float32)
    raw_rates()
    runs = (("1", {}), ("2", {}), ("3 no-graph", {"graph": False}),
            ("4 timeline", {"timeline": True}), ("5 streams 2", {"streams": 2}))
    for label, extra in runs:
        ns = {"np": np, "x": x}
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        rep = run_cell(CELL, ns, to_host=True, syncs="off",
                       batch=BatchOptions(forced=True, nbytes=PIECE, **extra))
        prof.disable()
        wall = time.perf_counter() - t0
        phases = {k: round(v, 3) for k, v in rep.batch.phases.items()}
        print(f"== run {label}: {wall:.3f} s {x.nbytes / wall / 1e9:.2f} GB/s phases {phases}",
              flush=True)
        print("\n".join(rep.text_lines()[-8:]))
        if label in ("2", "3 no-graph"):
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(22)
            print(out.getvalue()[-5000:], flush=True)
        del ns, rep


if __name__ == "__main__":
    main()
