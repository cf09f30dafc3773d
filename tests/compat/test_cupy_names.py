"""CuPy's own names in a ``%%gpu`` cell (a user audit on a laptop without a GPU): those with
a NumPy meaning run on the CPU fallback and give NumPy's result (``cp.asnumpy``,
``cp.get_array_module``, ``@cp.fuse``); those without one (a CUDA kernel, a device, a
stream), ``x.get()`` of a NumPy array, and ``import cupy`` are refused in one line naming
what to write instead; the advice names forms that run on both backends. Through a real
shell, on the host backend (and on CuPy where a GPU is)."""

from __future__ import annotations

import linecache

import numpy as np
import pytest
from conftest import cell_error, loaded

from cupy_magic import backend
from cupy_magic.compat.advice import TO_HOST, WAYS, explain_failure
from cupy_magic.run.lines import LineStat
from cupy_magic.run.linetable import hot_advice


@pytest.fixture
def host_ip(shell, monkeypatch):
    """The shell with the extension on the CPU fallback (NumPy), whatever the machine."""
    yield from loaded(shell, monkeypatch, "host")


@pytest.fixture
def gpu_ip(shell, monkeypatch):
    """The shell with the extension on CuPy (for the tests marked gpu)."""
    yield from loaded(shell, monkeypatch, "cupy")


def test_asnumpy_is_a_numpy_copy(ip):
    ip.user_ns["x"] = np.arange(6.0)
    ip.run_cell_magic("gpu", "--quiet", "a = cp.asnumpy(x * 2)\nout = np.zeros(6)\n"
                      "b = cp.asnumpy(x, out=cp.asnumpy(out))\nc = cp.asnumpy(x[::2])")
    a, b = ip.user_ns["a"], ip.user_ns["b"]
    assert type(a) is np.ndarray and a.tolist() == [0, 2, 4, 6, 8, 10]
    assert type(b) is np.ndarray and b.tolist() == list(range(6))
    assert ip.user_ns["c"].tolist() == [0, 2, 4] and ip.user_ns["c"].flags.c_contiguous


def test_asnumpy_never_shares_the_cells_array(host_ip):
    host_ip.user_ns["x"] = np.arange(4.0)
    host_ip.run_cell_magic("gpu", "--quiet", "y = x + 1\na = cp.asnumpy(y)\na[0] = 99")
    assert host_ip.user_ns["y"].tolist() == [1, 2, 3, 4]  # a GPU's copy is a copy too


def test_asnumpy_is_a_host_array_after_the_cell_as_on_a_gpu(host_ip):
    """On a GPU ``cp.asnumpy`` gives a host array: not counted as device memory, reported
    on the host; the fallback's other results count as the device's."""
    host_ip.user_ns["x"] = np.arange(4.0)
    host_ip.run_cell_magic("gpu", "--quiet", "y = x + 1\na = cp.asnumpy(y)\n"
                           "d = {'h': cp.asnumpy(y)}")
    be = backend.current()
    assert be.is_device_array(host_ip.user_ns["y"])
    assert not be.is_device_array(host_ip.user_ns["a"])
    assert not be.is_device_array(host_ip.user_ns["d"]["h"])


def test_get_array_module_gives_the_cells_module(ip):
    ip.user_ns["x"] = np.arange(4.0)
    ip.run_cell_magic("gpu", "--quiet --to-host q", "xp = cp.get_array_module(x)\n"
                      "q = xp.sqrt(x)")
    np.testing.assert_allclose(ip.user_ns["q"], np.sqrt(np.arange(4.0)))


def test_get_array_module_keeps_cupys_limits_on_the_fallback(host_ip, cupy_names):
    host_ip.user_ns["x"] = np.arange(4.0)
    message = cell_error(host_ip, "xp = cp.get_array_module(x)\nfor v in xp.nditer(x):\n"
                         "    pass")
    assert message.startswith("np.nditer at line 2") and "CuPy has no nditer" in message


@pytest.mark.parametrize("decorator", ["@cp.fuse", "@cp.fuse()", "@cp.fuse(kernel_name='f')"])
def test_fuse_with_and_without_arguments_gives_numpys_result(ip, decorator):
    ip.user_ns["x"] = np.arange(5.0)
    ip.run_cell_magic("gpu", "--quiet --to-host r",
                      f"{decorator}\ndef f(a, b):\n    return a * b + 1\nr = f(x, x)")
    assert ip.user_ns["r"].tolist() == (np.arange(5.0) ** 2 + 1).tolist()


def test_is_available_says_false_on_the_fallback(host_ip):
    host_ip.run_cell_magic("gpu", "--quiet", "ok = cp.is_available()\nhas = hasattr(cp, 'cuda')")
    assert host_ip.user_ns["ok"] is False and host_ip.user_ns["has"] is False


@pytest.mark.parametrize(("cell", "start", "words"), [
    ("k = cp.ElementwiseKernel('T x', 'T y', 'y = x', 'k')",
     "cp.ElementwiseKernel at line 1 `k = cp.ElementwiseKernel(", "a CUDA kernel needs a GPU"),
    ("k = cp.RawKernel('', 'k')", "cp.RawKernel at line 1", "@cp.fuse"),
    ("d = cp.cuda.Device(0)", "cp.cuda at line 1 `d = cp.cuda.Device(0)`", "--streams"),
    ("s = cp.cuda.Stream()", "cp.cuda at line 1", "no streams"),
    ("p = cp.get_default_memory_pool()", "cp.get_default_memory_pool at line 1", "%vram_who"),
])
def test_what_needs_a_gpu_is_one_line_naming_what_to_do(host_ip, cell, start, words):
    host_ip.user_ns.pop(cell[0], None)
    message = cell_error(host_ip, cell)
    assert message.startswith(start), message
    assert "needs a GPU" in message and "CPU fallback" in message and words in message
    assert "\n" not in message and cell[0] not in host_ip.user_ns


def test_get_of_a_numpy_array_names_the_form_for_both_backends(host_ip):
    host_ip.user_ns["x"] = np.arange(4.0)
    host_ip.user_ns.pop("b", None)
    message = cell_error(host_ip, "y = x * 2\nb = y.get()")
    assert message.startswith("line 2 `b = y.get()`: .get() is CuPy's copy to the host")
    assert f"instead: {TO_HOST}" in message and "\n" not in message
    assert "b" not in host_ip.user_ns
    assert "line 1 `t = x.sum().get()`" in cell_error(host_ip, "t = x.sum().get()")
    assert "x[...] = h" in cell_error(host_ip, "x.set(x + 1)")


def test_the_advised_forms_run_on_the_fallback(ip):
    """The nditer refusal (notebook 05) and the copy advice name cp.asnumpy(x): it runs."""
    assert "x.get()" not in WAYS["nditer"] and TO_HOST in WAYS["nditer"]
    assert not [k for k, way in WAYS.items() if ".get()" in way]
    ip.run_cell_magic("gpu", "--quiet", "grid = np.arange(16.0).reshape(4, 4)\ncount = 0\n"
                      "for v in cp.asnumpy(grid).ravel():\n    if v > 7:\n        count += 1")
    assert ip.user_ns["count"] == 8


def test_the_lines_hint_names_a_fusion_that_runs_on_both():
    row = LineStat(line=2, code="y = a * b + c", count=1, gpu_s=None, host_s=1.0, share=1.0)
    for on_host in (True, False):
        text = hot_advice(row, [], on_host)
        assert "@cp.fuse" in text and "ElementwiseKernel" not in text, text


@pytest.mark.parametrize(("cell", "instead"), [
    ("import cupy\ny = cupy.asarray(x)", "leave the import out"),
    ("import cupy as cp\ny = cp.sqrt(x)", "leave the import out"),
    ("from cupyx.scipy import ndimage\nz = ndimage.gaussian_filter(x, 2)",
     "from scipy import ndimage (SciPy's, on the host)"),
    ("import cupyx.scipy.ndimage as ndi", "import scipy.ndimage as ndi"),
])
def test_import_cupy_in_a_cell_on_the_fallback_is_one_line(host_ip, cupy_names, cell, instead):
    host_ip.user_ns["x"] = np.arange(4.0)
    message = cell_error(host_ip, cell)
    code = cell.splitlines()[0]
    assert message.startswith(f"line 1 `{code}`: "), message
    assert "and this cell runs on NumPy (the CPU fallback)" in message and instead in message
    assert ("CuPy is installed but no GPU is visible" in message
            or "the host backend was chosen" in message)
    assert "\n" not in message


def test_a_cells_import_fallback_and_a_plain_cells_import_still_work(host_ip, cupy_names):
    host_ip.user_ns["x"] = np.arange(4.0)
    host_ip.run_cell_magic("gpu", "--quiet --to-host w", "try:\n    import cupy as xp\n"
                           "except ImportError:\n    xp = np\nw = xp.sqrt(x)")
    np.testing.assert_allclose(host_ip.user_ns["w"], np.sqrt(np.arange(4.0)))
    result = host_ip.run_cell("import cupy as plain_cupy")  # a plain cell's is the user's
    assert result.error_in_exec is None
    host_ip.user_ns.pop("plain_cupy")


def test_a_device_scalar_as_a_key_is_named_where_cupy_refuses_it():
    """CuPy's x.sum() is a 0-d array, unhashable (``d[x.sum()] = 1`` fails on a GPU and runs
    on the fallback): the GPU's error becomes one line naming the fix."""
    source = "d = {}\nd[total] = 1\n"
    linecache.cache["<cell 9>"] = (len(source), None, source.splitlines(True), "<cell 9>")
    for text in ("unhashable type: 'ndarray'", "unhashable type: 'cupy.ndarray'"):
        try:
            exec(compile(source, "<cell 9>", "exec"), {"total": _Unhashable(text)})
        except TypeError as exc:
            limit = explain_failure(exc, "<cell 9>")
        assert limit is not None, text
        assert str(limit).startswith("line 2 `d[total] = 1`: CuPy does not support a device "
                                     "array as a dict key")
        assert ".item()" in str(limit) and "\n" not in str(limit)
    try:  # NumPy's own array as a key is the cell's own error
        {}[np.arange(2)] = 1
    except TypeError as exc:
        assert explain_failure(exc, "<cell 9>") is None


class _Unhashable:
    """Raises CuPy's error when hashed (a 0-d CuPy array needs a GPU to exist)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __hash__(self) -> int:
        raise TypeError(self.text)


@pytest.mark.gpu
def test_a_device_scalar_as_a_key_on_the_gpu(gpu_ip):
    gpu_ip.user_ns["x"] = np.arange(4.0)
    gpu_ip.user_ns.pop("d", None)
    message = cell_error(gpu_ip, "d = {}\nd[x.sum()] = 1")
    assert message.startswith("line 2 `d[x.sum()] = 1`: CuPy does not support a device "
                              "array as a dict key"), message
    assert "\n" not in message and "d" not in gpu_ip.user_ns
    gpu_ip.run_cell_magic("gpu", "--quiet", "d = {}\nd[x.sum().item()] = 1")
    assert gpu_ip.user_ns["d"] == {6.0: 1}


@pytest.mark.gpu
@pytest.mark.parametrize("line", ["z = np.sum(x) + L[0]", "z = x + L[0]", "z = L[0] + x",
                                  "z = x * [1.0, 2.0, 3.0, 4.0]"])
def test_a_host_array_mixed_with_a_device_array_is_named_on_the_gpu(gpu_ip, line):
    """An item of a list from an earlier cell is the user's NumPy array, which the cell does
    not move: CuPy refuses it beside a device array (in either order), and the cell stops
    with one line naming the fix, its variables as they were; np.asarray of it runs."""
    gpu_ip.user_ns.update(x=np.arange(4.0), L=[np.ones(4)])
    gpu_ip.user_ns.pop("z", None)
    message = cell_error(gpu_ip, line)
    assert message.startswith(f"line 1 `{line}`: CuPy does not support "), message
    assert "np.asarray(" in message and "\n" not in message and "z" not in gpu_ip.user_ns
    assert type(gpu_ip.user_ns["L"][0]) is np.ndarray
    fixed = line.replace("L[0]", "np.asarray(L[0])").replace("[1.0", "np.asarray([1.0")
    fixed = fixed.replace("4.0]", "4.0])")
    gpu_ip.run_cell_magic("gpu", "--quiet --to-host", fixed)
    plain = eval(line.split(" = ")[1], {"np": np, "x": np.arange(4.0), "L": [np.ones(4)]})
    np.testing.assert_allclose(gpu_ip.user_ns["z"], plain)


def test_a_host_array_beside_a_cells_array_runs_on_the_fallback(host_ip):
    host_ip.user_ns.update(x=np.arange(4.0), L=[np.ones(4)])
    host_ip.run_cell_magic("gpu", "--quiet", "z = np.sum(x) + L[0]")
    np.testing.assert_allclose(host_ip.user_ns["z"], 6.0 + np.ones(4))


@pytest.mark.gpu
def test_cupy_names_pass_through_on_the_gpu(gpu_ip):
    gpu_ip.user_ns["x"] = np.arange(4.0)
    gpu_ip.run_cell_magic("gpu", "--quiet", "import cupy\nok = cupy.is_available()\n"
                          "n = cp.cuda.runtime.getDeviceCount()\ny = x.get()")
    assert gpu_ip.user_ns["ok"] is True and gpu_ip.user_ns["n"] >= 1
    assert type(gpu_ip.user_ns["y"]) is np.ndarray
