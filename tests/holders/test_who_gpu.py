"""The H200 case of issue 14 (run on a GPU; skipped without one): a 4 GiB array held only
by ``Out``, a cuFFT plan and cached blocks. ``%vram_who`` accounts for the device's used
memory (cudaMemGetInfo) within 1%, and ``--free Out`` returns the 4 GiB, measured."""

from __future__ import annotations

import pytest

import cupy_magic
from cupy_magic import backend
from cupy_magic.units import format_bytes

pytestmark = pytest.mark.gpu

GiB = 1 << 30


@pytest.fixture
def on_gpu(shell, monkeypatch):
    from conftest import loaded

    yield from loaded(shell, monkeypatch, "cupy")
    import cupy

    cupy.fft.config.get_plan_cache().clear()  # its work area stays in the pool otherwise


def test_out_a_cufft_plan_and_cached_blocks_are_accounted_within_one_percent(on_gpu):
    import cupy as cp

    ip = on_gpu
    cupy_magic.vram_free("all-unnamed", ip.user_ns)
    out = ip.run_cell("%%gpu --quiet\nnp.ones(GiB_4 // 4, dtype=np.float32) * 2".replace(
        "GiB_4", str(4 * GiB)), store_history=True)
    assert out.error_in_exec is None
    n = out.execution_count
    del out
    # a cuFFT plan (its work area comes from the pool) and 1 GiB of cached blocks
    ip.run_cell("%%gpu --quiet\nspec = np.fft.fft(np.ones(2**24, dtype=np.complex64))\n"
                "tmp = np.ones(GiB // 4, dtype=np.float32)\ndel tmp".replace("GiB", str(GiB)))
    report = cupy_magic.vram_holders(ip.user_ns)
    holder = {h.path: h for h in report.holders}[f"Out[{n}]"]
    assert holder.nbytes == 4 * GiB and holder.frees == ("Out",)
    free, total = cp.cuda.runtime.memGetInfo()
    used = total - free
    parts = {p.label: p.nbytes for p in report.parts}
    accounted = report.held_bytes + sum(v for k, v in parts.items()
                                        if v is not None and not k.startswith("host:")
                                        and k != "other processes")
    print(f"\ncudaMemGetInfo used {used:,}; accounted {accounted:,}; parts {parts}")
    assert abs(accounted - used) <= 0.01 * used
    assert parts["the pool's cached blocks"] >= GiB * 0.99
    assert 0 < parts["memory no pool owns"] < 2 * GiB  # context, cuFFT/cuBLAS handles
    freed = ip.run_line_magic("vram_who", "--free Out")
    print(freed)
    # the 4 GiB array comes back; the cached blocks come back only where a whole allocation
    # is free: the fft's arrays and plan sit in the allocation of the first cell's temporary,
    # so its free part stays, and the result says so
    assert freed.returned >= 4 * GiB * 0.99
    pool = backend.current().stats()
    assert freed.cached_kept == pool.cached_free
    assert (f"{format_bytes(freed.cached_kept)} of cached blocks stay in the pool"
            in str(freed)) == (freed.cached_kept > 0)
    after = total - cp.cuda.runtime.memGetInfo()[0]
    assert used - after == pytest.approx(freed.returned, rel=0.01)


def test_out_of_memory_names_the_holder_and_the_command(on_gpu):
    ip = on_gpu
    ip.run_cell("%%gpu --quiet\nkeep = np.ones(2**28, dtype=np.float32)")  # 1 GiB
    ip.run_line_magic("vram_budget", "1.5GiB")
    try:
        result = ip.run_cell("%%gpu --quiet\nmore = np.ones(2**28, dtype=np.float32) + 1")
    finally:
        ip.run_line_magic("vram_budget", "off")
    assert ("Held now: keep holds 1.00 GiB (%vram_who --free keep; vram_free('keep') from "
            "Python)") in str(result.error_in_exec)
