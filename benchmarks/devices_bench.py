"""Several GPUs of one host: the stream benchmark's cell with ``%%gpu --devices`` (issue 16).

One run on a machine of several GPUs: an N GiB float32 NumPy input (``--size``, default
8GiB, page-locked by a first cell as a notebook's second cell finds it), the transfer-bound
cell ``y = np.sqrt(x * x + 1)`` of ``stream_bench.py`` batched over 1, 2 and 4 GPUs (and all
of them), best of ``--reps`` second cells: input GB/s and the scaling against one GPU. The
ceiling is measured in the same run: each GPU's pinned duplex copy alone, and all the GPUs'
at once (they may share host memory bandwidth or a PCIe switch); target: ``--devices all``
at >= 0.85 of the all-GPU ceiling. Then the Dask path (``%gpu_cluster local``:
``dask_cuda.LocalCUDACluster``, one worker per GPU, ``%%gpu --cluster --to-host``) on the
same GPUs and data: its GB/s and its ratio to ``--devices all``. Writes
``benchmarks/results/devices-<stamp>.json`` and ``.md`` (or under ``--out``).

Without a GPU it says so, runs a tiny smoke run on the host backend standing for two devices
(``CUPY_MAGIC_HOST_DEVICES=2``) and exits 0.

Usage: ``python3 benchmarks/devices_bench.py [--size 8GiB] [--reps 3] [--no-dask] [--out DIR]``
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from typing import Any

import numpy as np
from _results import add_out, host, python, stamp, when, write

from cupy_magic import BatchOptions, backend, run_cell, use_cluster
from cupy_magic.units import format_bytes, parse_size

CELL = "y = np.sqrt(x * x + 1)\n"  # stream_bench.py's transfer-bound cell
COLS = 1024
TARGET = 0.85


def smoke() -> int:
    print("no GPU visible (CuPy cannot reach a device): a tiny smoke run on the host backend "
          "standing for two devices; the figures of this benchmark need several GPUs")
    os.environ["CUPY_MAGIC_HOST_DEVICES"] = "2"
    backend.select("host")
    x = np.random.default_rng(0).random((20_000, 8)).astype(np.float32)
    ns = {"np": np, "x": x}
    report = run_cell(CELL, ns, devices="all", syncs="off",
                      batch=BatchOptions(forced=True, rows=1_000))
    assert np.array_equal(ns["y"], np.sqrt(x * x + 1))
    print(report)
    return 0


def _buffers(cp: Any, device: int, nbytes: int) -> tuple[Any, ...]:
    """Pinned source and target, device buffers and two streams on ``device``."""
    with cp.cuda.Device(device):
        src = np.frombuffer(cp.cuda.alloc_pinned_memory(nbytes), np.uint8, nbytes)
        dst = np.frombuffer(cp.cuda.alloc_pinned_memory(nbytes), np.uint8, nbytes)
        src[...] = 1
        d_in, d_out = cp.empty(nbytes, np.uint8), cp.ones(nbytes, np.uint8)
        up, down = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    return src, dst, d_in, d_out, up, down


def _duplex(cp: Any, device: int, bufs: tuple[Any, ...], reps: int) -> None:
    src, dst, d_in, d_out, up, down = bufs
    with cp.cuda.Device(device):
        for _ in range(reps):
            d_in.set(src, stream=up)
            d_out.get(stream=down, out=dst, blocking=False)
        up.synchronize()
        down.synchronize()


def _together(cp: Any, devices: list[int], bufs: dict[int, Any], nbytes: int,
              reps: int) -> float:
    """Input GB/s of the duplex copies of ``devices`` all at once (threads started
    together; their input bytes over the time the last one took)."""
    start = threading.Barrier(len(devices) + 1)
    threads = [threading.Thread(target=lambda d=d: (start.wait(), _duplex(cp, d, bufs[d], reps)))
               for d in devices]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return len(devices) * reps * nbytes / (time.perf_counter() - t0) / 1e9


def ceilings(cp: Any, counts: list[int], nbytes: int = 512 * 2**20,
             reps: int = 8) -> dict[str, Any]:
    """Input GB/s of each GPU's pinned duplex copy alone, and of the first k GPUs' at once
    for each k of ``counts`` (they may share host memory bandwidth or a PCIe switch)."""
    devices = list(range(max(counts)))
    bufs = {d: _buffers(cp, d, nbytes) for d in devices}
    for d in devices:
        _duplex(cp, d, bufs[d], 1)  # warm
    alone = {}
    for d in devices:
        t0 = time.perf_counter()
        _duplex(cp, d, bufs[d], reps)
        alone[d] = reps * nbytes / (time.perf_counter() - t0) / 1e9
    together = {k: _together(cp, devices[:k], bufs, nbytes, reps) for k in counts}
    return {"alone_input_gbps": alone, "together_input_gbps": together}


def _check(y: np.ndarray, x: np.ndarray) -> bool:
    step = max(1, len(x) // 1_000)
    return bool(np.allclose(y[::step], np.sqrt(x[::step] * x[::step] + 1)))


def devices_runs(x: np.ndarray, devices: list[int], reps: int) -> dict[str, Any]:
    """A first cell (page-locks the input), then the best of ``reps`` second cells."""
    spec = ",".join(map(str, devices))
    ns: dict[str, Any] = {"np": np, "x": x}
    opts = BatchOptions(forced=True)
    run_cell(CELL, ns, devices=spec, batch=opts, syncs="off")
    ok = _check(ns.pop("y"), x)
    runs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        report = run_cell(CELL, ns, devices=spec, batch=opts, syncs="off")
        runs.append((time.perf_counter() - t0, report))
        ok = ok and _check(ns.pop("y"), x)
    best, report = min(runs, key=lambda r: r[0])
    return {"devices": spec, "gbps": x.nbytes / best / 1e9, "seconds": best,
            "all_seconds": [t for t, _ in runs], "correct": ok,
            "per_device": [{"device": d.device, "batches": d.batches, "rows": d.rows,
                            "gbps_busy": d.gbps, "busy_s": d.seconds,
                            "peak_pool": d.peak_pool_bytes} for d in report.devices],
            "report": report.text_lines()}


def dask_run(x: np.ndarray, reps: int) -> dict[str, Any]:
    """The same cell on ``%gpu_cluster local`` (one worker per GPU), rows gathered back."""
    try:
        use_cluster("local")
    except Exception as exc:  # dask-cuda missing or failing: say so in the results
        return {"skipped": f"{type(exc).__name__}: {exc}".split("\n")[0]}
    try:
        opts = BatchOptions(forced=True, nbytes=128 * 2**20)
        warm = {"np": np, "x": x[: 64 * 2**20 // (4 * COLS)]}
        run_cell(CELL, warm, to_host=True, syncs="off", batch=opts, cluster=True)
        times, ok = [], True
        for _ in range(reps):
            ns: dict[str, Any] = {"np": np, "x": x}
            t0 = time.perf_counter()
            run_cell(CELL, ns, to_host=True, syncs="off", batch=opts, cluster=True)
            times.append(time.perf_counter() - t0)
            ok = ok and _check(ns.pop("y"), x)
        return {"gbps": x.nbytes / min(times) / 1e9, "all_seconds": times, "correct": ok}
    finally:
        use_cluster("off")


def _markdown(fig: dict[str, Any]) -> list[str]:
    ceil = fig["ceiling"]
    lines = [f"# devices_bench on {fig['gpus']} x {fig['gpu']}", "",
             f"input {format_bytes(fig['input_bytes'])} float32, cell `{CELL.strip()}`, "
             "second cells (input page-locked), best of "
             f"{fig['reps']}", "",
             "ceiling (pinned duplex, input GB/s): " + ", ".join(
                 f"GPU {d} alone {g:.1f}" for d, g in ceil["alone_input_gbps"].items())
             + "; at once: " + ", ".join(f"{k} GPUs {g:.1f}"
                                         for k, g in ceil["together_input_gbps"].items()), "",
             "| --devices | input GB/s | x one GPU | of the ceiling of those GPUs | correct |",
             "| --- | --- | --- | --- | --- |"]
    for row in fig["runs"]:
        lines.append(f"| {row['devices']} | {row['gbps']:.1f} | {row['scaling']:.2f} | "
                     f"{row['of_ceiling']:.2f} | {row['correct']} |")
    dask = fig.get("dask", {})
    if "gbps" in dask:
        lines += ["", f"Dask (LocalCUDACluster, one worker per GPU, --cluster --to-host): "
                      f"{dask['gbps']:.1f} GB/s, {dask['ratio_to_devices_all']:.2f} of "
                      "--devices all"]
    elif dask:
        lines += ["", f"Dask path: {dask.get('skipped', 'not run')}"]
    lines += ["", f"target: --devices all >= {TARGET} of the all-GPU ceiling: "
                  f"{fig['runs'][-1]['of_ceiling']:.2f}"]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="8GiB", help="input size (default 8GiB)")
    parser.add_argument("--reps", type=int, default=3, help="second cells per count, best kept")
    parser.add_argument("--no-dask", action="store_true", help="leave out the Dask path")
    add_out(parser)
    args = parser.parse_args(argv)
    cupy, why = backend.probe_cupy()
    if cupy is None:
        print(why)
        return smoke()
    be, _ = backend.select("cupy")
    count = be.device_count()
    counts = sorted({k for k in (1, 2, 4, count) if k <= count})
    n = parse_size(args.size) // (4 * COLS)
    x = np.empty((n, COLS), np.float32)
    x[...] = np.random.default_rng(0).random(COLS, dtype=np.float32)
    x[:, 0] = np.arange(n, dtype=np.float32)
    fig: dict[str, Any] = {"gpu": be.info().name, "gpus": count, "input_bytes": int(x.nbytes),
                           "reps": args.reps, "cupy": cupy.__version__,
                           "python": python(), "host": host(), "date": when(),
                           "ceiling": ceilings(cupy, counts)}
    fig["runs"] = []
    for k in counts:
        row = devices_runs(x, list(range(k)), args.reps)
        row["of_ceiling"] = row["gbps"] / fig["ceiling"]["together_input_gbps"][k]
        row["scaling"] = row["gbps"] / (fig["runs"][0]["gbps"] if fig["runs"] else row["gbps"])
        fig["runs"].append(row)
        print(f"--devices {row['devices']}: {row['gbps']:.1f} GB/s "
              f"(x{row['scaling']:.2f}, {row['of_ceiling']:.2f} of the ceiling)", flush=True)
    if not args.no_dask:
        fig["dask"] = dask_run(x, args.reps)
        if "gbps" in fig["dask"]:
            fig["dask"]["ratio_to_devices_all"] = fig["dask"]["gbps"] / fig["runs"][-1]["gbps"]
    lines = _markdown(fig)
    print("\n".join(lines))
    write(args.out, f"devices-{stamp()}", fig, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
