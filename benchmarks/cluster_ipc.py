"""Issue 15's next idea, measured before it is built: a local GPU worker computes on device
buffers the kernel fills and drains itself, handed over as CUDA IPC handles.

Through the shared-memory slots (``cluster-2026-12-04T1526``) the cluster path ran at 0.60 of
the kernel's batched path on first runs but 0.19 on second runs (9.60 against 49.32 GB/s):
there the kernel finds its input page-locked and copies it to the GPU directly, while the
cluster path copies every byte into a slot and every result byte out of one on the host,
because a worker in another process cannot read the kernel's page-locked memory. A worker on
the same GPU can read and write the kernel's *device* memory through CUDA IPC handles
(``cudaIpcGetMemHandle`` here, ``cudaIpcOpenMemHandle`` there), so the kernel can do the
transfers at its own pinned speed and the worker does the compute. This measures, in one run,
on the same page-locked input and the same element-wise work (plain CuPy, not ``%%gpu``, so
the figures show the transport alone):

- ``kernel``: the blocks run in this process: copied into one of three device slots on its
  stream, computed there, copied back into the page-locked result;
- ``ipc``: the same copies by this process into three pairs of device slots made with
  ``cudaMalloc``; each block's compute runs on the worker as one Dask task that opens the
  slots' handles (once per slot) and writes the result into the kernel's output slot;
- ``tasks``: the time of one empty task, submitted and awaited one at a time (the scheduler's
  round trip, which the ``ipc`` path pays per block where it cannot overlap).

The two paths run in the order kernel, ipc, ipc, kernel, best of two each. The ``ipc``
result must equal the kernel's bit for bit, and the kernel's NumPy's within float32 rounding.

Usage::

    python3 benchmarks/cluster_ipc.py [--size 8GiB] [--block 128MiB] [--out DIR]

Needs CuPy with a device and dask-cuda (one ``LocalCUDACluster`` worker on GPU 0); elsewhere
it says so and measures nothing. Writes ``cluster-ipc-<UTC time>.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cluster_shm import _bounds  # noqa: E402  (the same row ranges)

from cupy_magic.backend.cupy import probe_cupy  # noqa: E402
from cupy_magic.units import format_bytes, parse_size  # noqa: E402

COLS = 1024
SLOTS = 3  # one being filled, one computed on the worker, one being drained


def _gpu_reason() -> str:
    """Why there is nothing to measure here (``""``: there is)."""
    cupy, why = probe_cupy()
    if cupy is None:
        return why
    try:
        import dask_cuda  # noqa: F401
    except ImportError:
        return "dask-cuda is not installed (pip install 'dask-cuda>=25')"
    return ""


def _array(ptr: int, nbytes: int, shape: tuple[int, ...], owner: Any) -> Any:
    import cupy as cp

    mem = cp.cuda.UnownedMemory(ptr, nbytes, owner)
    return cp.ndarray(shape, np.float32, cp.cuda.MemoryPointer(mem, 0))


def _opened(worker: Any = None) -> dict[bytes, int]:
    """On the worker: the handles opened so far, kept on the worker object (this script's
    functions reach the worker pickled by value, so a module global would be a new dict in
    every task). ``worker``: the one ``client.run`` hands over (``get_worker`` works in tasks
    only)."""
    if worker is None:
        from distributed import get_worker

        worker = get_worker()
    if not hasattr(worker, "_bench_ipc_opened"):
        worker._bench_ipc_opened = {}
    return worker._bench_ipc_opened


def _open(handle: bytes) -> int:
    import cupy as cp

    opened = _opened()
    if handle not in opened:
        opened[handle] = cp.cuda.runtime.ipcOpenMemHandle(
            handle, cp.cuda.runtime.cudaIpcMemLazyEnablePeerAccess)
    return opened[handle]


def ipc_task(handles: tuple[bytes, bytes], nbytes: int, rows: int) -> int:
    """On the worker: the block's compute from the kernel's input slot into its output slot;
    returns the rows done once the device finished them."""
    import cupy as cp

    src = _array(_open(handles[0]), nbytes, (rows, COLS), handles)
    dst = _array(_open(handles[1]), nbytes, (rows, COLS), handles)
    cp.sqrt(src * src + 1, out=dst)
    cp.cuda.get_current_stream().synchronize()  # done before the kernel is told
    return rows


def close_opened(dask_worker: Any) -> int:
    """On the worker, through ``client.run``: close every handle opened; returns how many."""
    import cupy as cp

    opened = _opened(dask_worker)
    n = len(opened)
    for ptr in opened.values():
        cp.cuda.runtime.ipcCloseMemHandle(ptr)
    opened.clear()
    return n


class Slots:
    """Three pairs of device buffers of ``nbytes`` made with ``cudaMalloc`` (not from a pool,
    so a handle names exactly one buffer), one stream per pair."""

    def __init__(self, nbytes: int) -> None:
        import cupy as cp

        rt = cp.cuda.runtime
        self.nbytes = nbytes
        self.ptrs = [(rt.malloc(nbytes), rt.malloc(nbytes)) for _ in range(SLOTS)]
        self.handles = [(rt.ipcGetMemHandle(a), rt.ipcGetMemHandle(b)) for a, b in self.ptrs]
        self.streams = [cp.cuda.Stream(non_blocking=True) for _ in range(SLOTS)]

    def views(self, i: int, rows: int) -> tuple[Any, Any]:
        a, b = self.ptrs[i]
        return (_array(a, self.nbytes, (rows, COLS), self),
                _array(b, self.nbytes, (rows, COLS), self))

    def free(self) -> None:
        import cupy as cp

        cp.cuda.runtime.deviceSynchronize()
        for a, b in self.ptrs:
            cp.cuda.runtime.free(a)
            cp.cuda.runtime.free(b)
        self.ptrs = []


def kernel_run(x: np.ndarray, y: np.ndarray, bounds: list[tuple[int, int]],
               slots: Slots) -> float:
    """The blocks in this process, three in flight on three streams; seconds."""
    import cupy as cp

    t0 = time.perf_counter()
    for k, (a, b) in enumerate(bounds):
        i = k % SLOTS
        s = slots.streams[i]
        s.synchronize()  # this slot's last block drained
        src, dst = slots.views(i, b - a)
        src.set(x[a:b], stream=s)
        with s:
            cp.sqrt(src * src + 1, out=dst)
        dst.get(stream=s, out=y[a:b], blocking=False)
    for s in slots.streams:
        s.synchronize()
    return time.perf_counter() - t0


def ipc_run(client: Any, x: np.ndarray, y: np.ndarray, bounds: list[tuple[int, int]],
            slots: Slots) -> float:
    """The blocks' compute on the worker through the slots' handles; seconds. A slot is
    filled only after its last block's result was copied out (its stream synchronised)."""
    t0 = time.perf_counter()
    flying: list[tuple[Any, int, int, int]] = []  # future, slot, a, b: in submission order

    def drain(future: Any, i: int, a: int, b: int) -> None:
        future.result()
        _, dst = slots.views(i, b - a)
        dst.get(stream=slots.streams[i], out=y[a:b], blocking=False)

    for k, (a, b) in enumerate(bounds):
        i = k % SLOTS
        if len(flying) == SLOTS:
            drain(*flying.pop(0))
        s = slots.streams[i]
        src, _ = slots.views(i, b - a)
        src.set(x[a:b], stream=s)  # after the drain of this slot's last block, in order
        s.synchronize()  # on the device before the worker reads it
        flying.append((client.submit(ipc_task, slots.handles[i], slots.nbytes, b - a,
                                     pure=False), i, a, b))
    for item in flying:
        drain(*item)
    for s in slots.streams:
        s.synchronize()
    return time.perf_counter() - t0


def run(size: int, block: int) -> dict[str, Any]:
    import cupy as cp
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    rows = size // (4 * COLS)
    block_rows = max(1, block // (4 * COLS))
    bounds = _bounds(rows, block_rows)
    x = np.random.default_rng(0).random((rows, COLS), dtype=np.float32)
    y = np.zeros_like(x)
    ref = np.zeros_like(x)
    rt = cp.cuda.runtime
    figures: dict[str, Any] = {"input_bytes": int(x.nbytes), "blocks": len(bounds),
                               "block_bytes": block_rows * COLS * 4}
    t0 = time.perf_counter()
    for arr in (x, y, ref):
        rt.hostRegister(arr.ctypes.data, arr.nbytes, 0)  # as the kernel's second run finds it
    figures["register_s"] = time.perf_counter() - t0
    slots = Slots(block_rows * COLS * 4)
    try:
        with LocalCUDACluster(CUDA_VISIBLE_DEVICES="0", n_workers=1,
                              dashboard_address=None) as cluster, Client(cluster) as client:
            client.gather(client.submit(lambda: int(__import__("cupy").arange(3).sum()),
                                        pure=False))  # the worker's CUDA context up
            kernel_run(x[:block_rows], ref[:block_rows], bounds[:1], slots)  # kernels built
            ipc_run(client, x[:block_rows], y[:block_rows], bounds[:1], slots)
            times = []
            for _ in range(20):
                t = time.perf_counter()
                client.submit(int, 0, pure=False).result()
                times.append(time.perf_counter() - t)
            figures["task_roundtrip_ms"] = 1e3 * min(times)
            figures["task_roundtrip_median_ms"] = 1e3 * float(np.median(times))
            runs: dict[str, list[float]] = {"kernel": [], "ipc": []}
            for path in ("kernel", "ipc", "ipc", "kernel"):
                out = ref if path == "kernel" else y
                out[...] = 0
                runs[path].append(kernel_run(x, out, bounds, slots) if path == "kernel"
                                  else ipc_run(client, x, out, bounds, slots))
            figures["worker_handles_closed"] = sum(client.run(close_opened).values())
        figures["ipc_equal_kernel"] = bool(np.array_equal(y, ref))
        head = x[:block_rows]
        figures["kernel_close_numpy"] = bool(np.allclose(ref[:block_rows],
                                                         np.sqrt(head * head + 1), rtol=1e-6))
    finally:
        slots.free()
        for arr in (x, y, ref):
            rt.hostUnregister(arr.ctypes.data)
    for path, got in runs.items():
        figures[f"{path}_s"] = min(got)
        figures[f"{path}_runs_s"] = got
        figures[f"{path}_gbps"] = x.nbytes / min(got) / 1e9
    figures["ipc_over_kernel"] = figures["kernel_s"] / figures["ipc_s"]
    return figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="8GiB", help="input size (float32; default 8GiB)")
    ap.add_argument("--block", default="128MiB", help="bytes per block (default 128MiB)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args(argv)
    size, block = parse_size(args.size), parse_size(args.block)
    why = _gpu_reason()
    if why:
        print(f"cluster_ipc measures CUDA IPC between the kernel and a GPU worker: {why}; "
              "nothing measured")
        return 0
    figures = run(size, block)
    import cupy as cp

    gpu = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"cluster_ipc on {gpu}: {format_bytes(size)} float32, {figures['blocks']} blocks "
          f"of {format_bytes(figures['block_bytes'])}, one LocalCUDACluster worker")
    for path in ("kernel", "ipc"):
        print(f"  {path:<7} {figures[f'{path}_s']:8.3f} s  {figures[f'{path}_gbps']:6.2f} GB/s"
              f"  (runs {', '.join(f'{t:.3f}' for t in figures[f'{path}_runs_s'])} s)")
    print(f"  ipc/kernel {figures['ipc_over_kernel']:.2f}; one empty task's round trip "
          f"{figures['task_roundtrip_ms']:.2f} ms (median "
          f"{figures['task_roundtrip_median_ms']:.2f}); input page-locked in "
          f"{figures['register_s']:.2f} s; ipc equal to kernel {figures['ipc_equal_kernel']}, "
          f"kernel close to NumPy {figures['kernel_close_numpy']}; worker closed "
          f"{figures['worker_handles_closed']} handles")
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H%M")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"cluster-ipc-{stamp}.json"
    path.write_text(json.dumps({"gpu": gpu, "size": size,
                                "python": platform.python_version(), **figures}, indent=1))
    print(f"wrote {path}")
    return 0 if figures["ipc_equal_kernel"] and figures["kernel_close_numpy"] else 1


if __name__ == "__main__":
    sys.exit(main())
