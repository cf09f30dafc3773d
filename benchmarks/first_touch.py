"""First touch on the GPU machine: page faults, page-locking and ways to stream an unlocked input.

Issue 3 asks which is faster for a ``%%gpu`` cell whose NumPy input is not page-locked yet:
registering it (``cudaHostRegister``) or copying it through pinned staging buffers with
several host threads. This script measures, in one run on the GPU, over an N GiB float32
array (``--size``, default 8GiB):

- host memory: filling freshly allocated memory with 1 and 16 threads (first touch), and
  again after freeing it (whether the machine gives back faulted pages);
- page-locking: ``cudaHostRegister`` of touched and of untouched memory, in one call and in
  chunks from several threads; ``cudaHostAlloc`` of the same size; unregistering;
- streaming ``sqrt(x*x+1)`` in 128 MiB batches on 3 streams into a page-locked output, with the
  input (a) already locked (the reference), (b) locked whole first, (c) locked chunk by chunk
  a few batches ahead in helper threads, (d) staged through pinned buffers by 8 and 16
  threads, (e) copied from pageable memory;
- the output side: rows copied into a fresh, unlocked result array through staging;
- issue 20's variants (``first_touch_variants.py``): fresh result blocks backed by transparent
  huge pages, with and without pre-faulting helper threads, and ``cudaHostAlloc``ed; the
  input registered in batch-aligned pieces while it streams, then whole in the background.

Prints a table and writes ``first-touch-<date>.json`` under ``--out`` (default
``benchmarks/results``). Without a GPU it says so and exits 0.

Usage: ``python3 benchmarks/first_touch.py [--size 8GiB] [--out DIR]``
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import itertools
import sys
import time
from collections.abc import Callable
from typing import Any

import first_touch_variants as variants
import numpy as np
from _results import DAY, add_out, gpu_name, python, stamp, when, write

from cupy_magic import backend
from cupy_magic.units import parse_size

PAGE = 4096
BATCH_BYTES = 128 * 2**20
STREAMS = 3


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _threaded(pool: cf.ThreadPoolExecutor, threads: int, fn: Callable[[int, int], Any],
              n: int) -> None:
    edges = np.linspace(0, n, threads + 1).astype(np.int64)
    for job in [pool.submit(fn, int(p), int(q)) for p, q in itertools.pairwise(edges)]:
        job.result()


def fill(arr: np.ndarray, threads: int, pool: cf.ThreadPoolExecutor) -> float:
    """Seconds to write every element of ``arr`` (first touch when it is fresh)."""
    def part(p: int, q: int) -> None:
        arr[p:q].fill(1)
    return _timed(lambda: _threaded(pool, threads, part, len(arr)))


def chunk_edges(arr: np.ndarray, bounds: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Byte ranges (address, size) over ``arr``, one per batch, split at page boundaries."""
    base, end = arr.ctypes.data, arr.ctypes.data + arr.nbytes
    cuts = [base] + [-(-(base + a * arr.itemsize) // PAGE) * PAGE for a, _ in bounds[1:]] + [end]
    return [(p, q - p) for p, q in itertools.pairwise(cuts)]


class Streamer:
    """The pipeline under test: batches on K streams, slots recycled through events."""

    def __init__(self, cp: Any, n: int) -> None:
        self.cp = cp
        self.rows = BATCH_BYTES // 4
        self.bounds = [(a, min(a + self.rows, n)) for a in range(0, n, self.rows)]
        self.streams = [cp.cuda.Stream(non_blocking=True) for _ in range(STREAMS)]
        self.staging = [np.frombuffer(cp.cuda.alloc_pinned_memory(BATCH_BYTES), np.float32)
                        for _ in range(STREAMS)]
        self.down = [np.frombuffer(cp.cuda.alloc_pinned_memory(BATCH_BYTES), np.float32)
                     for _ in range(STREAMS)]
        for s in self.streams:  # warm each stream's pool arena
            with s:
                d = cp.empty(self.rows, np.float32)
                r = cp.sqrt(d * d + 1)
                del d, r
        for s in self.streams:
            s.synchronize()

    def run(self, x: np.ndarray, out: np.ndarray,
            upload: Callable[[int, int, int, int, Any], Any],
            download: Callable[[int, int, int, Any, Any], None] | None = None,
            recycle: Callable[[int], None] | None = None) -> dict[str, float]:
        cp = self.cp
        events: list[Any] = [None] * STREAMS
        waited = 0.0
        t0 = time.perf_counter()
        for i, (a, b) in enumerate(self.bounds):
            k = i % STREAMS
            s = self.streams[k]
            if events[k] is not None:
                w0 = time.perf_counter()
                events[k].synchronize()
                waited += time.perf_counter() - w0
                if recycle is not None:
                    recycle(k)
            with s:
                d = upload(i, a, b, k, s)
                r = cp.sqrt(d * d + 1)
                if download is None:
                    r.get(stream=s, out=out[a:b], blocking=False)
                else:
                    download(k, a, b, r, s)
            ev = cp.cuda.Event(block=True, disable_timing=True)
            ev.record(s)
            events[k] = ev
        for k, s in enumerate(self.streams):
            s.synchronize()
            if recycle is not None:
                recycle(k)
        seconds = time.perf_counter() - t0
        return {"seconds": seconds, "gbps": x.nbytes / seconds / 1e9, "host_waited_s": waited}


def profile_cell(x: np.ndarray) -> str:
    """Where a first and a second batched ``%%gpu`` cell over ``x`` spend their time.

    cProfile of the main thread, top 15 functions by own time each; the second cell runs
    after the first one's result was dropped (its page-locked block is reused).
    """
    import cProfile
    import io
    import pstats

    from cupy_magic import BatchOptions, run_cell

    backend.select("cupy")
    ns = {"np": np, "x": x}
    out = []
    for label in ("first cell (x not locked, fresh result)", "second cell"):
        prof = cProfile.Profile()
        reports = []
        t = _timed(lambda prof=prof, reports=reports: reports.append(prof.runcall(
            run_cell, "y = np.sqrt(x * x + 1)\n", ns, batch=BatchOptions(forced=True),
            syncs="off")))
        ns.pop("y")  # dropped: its page-locked block goes back for the next cell
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(15)
        phases = ", ".join(f"{k} {v:.3f} s" for k, v in reports[0].batch.phases.items())
        out.append(f"{label}: {t:.3f} s (phases: {phases})\n{buf.getvalue()}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="8GiB")
    add_out(parser)
    args = parser.parse_args(argv)
    cp, why = backend.probe_cupy()
    if cp is None:
        print(f"no GPU visible ({why}); this benchmark measures the GPU machine only")
        return 0
    rt = cp.cuda.runtime
    n = parse_size(args.size) // 4
    gb = 4 * n / 1e9
    pool = cf.ThreadPoolExecutor(16)
    fig: dict[str, Any] = {"gpu": gpu_name(), "cupy": cp.__version__,
                           "numpy": np.__version__, "python": python(), "date": when(),
                           "input_bytes": 4 * n, "batch_bytes": BATCH_BYTES, "streams": STREAMS}
    rate: dict[str, float] = {}

    def note(name: str, gbps: float) -> None:
        rate[name] = gbps
        print(f"{name}: {gbps:.1f} GB/s", flush=True)

    # --- host memory: first touch -------------------------------------------------------
    a16 = np.empty(n, np.float32)
    note("fill fresh memory, 16 threads", gb / fill(a16, 16, pool))
    a1 = np.empty(n, np.float32)
    note("fill fresh memory, 1 thread", gb / fill(a1, 1, pool))
    note("fill touched memory, 1 thread", gb / fill(a1, 1, pool))
    note("fill touched memory, 16 threads", gb / fill(a1, 16, pool))
    del a16, a1
    again = np.empty(n, np.float32)
    note("fill fresh memory after freeing, 16 threads", gb / fill(again, 16, pool))
    del again

    # --- page-locking -------------------------------------------------------------------
    x = np.empty(n, np.float32)
    fill(x, 16, pool)
    x[::1024] = np.arange(len(x[::1024]), dtype=np.float32) % 7
    note("register touched (1 call)",
         gb / _timed(lambda: rt.hostRegister(x.ctypes.data, x.nbytes, 0)))
    note("unregister (1 call)", gb / _timed(lambda: rt.hostUnregister(x.ctypes.data)))

    def lock_untouched() -> float:
        fresh = np.empty(n, np.float32)
        seconds = _timed(lambda: rt.hostRegister(fresh.ctypes.data, fresh.nbytes, 0))
        rt.hostUnregister(fresh.ctypes.data)
        return seconds
    note("register untouched (1 call)", gb / lock_untouched())
    st = Streamer(cp, n)
    chunks = chunk_edges(x, st.bounds)
    for threads in (1, 4, 8):
        def reg(p: int, q: int) -> None:
            for ptr, size in chunks[p:q]:
                rt.hostRegister(ptr, size, 0)
        note(f"register touched, 128 MiB chunks, {threads} threads", gb / _timed(
            lambda reg=reg, threads=threads: _threaded(pool, threads, reg, len(chunks))))
        for ptr, _ in chunks:
            rt.hostUnregister(ptr)
    ptr = 0

    def host_alloc() -> None:
        nonlocal ptr
        ptr = rt.hostAlloc(4 * n, 0)
    note("cudaHostAlloc", gb / _timed(host_alloc))
    note("cudaFreeHost", gb / _timed(lambda: rt.freeHost(ptr)))
    fig["host_gbps"] = rate

    # --- streaming an unlocked input into a locked output --------------------------------
    out = np.empty(n, np.float32)
    fill(out, 16, pool)
    rt.hostRegister(out.ctypes.data, out.nbytes, 0)
    want = np.sqrt(x[::4099] * x[::4099] + 1)
    runs: dict[str, Any] = {}

    def direct(i: int, a: int, b: int, k: int, s: Any) -> Any:
        d = cp.empty(b - a, np.float32)
        d.set(x[a:b], stream=s)
        return d

    def check(name: str, result: dict[str, float]) -> None:
        result["correct"] = bool(np.allclose(out[::4099], want))
        out[::4099] = -1
        runs[name] = result
        print(f"{name}: {result['gbps']:.1f} GB/s", flush=True)

    rt.hostRegister(x.ctypes.data, x.nbytes, 0)
    st.run(x, out, direct)  # warm-up
    check("input already locked (second cell)", st.run(x, out, direct))
    check("input already locked, again", st.run(x, out, direct))
    rt.hostUnregister(x.ctypes.data)

    def lock_whole_then_stream() -> dict[str, float]:
        t0 = time.perf_counter()
        rt.hostRegister(x.ctypes.data, x.nbytes, 0)
        r = st.run(x, out, direct)
        r["seconds"] = time.perf_counter() - t0
        r["gbps"] = gb / r["seconds"]
        return r
    check("lock whole input, then stream", lock_whole_then_stream())
    rt.hostUnregister(x.ctypes.data)

    for threads, ahead in ((1, 2), (1, 4), (4, 8)):
        locker = cf.ThreadPoolExecutor(threads)
        futures: list[cf.Future] = []

        def lock_ahead(i: int, a: int, b: int, k: int, s: Any,
                       futures: list[cf.Future] = futures, locker: Any = locker,
                       ahead: int = ahead) -> Any:
            while len(futures) < min(len(chunks), i + 1 + ahead):
                futures.append(locker.submit(rt.hostRegister, *chunks[len(futures)], 0))
            for f in futures[max(0, i - 1): i + 1]:
                f.result()
            # One copy may not span two registrations: split the batch where a chunk starts.
            d = cp.empty(b - a, np.float32)
            lo, hi = x.ctypes.data + 4 * a, x.ctypes.data + 4 * b
            cut = min(hi, max(lo, chunks[i][0]))
            for p, q in ((lo, cut), (cut, hi)):
                if q > p:
                    rt.memcpyAsync(d.data.ptr + (p - lo), p, q - p, rt.memcpyHostToDevice, s.ptr)
            return d
        check(f"lock chunks {ahead} batches ahead, {threads} threads",
              st.run(x, out, lock_ahead))
        for f in futures:
            f.result()
        for ptr, _ in chunks:
            rt.hostUnregister(ptr)
        locker.shutdown()

    for threads in (8, 16):
        def staged(i: int, a: int, b: int, k: int, s: Any, threads: int = threads) -> Any:
            buf = st.staging[k][: b - a]
            _threaded(pool, threads, lambda p, q: np.copyto(buf[p:q], x[a + p:a + q]), b - a)
            d = cp.empty(b - a, np.float32)
            d.set(buf, stream=s)
            return d
        check(f"stage input through pinned buffers, {threads} threads",
              st.run(x, out, staged))

    # What cupy_magic does: register the whole input in one call on a helper thread (a
    # buffer registered in pieces breaks cupy.asarray over it) and stage batches with 16
    # threads until the registration is done.
    whole = cf.ThreadPoolExecutor(1)
    job = whole.submit(rt.hostRegister, x.ctypes.data, x.nbytes, 0)
    direct_batches = [0]

    def stage_until_locked(i: int, a: int, b: int, k: int, s: Any) -> Any:
        if job.done():
            direct_batches[0] += 1
            return direct(i, a, b, k, s)
        buf = st.staging[k][: b - a]
        _threaded(pool, 16, lambda p, q: np.copyto(buf[p:q], x[a + p:a + q]), b - a)
        d = cp.empty(b - a, np.float32)
        d.set(buf, stream=s)
        return d
    r = st.run(x, out, stage_until_locked)
    r["direct_batches"] = direct_batches[0]
    check("stage with 16 threads while the whole input locks on a helper thread", r)
    job.result()
    rt.hostUnregister(x.ctypes.data)
    whole.shutdown()

    def pageable(i: int, a: int, b: int, k: int, s: Any) -> Any:
        return cp.asarray(x[a:b])
    check("pageable copies (cp.asarray per batch)", st.run(x, out, pageable))

    # --- the output side: a fresh result array that is not locked -------------------------
    rt.hostRegister(x.ctypes.data, x.nbytes, 0)
    for threads in (8, 16):
        fresh_out = np.empty(n, np.float32)
        pending: dict[int, tuple[int, int]] = {}

        def down(k: int, a: int, b: int, r: Any, s: Any,
                 pending: dict[int, tuple[int, int]] = pending) -> None:
            r.get(stream=s, out=st.down[k][: b - a], blocking=False)
            pending[k] = (a, b)

        def recycle(k: int, fresh_out: np.ndarray = fresh_out, threads: int = threads,
                    pending: dict[int, tuple[int, int]] = pending) -> None:
            if k in pending:
                a, b = pending.pop(k)
                _threaded(pool, threads,
                          lambda p, q: np.copyto(fresh_out[a + p:a + q], st.down[k][p:q]), b - a)
        r = st.run(x, fresh_out, direct, down, recycle)
        r["correct"] = bool(np.allclose(fresh_out[::4099], want))
        runs[f"fresh unlocked output through staging, {threads} threads"] = r
        print(f"fresh output, {threads} threads: {r['gbps']:.1f} GB/s", flush=True)
        del fresh_out
    # Issue 20: huge-page and cudaHostAlloc result blocks, and the input registered in
    # pieces while it streams then whole (first_touch_variants.py)
    runs.update(variants.fresh_outputs(st, x, want, direct, pool, _threaded))
    rt.hostUnregister(x.ctypes.data)
    runs["input in batch-aligned pieces while streaming, then whole in the background"] = \
        variants.pieces_then_whole(st, x, out, want, chunks, direct)
    rt.hostUnregister(out.ctypes.data)
    fig["streaming"] = runs

    lines = [f"First touch on {fig['gpu']} ({fig['date']}), {gb / 1.073741824:.1f} GiB float32",
             "", "| host operation | GB/s |", "| --- | ---: |"]
    lines += [f"| {k} | {v:.1f} |" for k, v in rate.items()]
    lines += ["", f"`sqrt(x*x+1)`, {BATCH_BYTES >> 20} MiB batches, {STREAMS} streams",
              "", "| input path | input GB/s | host waited s | correct |",
              "| --- | ---: | ---: | --- |"]
    lines += [f"| {k} | {v['gbps']:.1f} | {v['host_waited_s']:.2f} | {v['correct']} |"
              for k, v in runs.items()]
    md = "\n".join(lines)
    print(md)
    fig["cell_profile"] = profile_cell(x)
    print(fig["cell_profile"])
    write(args.out, f"first-touch-{stamp(DAY)}", fig, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
