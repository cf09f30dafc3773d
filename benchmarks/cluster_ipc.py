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
  slots' handles (once per slot) and writes the result into the kernel's output slot; the
  kernel waits for each block's copy in before it submits the task, the worker for its compute
  before the task returns, and the kernel gathers each task's result before it copies out;
- ``ipc_events``: the same slots (``--slots``, default 3 and 4 of them, each measured), with
  no host synchronisation in the loop: the kernel records an interprocess CUDA event after a
  block's copy in and submits the task at once; the worker's stream waits on that event, then
  computes and records the worker's own interprocess event, and the task returns without
  synchronising; once the task is *done* (``distributed.wait``: no result is gathered, which
  ``Future.result`` does with one more request through the scheduler) the kernel's stream
  waits on the worker's event and copies the result out (the ordering: ``ipc_events_run``);
- ``tasks``: the time of one empty task, submitted and awaited one at a time, with its result
  gathered (``task_roundtrip_ms``, what the ``ipc`` path pays per block where it cannot
  overlap) and without (``task_done_ms``), and the time per empty task with as many in flight
  as ``ipc_events`` keeps (``task_pipelined_ms``).

The paths run in the order given and then back (kernel, ipc, ipc_events at 3 and 4 slots,
the same reversed), best of two each. Every IPC result must equal the kernel's bit for bit,
and the kernel's NumPy's within float32 rounding (otherwise the script exits 1).

Usage::

    python3 benchmarks/cluster_ipc.py [--size 8GiB] [--block 128MiB] [--out DIR]
        [--paths kernel,ipc,ipc_events] [--slots 3,4]

Needs CuPy with a device and dask-cuda (one ``LocalCUDACluster`` worker on GPU 0); elsewhere
it says so and measures nothing. Writes ``cluster-ipc-<UTC time>.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _results import add_out, gpu_name, python, stamp, write  # noqa: E402
from cluster_shm import _bounds  # noqa: E402  (the same row ranges)

from cupy_magic.backend.cupy import probe_cupy  # noqa: E402
from cupy_magic.units import format_bytes, parse_size  # noqa: E402

COLS = 1024
SLOTS = 3  # one being filled, one computed on the worker, one being drained
PATHS = ("kernel", "ipc", "ipc_events")


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


def _slot_events(worker: Any = None) -> list[dict[str, Any]]:
    """On the worker: per slot, the kernel's event opened here (``ready``), the worker's own
    interprocess event (``done``) and its handle, and the stream the slot's compute runs on;
    kept on the worker object as ``_opened`` keeps the memory handles."""
    if worker is None:
        from distributed import get_worker

        worker = get_worker()
    if not hasattr(worker, "_bench_ipc_events"):
        worker._bench_ipc_events = []
    return worker._bench_ipc_events


def events_setup_task(ready_handles: tuple[bytes, ...]) -> list[bytes]:
    """On the worker, once before the ``ipc_events`` runs: open the kernel's event of each
    slot, make the worker's own interprocess event and a stream per slot; returns the handles
    of the worker's events, one per slot, for the kernel to open once. A second call with more
    slots adds the missing ones."""
    import cupy as cp

    rt = cp.cuda.runtime
    state = _slot_events()
    for handle in ready_handles[len(state):]:
        done = rt.eventCreateWithFlags(rt.eventDisableTiming | rt.eventInterprocess)
        state.append({"ready": rt.ipcOpenEventHandle(handle), "ready_handle": handle,
                      "done": done, "done_handle": rt.ipcGetEventHandle(done),
                      "stream": cp.cuda.Stream(non_blocking=True)})
    if [st["ready_handle"] for st in state[:len(ready_handles)]] != list(ready_handles):
        raise RuntimeError("the worker holds other slots' events than the kernel's")
    return [st["done_handle"] for st in state[:len(ready_handles)]]


def ipc_events_task(handles: tuple[bytes, bytes], slot: int, nbytes: int, rows: int) -> int:
    """On the worker: the block's compute from the kernel's input slot into its output slot on
    the slot's stream, after the kernel's event (its copy in) and before the worker's event
    (which the kernel's stream waits on before it copies the result out). Returns at once,
    without waiting for the device: the task's being done says only that both the wait and the
    record are *queued*, which is all the kernel needs (see ``ipc_events_run``)."""
    import cupy as cp

    rt = cp.cuda.runtime
    st = _slot_events()[slot]
    stream = st["stream"]
    src = _array(_open(handles[0]), nbytes, (rows, COLS), handles)
    dst = _array(_open(handles[1]), nbytes, (rows, COLS), handles)
    rt.streamWaitEvent(stream.ptr, st["ready"], 0)  # the kernel's copy in of this block
    with stream:
        cp.sqrt(src * src + 1, out=dst)  # the temporaries come from this stream's arena
    rt.eventRecord(st["done"], stream.ptr)  # the kernel's copy out waits on this
    return rows


def close_events(dask_worker: Any) -> int:
    """On the worker, through ``client.run``, after the kernel destroyed what it opened of the
    worker's events: destroy the kernel's events opened here and the worker's own; returns
    how many events were destroyed."""
    import cupy as cp

    rt = cp.cuda.runtime
    state = _slot_events(dask_worker)
    for st in state:
        st["stream"].synchronize()
        rt.eventDestroy(st["ready"])  # opened here: before the kernel destroys its own
        rt.eventDestroy(st["done"])
    n = 2 * len(state)
    state.clear()
    return n


class Slots:
    """``n`` pairs of device buffers of ``nbytes`` made with ``cudaMalloc`` (not from a pool,
    so a handle names exactly one buffer), one stream per pair. The ``kernel`` and ``ipc``
    paths use the first ``SLOTS``; ``ipc_events`` as many as it is run with."""

    def __init__(self, nbytes: int, n: int = SLOTS) -> None:
        import cupy as cp

        rt = cp.cuda.runtime
        self.nbytes = nbytes
        self.ptrs = [(rt.malloc(nbytes), rt.malloc(nbytes)) for _ in range(n)]
        self.handles = [(rt.ipcGetMemHandle(a), rt.ipcGetMemHandle(b)) for a, b in self.ptrs]
        self.streams = [cp.cuda.Stream(non_blocking=True) for _ in range(n)]

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


class Events:
    """The kernel's side of ``ipc_events``: one interprocess event per slot (``ready``,
    recorded after the block's copy in; created with ``cudaEventDisableTiming |
    cudaEventInterprocess`` as ``cudaIpcGetEventHandle`` needs, its handle got once) and the
    worker's event of each slot opened here once (``done``)."""

    def __init__(self, n: int) -> None:
        import cupy as cp

        rt = cp.cuda.runtime
        self.ready = [rt.eventCreateWithFlags(rt.eventDisableTiming | rt.eventInterprocess)
                      for _ in range(n)]
        self.handles = [rt.ipcGetEventHandle(e) for e in self.ready]
        self.done: list[int] = []

    def open_done(self, handles: list[bytes]) -> None:
        import cupy as cp

        for handle in handles[len(self.done):]:
            self.done.append(cp.cuda.runtime.ipcOpenEventHandle(handle))

    def close_done(self) -> int:
        """Destroy the worker's events opened here (before the worker destroys them)."""
        import cupy as cp

        for e in self.done:
            cp.cuda.runtime.eventDestroy(e)
        n, self.done = len(self.done), []
        return n

    def destroy(self) -> int:
        """Destroy the kernel's own events (after the worker destroyed what it opened of them,
        or after the worker is gone)."""
        import cupy as cp

        for e in self.ready:
            cp.cuda.runtime.eventDestroy(e)
        n, self.ready = len(self.ready), []
        return n


def plan(blocks: int, slots: int) -> list[tuple[str, int]]:
    """The order of ``ipc_events_run``'s steps over ``blocks`` blocks in ``slots`` slots, block
    ``k`` in slot ``k % slots``: ``("fill", k)`` copies block k in, records the slot's event and
    submits its task; ``("drain", k)`` waits for that task to be done and queues the block's
    copy out behind the worker's event. A slot is filled again only after its last block's
    drain (``k - slots`` is the block before ``k`` in the same slot), so at most ``slots``
    blocks are in flight and every slot alternates fill, drain."""
    steps: list[tuple[str, int]] = []
    for k in range(blocks):
        if k >= slots:
            steps.append(("drain", k - slots))
        steps.append(("fill", k))
    steps.extend(("drain", k) for k in range(max(0, blocks - slots), blocks))
    return steps


def _done(future: Any) -> None:
    """Wait until ``future``'s task is done, without gathering its result (``Future.result``
    asks the scheduler for it: one more request through the scheduler to the worker and back,
    in this thread's way, per block); raise its error if it failed."""
    from distributed import wait

    wait([future])
    if future.status != "finished":
        future.result()  # raises the task's error
        raise RuntimeError(f"task {future.key} is {future.status}")


def ipc_events_run(client: Any, x: np.ndarray, y: np.ndarray, bounds: list[tuple[int, int]],
                   slots: Slots, events: Events, nslots: int,
                   stats: dict[str, float] | None = None) -> float:
    """The blocks' compute on the worker through the slots' handles, ordered on the device by
    interprocess events instead of host synchronisation; ``nslots`` blocks in flight; seconds.
    ``stats`` gets the seconds this thread spent waiting for tasks (``wait_s``) and submitting
    them (``submit_s``).

    The ordering, for block k in slot i (kernel stream K_i, worker stream W_i, the kernel's
    event R_i, the worker's event D_i; ``plan`` gives the host order of fills and drains):

    1. fill k (this thread): the copy in of block k is queued on K_i, then R_i is recorded on
       K_i, then the task is submitted. No host synchronisation: the task's message leaves
       after ``eventRecord`` returned, so the worker's wait (2) comes after this record.
    2. the task (worker's thread): W_i waits on R_i (``streamWaitEvent`` waits for the record
       most recent at the call, this block's: the kernel records R_i again only at fill
       k + nslots, which comes after the drain of k, after this task was done), computes the
       block into the output slot on W_i, records D_i on W_i and returns.
    3. drain k (this thread): once the task is done, which it is only after its
       ``eventRecord`` returned, K_i waits on D_i (the record of this block, D_i's most recent:
       the worker records D_i again only in the task of block k + nslots, submitted after this
       drain) and the copy out of block k is queued on K_i behind that wait.
    4. fill k + nslots: its copy in is queued on K_i after drain k's copy out, so it overwrites
       the input slot only after the compute of k, which read it, is done (K_i waited on D_i),
       and its R_i record follows the copy out of k, so the compute of k + nslots (which waits
       on R_i) overwrites the output slot only after block k's result left it.

    So on the device: copy in k -> compute k -> copy out k -> copy in k + nslots -> ... per
    slot, while the host never waits for the device inside the loop, only for tasks being done
    (``distributed.wait`` releases the GIL, and the client's event loop thread gets it for the
    messages); the streams are synchronised once at the end."""
    import cupy as cp

    rt = cp.cuda.runtime
    assert nslots <= len(events.ready) and nslots <= len(events.done)
    futures: dict[int, Any] = {}
    wait_s = submit_s = 0.0
    t0 = time.perf_counter()
    for step, k in plan(len(bounds), nslots):
        i = k % nslots
        a, b = bounds[k]
        s = slots.streams[i]
        src, dst = slots.views(i, b - a)
        if step == "fill":
            src.set(x[a:b], stream=s)  # behind the copy out of slot i's last block (4)
            rt.eventRecord(events.ready[i], s.ptr)  # (1)
            t = time.perf_counter()
            futures[k] = client.submit(ipc_events_task, slots.handles[i], i, slots.nbytes,
                                       b - a, pure=False)
            submit_s += time.perf_counter() - t
        else:
            t = time.perf_counter()
            _done(futures.pop(k))  # the worker's record of D_i has returned (3)
            wait_s += time.perf_counter() - t
            rt.streamWaitEvent(s.ptr, events.done[i], 0)
            dst.get(stream=s, out=y[a:b], blocking=False)
    for s in slots.streams:
        s.synchronize()
    elapsed = time.perf_counter() - t0
    if stats is not None:
        stats.update(wait_s=wait_s, submit_s=submit_s)
    return elapsed


def tasks_pipelined(client: Any, inflight: int, count: int = 64) -> float:
    """Seconds per empty task with ``inflight`` of them in flight, each awaited (not gathered)
    in order, as ``ipc_events_run`` does: what the scheduler allows it at best per block."""
    flying: deque[Any] = deque()
    t0 = time.perf_counter()
    for k in range(count):
        if len(flying) == inflight:
            _done(flying.popleft())
        flying.append(client.submit(int, k, pure=False))
    while flying:
        _done(flying.popleft())
    return (time.perf_counter() - t0) / count


def _equal(y: np.ndarray, ref: np.ndarray, bounds: list[tuple[int, int]]) -> bool:
    """``y == ref`` bit for bit, block by block (no temporary of the whole array)."""
    return all(np.array_equal(y[a:b].view(np.uint32), ref[a:b].view(np.uint32))
               for a, b in bounds)


def _runs(paths: list[str], slot_counts: list[int]) -> list[str]:
    """The timed runs' order: each path (``ipc_events`` once per slot count, as
    ``ipc_events/N``) in the order kernel, ipc, ipc_events, then the same back, so that each
    is run twice and drifts of the machine fall on both sides."""
    names = [p for p in PATHS[:2] if p in paths]
    if "ipc_events" in paths:
        names += [f"ipc_events/{n}" for n in slot_counts]
    return names + names[::-1]


def _task_times(client: Any, gather: bool) -> list[float]:
    """Seconds of 20 empty tasks submitted one at a time, each gathered (``result``) or only
    awaited (``_done``)."""
    times = []
    for _ in range(20):
        t = time.perf_counter()
        f = client.submit(int, 0, pure=False)
        if gather:
            f.result()
        else:
            _done(f)
        times.append(time.perf_counter() - t)
    return times


def run(size: int, block: int, paths: list[str] | None = None,
        slot_counts: list[int] | None = None) -> dict[str, Any]:
    import cupy as cp
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    paths = list(PATHS) if paths is None else paths
    slot_counts = [3, 4] if slot_counts is None else slot_counts
    if "ipc_events" not in paths:
        slot_counts = []
    rows = size // (4 * COLS)
    block_rows = max(1, block // (4 * COLS))
    bounds = _bounds(rows, block_rows)
    x = np.random.default_rng(0).random((rows, COLS), dtype=np.float32)
    y = np.zeros_like(x)  # every IPC path's result, checked after each run
    ref = np.zeros_like(x)  # the kernel's
    rt = cp.cuda.runtime
    figures: dict[str, Any] = {"input_bytes": int(x.nbytes), "blocks": len(bounds),
                               "block_bytes": block_rows * COLS * 4, "paths": paths,
                               "slots": SLOTS}
    if slot_counts:
        figures["ipc_events_slot_counts"] = slot_counts
    t0 = time.perf_counter()
    for arr in (x, y, ref):
        rt.hostRegister(arr.ctypes.data, arr.nbytes, 0)  # as the kernel's second run finds it
    figures["register_s"] = time.perf_counter() - t0
    slots = Slots(block_rows * COLS * 4, max([SLOTS, *slot_counts]))
    events = Events(max(slot_counts)) if slot_counts else None
    runs: dict[str, list[float]] = {}
    stats: dict[str, list[dict[str, float]]] = {}
    equal: dict[str, bool] = {}
    try:
        with LocalCUDACluster(CUDA_VISIBLE_DEVICES="0", n_workers=1,
                              dashboard_address=None) as cluster, Client(cluster) as client:
            client.gather(client.submit(lambda: int(__import__("cupy").arange(3).sum()),
                                        pure=False))  # the worker's CUDA context up
            kernel_run(x, ref, bounds[:1], slots)  # kernels built
            if "ipc" in paths:
                ipc_run(client, x, y, bounds[:1], slots)
            if events is not None:
                events.open_done(client.submit(events_setup_task, tuple(events.handles),
                                               pure=False).result())
                for n in slot_counts:  # every slot's handles opened, the worker's kernels built
                    ipc_events_run(client, x, y, bounds[:n], slots, events, n)
            times = _task_times(client, gather=True)
            figures["task_roundtrip_ms"] = 1e3 * min(times)
            figures["task_roundtrip_median_ms"] = 1e3 * float(np.median(times))
            times = _task_times(client, gather=False)
            figures["task_done_ms"] = 1e3 * min(times)
            figures["task_done_median_ms"] = 1e3 * float(np.median(times))
            if slot_counts:
                figures["task_pipelined_ms"] = {str(n): 1e3 * tasks_pipelined(client, n)
                                                for n in slot_counts}
            for name in _runs(paths, slot_counts):
                out = ref if name == "kernel" else y
                out[...] = 0
                if name == "kernel":
                    got = kernel_run(x, out, bounds, slots)
                elif name == "ipc":
                    got = ipc_run(client, x, out, bounds, slots)
                else:
                    st: dict[str, float] = {}
                    got = ipc_events_run(client, x, out, bounds, slots, events,
                                         int(name.split("/")[1]), st)
                    stats.setdefault(name, []).append(st)
                runs.setdefault(name, []).append(got)
                if name != "kernel":  # ref holds the kernel's first run until its last
                    equal[name] = equal.get(name, True) and _equal(y, ref, bounds)
            rt.deviceSynchronize()
            if events is not None:
                figures["kernel_opened_events_destroyed"] = events.close_done()
                figures["worker_events_destroyed"] = sum(client.run(close_events).values())
            figures["worker_handles_closed"] = sum(client.run(close_opened).values())
        head = x[:block_rows]
        figures["kernel_close_numpy"] = bool(np.allclose(ref[:block_rows],
                                                         np.sqrt(head * head + 1), rtol=1e-6))
    finally:
        if events is not None:  # the worker is gone or closed what it opened of them
            figures["kernel_events_destroyed"] = events.destroy()
        slots.free()
        for arr in (x, y, ref):
            rt.hostUnregister(arr.ctypes.data)
    for name, got in runs.items():
        if name.startswith("ipc_events/"):
            continue
        figures[f"{name}_s"] = min(got)
        figures[f"{name}_runs_s"] = got
        figures[f"{name}_gbps"] = x.nbytes / min(got) / 1e9
    if "ipc" in runs:
        figures["ipc_equal_kernel"] = equal["ipc"]
        figures["ipc_over_kernel"] = figures["kernel_s"] / figures["ipc_s"]
    if slot_counts:
        by: dict[str, dict[str, Any]] = {}
        for n in slot_counts:
            name = f"ipc_events/{n}"
            got = runs[name]
            best = got.index(min(got))
            by[str(n)] = {"s": min(got), "runs_s": got, "gbps": x.nbytes / min(got) / 1e9,
                          "over_kernel": figures["kernel_s"] / min(got),
                          "equal_kernel": equal[name], "runs_wait_s":
                          [st["wait_s"] for st in stats[name]], "runs_submit_s":
                          [st["submit_s"] for st in stats[name]], "best_run": best}
        best_n = min(slot_counts, key=lambda n: by[str(n)]["s"])
        b = by[str(best_n)]
        figures.update(ipc_events_slots=best_n, ipc_events_s=b["s"],
                       ipc_events_runs_s=b["runs_s"], ipc_events_gbps=b["gbps"],
                       ipc_events_over_kernel=b["over_kernel"],
                       ipc_events_equal_kernel=all(v["equal_kernel"] for v in by.values()),
                       ipc_events_by_slots=by)
    return figures


def _paths(text: str) -> list[str]:
    """``--paths``: names from ``PATHS``, comma-separated, in ``PATHS``' order; the kernel's
    is the reference of the others, so it is always among them."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in names if t not in PATHS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown path(s) {', '.join(bad)}; "
                                         f"choose from {', '.join(PATHS)}")
    if "kernel" not in names:
        raise argparse.ArgumentTypeError("the kernel path is the others' reference: name it")
    return [p for p in PATHS if p in names]


def _slot_counts(text: str) -> list[int]:
    """``--slots``: the slot counts ``ipc_events`` runs with, comma-separated, each 1 to 16."""
    try:
        counts = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"slot counts are whole numbers: {text!r}") from None
    if not counts or any(not 1 <= n <= 16 for n in counts):
        raise argparse.ArgumentTypeError(f"slot counts are 1 to 16: {text!r}")
    return sorted(set(counts))


def _line(label: str, s: float, gbps: float, runs: list[float]) -> str:
    return (f"  {label:<13} {s:8.3f} s  {gbps:6.2f} GB/s"
            f"  (runs {', '.join(f'{t:.3f}' for t in runs)} s)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="8GiB", help="input size (float32; default 8GiB)")
    ap.add_argument("--block", default="128MiB", help="bytes per block (default 128MiB)")
    ap.add_argument("--paths", type=_paths, default=list(PATHS),
                    help="the paths to measure, comma-separated, kernel among them "
                         "(default kernel,ipc,ipc_events)")
    ap.add_argument("--slots", type=_slot_counts, default=[3, 4],
                    help="the blocks ipc_events keeps in flight, one run per count, "
                         "comma-separated (default 3,4)")
    add_out(ap)
    args = ap.parse_args(argv)
    size, block = parse_size(args.size), parse_size(args.block)
    why = _gpu_reason()
    if why:
        print(f"cluster_ipc measures CUDA IPC between the kernel and a GPU worker: {why}; "
              "nothing measured")
        return 0
    figures = run(size, block, args.paths, args.slots)
    gpu = gpu_name()
    print(f"cluster_ipc on {gpu}: {format_bytes(size)} float32, {figures['blocks']} blocks "
          f"of {format_bytes(figures['block_bytes'])}, one LocalCUDACluster worker")
    for path in ("kernel", "ipc"):
        if f"{path}_s" in figures:
            print(_line(path, figures[f"{path}_s"], figures[f"{path}_gbps"],
                        figures[f"{path}_runs_s"]))
    for n, b in figures.get("ipc_events_by_slots", {}).items():
        print(_line(f"ipc_events/{n}", b["s"], b["gbps"], b["runs_s"])
              + f"  {b['over_kernel']:.2f} of kernel; waiting for tasks "
              f"{b['runs_wait_s'][b['best_run']]:.3f} s, submitting "
              f"{b['runs_submit_s'][b['best_run']]:.3f} s")
    ratios = []
    if "ipc_over_kernel" in figures:
        ratios.append(f"ipc/kernel {figures['ipc_over_kernel']:.2f}")
    if "ipc_events_over_kernel" in figures:
        ratios.append(f"ipc_events/kernel {figures['ipc_events_over_kernel']:.2f} "
                      f"({figures['ipc_events_slots']} slots)")
    print(f"  {'; '.join(ratios) or 'kernel only'}; one empty task's round trip "
          f"{figures['task_roundtrip_ms']:.2f} ms gathered (median "
          f"{figures['task_roundtrip_median_ms']:.2f}), {figures['task_done_ms']:.2f} ms "
          f"awaited only (median {figures['task_done_median_ms']:.2f})"
          + "".join(f"; {ms:.2f} ms a task with {n} in flight"
                    for n, ms in figures.get("task_pipelined_ms", {}).items()))
    equal = {k: figures[k] for k in ("ipc_equal_kernel", "ipc_events_equal_kernel")
             if k in figures}
    print(f"  input page-locked in {figures['register_s']:.2f} s; "
          + "".join(f"{k} {v}, " for k, v in equal.items())
          + f"kernel close to NumPy {figures['kernel_close_numpy']}; worker closed "
          f"{figures['worker_handles_closed']} handles"
          + (f", destroyed {figures['worker_events_destroyed']} events"
             if "worker_events_destroyed" in figures else ""))
    write(args.out, f"cluster-ipc-{stamp()}",
          {"gpu": gpu, "size": size, "python": python(), **figures})
    return 0 if all(equal.values()) and figures["kernel_close_numpy"] else 1


if __name__ == "__main__":
    sys.exit(main())
