"""Why the hand port and ``%%gpu`` of ``peer_bench.py``'s small loop are both slower when
timed in turn than each timed alone (issue 20).

In ``peer-2026-12-06T0807`` (an H100) the small loop's hand port took 12.47 ms and warm
``%%gpu`` 13.86 ms timed in turn (hand, gpu, gpu, hand, ...), while ``%%gpu`` alone took
8.59 to 8.87 ms and a hand port alone 8.08 ms. This times, in one process and best of at
least 0.5 s of runs each:

- ``hand_default`` (CuPy's default pool, as ``peer_bench``'s hand port), ``hand_magic`` (the
  allocator cupy_magic installs at load), and ``gpu`` (``run_cell`` with ``to_host=("y",)``),
  each alone;
- in turn: hand_default with gpu, hand_magic with gpu, hand_default with hand_magic (the
  pools switched, no cell), and hand_default with gpu with the garbage collector off.

Usage::

    python3 benchmarks/alternation.py [--out DIR]

Without a GPU it runs on the CPU fallback (the hand port is NumPy there; no pools).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _results import add_out, stamp, write
from peer_bench import _best, _best_alternating

CODE = "y = v\nfor _ in range(300):\n    y = y * 0.999 + 0.001\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_out(ap)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    import cupy_magic
    from cupy_magic import backend

    be = backend.current()
    xp: Any = np
    if be.is_gpu:
        import cupy as xp
    v = np.random.default_rng(0).random(10_000).astype(np.float32)

    def plain() -> Any:
        return (xp.cuda.using_allocator(xp.get_default_memory_pool().malloc)
                if be.is_gpu else contextlib.nullcontext())

    def port() -> None:
        ns = {"np": xp, "v": xp.asarray(v.copy())}
        exec(CODE, ns)
        xp.asnumpy(ns["y"]) if be.is_gpu else ns["y"]

    def hand_default() -> None:
        with plain():
            port()

    def gpu() -> None:
        cupy_magic.run_cell(CODE, {"np": np, "v": v}, to_host=("y",))

    for fn in (hand_default, port, gpu):
        fn()
    fig: dict[str, float] = {}
    r = args.repeats
    for _ in range(2):  # twice: the first pass warms what the second measures again
        fig["hand_default_alone_ms"] = _best(hand_default, r) * 1e3
        fig["hand_magic_alone_ms"] = _best(port, r) * 1e3
        fig["gpu_alone_ms"] = _best(gpu, r) * 1e3
        a, b = _best_alternating([hand_default, gpu], r)
        fig["turn_hand_default_ms"], fig["turn_gpu_with_default_ms"] = a * 1e3, b * 1e3
        a, b = _best_alternating([port, gpu], r)
        fig["turn_hand_magic_ms"], fig["turn_gpu_with_magic_ms"] = a * 1e3, b * 1e3
        a, b = _best_alternating([hand_default, port], r)
        fig["turn_pools_default_ms"], fig["turn_pools_magic_ms"] = a * 1e3, b * 1e3
        gc.disable()
        try:
            a, b = _best_alternating([hand_default, gpu], r)
        finally:
            gc.enable()
        fig["turn_nogc_hand_default_ms"], fig["turn_nogc_gpu_ms"] = a * 1e3, b * 1e3
    for k, val in fig.items():
        print(f"{k:32s} {val:8.3f}")
    write(args.out, f"alternation-{stamp()}-{'gpu' if be.is_gpu else 'host'}",
          {"device": be.info().name, "code": CODE, "repeats": r, "ms": fig})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
