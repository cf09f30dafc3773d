"""How much a live VRAM panel (sampling every 0.5 s) slows a CPU-bound and a GPU-bound cell.

Runs each workload alternately without and with a panel subscribed to the sampler (the real
sources: NVML, pool, budget; the real widget update, without a browser) and reports the
median times and the slowdown. Target: under 1%. Results are written to
``benchmarks/results/`` only when run on a GPU.

    python benchmarks/panel_overhead.py [--repeats 7] [--interval 0.5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from cupy_magic import backend, monitor, panel

RESULTS = Path(__file__).resolve().parent / "results"


def cpu_workload() -> Callable[[], None]:
    """About three seconds of NumPy matmuls on the host (several sampling periods)."""
    rng = np.random.default_rng(0)
    a = rng.random((700, 700))

    def run() -> None:
        x = a
        for _ in range(320):
            x = np.tanh(x @ a / 700.0)

    return run


def gpu_workload(cp: Any) -> Callable[[], None]:
    """About three seconds of CuPy matmuls on an H200, synchronised at the end like a cell."""
    a = cp.random.default_rng(0).random((8192, 8192), dtype=cp.float32)

    def run() -> None:
        x = a
        for _ in range(150):
            x = cp.tanh(x @ a / 8192.0)
        cp.cuda.get_current_stream().synchronize()

    return run


def measure(work: Callable[[], None], repeats: int, interval: float) -> dict[str, Any]:
    """Median seconds of ``work`` without and with a live panel, interleaved.

    One panel stays subscribed; "without" runs pause the sampler, so both modes share the
    same thread, widgets and memory, and only the sampling itself differs.
    """
    work()  # warm caches, kernels, the pool
    off: list[float] = []
    on: list[float] = []
    sampler = monitor.Sampler(interval=interval)
    view = panel.VramPanel(sampler, 0)  # subscribes: the thread samples and redraws
    try:
        for _ in range(repeats):
            sampler.pause()
            t0 = time.perf_counter()
            work()
            off.append(time.perf_counter() - t0)
            sampler.resume()
            t0 = time.perf_counter()
            work()
            on.append(time.perf_counter() - t0)
    finally:
        view.close()
    base, live = statistics.median(off), statistics.median(on)
    return {"without_panel_s": base, "with_panel_s": live,
            "slowdown_pct": 100.0 * (live - base) / base, "runs_without": off,
            "runs_with": on, "samples_taken": sampler.ticks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--interval", type=float, default=monitor.DEFAULT_INTERVAL)
    args = parser.parse_args()
    be = backend.current()
    results: dict[str, Any] = {
        "when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "device": be.info().name, "backend": be.name,
        "interval_s": args.interval, "repeats": args.repeats, "workloads": {},
    }
    workloads = {"cpu_bound": cpu_workload()}
    if be.is_gpu:
        workloads["gpu_bound"] = gpu_workload(be.cp)
    for name, work in workloads.items():
        r = measure(work, args.repeats, args.interval)
        results["workloads"][name] = r
        print(f"{name:>10}: {r['without_panel_s']:.3f} s without, {r['with_panel_s']:.3f} s "
              f"with a panel every {args.interval} s: {r['slowdown_pct']:+.2f}% "
              f"({r['samples_taken']} samples)")
    if be.is_gpu:
        RESULTS.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = RESULTS / f"panel_overhead-{stamp}.json"
        path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path}")
    else:
        print("no GPU: results not written (they are recorded from the H200)")


if __name__ == "__main__":
    main()
