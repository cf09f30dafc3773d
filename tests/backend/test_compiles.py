"""The kernel-compile record: CuPy's compiler hooked while a cell runs, builds charged to lines.

The CPU tests drive the hook against a scripted compiler module shaped like CuPy 14's
``cupy.cuda.compiler`` (its functions call each other through the module's globals, as
CuPy's do); the GPU tests compile fresh kernels with CuPy itself.
"""

from __future__ import annotations

import threading
import types
import uuid

import numpy as np
import pytest
from conftest import loaded

import cupy_magic
from cupy_magic.backend import compiles
from cupy_magic.backend.compiles import CompileRecord, NoCompiles, timed
from cupy_magic.run.plan import register_source
from cupy_magic.run.report import RunReport

# A compiler with CuPy 14's call structure: a cached build that loads a cubin from its cache
# or compiles it with "NVRTC" (sleeping the time a compile takes) and saves it.
FAKE_COMPILER = '''
import time
disk = {}
def _compile_using_nvrtc_no_warning(source, options=(), *args, **kwargs):
    time.sleep(0.02)
    return b"cubin:" + source.encode(), {}
def compile_using_nvcc(source, options=(), *args, **kwargs):
    time.sleep(0.02)
    return b"nvcc:" + source.encode()
def _compile_with_cache_cuda(source, options=(), arch=None, extra_source=None,
                             backend="nvrtc", **kwargs):
    if source in disk:
        return disk[source]
    if backend == "nvrtc":
        cubin, _ = _compile_using_nvrtc_no_warning(source, options)
    else:
        cubin = compile_using_nvcc(source, options)
    disk[source] = cubin
    return cubin
def _compile_module_with_cache(source, options=(), **kwargs):
    return _compile_with_cache_cuda(source, options, **kwargs)
'''


@pytest.fixture
def fake() -> types.ModuleType:
    module = types.ModuleType("fake_cupy_compiler")
    exec(FAKE_COMPILER, module.__dict__)
    return module


def build(module: types.ModuleType, source: str, backend: str = "nvrtc") -> bytes:
    """A library function between the cell and the compiler, as CuPy's kernels are."""
    return module._compile_module_with_cache(source, backend=backend)


def cell(source: str) -> tuple[types.CodeType, str]:
    filename = f"<gpu-cell-test-{uuid.uuid4().hex[:8]}>"
    register_source(source, filename)
    return compile(source, filename, "exec"), filename


def test_the_hook_is_installed_while_a_record_is_active_and_restored_after(fake):
    originals = {n: getattr(fake, n) for n in (compiles.OUTER, *compiles.INNER)}
    with CompileRecord("<cell>", module=fake) as outer:
        assert outer.available and outer.reason == ""
        wrapped = {n: getattr(fake, n) for n in originals}
        assert all(wrapped[n] is not originals[n] for n in originals)
        with CompileRecord("<cell>", module=fake):
            assert all(getattr(fake, n) is wrapped[n] for n in originals)  # one hook, shared
        assert all(getattr(fake, n) is wrapped[n] for n in originals)  # still one record left
    assert all(getattr(fake, n) is originals[n] for n in originals)
    with pytest.raises(ZeroDivisionError), CompileRecord("<cell>", module=fake):
        raise ZeroDivisionError("the cell failed")
    assert all(getattr(fake, n) is originals[n] for n in originals)


def test_a_wrapper_installed_over_ours_is_left_in_place(fake):
    with CompileRecord("<cell>", module=fake):
        ours = fake._compile_with_cache_cuda
        fake._compile_with_cache_cuda = theirs = lambda *a, **k: ours(*a, **k)
    assert fake._compile_with_cache_cuda is theirs
    assert fake._compile_using_nvrtc_no_warning.__name__ == "_compile_using_nvrtc_no_warning"


def test_builds_are_charged_to_the_innermost_cell_line_compiled_or_loaded(fake):
    code, filename = cell("a = build(fake, 'k1')\n"
                          "for _ in range(2):\n"
                          "    b = build(fake, 'k2', 'nvcc')\n"
                          "c = build(fake, 'k1')\n")
    fake.disk["k0"] = b"cached by an earlier process"
    with CompileRecord(filename, module=fake) as rec:
        exec(code, {"build": build, "fake": fake})
        build(fake, "k0")  # outside the cell's code: the runner's own
    assert [(b.line, b.compiled) for b in rec.builds] == [
        (1, True), (3, True), (3, False), (4, False), (None, False)]
    assert rec.builds[1].code == "b = build(fake, 'k2', 'nvcc')"
    assert all(b.seconds >= 0.02 for b in rec.compiled)
    assert rec.by_line() == [(1, "a = build(fake, 'k1')", 1, rec.builds[0].seconds, True),
                             (3, "b = build(fake, 'k2', 'nvcc')", 1, rec.builds[1].seconds,
                              True)]


def test_a_compile_outside_a_cached_build_counts_on_its_own(fake):
    code, filename = cell("fake._compile_using_nvrtc_no_warning('raw')\n")
    with CompileRecord(filename, module=fake) as rec:
        exec(code, {"fake": fake})
    assert [(b.line, b.compiled) for b in rec.builds] == [(1, True)]


def test_timing_windows_add_up_the_builds_inside_them_and_mark_them(fake):
    code, filename = cell("build(fake, 'warm')\n")
    with CompileRecord(filename, module=fake) as rec:
        exec(code, {"build": build, "fake": fake})  # a warm-up: outside any window
        with timed() as window:
            exec(compile("build(fake, 'timed')\n", filename, "exec"),
                 {"build": build, "fake": fake})
    assert [(b.compiled, b.timed) for b in rec.builds] == [(True, False), (True, True)]
    assert window.seconds == pytest.approx(rec.builds[1].seconds)
    assert rec.timed_seconds == window.seconds
    assert rec.warmup == [rec.builds[0]]
    with timed() as idle:  # no record active: nothing is hooked, nothing added
        build(fake, "unhooked")
    assert idle.seconds == 0.0


def test_nested_windows_each_close_their_own(fake):
    """The batched run opens a window per batch inside the run's window: a build in a
    later batch must reach both, and each block must close its own window (found on the
    H200: an inner exit removed the equal outer window, the outer one then failed)."""
    with CompileRecord("<cell>", module=fake) as rec, timed() as outer:
        with timed() as first:
            pass
        with timed() as second:
            build(fake, "in a later batch")
    assert first.seconds == 0.0 and second.seconds == pytest.approx(rec.builds[0].seconds)
    assert outer.seconds == pytest.approx(second.seconds) and outer.seconds > 0


def test_builds_on_other_threads_are_not_charged_to_the_cell(fake):
    with CompileRecord("<cell>", module=fake) as rec:
        worker = threading.Thread(target=build, args=(fake, "elsewhere"))
        worker.start()
        worker.join()
    assert rec.builds == []


def test_a_compiler_without_the_private_function_is_reported_not_measured(fake):
    del fake._compile_with_cache_cuda
    with CompileRecord("<cell>", module=fake) as rec:
        pass
    assert not rec.available
    assert rec.reason == "this CuPy has no cupy.cuda.compiler._compile_with_cache_cuda to hook"
    report = RunReport(backend="cupy", device="GPU", compiles=rec, gpu_seconds=0.5)
    assert ("  compile time not measured (this CuPy has no cupy.cuda.compiler."
            "_compile_with_cache_cuda to hook); the GPU time may include kernel compiling"
            in report.text_lines())


def test_the_report_separates_compiles_from_gpu_time(fake, monkeypatch):
    monkeypatch.setenv("CUPY_CACHE_DIR", "/data/kernels")
    monkeypatch.delenv("CUPY_CACHE_IN_MEMORY", raising=False)
    code, filename = cell("x = 1\ny = build(fake, 'new')\nz = build(fake, 'old')\n")
    fake.disk["old"] = b"from an earlier process"
    with CompileRecord(filename, module=fake) as rec, timed():
        exec(code, {"build": build, "fake": fake})
    report = RunReport(backend="cupy", device="GPU", compiles=rec, gpu_seconds=0.002)
    text = str(report)
    ms = f"{rec.compiled[0].seconds * 1e3:,.1f} ms"
    assert f"  compile 1 kernel compiled in {ms} on the host, cached for next time in " \
           "/data/kernels (CUPY_CACHE_DIR); not counted in the GPU time" in text
    assert f"  compile   line 2 `y = build(fake, 'new')`: 1 kernel, {ms}" in text
    assert "  compile 1 kernel loaded from the kernel cache in /data/kernels" in text
    assert "  compile first use of these kernels in this process: the GPU time also counts " \
           "loading them onto the GPU at their first launch" in text
    assert f"GPU time (CUDA events, less {rec.timed_seconds * 1e3:,.1f} ms of kernel " \
           "compiling on the host between launches): 2.00 ms" in text
    assert "compile" in report._repr_html_() and "cached for next time" in report._repr_html_()


def test_a_warmup_that_compiled_says_so_in_its_line(fake):
    code, filename = cell("y = build(fake, 'w')\n")
    with CompileRecord(filename, module=fake) as rec:
        exec(code, {"build": build, "fake": fake})
    report = RunReport(backend="cupy", device="GPU", compiles=rec, warmup_seconds=0.5,
                       warmup_rows=4096)
    line = next(x for x in report.text_lines() if x.startswith("  warm-up"))
    assert line.startswith("  warm-up run on the first 4,096 rows: 0.500 s, of it 1 kernel "
                           "compiled in ")
    assert "(in the warm-up run)" in str(report)
    assert "less" not in str(report)  # nothing compiled inside the timed run
    # the warm-up launched the kernel first: the timed run's GPU time pays no first load
    assert "  compile first use of these kernels in this process: the warm-up run launched " \
           "them first, so the GPU time below does not count loading them" in str(report)
    assert "the GPU time also counts loading them" not in str(report)


def test_the_cache_place_is_said_in_words(monkeypatch):
    monkeypatch.setenv("CUPY_CACHE_IN_MEMORY", "1")
    assert compiles.cache_place(None) == \
        "in this process's memory only (CUPY_CACHE_IN_MEMORY is set)"
    monkeypatch.delenv("CUPY_CACHE_IN_MEMORY")
    monkeypatch.delenv("CUPY_CACHE_DIR", raising=False)
    assert compiles.cache_place(None) == "in ~/.cupy/kernel_cache (CuPy's default)"
    holder = types.SimpleNamespace(_kernel_cache_backend=types.SimpleNamespace(
        _cache_dir="/srv/cache"))
    assert compiles.cache_place(holder) == "in /srv/cache (CuPy's default)"


def test_the_cpu_fallback_compiles_nothing_and_says_nothing_of_it(shell, monkeypatch):
    for ip in loaded(shell, monkeypatch, "host"):
        ip.user_ns["x"] = np.arange(10.0)
        ip.run_cell_magic("gpu", "--quiet", "y = x * 2\n")
        report = cupy_magic.last_report()
        assert isinstance(report.compiles, NoCompiles)
        assert report.compiles.reason == "no compilation on the CPU fallback"
        assert report.compiles.builds == [] and not report.compile_lines()
        assert "compile" not in str(report)


# --- on the GPU: CuPy's own compiler ------------------------------------------------------


def _fresh_kernels(salt: str) -> str:
    """A cell that builds an elementwise and a reduction kernel no process has compiled."""
    return (f"k = cp.ElementwiseKernel('float32 a', 'float32 b', 'b = a * 2 + {len(salt)}', "
            f"'twice_{salt}')\n"
            f"r = cp.ReductionKernel('float32 a', 'float32 s', 'a', 'a + b', 's = a', '0', "
            f"'total_{salt}')\n"
            "y = k(x)\n"
            "t = r(y)\n")


@pytest.mark.gpu
def test_fresh_kernels_are_counted_on_their_lines_and_left_out_of_gpu_time(gip):
    salt = uuid.uuid4().hex[:12]
    gip.user_ns["x"] = np.ones(1 << 20, dtype=np.float32)
    gip.run_cell_magic("gpu", "--quiet", _fresh_kernels(salt))
    report = cupy_magic.last_report()
    rec = report.compiles
    assert rec.available, rec.reason
    lines = {line for line, *_ in rec.by_line()}
    assert {3, 4} <= lines, rec.builds
    assert all(b.timed for b in rec.builds if b.line in (3, 4))
    assert rec.timed_seconds > report.gpu_seconds  # compiling took longer than the kernels
    text = str(report)
    assert "line 3 `y = k(x)`: 1 kernel" in text and "line 4 `t = r(y)`" in text
    assert "cached for next time in" in text and "less" in text
    gip.run_cell_magic("gpu", "--quiet", _fresh_kernels(salt))  # the same kernels again
    again = cupy_magic.last_report().compiles
    assert again.compiled == [], again.builds  # from the process or the kernel cache
    assert "compiled in" not in str(cupy_magic.last_report())


@pytest.mark.gpu
def test_a_warmup_compiles_and_the_timed_run_does_not(gip):
    salt = uuid.uuid4().hex[:12]
    gip.user_ns["x"] = np.ones(1 << 20, dtype=np.float32)
    gip.run_cell_magic("gpu", "--quiet --warmup", _fresh_kernels(salt))
    report = cupy_magic.last_report()
    rec = report.compiles
    assert rec.warmup and all(not b.timed for b in rec.compiled), rec.builds
    assert rec.timed_seconds == 0.0
    assert "of it" in next(x for x in report.text_lines() if x.startswith("  warm-up"))


@pytest.mark.gpu
def test_a_batched_cell_leaves_its_compiles_out_of_its_time(gip):
    salt = uuid.uuid4().hex[:12]
    gip.user_ns["x"] = np.ones((4096, 64), dtype=np.float32)
    source = (f"k = cp.ElementwiseKernel('float32 a', 'float32 b', 'b = a + {len(salt)}', "
              f"'plus_{salt}')\ny = k(x)\n")
    gip.run_cell_magic("gpu", "--quiet --batch-rows 512", source)
    report = cupy_magic.last_report()
    rec = report.compiles
    assert report.batch is not None
    assert [(b.line, b.timed) for b in rec.compiled] == [(2, True)], rec.builds
    assert rec.timed_seconds > report.gpu_seconds


@pytest.mark.gpu
def test_without_the_private_compiler_function_the_report_says_not_measured(gip, monkeypatch):
    from cupy.cuda import compiler

    monkeypatch.delattr(compiler, "_compile_with_cache_cuda")
    gip.run_cell_magic("gpu", "--quiet", "y = 1\n")
    assert "compile time not measured" in str(cupy_magic.last_report())
