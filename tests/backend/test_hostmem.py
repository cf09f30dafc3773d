"""Background page-locking and the cache of locked result blocks (cupy_magic.backend.hostmem).

CUDA cannot run on this machine, so these tests drive HostMemory with a runtime that
enforces what the H200 showed: a page belongs to at most one registration, and one copy
may not span two registrations (CUDA answers "invalid argument"). Copies really move the
bytes (device memory is host memory here). The GPU tests (test_pipeline.py, test_gpu.py)
run the real thing.
"""

from __future__ import annotations

import ctypes
import gc
import threading
import time
import types

import numpy as np
import pytest

from cupy_magic.backend import hostmem
from cupy_magic.backend.hostmem import MIN_BYTES, HostMemory

PAGE = 4096
BIG = 8 * MIN_BYTES


class StrictRuntime:
    """cudaHostRegister / cudaHostUnregister / cudaMemcpyAsync with CUDA's rules."""

    def __init__(self, fail_after: int | None = None, gate: threading.Event | None = None
                 ) -> None:
        self.gate = gate
        self.ranges: dict[int, int] = {}  # registered base -> end
        self.mutex = threading.Lock()
        self.registers = 0
        self.unregisters = 0
        self.fail_after = fail_after
        self.copies: list[tuple[int, int]] = []

    def hostRegister(self, ptr: int, size: int, flags: int) -> None:
        if self.gate is not None:
            self.gate.wait(10)
        with self.mutex:
            self.registers += 1
            if self.fail_after is not None and self.registers > self.fail_after:
                raise RuntimeError("cudaErrorHostMemoryAlreadyRegistered (simulated refusal)")
            first, last = ptr // PAGE, (ptr + size - 1) // PAGE
            for base, end in self.ranges.items():
                if first <= (end - 1) // PAGE and base // PAGE <= last:
                    raise RuntimeError(f"page shared with the registration at {base:#x}")
            self.ranges[ptr] = ptr + size

    def hostUnregister(self, ptr: int) -> None:
        with self.mutex:
            self.unregisters += 1
            if ptr not in self.ranges:
                raise RuntimeError("cudaErrorHostMemoryNotRegistered")
            del self.ranges[ptr]

    def memcpyAsync(self, dst: int, src: int, size: int, kind: int, stream: int) -> None:
        host = src if kind == hostmem.H2D else dst
        with self.mutex:
            inside = [b for b, e in self.ranges.items() if b <= host and host + size <= e]
        if not inside:
            raise RuntimeError("cudaErrorInvalidValue: the copy spans registrations or none")
        self.copies.append((host, size))
        ctypes.memmove(dst, src, size)

    def locked_bytes(self) -> int:
        return sum(e - b for b, e in self.ranges.items())


class Dev:
    """Stands for a contiguous CuPy array: bytes at ``data.ptr``."""

    def __init__(self, shape: tuple[int, ...], dtype: str) -> None:
        self.arr = np.zeros(shape, dtype)
        self.data = types.SimpleNamespace(ptr=self.arr.ctypes.data)


@pytest.fixture
def rt():
    return StrictRuntime()


@pytest.fixture
def hm(rt):
    mem = HostMemory(rt, cache_limit=4 * BIG)
    yield mem
    mem.close()


def big(nbytes: int = BIG, dtype: str = "float32", seed: int = 0) -> np.ndarray:
    n = nbytes // np.dtype(dtype).itemsize
    return np.random.default_rng(seed).random(n).astype(dtype)


def settled(mem: HostMemory, arr: np.ndarray) -> np.ndarray:
    region = mem.find(arr)
    assert region is not None and mem.wait(region)
    return arr


def test_a_locked_input_is_one_registration_copied_in_one_piece(hm, rt):
    x = big(BIG + 3 * PAGE + 8)
    region = hm.lock(x)
    assert region is not None and hm.wait(region) and hm.locked(x)
    assert rt.ranges == {x.ctypes.data: x.ctypes.data + x.nbytes}  # CuPy's own copies work
    dev = Dev(x.shape, "float32")
    assert hm.copy_in(dev, x, stream=0)
    np.testing.assert_array_equal(dev.arr, x)
    assert rt.copies == [(x.ctypes.data, x.nbytes)]
    part = x[1000:3000]  # a slice of a locked array is locked too
    dev2 = Dev(part.shape, "float32")
    assert hm.copy_in(dev2, part, 0)
    np.testing.assert_array_equal(dev2.arr, part)


def test_copies_wait_for_nobody_until_the_lock_is_done():
    gate = threading.Event()
    rt = StrictRuntime(gate=gate)
    mem = HostMemory(rt)
    x = big()
    region = mem.lock(x)
    assert region is not None and not mem.locked(x)
    assert not mem.copy_in(Dev(x.shape, "float32"), x, 0)  # pending: the caller stages
    gate.set()
    assert mem.wait(region) and mem.copy_in(Dev(x.shape, "float32"), x, 0)
    mem.close()
    assert rt.ranges == {}


def test_a_second_lock_finds_the_registration_and_it_goes_with_the_buffer(hm, rt):
    x = big()
    first = hm.lock(x)
    assert hm.lock(x[10:]) is first  # a view finds its owner's registration
    hm.wait(first)
    assert hm.lock(x) is first and rt.registers == 1  # not registered again
    del x, first
    gc.collect()
    assert rt.ranges == {} and hm.stats()["locked_bytes"] == 0


def test_small_strided_and_foreign_buffers_are_not_locked(hm, rt):
    assert hm.lock(np.ones(1000)) is None  # below MIN_BYTES: a pageable copy is faster
    assert hm.lock(big()[::2]) is None  # not contiguous
    raw = bytearray(BIG)
    assert hm.lock(np.frombuffer(raw, np.uint8)) is None  # memory a bytearray owns
    assert rt.registers == 0


def test_a_refused_registration_is_reported_and_not_retried(rt):
    rt.fail_after = 0
    mem = HostMemory(rt)
    x = big()
    region = mem.lock(x)
    assert not mem.wait(region) and "simulated refusal" in region.failed
    assert not mem.copy_in(Dev(x.shape, "float32"), x, 0)  # the caller copies another way
    assert mem.lock(x) is None and rt.registers == 1
    mem.close()
    assert rt.ranges == {}


def test_a_result_block_is_locked_after_the_run_and_reused_by_the_next(hm, rt):
    y = hm.empty((BIG // 4 + 77,), "float32")
    assert y.flags.writeable and y.flags.c_contiguous and y.dtype == np.float32
    assert not hm.copy_out(y, Dev(y.shape, "float32"), 0)  # fresh: rows are staged
    y[...] = 3.0
    hm.lock(y)
    settled(hm, y)
    dev = Dev(y.shape, "float32")
    dev.arr[...] = 4.0
    assert hm.copy_out(y, dev, 0) and (y == 4.0).all()
    ptr = y.ctypes.data
    view = y[5:]  # a view keeps the block out of the cache
    del y
    gc.collect()
    assert hm.stats()["cached_blocks"] == 0
    del view
    gc.collect()
    assert hm.stats()["cached_blocks"] == 1 and hm.stats()["cached_bytes"] >= BIG
    z = hm.empty((BIG // 4,), "float32")  # fits the cached block: reused, already locked
    assert z.ctypes.data == ptr and rt.registers == 1 and hm.locked(z)
    assert hm.copy_out(z, Dev(z.shape, "float32"), 0)
    assert hm.stats()["cached_blocks"] == 0
    del z
    gc.collect()
    assert hm.release_cached() >= BIG and rt.ranges == {}


def test_a_block_dropped_before_it_was_settled_is_not_cached(hm, rt):
    y = hm.empty((BIG // 4,), "float32")
    del y  # e.g. a run interrupted before the end
    gc.collect()
    assert hm.stats()["cached_blocks"] == 0 and rt.ranges == {} and rt.registers == 0


def test_a_much_smaller_result_does_not_take_a_big_block(hm, rt):
    y = settled(hm, hm.empty((3 * BIG // 4,), "float32"))
    del y
    gc.collect()
    small = hm.empty((MIN_BYTES // 4,), "float32")
    assert hm.stats()["cached_blocks"] == 1 and not hm.locked(small)
    del small


def test_the_cache_keeps_at_most_its_limit(rt):
    mem = HostMemory(rt, cache_limit=BIG + 1)
    a = mem.empty((BIG // 4,), "float32")
    b = mem.empty((BIG // 4,), "float32")
    for arr in (a, b):
        mem.lock(arr)
        settled(mem, arr)
    del a, b, arr
    gc.collect()
    assert mem.stats()["cached_blocks"] == 1 and rt.locked_bytes() == BIG
    mem.close()
    assert rt.ranges == {}


def test_small_results_are_plain_arrays(hm, rt):
    y = hm.empty((10, 3), "int64")
    hm.lock(y)
    assert y.shape == (10, 3) and hm.find(y) is None and rt.registers == 0


def test_an_object_result_is_a_plain_array_and_never_locked(hm, rt):
    """A large result of Python objects (a cluster's ``x.astype(object)``) gets a plain
    array: a reused block would hold no valid objects, and pointers never go to a device."""
    rows = BIG // np.dtype(object).itemsize
    out = hm.empty((rows,), object)
    assert out.dtype == object and out.shape == (rows,) and hm.find(out) is None
    out[:] = "a"
    assert hm.lock(out) is None and rt.registers == 0
    assert list(out[:2]) == ["a", "a"]


def test_close_undoes_every_registration_and_later_collection_is_harmless(rt):
    mem = HostMemory(rt)
    x = big()
    y = mem.empty((BIG // 4,), "float32")
    mem.lock(y)
    mem.wait(mem.lock(x))
    settled(mem, y)
    assert len(rt.ranges) == 2
    mem.close()
    assert rt.ranges == {} and rt.unregisters == 2
    y[...] = 1.0  # the array stays usable, just not page-locked
    del x, y
    gc.collect()
    assert rt.unregisters == 2  # nothing undone twice


def test_staging_buffers_are_registered_once_and_reused(hm, rt):
    touched = []
    buf = hm.staging(3 * PAGE + 5, touch=lambda b: touched.append(b.nbytes))
    assert buf.nbytes >= 3 * PAGE + 5 and touched == [buf.nbytes]
    assert rt.ranges == {buf.ctypes.data: buf.ctypes.data + buf.nbytes}
    hm.unstage(buf)
    again = hm.staging(3 * PAGE)  # fits: the same buffer, not registered again
    assert again is buf and rt.registers == 1
    hm.unstage(again)
    other = hm.staging(64 * PAGE)  # bigger than twice: a new one
    assert other is not buf and rt.registers == 2
    hm.unstage(other)
    assert hm.staging(40 * PAGE) is other  # found behind another free buffer
    hm.unstage(other)
    assert hm.stats()["staging_bytes"] == buf.nbytes + other.nbytes
    assert hm.stats()["cached_bytes"] == 0  # result blocks only
    assert hm.release_cached() == buf.nbytes + other.nbytes and rt.ranges == {}


def test_a_registration_queued_at_close_never_happens():
    class Slow(StrictRuntime):
        def hostRegister(self, ptr: int, size: int, flags: int) -> None:
            time.sleep(0.2)
            super().hostRegister(ptr, size, flags)

    rt = Slow()
    mem = HostMemory(rt)
    ys = [mem.empty((BIG // 4,), "float32") for _ in range(3)]
    for y in ys:
        mem.lock(y)  # two lock threads: the third registration waits in the queue
    mem.close()  # cancels the queued one, waits for the two running, undoes them
    del ys, y
    gc.collect()
    mem.stats()
    assert rt.registers == 2 and rt.ranges == {}


def test_adopted_shared_memory_is_locked_in_one_piece_copied_through_and_disowned(hm, rt):
    from multiprocessing import shared_memory

    seg = shared_memory.SharedMemory(create=True, size=BIG)
    mem = rows = out = None  # views of the segment: dropped before it closes
    try:
        mem = np.ndarray((BIG // 4,), np.float32, buffer=seg.buf)
        base = mem.ctypes.data
        assert hm.lock(mem) is None  # not a NumPy array's own memory: lock() leaves it
        region = hm.adopt(base, seg.size)
        assert region is not None and rt.ranges == {base: base + seg.size}
        rows = mem[4096:8192]
        rows[:] = np.arange(4096, dtype=np.float32)
        dev = Dev(rows.shape, "float32")
        assert hm.copy_in(dev, rows, 0)  # a view inside the segment copies asynchronously
        np.testing.assert_array_equal(dev.arr, rows)
        out = mem[:4096]
        assert hm.copy_out(out, dev, 0)
        np.testing.assert_array_equal(out, rows)
        hm.disown(region)
        assert rt.ranges == {} and not hm.locked(rows) and not hm.copy_in(dev, rows, 0)
        hm.disown(region)  # twice: nothing more
        assert rt.unregisters == 1
        refused = HostMemory(StrictRuntime(fail_after=0))
        assert refused.adopt(base, seg.size) is None and not refused.locked(rows)
        refused.close()
    finally:
        mem = rows = out = None
        seg.close()
        seg.unlink()
