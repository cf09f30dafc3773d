"""How much a live VRAM panel (sampling every 0.5 s) slows a CPU-bound and a GPU-bound cell.

Two measurements, both against the target "under 1% slower with a panel sampling every 0.5 s":

1. The cost of one sampler tick, on the real sources (NVML, pool, budget, host memory) and
   the real widget update, drawn with a full two-minute history: wall and CPU ms, medians
   over ``--ticks`` ticks, and the fraction of one core this takes at ``--interval``. This is
   the mechanism: a cell can only lose the core time (and the GIL time) the ticks take.
2. Paired A/B runs of each workload, without (A) and with (B) the panel sampling, in ABBA
   order (pairs alternate AB, BA) so that slow drift (clocks, caches, other load) cancels.
   The figure is the median of the per-pair ratios with/without and its distribution-free
   95% confidence interval (order statistics of the ratios); raw times are kept.

Each phase gets one sampler with one panel subscribed, its history pre-filled to two minutes
(as a panel left open draws it); "without" runs pause that sampler, so both modes share the
same thread, widgets and memory, and only the sampling itself differs. The widget update
runs without a browser (no comm messages); the JSON encoding of the state a kernel would send
is timed separately as an estimate. The CPU-bound cell's BLAS threads are pinned (default 1,
the cell most exposed to a sampler that needs the GIL) through environment variables set
before NumPy is imported.

Results (JSON and a Markdown table) are written to ``benchmarks/results/`` only on a GPU.
Without one, the CPU-bound cell and the tick cost run on the host backend and are printed.

    python benchmarks/panel_overhead.py [--repeats 20] [--interval 0.5] [--seconds 0.75]
                                        [--ticks 200] [--blas-threads N]
                                        [--workloads cpu_bound,gpu_bound]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

# monitor does not import NumPy (pin_blas says so if that ever changes); panel and backend do.
from _results import RESULTS, host, python, stamp, when, write

from cupy_magic.monitor import sampler as monitor

TARGET_PCT = 1.0
BLAS_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


# --- BLAS threads (must be decided before NumPy is imported) -----------------------------

def pin_blas(requested: int | None) -> str:
    """Set the BLAS thread count through the environment; return how it was chosen."""
    if "numpy" in sys.modules:
        return "not pinned (NumPy was imported before the script could set it)"
    if requested is None:
        for var in BLAS_ENV[:2]:
            if os.environ.get(var):
                return f"pinned by {var}={os.environ[var]} from the environment"
        # One thread: the cell most exposed to the sampler (it needs the GIL and one core
        # throughout), and steadier than several BLAS threads on a shared machine (with 4 on
        # the H200 the runs of one mode varied from 0.43 to 0.60 s).
        requested = 1
    if requested <= 0:
        return "library default (not pinned)"
    for var in BLAS_ENV:
        os.environ[var] = str(requested)
    return f"pinned to {requested} by {'/'.join(BLAS_ENV[:2])} before NumPy was imported"


def blas_threads_in_use() -> tuple[int | None, str]:
    """The BLAS thread count NumPy's library reports now, and the library (best effort)."""
    with contextlib.suppress(ImportError):
        from threadpoolctl import threadpool_info

        blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
        if blas:
            return int(blas[0]["num_threads"]), f"{blas[0]['internal_api']} (threadpoolctl)"
    try:
        with open("/proc/self/maps", encoding="utf-8") as fh:
            paths = {line.split()[-1] for line in fh if "openblas" in line.lower()}
    except OSError:
        return None, "unknown"
    for path in sorted(paths):
        with contextlib.suppress(OSError):
            lib = ctypes.CDLL(path)
            for symbol in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_",
                           "openblas_get_num_threads"):
                if hasattr(lib, symbol):
                    return int(getattr(lib, symbol)()), f"OpenBLAS ({Path(path).name})"
    return None, "unknown"


# --- workloads ---------------------------------------------------------------------------

def cpu_workload(np: Any) -> Callable[[int], None]:
    """NumPy matmuls and tanh on the host, ``steps`` of them (a few ms each)."""
    rng = np.random.default_rng(0)
    a = rng.random((700, 700))

    def run(steps: int) -> None:
        x = a
        for _ in range(steps):
            x = np.tanh(x @ a / 700.0)

    return run


def gpu_workload(cp: Any) -> Callable[[int], None]:
    """CuPy 8192x8192 float32 matmuls (about 22 ms each on an H200), synchronised like a cell."""
    a = cp.random.default_rng(0).random((8192, 8192), dtype=cp.float32)

    def run(steps: int) -> None:
        x = a
        for _ in range(steps):
            x = cp.tanh(x @ a / 8192.0)
        cp.cuda.get_current_stream().synchronize()

    return run


def calibrate(run: Callable[[int], None], seconds: float) -> int:
    """How many steps make one run last about ``seconds`` (sampler paused)."""
    run(2)
    steps = 2
    while True:
        t0 = time.perf_counter()
        run(steps)
        took = time.perf_counter() - t0
        if took >= 0.15 or steps >= 1 << 20:
            return max(1, round(steps * seconds / took))
        steps *= 2


# --- statistics --------------------------------------------------------------------------

def median_ci(values: list[float], level: float = 0.95) -> tuple[float, float, float, str]:
    """Distribution-free CI of the median from order statistics (binomial, exact coverage).

    Returns ``(low, high, coverage, ranks)``: the widest-inset pair of order statistics
    whose coverage is at least ``level``; with too few values, the full range and its
    (lower) coverage.
    """
    xs = sorted(values)
    n = len(xs)

    def coverage(k: int) -> float:  # of [x_(k), x_(n-k+1)]: 1 - 2 P(Binomial(n, 1/2) < k)
        return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) / 2.0**n

    best = max((k for k in range(1, (n + 1) // 2 + 1) if coverage(k) >= level), default=1)
    return xs[best - 1], xs[n - best], coverage(best), f"{best}..{n - best + 1} of {n}"


def verdict(low_pct: float, high_pct: float, coverage: float) -> str:
    if coverage < 0.95:
        return (f"no verdict: too few pairs for a 95% CI (the range covers only "
                f"{100 * coverage:.1f}%; 6 pairs or more are needed)")
    if high_pct < TARGET_PCT:
        return f"meets the target: the whole 95% CI is below +{TARGET_PCT:g}%"
    if low_pct >= TARGET_PCT:
        return f"misses the target: the whole 95% CI is at or above +{TARGET_PCT:g}%"
    return f"inconclusive: the 95% CI spans +{TARGET_PCT:g}% (more pairs would narrow it)"


def quantile(values: list[float], q: float) -> float:
    xs = sorted(values)
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))]


# --- a live panel with a full history ----------------------------------------------------

class ShiftClock:
    """Monotonic time, shifted for the calling thread only while the history is pre-filled.

    A :class:`cupy_magic.monitor.sampler.Clock` (same two methods); the sampler thread always sees
    the true time, so its schedule is untouched.
    """

    def __init__(self) -> None:
        self._local = threading.local()

    def now(self) -> float:
        return time.monotonic() + getattr(self._local, "shift", 0.0)

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.wait(timeout)

    @contextlib.contextmanager
    def shifted(self, seconds: float) -> Iterator[None]:
        self._local.shift = seconds
        try:
            yield
        finally:
            self._local.shift = 0.0


class Replay:
    """Sources that repeat one real reading of each figure (to pre-fill a history fast)."""

    def __init__(self, live: Any, device: int = 0) -> None:
        self.live, self._reading, self._pool = live, live.reading(device), live.pool(device)
        self._host, self._budget, self._status = live.host(), live.budget(), live.status()

    def devices(self) -> list[str]:
        return self.live.devices()

    def reading(self, device: int) -> Any:
        return self._reading

    def pool(self, device: int) -> Any:
        return self._pool

    def row(self, device: int) -> Any:
        return self.live.row(device)

    def host(self) -> tuple[int, int]:
        return self._host

    def budget(self) -> str:
        return self._budget

    def cell(self) -> None:
        return None

    def status(self) -> tuple[str, str, str]:
        return self._status


@contextlib.contextmanager
def live_panel(panel: Any, interval: float) -> Iterator[tuple[Any, Any]]:
    """A paused sampler on the real sources with one panel subscribed, its history full.

    The history a panel draws grows for ``history_seconds`` (two minutes) and the drawing
    cost with it, so it is pre-filled to that length: samples of one real reading, spaced
    one interval apart and ending now, taken through ``sampler.tick()`` (the panel draws each).
    """
    clock = ShiftClock()
    sampler = monitor.Sampler(interval=interval, clock=clock)
    sampler.pause()  # the thread starts paused: nothing samples until resume()
    view = panel.VramPanel(sampler, 0)  # subscribed: once resumed, the thread samples and draws
    try:
        live, steady = sampler.sources, int(sampler.history_seconds / interval)
        sampler.sources = Replay(live, 0)
        try:
            for i in range(steady):
                with clock.shifted(-(steady - i) * interval):
                    sampler.tick()
        finally:
            sampler.sources = live
        yield sampler, view
    finally:
        view.close()


# --- 1. the cost of one tick -------------------------------------------------------------

def _timed(func: Callable[[], Any]) -> tuple[Any, float, float]:
    """Result, wall ms and this thread's CPU ms of one call."""
    c0, t0 = time.thread_time(), time.perf_counter()
    result = func()
    t1, c1 = time.perf_counter(), time.thread_time()
    return result, 1e3 * (t1 - t0), 1e3 * (c1 - c0)


def _summary(wall: list[float], cpu: list[float]) -> dict[str, float]:
    return {"wall_ms_median": statistics.median(wall), "wall_ms_p90": quantile(wall, 0.9),
            "wall_ms_max": max(wall), "cpu_ms_median": statistics.median(cpu),
            "cpu_ms_p90": quantile(cpu, 0.9)}


def tick_cost(sampler: Any, view: Any, ticks: int, limit_s: float = 20.0) -> dict[str, Any]:
    """Time what one tick does, in this thread, with the sampler thread paused.

    Each tick: ``sampler.sample(0)`` (status, NVML reading, pool, host memory, budget, cell),
    then ``view.update(sample, history)`` with a history as long as a panel open for
    ``history_seconds`` holds (the drawing cost grows with it), then the JSON encoding of the
    four HTML values the update set (what a kernel would serialise to the browser). The
    history is the pre-filled one, each new sample appended one interval later.
    """
    interval = sampler.interval
    ring: deque[Any] = deque(sampler.history(0), maxlen=len(sampler.history(0)))
    now = ring[-1].time
    sampler.sample(0)  # warm
    src = sampler.sources
    parts: dict[str, tuple[list[float], list[float]]] = {}
    for name, call in (("nvml reading", lambda: src.reading(0)), ("pool", lambda: src.pool(0)),
                       ("host memory", src.host), ("budget", src.budget),
                       ("status", src.status), ("cell", src.cell)):
        walls, cpus = [], []
        for _ in range(max(5, ticks // 8)):
            _, w, c = _timed(call)
            walls.append(w)
            cpus.append(c)
        parts[name] = (walls, cpus)
    s_wall, s_cpu, u_wall, u_cpu, j_wall, j_cpu = [], [], [], [], [], []
    payload = 0
    start = time.perf_counter()
    for i in range(ticks):
        sample, w, c = _timed(lambda: sampler.sample(0))
        s_wall.append(w)
        s_cpu.append(c)
        ring.append(dataclasses.replace(sample, time=now + (i + 1) * interval))
        history = tuple(ring)
        _, w, c = _timed(lambda sample=sample, history=history: view.update(sample, history))
        u_wall.append(w)
        u_cpu.append(c)
        state = {"title": view.title.value, "figures": view.figures.value,
                 "history": view.history.value, "status": view.status.value}
        text, w, c = _timed(lambda state=state: json.dumps({"method": "update", "state": state}))
        j_wall.append(w)
        j_cpu.append(c)
        payload = len(text)
        if time.perf_counter() - start > limit_s:
            break
    tick_wall = [a + b + c for a, b, c in zip(s_wall, u_wall, j_wall, strict=True)]
    tick_cpu = [a + b + c for a, b, c in zip(s_cpu, u_cpu, j_cpu, strict=True)]
    total = _summary(tick_wall, tick_cpu)
    return {
        "ticks": len(s_wall), "history_samples": len(ring), "interval_s": interval,
        "sample": _summary(s_wall, s_cpu), "panel_update": _summary(u_wall, u_cpu),
        "json_state_estimate": {**_summary(j_wall, j_cpu), "bytes": payload},
        "tick": total,
        "core_fraction_cpu": total["cpu_ms_median"] / (1e3 * interval),
        "core_fraction_wall": total["wall_ms_median"] / (1e3 * interval),
        "sources": {k: _summary(*v) for k, v in parts.items()},
        "errors_in_last_sample": list(sample.errors),
    }


# --- 2. paired A/B runs ------------------------------------------------------------------

def ab_pairs(run: Callable[[int], None], steps: int, pairs: int, sampler: Any,
             settle: float) -> dict[str, Any]:
    """``pairs`` ABBA-ordered pairs of runs without (A, sampler paused) and with (B) sampling."""
    rows: list[dict[str, Any]] = []
    history_before = len(sampler.history(0))
    for i in range(-1, pairs):  # pair -1 warms both modes and is not kept
        order = ("without", "with") if i % 2 == 0 else ("with", "without")
        row: dict[str, Any] = {"order": "AB" if order[0] == "without" else "BA"}
        for mode in order:
            if mode == "with":
                sampler.resume()
            else:
                sampler.pause()
            gc.collect()
            time.sleep(settle)  # lets a tick in flight finish before a run without sampling
            before = sampler.ticks
            t0 = time.perf_counter()
            run(steps)
            row[f"{mode}_s"] = time.perf_counter() - t0
            row[f"ticks_{mode}"] = sampler.ticks - before
        row["ratio"] = row["with_s"] / row["without_s"]
        if i >= 0:
            rows.append(row)
    sampler.pause()
    ratios = [r["ratio"] for r in rows]
    low, high, coverage, ranks = median_ci(ratios)
    med = statistics.median(ratios)

    def pct(r: float) -> float:
        return 100.0 * (r - 1.0)

    by_order = {o: [r["ratio"] for r in rows if r["order"] == o] for o in ("AB", "BA")}
    with_ticks = [r["ticks_with"] for r in rows]
    with_time = sum(r["with_s"] for r in rows)
    return {
        "steps": steps, "pairs": len(rows), "settle_s": settle,
        "without_median_s": statistics.median(r["without_s"] for r in rows),
        "with_median_s": statistics.median(r["with_s"] for r in rows),
        "slowdown_pct": pct(med), "ci95_pct": [pct(low), pct(high)],
        "ci_coverage": coverage, "ci_ranks": ranks,
        "verdict": verdict(pct(low), pct(high), coverage),
        "slowdown_pct_by_order": {o: pct(statistics.median(v)) if v else None
                                  for o, v in by_order.items()},
        "ticks_per_s_with": sum(with_ticks) / with_time if with_time else 0.0,
        "ticks_during_without": sum(r["ticks_without"] for r in rows),
        "history_samples": [history_before, len(sampler.history(0))],
        "pairs_raw": rows,
    }


# --- reporting ---------------------------------------------------------------------------

def _versions(np: Any, be: Any) -> dict[str, str]:
    import cupy_magic

    out = {"python": python(), "numpy": np.__version__,
           "cupy_magic": cupy_magic.__version__}
    for dist in ("ipywidgets", "nvidia-ml-py", "threadpoolctl"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    with contextlib.suppress(Exception):
        out["blas"] = np.__config__.CONFIG["Build Dependencies"]["blas"]["version"]
    if be.is_gpu:
        info = be.info()
        out.update(cupy=info.cupy_version, driver=info.driver, cuda_runtime=info.runtime)
    with contextlib.suppress(Exception):
        out["git_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parent,
            capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    return out


def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def print_tick(t: dict[str, Any]) -> None:
    print(f"one tick, median of {t['ticks']} (history of {t['history_samples']} samples), "
          "wall / CPU ms:")
    for label, key in (("sample (NVML + pool + host + budget)", "sample"),
                       ("panel widget update", "panel_update"),
                       ("JSON of the widget state (kernel send estimate)", "json_state_estimate"),
                       ("tick total", "tick")):
        f = t[key]
        print(f"  {label:>48}: {f['wall_ms_median']:7.3f} / {f['cpu_ms_median']:7.3f}"
              f"   (p90 {f['wall_ms_p90']:.3f} / {f['cpu_ms_p90']:.3f})")
    parts = ", ".join(f"{k} {v['wall_ms_median']:.3f}/{v['cpu_ms_median']:.3f}"
                      for k, v in t["sources"].items())
    print(f"  sources, wall/CPU ms: {parts}")
    print(f"  at one tick every {t['interval_s']:g} s: {100 * t['core_fraction_cpu']:.3f}% of "
          f"one core in CPU time ({100 * t['core_fraction_wall']:.3f}% in wall time); a cell "
          "that needs that core or the GIL throughout can lose about that much")
    if t["errors_in_last_sample"]:
        print(f"  errors in the samples: {'; '.join(t['errors_in_last_sample'])}")


def print_ab(name: str, r: dict[str, Any], note: str) -> None:
    low, high = r["ci95_pct"]
    order = r["slowdown_pct_by_order"]
    print(f"{name} ({note}; {r['pairs']} ABBA pairs of {r['steps']} steps):")
    print(f"  without {r['without_median_s']:.4f} s, with {r['with_median_s']:.4f} s "
          f"(medians); {r['ticks_per_s_with']:.2f} ticks/s while sampling, "
          f"{r['ticks_during_without']} during runs without")
    print(f"  slowdown (median of per-pair ratios) {r['slowdown_pct']:+.3f}%, CI "
          f"[{low:+.3f}%, {high:+.3f}%] (order statistics {r['ci_ranks']}, coverage "
          f"{100 * r['ci_coverage']:.1f}%); without-first pairs {order['AB']:+.3f}%, "
          f"with-first pairs {order['BA']:+.3f}%")
    print(f"  history drawn: {r['history_samples'][0]} samples at the start, "
          f"{r['history_samples'][1]} at the end; {r['verdict']}")
    raw = "  ".join(f"{p['without_s']:.3f}/{p['with_s']:.3f}" for p in r["pairs_raw"])
    print(f"  raw without/with s: {raw}")


def markdown(res: dict[str, Any]) -> str:
    t = res["tick_cost"]
    lines = [f"Panel overhead on {res['device']} ({res['when']}), sampling every "
             f"{res['interval_s']:g} s; BLAS threads: {res['blas_threads']['note']} "
             f"({res['blas_threads']['in_use']} in use); target < {TARGET_PCT:g}%", "",
             "| cell | pairs x run | without (s) | with (s) | slowdown (median of ratios) "
             "| CI (coverage) | verdict |",
             "| --- | --- | ---: | ---: | ---: | --- | --- |"]
    for name, r in res["workloads"].items():
        low, high = r["ci95_pct"]
        lines.append(f"| {name} | {r['pairs']} x {r['without_median_s']:.2f} s "
                     f"| {r['without_median_s']:.4f} | {r['with_median_s']:.4f} "
                     f"| {r['slowdown_pct']:+.3f}% | [{low:+.3f}%, {high:+.3f}%] "
                     f"({100 * r['ci_coverage']:.1f}%) "
                     f"| {r['verdict'].split(':')[0]} |")
    lines += ["", f"| one tick (median of {t['ticks']}) | wall ms | CPU ms |",
              "| --- | ---: | ---: |"]
    for label, key in (("sample: NVML + pool + host + budget", "sample"),
                       (f"panel update ({t['history_samples']}-sample history)",
                        "panel_update"),
                       (f"JSON of the widget state ({t['json_state_estimate']['bytes']} B)",
                        "json_state_estimate"), ("tick total", "tick")):
        f = t[key]
        lines.append(f"| {label} | {f['wall_ms_median']:.3f} | {f['cpu_ms_median']:.3f} |")
    lines += ["", f"One tick every {t['interval_s']:g} s takes {100 * t['core_fraction_cpu']:.3f}%"
              f" of one core (CPU time), {100 * t['core_fraction_wall']:.3f}% in wall time."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20,
                        help="A/B pairs per workload (ABBA order; default 20)")
    parser.add_argument("--interval", type=float, default=monitor.DEFAULT_INTERVAL,
                        help=f"sampling period in seconds (default {monitor.DEFAULT_INTERVAL})")
    parser.add_argument("--seconds", type=float, default=0.75,
                        help="length of one run, calibrated per workload (default 0.75)")
    parser.add_argument("--ticks", type=int, default=200,
                        help="ticks timed for the tick cost (default 200, at most 20 s)")
    parser.add_argument("--workloads", default="cpu_bound,gpu_bound",
                        help="comma-separated workloads to pair (default cpu_bound,gpu_bound; "
                             "gpu_bound needs a GPU)")
    parser.add_argument("--blas-threads", type=int, default=None,
                        help="BLAS threads for the CPU-bound cell (default 1, or "
                             "OPENBLAS_NUM_THREADS/OMP_NUM_THREADS if set; 0: not pinned)")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.ticks < 1 or args.seconds <= 0:
        parser.error("--repeats and --ticks must be >= 1 and --seconds > 0")
    chosen = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = sorted(set(chosen) - {"cpu_bound", "gpu_bound"})
    if unknown or not chosen:
        parser.error(f"--workloads {args.workloads!r}: choose from cpu_bound, gpu_bound, "
                     "e.g. --workloads cpu_bound")
    started = time.perf_counter()
    blas_note = pin_blas(args.blas_threads)

    import numpy as np

    from cupy_magic import backend
    from cupy_magic.view import panel

    be = backend.current()
    threads, blas_lib = blas_threads_in_use()
    res: dict[str, Any] = {
        "when": when(), "host": host(), "device": be.info().name, "backend": be.name,
        "cpu": _cpu_model(), "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "versions": _versions(np, be), "interval_s": args.interval, "pairs": args.repeats,
        "run_seconds": args.seconds, "target_pct": TARGET_PCT,
        "blas_threads": {"note": blas_note, "in_use": threads, "library": blas_lib},
        "method": "ABBA-paired runs without (sampler paused) / with a live panel; median of "
                  "per-pair ratios with an order-statistic 95% CI; tick cost timed in the "
                  "main thread with the sampler paused",
        "workloads": {},
    }
    print(f"{res['device']} ({be.name} backend), {res['cpu']}, {res['cores_usable']} cores; "
          f"panel sampling every {args.interval:g} s; target < {TARGET_PCT:g}%")
    print(f"BLAS threads for the CPU-bound cell: {blas_note}; in use: {threads} ({blas_lib})")

    with live_panel(panel, args.interval) as (sampler, view):
        res["tick_cost"] = tick = tick_cost(sampler, view, args.ticks)
    print_tick(tick)
    # Before each run, wait for a tick in flight to end (both modes wait the same).
    settle = min(0.25, max(0.05, 2e-3 * tick["tick"]["wall_ms_p90"]))
    workloads: dict[str, tuple[Callable[[int], None], str]] = {}
    if "cpu_bound" in chosen:
        workloads["cpu_bound"] = (cpu_workload(np), f"NumPy, {threads} BLAS thread(s)")
    if "gpu_bound" in chosen and be.is_gpu:
        workloads["gpu_bound"] = (gpu_workload(be.cp), "CuPy matmuls, synchronised")
    for name, (work, note) in workloads.items():
        steps = calibrate(work, args.seconds)
        with live_panel(panel, args.interval) as (sampler, _):
            r = ab_pairs(work, steps, args.repeats, sampler, settle)
        r["note"] = note
        res["workloads"][name] = r
        print_ab(name, r, note)
    res["elapsed_s"] = time.perf_counter() - started
    print(f"took {res['elapsed_s']:.0f} s")
    if be.is_gpu:
        write(RESULTS, f"panel_overhead-{stamp('%Y%m%d-%H%M%S')}", res, markdown(res))
    else:
        print("no GPU: results not written (they are recorded from the H200)")


if __name__ == "__main__":
    main()
