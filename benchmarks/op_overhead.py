"""Where the microseconds per operation go in a ``%%gpu`` cell of many small operations.

One cell, a loop of ``--ops`` steps of two small element-wise operations each
(``y = y * 0.999 + 0.001`` on 10,000 float32, the ``small_loop`` cell of ``peer_bench.py``), is
timed (best of ``--repeats``, the device synchronised at the end) under each layer the
extension adds, one at a time:

- ``cupy``: plain ``exec`` with CuPy's default allocator: the hand port, the reference;
- ``pool``: plain ``exec``, CuPy calling the ``SingleDeviceMemoryPool`` cupy_magic installs
  directly (``set_allocator(pool.malloc)``);
- ``backend``: plain ``exec`` under the allocator cupy_magic installs
  (``CupyBackend._allocator``: the pool's own limit, the retry after a refusal), no
  measurement open;
- ``measured``: the same inside ``track_memory`` (the peak read at each allocation);
- ``checked`` (since 2026-12-04T1230): ``measured`` with each request checked in Python against
  the bytes in use (``CupyBackend._malloc``, what cupy_magic installed before; now only for
  other devices and a pool that holds more than a budget set lower);
- ``hook``: ``measured`` plus a CuPy ``MemoryHook`` of four no-op Python methods, which is how
  cupy_magic followed the peak before (kept to show what it cost);
- ``run_cell`` and ``run_cell syncs off``: the whole cell through :func:`cupy_magic.run_cell`.

The cost of each layer per array operation is ``(t - t_cupy) / (2 * ops)``. Without a GPU
the rows are plain ``exec`` with NumPy and ``run_cell`` on the CPU fallback, labelled ``host``.
Each pass runs with ``--live`` small device arrays held alive (default ``0,10000``, since
2026-12-04T0710): CuPy's ``SingleDeviceMemoryPool.used_bytes()``, which cupy_magic's
allocator reads once an allocation while a cell measures its peak, walks every block in use
(on the H200, 2026-12-04T1152, 10,000 live arrays changed no row by more than the noise).

Usage::

    python benchmarks/op_overhead.py [--ops 3000] [--repeats 7] [--live 0,10000]

Prints a table and writes ``benchmarks/results/op-overhead-<UTC time>-<gpu|host>.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _results import RESULTS, python, stamp, write  # noqa: E402

import cupy_magic  # noqa: E402
from cupy_magic import backend as _backend  # noqa: E402

CELL = "y = v\nfor _ in range(OPS):\n    y = y * 0.999 + 0.001\n"


def best(fn: Callable[[], None], repeats: int, sync: Callable[[], None]) -> float:
    """Best wall seconds of ``repeats`` calls of ``fn`` (after one untimed call)."""
    fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return min(times)


def variants(be: Any, code: str, v: Any) -> Iterator[tuple[str, Callable[[], None], Any]]:
    """``(name, run, context)`` for each layer on this backend."""
    def plain() -> None:
        exec(code, {"v": v})

    def cell(syncs: str) -> Callable[[], None]:
        return lambda: cupy_magic.run_cell(code, {"np": be.xp, "v": v}, syncs=syncs)

    if not be.is_gpu:
        yield "numpy", plain, contextlib.nullcontext
        yield "run_cell", cell("warn"), contextlib.nullcontext
        yield "run_cell syncs off", cell("off"), contextlib.nullcontext
        return
    cp = be.cp

    @contextlib.contextmanager
    def allocator(malloc: Any) -> Iterator[None]:
        installed = cp.cuda.get_allocator()
        cp.cuda.set_allocator(malloc)
        try:
            yield
        finally:
            cp.cuda.set_allocator(installed)

    @contextlib.contextmanager
    def checked() -> Iterator[None]:  # every request checked in Python (before 2026-12-04)
        with allocator(be._malloc), measured():
            yield

    @contextlib.contextmanager
    def measured() -> Iterator[None]:
        with be.track_memory("<op_overhead>"):
            yield

    class NoOpHook(cp.cuda.memory_hook.MemoryHook):  # type: ignore[misc, name-defined]
        name = "op_overhead.noop"

        def malloc_preprocess(self, **kw: Any) -> None: ...
        def malloc_postprocess(self, **kw: Any) -> None: ...
        def free_preprocess(self, **kw: Any) -> None: ...
        def free_postprocess(self, **kw: Any) -> None: ...

    @contextlib.contextmanager
    def hooked() -> Iterator[None]:
        with measured(), NoOpHook():
            yield

    yield "cupy", plain, lambda: allocator(cp.get_default_memory_pool().malloc)
    yield "pool", plain, lambda: allocator(be.pool.malloc)
    yield "backend", plain, contextlib.nullcontext
    yield "measured", plain, measured
    yield "checked", plain, checked
    yield "hook", plain, hooked
    yield "run_cell", cell("warn"), contextlib.nullcontext
    yield "run_cell syncs off", cell("off"), contextlib.nullcontext


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--live", default="0,10000",
                        help="device arrays held alive in the pool while the loop runs, one "
                             "pass per count (comma-separated)")
    args = parser.parse_args()
    be = _backend.current()
    code = CELL.replace("OPS", str(args.ops))
    v = be.xp.ones(10_000, dtype=be.xp.float32)
    rows: list[dict[str, Any]] = []
    where = "gpu" if be.is_gpu else "host"
    operations = 2 * args.ops
    for live in (int(n) for n in args.live.split(",")):
        # arrays a notebook keeps: on the GPU they sit in the pool cupy_magic installs,
        # whose used_bytes() walks every block in use (_malloc reads it once an allocation
        # while a cell measures its peak)
        kept = [be.xp.empty(8, dtype=be.xp.float32) for _ in range(live)]
        first = len(rows)
        for name, run, context in variants(be, code, v):
            with context():
                seconds = best(run, args.repeats, be.synchronize)
            rows.append({"variant": name, "live": live, "seconds": seconds})
        base = rows[first]["seconds"]
        for r in rows[first:]:
            r["us_per_op"] = r["seconds"] / operations * 1e6
            r["extra_us_per_op"] = (r["seconds"] - base) / operations * 1e6
        print(f"cost per array operation on {be.info().name} [{where}]: {args.ops:,} steps of "
              f"2 operations on 10,000 float32, best of {args.repeats}, {live:,} arrays alive")
        for r in rows[first:]:
            print(f"  {r['variant']:<20} {r['seconds'] * 1e3:9.2f} ms  {r['us_per_op']:7.2f} "
                  f"us/op  {r['extra_us_per_op']:+7.2f} us/op against {rows[first]['variant']}")
        del kept
    write(RESULTS, f"op-overhead-{stamp()}-{where}", {
        "benchmark": "op_overhead", "backend": where, "device": be.info().name,
        "python": python(), "ops": args.ops, "repeats": args.repeats,
        "cell": code, "rows": rows})


if __name__ == "__main__":
    main()
