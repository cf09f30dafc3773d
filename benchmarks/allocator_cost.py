"""What one array's allocation costs under each allocator a cell could run with (issue 20).

``alternation.py`` put the small loop's gap to the hand port on the allocator cupy_magic
installs (a Python function CuPy calls for every array). This splits that cost:

- ``ns`` per ``cupy.cuda.alloc`` of 40,000 bytes, freed at once (best of 5 runs of 200,000
  calls), under: CuPy's default pool (``default``); cupy_magic's pool called directly
  (``pool_bound``, no Python frame); a one-line Python function in front of it
  (``py_wrap``); cupy_magic's allocator with no measurement open (``magic``), with one open
  (``magic_measuring``, it reads the pool's bytes in use after each array), and with one
  open while 10,000 other arrays live (``magic_measuring_live``: the pool sums its arrays
  for each read); CUDA's stream-ordered pool (``async_bound``) and a Python function in
  front of it that checks a limit against the pool's bytes in use (``async_checked``);
- the reads alone: ``used_bytes`` of the pool with few and with 10,000 arrays live, and the
  stream-ordered pool's bytes-in-use attribute;
- the small loop (``peer_bench.py``'s 300 steps on 10,000 float32) as a hand port under
  each allocator, all timed in turn, and ``run_cell`` of it with ``to_host=("y",)``;
- the fixed cost of a cell: ``run_cell("y = v")`` of 16 float32 against the hand port's
  ``asnumpy(asarray(v))``, and ``y = v + 0`` over the small loop's 10,000 float32.

Usage::

    python3 benchmarks/allocator_cost.py [--out DIR]

It needs a GPU (it exits 0 and says so without one).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _results import add_out, stamp, write
from peer_bench import _best_alternating

CODE = "y = v\nfor _ in range(300):\n    y = y * 0.999 + 0.001\n"
LIVE = 10_000


def per_call_ns(cp: Any, allocator: Callable[[int], Any], calls: int = 200_000,
                nbytes: int = 40_000, runs: int = 5) -> float:
    """Best ns per ``cupy.cuda.alloc(nbytes)`` (freed at once) under ``allocator``."""
    alloc = cp.cuda.alloc
    best = float("inf")
    with cp.cuda.using_allocator(allocator):
        alloc(nbytes)
        for _ in range(runs):
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                alloc(nbytes)
            best = min(best, (time.perf_counter_ns() - t0) / calls)
    return best


def read_ns(fn: Callable[[], Any], calls: int = 100_000) -> float:
    """Best ns per call of ``fn`` (best of 5 runs)."""
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter_ns() - t0) / calls)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_out(ap)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args(argv)
    import cupy_magic
    from cupy_magic import backend

    be = backend.current()
    if not be.is_gpu:
        print("allocator_cost: no GPU here (the CPU fallback has no allocator to time)")
        return 0
    import cupy as cp
    from cupy_backends.cuda.api import runtime as rt

    be.preheated.wait(30)
    default = cp.get_default_memory_pool().malloc
    pool = be.pool
    bound = pool.malloc

    def py_wrap(n: int) -> Any:
        return bound(n)

    magic = be._allocator()
    apool = cp.cuda.MemoryAsyncPool()
    abound = apool.malloc
    handle = rt.deviceGetMemPool(cp.cuda.Device().id)
    attr, current = rt.memPoolGetAttribute, rt.cudaMemPoolAttrUsedMemCurrent
    limit = 1 << 40

    def async_checked(n: int) -> Any:
        if attr(handle, current) + n > limit:
            raise cp.cuda.memory.OutOfMemoryError(n, attr(handle, current), limit)
        return abound(n)

    @contextlib.contextmanager
    def measuring() -> Iterator[None]:
        with be.track_memory("<allocator_cost>"):
            yield

    allocators: dict[str, tuple[Callable[[int], Any], Any]] = {
        "default": (default, contextlib.nullcontext),
        "pool_bound": (bound, contextlib.nullcontext),
        "py_wrap": (py_wrap, contextlib.nullcontext),
        "magic": (magic, contextlib.nullcontext),
        "magic_measuring": (magic, measuring),
        "async_bound": (abound, contextlib.nullcontext),
        "async_checked": (async_checked, contextlib.nullcontext),
    }
    ns: dict[str, float] = {}
    for name, (fn, ctx) in allocators.items():
        with ctx():
            ns[name] = per_call_ns(cp, fn)
    live = [bound(512) for _ in range(LIVE)]
    with measuring():
        ns["magic_measuring_live"] = per_call_ns(cp, magic)
    reads = {"used_bytes_live": read_ns(pool.used_bytes, 10_000)}
    del live
    reads["used_bytes_few"] = read_ns(pool.used_bytes)
    reads["async_used_attr"] = read_ns(lambda: attr(handle, current))
    reads["get_device"] = read_ns(rt.getDevice)

    v = np.random.default_rng(0).random(10_000).astype(np.float32)
    tiny = v[:16].copy()

    def port(fn: Callable[[int], Any], ctx: Any) -> Callable[[], None]:
        def run() -> None:
            with cp.cuda.using_allocator(fn), ctx():
                ns_ = {"np": cp, "v": cp.asarray(v)}
                exec(CODE, ns_)
                cp.asnumpy(ns_["y"])
        return run

    def gpu() -> None:
        cupy_magic.run_cell(CODE, {"np": np, "v": v}, to_host=("y",))

    def cell_fixed() -> None:
        cupy_magic.run_cell("y = v\n", {"np": np, "v": tiny}, to_host=("y",))

    def hand_fixed() -> None:
        with cp.cuda.using_allocator(default):
            cp.asnumpy(cp.asarray(tiny))

    loop_names = ["default", "magic", "magic_measuring", "async_bound", "async_checked"]
    fns = [port(*allocators[n]) for n in loop_names] + [gpu]
    for fn in fns:
        fn()
    loop = dict(zip([f"hand_{n}" for n in loop_names] + ["gpu"],
                    (t * 1e3 for t in _best_alternating(fns, args.repeats, least_s=1.0,
                                                        most=300)), strict=True))
    def cell_one() -> None:  # the small loop's input, one step: its fixed cost
        cupy_magic.run_cell("y = v + 0\n", {"np": np, "v": v}, to_host=("y",))

    def hand_one() -> None:
        with cp.cuda.using_allocator(default):
            cp.asnumpy(cp.asarray(v) + 0)

    a, b, c, d = _best_alternating([hand_fixed, cell_fixed, hand_one, cell_one],
                                   args.repeats, least_s=1.0, most=500)
    fixed = {"hand_tiny_ms": a * 1e3, "cell_tiny_ms": b * 1e3, "hand_one_step_ms": c * 1e3,
             "cell_one_step_ms": d * 1e3}
    for group in (ns, reads):
        for k, val in group.items():
            print(f"{k:28s} {val:9.1f} ns")
    for group in (loop, fixed):
        for k, val in group.items():
            print(f"{k:28s} {val:9.3f} ms")
    write(args.out, f"allocator-cost-{stamp()}-gpu",
          {"device": be.info().name, "code": CODE, "live_arrays": LIVE,
           "alloc_ns": ns, "read_ns": reads, "small_loop_ms": loop, "fixed_ms": fixed})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
