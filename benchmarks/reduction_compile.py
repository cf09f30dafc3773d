"""When does CuPy compile a reduction again? First-call times of reductions by length.

The measurement behind ``--warmup``'s slice of at least 4,096 elements: CuPy compiles a
reduction for the block size it picks from the reduced length (its CUB path reaches 512
threads only above 1,024 elements), so a warm-up on 2 elements left the real kernel to be
compiled inside the timed run. Each line is one call, synchronised, with a fresh kernel cache;
a line of seconds is a compilation. GPU only.

    python3 benchmarks/reduction_compile.py

Recorded on the H200: ``results/reduction-compile-2026-12-03.txt``.
"""

import os
import sys
import tempfile
import time

os.environ["CUPY_CACHE_DIR"] = tempfile.mkdtemp()  # before CuPy is imported
try:
    import cupy as cp
    from cupy._core import _accelerator

    cp.cuda.runtime.getDeviceCount()
except Exception as exc:  # no CuPy, no driver or no device
    print(f"no GPU here ({type(exc).__name__}: {exc}); this benchmark runs on a GPU only")
    sys.exit(0)

print("reduction accelerators", _accelerator.get_reduction_accelerators(),
      "routine", _accelerator.get_routine_accelerators())


def t(label, fn):
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    fn()
    cp.cuda.Device().synchronize()
    print(f"{label:40} {1e3 * (time.perf_counter() - t0):9.1f} ms")


for op, f in [("max", lambda a: a.max()), ("any(a<0)", lambda a: cp.any(a < 0)),
              ("sum f64", lambda a: a.sum(dtype=cp.float64)),
              ("mean f64", lambda a: a.mean(dtype=cp.float64)),
              ("where(keep,a,0).sum()", lambda a: cp.where(a > 0.5, a, 0).sum())]:
    for n in (2, 2, 1000, 1025, 4096, 2**22, 2**22, 2**31 + 8):
        if n > 2**30 and op != "max":
            continue
        a = cp.random.random(n, dtype=cp.float32) - 0.25
        t(f"{op} n={n}", lambda: f(a))  # noqa: B023  (called at once)
        del a
# 2-D: reduce all vs axis 1
for shape in [(2, 64), (4096, 64), (2, 3), (4096, 3)]:
    a = cp.random.random(shape, dtype=cp.float32)
    t(f"sum axis=0 {shape}", lambda: a.sum(axis=0))  # noqa: B023
    t(f"sum axis=1 {shape}", lambda: a.sum(axis=1))  # noqa: B023
