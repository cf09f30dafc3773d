"""Chunked page-locking and the cache of locked result blocks (cupy_magic.hostmem).

CUDA cannot run on this machine, so these tests drive HostMemory with a runtime that
enforces what the H200 showed: a page belongs to at most one registration, and one copy
may not span two registrations (CUDA answers "invalid argument"). Copies really move the
bytes (device memory is host memory here). The GPU tests (test_gpu.py) run the real thing.
"""

from __future__ import annotations

import ctypes
import gc
import threading
import types

import numpy as np
import pytest

from cupy_magic import hostmem
from cupy_magic.hostmem import CHUNK_BYTES, MIN_BYTES, PAGE, HostMemory, Region


class StrictRuntime:
    """cudaHostRegister / cudaHostUnregister / cudaMemcpyAsync with CUDA's rules."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.ranges: dict[int, int] = {}  # registered base -> end
        self.mutex = threading.Lock()
        self.registers = 0
        self.fail_after = fail_after
        self.copies: list[tuple[int, int]] = []

    def hostRegister(self, ptr: int, size: int, flags: int) -> None:
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
    mem = HostMemory(rt, cache_limit=4 * CHUNK_BYTES)
    yield mem
    mem.close()


def big(nbytes: int, dtype: str = "float32", seed: int = 0) -> np.ndarray:
    n = nbytes // np.dtype(dtype).itemsize
    return np.random.default_rng(seed).random(n).astype(dtype)


def test_chunks_cover_the_buffer_and_inner_cuts_fall_on_pages():
    base = 0x7F00_0000_0010  # NumPy's large buffers start 16 bytes into a page
    region = Region.over(base, 3 * CHUNK_BYTES + 12345)
    assert region.starts[0] == base and len(region.starts) == 4
    assert all(s % PAGE == 0 for s in region.starts[1:])
    assert region.chunk(3)[1] == base + 3 * CHUNK_BYTES + 12345
    # A range across a cut becomes one piece per chunk; pieces tile the range.
    cut = region.starts[2]
    assert region.pieces(cut - 100, cut + 100) == [(cut - 100, cut), (cut, cut + 100)]
    assert list(region.covering(cut - 100, cut + 100)) == [1, 2]
    assert list(region.covering(cut, cut + 1)) == [2]


def test_copies_of_a_locked_input_split_at_chunks_and_move_every_byte(hm, rt):
    x = big(2 * CHUNK_BYTES + 3 * PAGE + 8)  # three chunks, odd end
    region = hm.lock(x)
    assert region is not None and len(region.starts) == 3
    dev = Dev(x.shape, "float32")
    assert hm.copy_in(dev, x, stream=0)
    np.testing.assert_array_equal(dev.arr, x)
    # one copy per chunk; no copy crossed a registration (the runtime would have refused)
    assert len(rt.copies) == 3 and sum(n for _, n in rt.copies) == x.nbytes
    assert hm.locked(x) and rt.locked_bytes() == x.nbytes
    # a slice in the middle, across a chunk boundary, copies back out
    back = np.zeros(1000, np.float32)
    start = (region.starts[1] - x.ctypes.data) // 4 - 500
    assert not hm.copy_out(back, Dev((1000,), "float32"), 0)  # back is not locked: refused
    part = x[start:start + 1000]
    dev2 = Dev((1000,), "float32")
    assert hm.copy_in(dev2, part, 0)
    np.testing.assert_array_equal(dev2.arr, part)


def test_a_second_lock_finds_the_registration_and_it_goes_with_the_buffer(hm, rt):
    x = big(MIN_BYTES * 2)
    first = hm.lock(x)
    assert hm.lock(x[10:]) is first  # a view finds its owner's registration
    hm.wait(first, first.base, first.end)
    before = rt.registers
    assert hm.lock(x) is first and rt.registers == before  # not registered again
    del x, first
    gc.collect()
    assert rt.ranges == {} and hm.stats()["locked_bytes"] == 0


def test_small_strided_and_foreign_buffers_are_not_locked(hm, rt):
    assert hm.lock(np.ones(1000)) is None  # below MIN_BYTES: a pageable copy is faster
    assert hm.lock(big(MIN_BYTES * 2)[::2]) is None  # not contiguous
    raw = bytearray(MIN_BYTES * 2)
    assert hm.lock(np.frombuffer(raw, np.uint8)) is None  # memory a bytearray owns
    assert rt.registers == 0


def test_a_refused_chunk_makes_the_copy_fall_back(rt):
    rt.fail_after = 1
    mem = HostMemory(rt)
    x = big(2 * CHUNK_BYTES + PAGE)
    region = mem.lock(x)
    dev = Dev(x.shape, "float32")
    assert not mem.copy_in(dev, x, 0)  # the caller then copies another way
    assert region.failed and not mem.locked(x)
    assert mem.lock(x) is None  # not retried
    mem.close()
    assert rt.ranges == {}


def test_result_blocks_are_locked_reused_after_collection_and_released(hm, rt):
    y = hm.empty((CHUNK_BYTES // 4 + 77,), "float32")
    assert y.flags.writeable and y.flags.c_contiguous and y.dtype == np.float32
    dev = Dev(y.shape, "float32")
    dev.arr[...] = 3.0
    assert hm.copy_out(y, dev, 0)
    assert (y == 3.0).all() and hm.locked(y)
    ptr = y.ctypes.data
    view = y[5:]  # a view keeps the block out of the cache
    del y
    gc.collect()
    assert hm.stats()["cached_blocks"] == 0
    del view
    gc.collect()
    assert hm.stats()["cached_blocks"] == 1
    registers = rt.registers
    z = hm.empty((CHUNK_BYTES // 4,), "float32")  # fits the cached block: reused as is
    assert z.ctypes.data == ptr and rt.registers == registers and hm.locked(z)
    assert hm.stats()["cached_blocks"] == 0
    del z
    gc.collect()
    assert hm.release_cached() >= CHUNK_BYTES
    assert rt.ranges == {}


def test_a_much_smaller_result_does_not_take_a_big_block(hm, rt):
    y = hm.empty((3 * CHUNK_BYTES // 4,), "float32")
    assert hm.wait(hm.find(y), y.ctypes.data, y.ctypes.data + y.nbytes)
    del y
    gc.collect()
    small = hm.empty((MIN_BYTES // 4,), "float32")
    assert hm.stats()["cached_blocks"] == 1  # a fresh block instead of 3x the size
    del small


def test_the_cache_keeps_at_most_its_limit(rt):
    mem = HostMemory(rt, cache_limit=CHUNK_BYTES + 1)
    a = mem.empty((CHUNK_BYTES // 4,), "float32")
    b = mem.empty((CHUNK_BYTES // 4,), "float32")
    for arr in (a, b):
        mem.wait(mem.find(arr), arr.ctypes.data, arr.ctypes.data + arr.nbytes)
    del a, b, arr
    gc.collect()
    assert mem.stats()["cached_blocks"] == 1 and rt.locked_bytes() == CHUNK_BYTES
    mem.close()
    assert rt.ranges == {}


def test_a_block_dropped_while_still_locking_is_not_cached(hm, rt):
    y = hm.empty((4 * CHUNK_BYTES // 4,), "float32")  # four chunks queued, not waited for
    del y  # e.g. a run interrupted before its first copy
    gc.collect()
    assert hm.stats()["cached_blocks"] == 0 and rt.ranges == {}


def test_small_results_are_plain_arrays(hm, rt):
    y = hm.empty((10, 3), "int64")
    assert y.shape == (10, 3) and hm.find(y) is None and rt.registers == 0


def test_close_undoes_user_registrations_and_later_collection_is_harmless(rt):
    mem = HostMemory(rt)
    x = big(MIN_BYTES * 3)
    region = mem.lock(x)
    mem.wait(region, region.base, region.end)
    assert rt.ranges
    mem.close()
    assert rt.ranges == {}
    del x
    gc.collect()  # the finalizer was detached: no second unregister
