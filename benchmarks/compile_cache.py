"""Kernel compilation on first use, cold and warm cache: what a `%%gpu` report says.

Runs a two-iteration k-means cell (the one whose first run reported 6.9 s of "GPU time" on the
H200) through ``cupy_magic.run_cell`` in three fresh processes sharing one new
``CUPY_CACHE_DIR``: the first finds the cache empty (CuPy compiles), the second and third
find it filled (CuPy loads the kernels from disk). Each prints the report's GPU time, the
compile time it keeps apart, the kernels compiled or loaded, and the wall time; then the
same cell once more in that process, whose GPU time is the steady figure (the difference is
what first use costs beyond compiling: loading kernels onto the GPU, the pool's first
allocations).

    python3 benchmarks/compile_cache.py [--out DIR]

Without a GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from _results import add_out, gpu_name, stamp, write

CELL = """\
for _ in range(2):
    d = ((x[:, None, :] - c[None, :, :]) ** 2).sum(axis=2)
    label = d.argmin(axis=1)
    c = np.stack([x[label == k].mean(axis=0) for k in range(8)])
"""

CHILD = """
import json, time, numpy as np, cupy_magic
rng = np.random.default_rng(0)
ns = {"np": np, "x": rng.random((200_000, 16), dtype=np.float32),
      "c": rng.random((8, 16), dtype=np.float32)}
t0 = time.perf_counter()
r = cupy_magic.run_cell(CELL, ns, syncs="off")
wall = time.perf_counter() - t0
rec = r.compiles
t0 = time.perf_counter()
again = cupy_magic.run_cell(CELL, ns, syncs="off")  # the same cell again, same process
print(json.dumps({"wall_s": wall, "gpu_s": r.gpu_seconds, "gpu_s_again": again.gpu_seconds,
                  "wall_s_again": time.perf_counter() - t0,
                  "compiled": len(rec.compiled) if rec is not None else None,
                  "loaded": len(rec.loaded) if rec is not None else None,
                  "compile_s": rec.seconds if rec is not None else None,
                  "report": str(r)}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_out(ap)
    args = ap.parse_args()
    import cupy

    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no device")
    except Exception as exc:
        print(f"compile_cache: no GPU here ({type(exc).__name__}); nothing to measure")
        return 0
    cache = tempfile.mkdtemp(prefix="cupy-cache-")
    env = {**os.environ, "CUPY_CACHE_DIR": cache, "CUPY_MAGIC_BACKEND": "cupy"}
    runs = []
    for name in ("cold cache", "warm cache", "warm cache again"):
        done = subprocess.run([sys.executable, "-c", f"CELL = {CELL!r}\n" + CHILD], env=env,
                              capture_output=True, text=True, check=True)
        row = json.loads(done.stdout.strip().splitlines()[-1])
        row["run"] = name
        runs.append(row)
        print(f"{name}: wall {row['wall_s']:.3f} s, GPU time {row['gpu_s'] * 1e3:.1f} ms, "
              f"compile {row['compile_s']:.3f} s, {row['compiled']} kernels compiled, "
              f"{row['loaded']} loaded from the cache; run again in that process: GPU time "
              f"{row['gpu_s_again'] * 1e3:.1f} ms, wall {row['wall_s_again']:.3f} s")
    print("\nthe cold run's report:\n" + runs[0]["report"])
    write(args.out, f"compile-cache-{stamp()}",
          {"gpu": gpu_name(), "cupy": cupy.__version__, "cell": CELL, "runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
