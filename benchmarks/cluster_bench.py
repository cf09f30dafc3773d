"""The same cell through a Dask cluster against the in-kernel batched path (issue 15).

On a GPU (one H200: ``dask_cuda.LocalCUDACluster``, one worker on the same GPU): a float32
NumPy input 4x the VRAM budget (``--budget``, default 4GiB, so 16 GiB of input), the cell
``y = np.sqrt(x * x + 1)`` with ``--to-host``, run (1) in the kernel, batched and streamed,
and (2) with ``%%gpu --cluster`` (chunked, one task per block, rows back as NumPy: through
the ring of shared-memory slots when the workers share this host's memory, as a local
cluster's do, else scattered and gathered; each row records its ``transport``), then both
once more. Prints input GB/s of both and their ratio, of the first runs and of the best run
of each (target: the cluster >= 0.5 of the kernel on one GPU) and writes
``benchmarks/results/cluster-<date>.json``/``.md``.
Then the same comparison when nothing large crosses between the kernel and the workers: the
cell ``s = np.sqrt(x * x + 1).sum(axis=1)`` (one float per row comes back) over the NumPy
input in the kernel, and over a Dask array of the same size made and held on the workers
(``da.random``, as a cluster job loads its data where it runs), twice: the second run finds
each block page-locked by the first, as the kernel's run finds ``x`` (since 2026-12-04T1245).

On a GPU the cluster rows run once per transport (``--transports``, default ``ipc,shm``):
``ipc``, blocks through device slots of the kernel's GPU the worker opens by CUDA IPC
handles (blocks of ``--ipc-block``, default 512MiB: at 128 MiB the task round trips cost more
than the copies they overlap, ``cluster-ipc-2026-12-04T1930``), and ``shm``, the ring of
shared-memory slots (CUDA IPC turned off), each with its ratio to the kernel's run.

Without a GPU it says so and exits 0; ``--host`` runs the same comparison on the CPU
fallback (a LocalCluster of 2 worker processes, ``--size`` of input, default 256MiB) and
records those figures labelled "host" (NumPy on the CPU; they say nothing of a GPU).

Usage: ``python3 benchmarks/cluster_bench.py [--budget 4GiB] [--transports ipc,shm]
[--ipc-block 512MiB] [--host [--size 256MiB]] [--out DIR]``
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np
from _results import add_out, host, python, stamp, write

from cupy_magic import (
    BatchOptions,
    backend,
    cluster_status,
    run_cell,
    set_budget,
    use_backend,
    use_cluster,
)
from cupy_magic.cluster.ring import SLOTS_PER_WORKER
from cupy_magic.cluster.transport import use_ipc
from cupy_magic.units import format_bytes, parse_size

CELL = "y = np.sqrt(x * x + 1)\n"
ROW_CELL = "s = np.sqrt(x * x + 1).sum(axis=1)\n"  # a result of one value per row


def _gpu() -> bool:
    try:
        import cupy

        return bool(cupy.cuda.is_available())
    except Exception:  # no CuPy, no driver: either way no GPU to measure
        return False


def _timed(cell: str, x: Any, path: str, opts: BatchOptions,
           cluster: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run ``cell`` over ``x`` (results to the host) and time it: its namespace after, and
    its row of figures (with the cluster's own when it ran there)."""
    ns: dict[str, Any] = {"np": np, "x": x}
    t0 = time.perf_counter()
    rep = run_cell(cell, ns, to_host=True, syncs="off", batch=opts, cluster=cluster)
    wall = time.perf_counter() - t0
    row = {"path": path, "wall_s": wall, "input_gbps": x.nbytes / wall / 1e9,
           "report": rep.text_lines()}
    info = rep.batch
    if info is not None and getattr(info, "phases", None):  # the kernel's: where its time went
        row["phases"] = {k: round(v, 4) for k, v in info.phases.items()}
    if info is not None and hasattr(info, "scatter_seconds"):  # it ran on the cluster
        row.update(blocks=info.blocks, run_s=info.run_seconds,
                   scatter_s=info.scatter_seconds, outside_blocks_s=info.scheduler_seconds)
        if info.transport is not None:  # how the blocks' data moved, and why a fallback
            row.update(transport=info.transport.kind, transport_why=info.transport.why,
                       not_ipc=info.transport.not_ipc,
                       slots=info.slots, copy_s=info.copy_seconds,
                       copy_in_s=info.copy_in_seconds, copy_out_s=info.copy_out_seconds)
    return ns, row


def _run(x: np.ndarray, cluster: bool, opts: BatchOptions, label: str = "cluster"
         ) -> dict[str, Any]:
    ns, row = _timed(CELL, x, label if cluster else "kernel (batched)", opts, cluster)
    assert ns["y"].shape == x.shape and float(ns["y"][-1, -1]) == float(
        np.sqrt(x[-1, -1] * x[-1, -1] + 1, dtype=np.float32))
    return row


def _run_rows(x: Any, where: str, opts: BatchOptions) -> dict[str, Any]:
    """ROW_CELL over ``x``: a NumPy array in this kernel (batched, streamed) or a Dask array
    already on the workers; the per-row sums (1/1024 of the input) come back as NumPy."""
    ns, row = _timed(ROW_CELL, x, f"row sums, {where}", opts)
    last = np.asarray(x[-1] if isinstance(x, np.ndarray) else x[-1].compute())
    want = np.sqrt(last * last + 1, dtype=np.float32).sum(dtype=np.float64)
    assert isinstance(ns["s"], np.ndarray) and ns["s"].shape == x.shape[:1]
    assert abs(float(ns["s"][-1]) - want) <= 1e-4 * abs(want), (ns["s"][-1], want)
    return row


def _on_workers(shape: tuple[int, int], rows: int) -> Any:
    """A float32 Dask array of ``shape`` made on the workers (chunks of ``rows`` rows), held
    there: data a cluster job loads where it runs, which never crosses from the kernel."""
    import dask.array as da
    from distributed import wait

    arr = da.random.default_rng(1).random(shape, dtype=np.float32,
                                          chunks=(rows, shape[1])).persist()
    wait(arr)
    return arr


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", default="4GiB", help="VRAM budget; the input is 4x it")
    ap.add_argument("--host", action="store_true", help="run on the CPU fallback instead")
    ap.add_argument("--size", default="256MiB", help="input size with --host")
    ap.add_argument("--transports", default="ipc,shm",
                    help="the cluster runs' transports on a GPU, comma-separated (ipc, shm)")
    ap.add_argument("--ipc-block", default="512MiB", help="bytes per block through CUDA IPC")
    add_out(ap)
    args = ap.parse_args(argv)
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    if not transports or set(transports) - {"ipc", "shm"}:
        ap.error(f"--transports takes ipc and shm, comma-separated; got {args.transports!r}")
    gpu = _gpu()
    if not gpu and not args.host:
        print("cluster_bench: no GPU visible; nothing measured (run on the H200, or pass "
              "--host for the CPU fallback's figures)")
        return 0
    use_backend("cupy" if gpu and not args.host else "host")
    if args.host:
        nbytes = parse_size(args.size)
        set_budget(nbytes // 4)
    else:
        budget = set_budget(args.budget)
        nbytes = 4 * budget.budget_bytes
    cols = 1024
    x = np.random.default_rng(0).random((nbytes // (4 * cols), cols), dtype=np.float32)
    use_cluster("local")
    try:
        # blocks with room in each worker's budget for the cell's temporaries
        opts = BatchOptions(forced=True, nbytes=min(128 << 20, nbytes // 4 // 8))
        # warm: imports, compiles, and the shared-memory ring (made once, kept while the
        # cluster is in use): blocks of the timed run's size, enough to fill each worker's
        # slots, so the timed run reuses them as every later cell does
        workers = len(cluster_status().workers)
        if args.host or not gpu:
            transports = ["shm"]  # the CPU fallback has no CUDA IPC
        ways = {t: opts if t == "shm" else BatchOptions(forced=True, nbytes=min(
            parse_size(args.ipc_block), nbytes // 8)) for t in transports}
        for t, o in ways.items():
            use_ipc(t == "ipc")
            warm = max(64 << 20, (SLOTS_PER_WORKER + 1) * workers * o.nbytes)
            _run(x[: warm // (4 * cols)], True, o, f"cluster ({t})")
        rows = [_run(x, False, opts)]
        for t, o in ways.items():
            use_ipc(t == "ipc")
            rows.append(_run(x, True, o, f"cluster ({t})"))
        # each once more: what the first runs paid once shows as the difference (the kernel's
        # first run page-locks x; making the ring's pages, just before, can slow the host's
        # next large allocations: seen on the CPU fallback)
        again = [_run(x, False, opts)]
        for t, o in ways.items():
            use_ipc(t == "ipc")
            again.append(_run(x, True, o, f"cluster ({t})"))
        use_ipc(True)
        for row in again:
            row["path"] += ", again"
        rows += again
        timed = len(rows)
        # when the data already lives on the workers and the result is small, nothing large
        # crosses between the kernel and the workers: the same GPU work, the other transport
        rows.append(_run_rows(x, "NumPy input in the kernel (batched; x page-locked by the "
                                 "cells before)", opts))
        del x
        xd = _on_workers((nbytes // (4 * cols), cols), opts.nbytes // (4 * cols))
        _run_rows(xd[: 64 * 1024 * 1024 // (4 * cols)], "warm-up", opts)
        rows.append(_run_rows(xd, "Dask input already on the workers", opts))
        # again: each worker page-locked its blocks in the run before and keeps them locked
        # while they live (as the kernel did x), so this is the like-for-like steady state
        rows.append(_run_rows(xd, "Dask input already on the workers, again", opts))
        del xd
    finally:
        use_ipc(True)
        use_cluster("off")
    per = len(ways) + 1  # a kernel row, then a cluster row per transport, twice
    kernel, sums = [rows[0], rows[per]], rows[timed]
    by: dict[str, dict[str, Any]] = {}
    for k, t in enumerate(ways, start=1):
        first, second = rows[k], rows[per + k]
        by[t] = {"ratio_first": first["input_gbps"] / kernel[0]["input_gbps"],
                 "ratio_best": max(first["input_gbps"], second["input_gbps"])
                 / max(r["input_gbps"] for r in kernel),
                 "transport": first.get("transport"),
                 "transport_why": first.get("transport_why", ""),
                 "block_bytes": ways[t].nbytes}
    main_t = next(iter(ways))
    ratio, best = by[main_t]["ratio_first"], by[main_t]["ratio_best"]
    ratio_rows = rows[timed + 1]["input_gbps"] / sums["input_gbps"]
    ratio_again = rows[timed + 2]["input_gbps"] / sums["input_gbps"]
    label = "host (CPU fallback: NumPy on the CPU, no GPU)" if args.host else \
        backend.current().info().name
    nbytes = 4 * cols * (nbytes // (4 * cols))
    result = {"label": label, "input_bytes": nbytes, "budget": format_bytes(nbytes // 4),
              "rows": rows, "ratio_cluster_over_kernel": ratio,
              "ratio_best_cluster_over_best_kernel": best,
              "cluster_transport": rows[1].get("transport"), "by_transport": by,
              "ratio_row_sums_workers_over_kernel": ratio_rows,
              "ratio_row_sums_workers_again_over_kernel": ratio_again,
              "python": python(), "host": host()}
    lines = [f"# cluster_bench on {label}", "",
             f"input {format_bytes(nbytes)} float32 (4x the budget {format_bytes(nbytes // 4)})",
             "", "| path | transport | wall s | input GB/s | kernel's slot copies in / out s |",
             "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r['path']} | {r.get('transport', 'in the kernel')} | {r['wall_s']:.2f} | "
              f"{r['input_gbps']:.2f} | "
              + (f"{r['copy_in_s']:.2f} / {r['copy_out_s']:.2f} |"
                 if r.get("transport") in ("ipc", "shm") else " |")
              for r in rows]
    lines.append("")
    for k, (t, b) in enumerate(by.items(), start=1):
        r = rows[k]
        lines.append(
            f"cluster ({t}, blocks of {format_bytes(b['block_bytes'])}) / kernel: "
            f"{b['ratio_first']:.2f}, best of each / best of the other: {b['ratio_best']:.2f} "
            f"(target on one GPU: >= 0.5); the row's transport: {r.get('transport')}"
            + (f" ({r['transport_why']})" if r.get("transport_why") else "")
            + (f", {r['slots']}, the kernel's copies {r['copy_s']:.2f} s (in "
               f"{r['copy_in_s']:.2f}, out {r['copy_out_s']:.2f})"
               if r.get("transport") in ("ipc", "shm") else ""))
    lines.append(f"row sums, input on the workers / in the kernel: {ratio_rows:.2f} (again: "
                 f"{ratio_again:.2f})")
    print("\n".join(lines))
    write(args.out, f"cluster-{stamp()}{'-host' if args.host else ''}", result, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
