"""What the array module in front of ``np`` costs a ``%%gpu`` cell (issue 18's proxy).

Inside a cell ``np`` is :class:`cupy_magic.compat.proxy.ArrayModule`, which checks each call
on its way to the array module (CuPy, or NumPy on the CPU fallback). This measures the same
code with ``np.`` (the proxy) against ``bare.``, a plain module holding the array module's own
names (no checks), best of ``--repeats``, alternating:

- ``calls``: the proxy's cost per call, outside any cell: ``--calls`` calls of a ufunc with
  positional arguments (the fast path), of the same ufunc with a keyword (``dtype=``, the
  slow path: options checked), of a function with positional arguments (``np.where``), and
  of a ufunc given a Python list (converted to a device array each call).
- ``small ops``: cells of ``--ops`` small element-wise operations (1,000 float32 elements)
  run through :func:`cupy_magic.run_cell` (the function under ``%%gpu``), for each count in
  ``--ops`` (300 and 10,000 by default), positional and with ``dtype=``.
- ``bandwidth``: a cell of three element-wise calls over ``--mib`` MiB of float32 kept on
  the device: the proxy's cost should vanish there.

``--profile`` adds a cProfile of the 10,000-call cells (where the time per call goes).

Usage::

    python benchmarks/compat_overhead.py [--repeats 7] [--ops 300,10000] [--mib 256]

Prints a table and writes ``benchmarks/results/compat-overhead-<UTC time>-<gpu|host>.json``.
Without a GPU the cells run on the CPU fallback (NumPy): those figures are labelled ``host``
and say nothing about the GPU's, where each call costs more and the proxy's share is smaller.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy  # noqa: E402
from _results import RESULTS, python, stamp, write  # noqa: E402

import cupy_magic  # noqa: E402
from cupy_magic import backend as _backend  # noqa: E402
from cupy_magic.compat.proxy import array_module  # noqa: E402
from cupy_magic.compat.record import CompatRecord  # noqa: E402

CALLS = {
    "ufunc, positional": "for i in range(N):\n    y = M.multiply(x, 1.0001)\n",
    "ufunc, dtype=": "for i in range(N):\n    y = M.multiply(x, 1.0001, dtype=M.float32)\n",
    "function, positional": "for i in range(N):\n    y = M.where(c, x, 0)\n",
    "ufunc, a list": "for i in range(N):\n    y = M.add(s, LIST)\n",
}
# CuPy takes no list: the bare call is what a hand port writes, M.asarray of the list
LIST = {"proxy": "[1.0, 2.0, 3.0]", "bare": "bare.asarray([1.0, 2.0, 3.0])"}
SMALL = {
    "positional": "y = x\nfor i in range(OPS):\n    y = M.multiply(y, 1.0001)\n",
    "dtype=": "y = x\nfor i in range(OPS):\n    y = M.multiply(y, 1.0001, dtype=M.float32)\n",
}
BANDWIDTH = "y = M.multiply(x, 2)\nz = M.sqrt(M.add(y, 1))\nw = M.subtract(z, y)\n"


def bare_module(xp: ModuleType) -> ModuleType:
    """A plain module with ``xp``'s names: what ``np`` would be without the proxy."""
    bare = ModuleType("bare")
    bare.__dict__.update({k: v for k, v in vars(xp).items() if not k.startswith("__")})
    return bare


def best_of(run: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return min(times)


def per_call(xp: ModuleType, calls: int, repeats: int) -> list[dict[str, Any]]:
    """The proxy's cost per call outside a cell, by kind of call."""
    proxy = array_module(xp, CompatRecord("<compat_overhead>", ""))
    bare = bare_module(xp)
    x = xp.ones(1000, dtype=xp.float32)
    rows = []
    for label, template in CALLS.items():
        codes = {which: compile(template.replace("M", which).replace("LIST", LIST[which]),
                                f"<{which}>", "exec")
                 for which in ("bare", "proxy")}
        times: dict[str, list[float]] = {"bare": [], "proxy": []}
        for _ in range(repeats):
            for which, code in codes.items():
                ns = {"bare": bare, "proxy": proxy, "x": x, "c": x > 0,
                      "s": xp.ones(3, dtype=xp.float32), "N": calls}
                times[which].append(best_of(lambda code=code, ns=ns: exec(code, ns), 1))
        b, p = min(times["bare"]), min(times["proxy"])
        rows.append({"call": label, "calls": calls, "bare_us": b / calls * 1e6,
                     "proxy_us": p / calls * 1e6, "overhead_us": (p - b) / calls * 1e6,
                     "ratio": p / b})
    return rows


def cells(xp: ModuleType, name: str, template: str, ns: dict[str, Any],
          repeats: int) -> dict[str, Any]:
    """``template`` as a %%gpu cell with ``np`` (the proxy) and with ``bare``, best of each."""
    sources = {"proxy": template.replace("M.", "np."), "bare": template.replace("M.", "bare.")}
    namespace = {**ns, "np": numpy, "bare": bare_module(xp)}
    for source in sources.values():  # compile kernels and grow the pool first
        cupy_magic.run_cell(source, dict(namespace), syncs="off")
    times: dict[str, list[float]] = {"bare": [], "proxy": []}
    for _ in range(repeats):
        for which, source in sources.items():
            times[which].append(best_of(
                lambda s=source: cupy_magic.run_cell(s, dict(namespace), syncs="off"), 1))
    b, p = min(times["bare"]), min(times["proxy"])
    return {"cell": name, "source": sources["proxy"], "bare_s": b, "proxy_s": p,
            "overhead_s": p - b, "ratio": p / b}


def profile(xp: ModuleType, calls: int) -> str:
    """The top of a cProfile of 10,000-call cells through ``run_cell`` (positional, then
    ``dtype=``): where the proxy's time goes inside a cell (on the CPU fallback the cell runs
    under tracemalloc, whose cost lands in the frame that calls NumPy: see README)."""
    out = io.StringIO()
    small = {"x": numpy.ones(1000, dtype=numpy.float32), "np": numpy}
    for label, template in SMALL.items():
        source = template.replace("OPS", str(calls)).replace("M.", "np.")
        cupy_magic.run_cell(source, dict(small), syncs="off")
        prof = cProfile.Profile()
        prof.runcall(cupy_magic.run_cell, source, dict(small), syncs="off")
        out.write(f"--- {calls:,}-call cell, {label}\n")
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(6)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--ops", default="300,10000")
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    be = _backend.current()
    xp = be.xp
    where = "gpu" if be.is_gpu else "host"
    calls = per_call(xp, args.calls, args.repeats)
    small = {"x": numpy.ones(1000, dtype=numpy.float32)}
    rows = [cells(xp, f"small ops, {ops:,}, {label}", t.replace("OPS", str(ops)), small,
                  args.repeats)
            for ops in (int(v) for v in args.ops.split(",")) for label, t in SMALL.items()]
    big = {"x": xp.ones(args.mib * (1 << 20) // 4, dtype=xp.float32)}  # kept on the device
    rows.append(cells(xp, f"bandwidth, {args.mib} MiB", BANDWIDTH, big, args.repeats))
    print(f"proxy overhead on {be.info().name} [{where}], best of {args.repeats}")
    for r in calls:
        print(f"  {r['call']:<22} bare {r['bare_us']:7.2f} us  proxy {r['proxy_us']:7.2f} us"
              f"  +{r['overhead_us']:5.2f} us/call  x{r['ratio']:.2f}")
    for r in rows:
        print(f"  {r['cell']:<32} bare {r['bare_s'] * 1e3:9.2f} ms  proxy "
              f"{r['proxy_s'] * 1e3:9.2f} ms  x{r['ratio']:.3f}")
    if not be.is_gpu:
        print("  (CPU fallback: NumPy runs the calls; these are not GPU figures)")
    report = profile(xp, args.calls) if args.profile else ""
    print(report, end="")
    write(RESULTS, f"compat-overhead-{stamp()}-{where}", {
        "benchmark": "compat_overhead", "backend": where, "device": be.info().name,
        "label": "GPU" if be.is_gpu else "CPU fallback (NumPy)",
        "python": python(), "numpy": numpy.__version__,
        "repeats": args.repeats, "calls": calls, "cells": rows, "profile": report})


if __name__ == "__main__":
    main()
