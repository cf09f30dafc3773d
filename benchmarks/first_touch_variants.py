"""Issue 20's first-touch variants, run by ``first_touch.py`` after its own (GPU only).

- Result blocks from ``mmap`` + ``madvise(MADV_HUGEPAGE)`` (transparent huge pages: a fresh
  8 GiB result faults 4,096 times instead of 2 million), filled through staging with and
  without helper threads pre-faulting the block ahead of the batches; the kernel's THP mode
  and the AnonHugePages gained are recorded, since ``madvise`` is only advice.
- ``cudaHostAlloc``ed result blocks (allocation included in the time).
- The input registered in batch-aligned pieces while it streams, then unregistered and
  registered whole on a helper thread (so that ``cupy.asarray`` over it works): the stream's
  rate, the re-registration's time, a second cell straight from it, and ``cupy.asarray``
  over the whole buffer and a slice, checked against NumPy.

Each returns figures with ``correct``; nothing here changes ``cupy_magic``.
"""

from __future__ import annotations

import concurrent.futures as cf
import mmap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HUGE = 2 * 2**20


def _anon_huge_kib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return -1


def thp_mode() -> str:
    path = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    return path.read_text().strip() if path.exists() else "unknown"


def huge_block(nbytes: int) -> tuple[mmap.mmap, np.ndarray]:
    """An anonymous mapping advised to use transparent huge pages, as float32."""
    m = mmap.mmap(-1, -(-nbytes // HUGE) * HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_HUGEPAGE)
    return m, np.frombuffer(m, np.float32, count=nbytes // 4)


def _through(st: Any, x: np.ndarray, out: np.ndarray, want: np.ndarray,
             direct: Callable[..., Any], pool: cf.ThreadPoolExecutor,
             threaded: Callable[..., None],
             prefault: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Stream into ``out`` through the pinned download buffers, copied out by 16 threads."""
    pending: dict[int, tuple[int, int]] = {}

    def down(k: int, a: int, b: int, r: Any, s: Any) -> None:
        if prefault is not None:
            prefault(a)
        r.get(stream=s, out=st.down[k][: b - a], blocking=False)
        pending[k] = (a, b)

    def recycle(k: int) -> None:
        if k in pending:
            a, b = pending.pop(k)
            threaded(pool, 16, lambda p, q: np.copyto(out[a + p:a + q], st.down[k][p:q]), b - a)
    r = st.run(x, out, direct, down, recycle)
    r["correct"] = bool(np.allclose(out[::4099], want))
    return r


def _thp_run(st: Any, x: np.ndarray, want: np.ndarray, direct: Callable[..., Any],
             pool: cf.ThreadPoolExecutor, threaded: Callable[..., None],
             helpers: int) -> dict[str, Any]:
    """A fresh THP block as the result; ``helpers`` threads pre-fault 8 batches ahead."""
    n, step = len(x), len(st.down[0])
    before = _anon_huge_kib()
    _m, block = huge_block(4 * n)
    faults: dict[int, cf.Future] = {}
    helper = cf.ThreadPoolExecutor(max(helpers, 1), thread_name_prefix="prefault")

    def touch(a: int) -> None:
        block[a:min(a + step, n):HUGE // 4] = 0  # one write per huge page faults it in

    def prefault(a: int) -> None:
        for ahead in range(a, min(n, a + 8 * step), step):
            if ahead not in faults:
                faults[ahead] = helper.submit(touch, ahead)
        faults[a].result()
    r = _through(st, x, block, want, direct, pool, threaded, prefault if helpers else None)
    helper.shutdown()
    r.update(thp=thp_mode(), anon_huge_kib_gained=_anon_huge_kib() - before)
    return r


def fresh_outputs(st: Any, x: np.ndarray, want: np.ndarray, direct: Callable[..., Any],
                  pool: cf.ThreadPoolExecutor, threaded: Callable[..., None]) -> dict[str, Any]:
    """Stream into fresh result blocks of each kind (x already page-locked)."""
    runs = {"fresh THP output (mmap+madvise), staged 16 threads":
            _thp_run(st, x, want, direct, pool, threaded, 0),
            "fresh THP output, pre-faulted 8 batches ahead by 4 threads":
            _thp_run(st, x, want, direct, pool, threaded, 4)}
    runs["cudaHostAlloc output (direct D2H; gbps_with_alloc counts the allocation)"] = \
        _host_alloc_run(st, x, want, direct)
    return runs


def _host_alloc_run(st: Any, x: np.ndarray, want: np.ndarray,
                    direct: Callable[..., Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    mem = st.cp.cuda.alloc_pinned_memory(x.nbytes)
    alloc = time.perf_counter() - t0
    out = np.frombuffer(mem, np.float32, count=len(x))
    r = st.run(x, out, direct)
    r.update(correct=bool(np.allclose(out[::4099], want)), alloc_s=alloc,
             gbps_with_alloc=x.nbytes / (r["seconds"] + alloc) / 1e9)
    return r


def pieces_then_whole(st: Any, x: np.ndarray, out: np.ndarray, want: np.ndarray,
                      chunks: list[tuple[int, int]], direct: Callable[..., Any]) -> dict:
    """Register ``x`` in batch-aligned pieces while it streams, then whole in the background."""
    cp, rt = st.cp, st.cp.cuda.runtime
    locker = cf.ThreadPoolExecutor(4)
    futures: list[cf.Future] = []

    def piece(i: int, a: int, b: int, k: int, s: Any) -> Any:
        while len(futures) < min(len(chunks), i + 1 + 4):
            futures.append(locker.submit(rt.hostRegister, *chunks[len(futures)], 0))
        for f in futures[max(0, i - 1): i + 1]:
            f.result()
        d = cp.empty(b - a, np.float32)
        lo, hi = x.ctypes.data + 4 * a, x.ctypes.data + 4 * b
        cut = min(hi, max(lo, chunks[i][0]))
        for p, q in ((lo, cut), (cut, hi)):  # one copy may not span two registrations
            if q > p:
                rt.memcpyAsync(d.data.ptr + (p - lo), p, q - p, rt.memcpyHostToDevice, s.ptr)
        return d
    r = st.run(x, out, piece)
    r["correct"] = bool(np.allclose(out[::4099], want))
    out[::4099] = -1
    for f in futures:
        f.result()
    locker.shutdown()

    def whole() -> float:
        t0 = time.perf_counter()
        for ptr, _ in chunks:
            rt.hostUnregister(ptr)
        rt.hostRegister(x.ctypes.data, x.nbytes, 0)
        return time.perf_counter() - t0
    job = cf.ThreadPoolExecutor(1).submit(whole)
    r["rewhole_s"] = job.result()
    second = st.run(x, out, direct)
    r["second_cell_gbps"] = second["gbps"]
    r["second_cell_correct"] = bool(np.allclose(out[::4099], want))
    part = x[len(x) // 3: len(x) // 3 + 1_000_003]
    r["asarray_ok"] = bool(np.array_equal(cp.asarray(part).get(), part)
                           and np.array_equal(cp.asarray(x[:4099]).get(), x[:4099]))
    r["correct"] = r["correct"] and r["second_cell_correct"] and r["asarray_ok"]
    rt.hostUnregister(x.ctypes.data)
    return r
