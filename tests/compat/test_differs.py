"""Calls where CuPy silently gives another result than NumPy (``cupy_magic.compat.differs``):
the window functions and ``np.float_power`` in complex are made right on the device;
``np.arange`` with an integer dtype and a fractional step is refused on both backends; and
under ``--fallback`` a NumPy result that is a view of its argument is refused (the device can
only get a copy). Through a real shell."""

from __future__ import annotations

import numpy as np
import pytest

import cupy_magic


@pytest.fixture
def gpu(shell, monkeypatch):
    """The shell with the extension loaded on the GPU backend."""
    from conftest import loaded

    yield from loaded(shell, monkeypatch, "cupy")


def _error(ip, body: str, flags: str = "--quiet") -> str:
    result = ip.run_cell(f"%%gpu {flags}\n{body}")
    assert result.error_in_exec is not None, "the cell should have stopped"
    return str(result.error_in_exec)


def test_arange_with_an_integer_dtype_and_a_fraction_is_refused(ip, xp, cupy_names):
    ip.user_ns.pop("a", None)
    message = _error(ip, "b = np.arange(6)\na = np.arange(-3, 3, 0.5, dtype=int)\n")
    assert message.startswith("np.arange at line 2 `a = np.arange(-3, 3, 0.5, dtype=int)`: "
                              "NumPy and CuPy give different values for an integer dtype with "
                              "a fractional start, stop or step")
    assert "\n" not in message and ".astype(dtype)" in message and "--fallback" in message
    assert "a" not in ip.user_ns and "b" not in ip.user_ns  # the cell is a transaction


def test_arange_under_fallback_is_numpys(ip, xp, cupy_names):
    ip.run_cell_magic("gpu", "--quiet --fallback --to-host",
                      "a = np.arange(-3, 3, 0.5, dtype=int)\n")
    np.testing.assert_array_equal(ip.user_ns["a"], np.arange(-3, 3, 0.5, dtype=int))
    assert [r.function for r in cupy_magic.last_report().fallbacks] == ["np.arange"]


def test_arange_that_both_compute_alike_runs(ip, xp, cupy_names):
    ip.run_cell_magic("gpu", "--quiet --to-host",
                      "a = np.arange(0, 6, 2.0, dtype=int)\nb = np.arange(-3, 3, 0.5)\n"
                      "c = np.arange(5, dtype=np.int32)\n")
    np.testing.assert_array_equal(ip.user_ns["a"], np.arange(0, 6, 2.0, dtype=int))
    np.testing.assert_array_equal(ip.user_ns["b"], np.arange(-3, 3, 0.5))
    assert ip.user_ns["c"].dtype == np.int32


def test_fallback_refuses_a_view_of_a_device_argument(ip, xp, cupy_names):
    ip.user_ns["x"] = np.arange(4.0).reshape(2, 2)
    ip.user_ns.pop("m", None)
    with pytest.warns(PendingDeprecationWarning, match="matrix subclass"):  # NumPy's
        message = _error(ip, "m = np.asmatrix(x)\n", "--quiet --fallback")
    assert message.startswith("np.asmatrix at line 1 `m = np.asmatrix(x)`: NumPy returns a "
                              "view of its argument here")
    assert "--fallback" not in message.split(":", 2)[2]  # no hint to use what failed
    assert "m" not in ip.user_ns


def test_fallback_of_a_new_array_still_runs(ip, xp, cupy_names):
    ip.run_cell_magic("gpu", "--quiet --fallback --to-host", "g = np.geomspace(1, 1000, 4)\n")
    np.testing.assert_allclose(ip.user_ns["g"], np.geomspace(1, 1000, 4))


def test_fallback_leaves_numpys_scratch_in_the_inputs(ip, xp, cupy_names):
    a = np.array([[10.0, np.nan, 4.0], [3.0, 2.0, 1.0]])
    ip.user_ns["a"] = a
    ip.run_cell_magic("gpu", "--quiet --fallback --to-host",
                      "b = a.copy()\nm = np.nanpercentile(b, 50, axis=1, overwrite_input=True)\n")
    ref_b = a.copy()
    ref_m = np.nanpercentile(ref_b, 50, axis=1, overwrite_input=True)
    np.testing.assert_array_equal(ip.user_ns["m"], ref_m)
    np.testing.assert_array_equal(ip.user_ns["b"], ref_b)  # as NumPy left its input


def test_an_array_class_cupy_lacks_is_numpys_under_fallback(ip, xp, cupy_names):
    ip.run_cell_magic("gpu", "--quiet --fallback",
                      "sub = issubclass(np.recarray, np.ndarray)\nr = np.recarray\n")
    assert ip.user_ns["r"] is np.recarray
    # the cell's np.ndarray is the backend's array type (CuPy's on the GPU), which NumPy's
    # record array class does not derive from
    assert ip.user_ns["sub"] is issubclass(np.recarray, xp.ndarray)


@pytest.mark.gpu
def test_windows_and_complex_float_power_equal_numpy_on_the_gpu(gpu):
    gpu.run_cell_magic("gpu", "--quiet --to-host",
                       "w = [np.bartlett(12), np.blackman(12), np.hamming(12), "
                       "np.hanning(12), np.kaiser(12, 14)]\n"
                       "p = np.float_power(np.array([-1, -4]), 1.5, dtype=complex)\n"
                       "q = np.float_power(np.array([-1, -4], dtype=np.complex64), 1.5)\n")
    rows = {r.function for r in cupy_magic.last_report().fallbacks}
    windows = gpu.user_ns["w"]
    p, q = gpu.user_ns["p"], gpu.user_ns["q"]
    want = [np.bartlett(12), np.blackman(12), np.hamming(12), np.hanning(12), np.kaiser(12, 14)]
    for got, ref in zip(windows, want, strict=True):
        np.testing.assert_array_equal(got, ref)  # NumPy's window, computed on the host
    assert {"np.bartlett", "np.blackman", "np.hamming", "np.hanning", "np.kaiser"} <= rows
    ref = np.float_power(np.array([-1, -4]), 1.5, dtype=complex)
    assert p.dtype == np.complex128 and np.allclose(p, ref, rtol=1e-14, atol=1e-14)
    ref = np.float_power(np.array([-1, -4], dtype=np.complex64), 1.5)
    assert q.dtype == ref.dtype and np.allclose(q, ref, rtol=1e-14, atol=1e-14)


def test_an_npz_in_a_cell_is_numpys_mapping_over_cupys_reader():
    import io

    npz_module = pytest.importorskip("cupy._io.npz", reason="CuPy's NpzFile is the reader")
    from cupy_magic.compat.differs import DeviceNpz

    buf = io.BytesIO()
    np.savez(buf, x=np.arange(3), y=np.ones(2))
    buf.seek(0)
    with DeviceNpz(npz_module.NpzFile(np.load(buf))) as data:
        assert data.files == ["x", "y"] and sorted(data) == ["x", "y"] and len(data) == 2
        assert "x" in data and "z" not in data and list(data.keys()) == ["x", "y"]
        assert "its arrays read onto the device" in repr(data)


@pytest.mark.gpu
def test_np_load_of_an_npz_in_a_cell_has_files_and_device_arrays(gpu, tmp_path):
    path = tmp_path / "a.npz"
    np.savez(path, x=np.arange(3), y=np.ones(2))
    gpu.user_ns["path"] = str(path)
    gpu.run_cell_magic("gpu", "--quiet",
                       "data = np.load(path)\nnames = sorted(data.files)\nx = data['x']\n"
                       "n = len(data)\n")
    import cupy

    assert gpu.user_ns["names"] == ["x", "y"] and gpu.user_ns["n"] == 2
    assert isinstance(gpu.user_ns["x"], cupy.ndarray)
    np.testing.assert_array_equal(gpu.user_ns["x"].get(), np.arange(3))


@pytest.mark.gpu
def test_float_formatting_keeps_a_numpy_scalars_precision_on_the_gpu(gpu):
    gpu.run_cell_magic("gpu", "--quiet",
                       "s = np.format_float_scientific(np.float32(np.pi))\n"
                       "p = np.format_float_positional(np.float32(np.pi))\n"
                       "d = np.format_float_scientific(np.asarray(np.pi), precision=3)\n"
                       "f = np.format_float_positional(np.full(2, 3.14159, np.float32)[0])\n")
    assert gpu.user_ns["s"] == np.format_float_scientific(np.float32(np.pi))
    assert gpu.user_ns["p"] == np.format_float_positional(np.float32(np.pi))
    assert gpu.user_ns["d"] == np.format_float_scientific(np.float64(np.pi), precision=3)
    assert gpu.user_ns["f"] == np.format_float_positional(np.float32(3.14159))


def test_the_ravel_rule_is_numpys_view_or_copy():
    """NumPy's ``a.ravel(order)`` is a view only where ``a`` is contiguous in that order
    ('K': in the order its strides lie in memory); CuPy's is a view wherever a reshape can
    be one, so the cell's ravel copies where the rule says NumPy's would."""
    from cupy_magic.compat.views import _contiguous_in, stands_strided

    B = np.arange(24.0).reshape(4, 6)
    C = np.arange(24.0).reshape(2, 3, 4)
    layouts = [B, B[:, ::2], B[::2], B.T, B[:, ::2].T, B[1], B[:, 1], np.asfortranarray(B),
               B[:, :1], B[:1], C.transpose(1, 0, 2), C.transpose(2, 0, 1), C[:, ::-1],
               np.zeros((0, 3)), np.ones((1, 5))]
    for a in layouts:
        for order in "CFAK":
            want = np.shares_memory(a.ravel(order), a) or a.size <= 1
            assert _contiguous_in(a, order) == want or a.size <= 1, (a.shape, a.strides, order)
    copy = np.ascontiguousarray(B[:, ::2])  # stands for the strided B[:, ::2]: a copy
    assert _contiguous_in(copy, "C")
    stands_strided(copy)
    assert not _contiguous_in(copy, "C")


RAVELS = ("a = X[:, ::2]\nr = a.ravel()\nr[0] = -5\ns = X.ravel()\ns[1] = -7\n"
          "t = np.ravel(X.T)\nt[2] = -9\nu = X.T.ravel('F')\nu[3] = -11\n"
          "v = X[::2].ravel()\nv[4] = -13\n")


def test_a_cells_ravel_is_a_view_or_a_copy_as_numpys(ip):
    """CuPy's ravel of a strided array (``X[:, ::2]``, ``X.T``) is a view where NumPy's is a
    copy: a change to it changed ``X`` on the device (and under ``--to-host`` the user's
    ``X``). Method and function both follow NumPy: a copy for those, a view of a contiguous
    ``X`` (``X.ravel()``, ``X.T.ravel('F')``)."""
    plain = {"np": np, "X": np.arange(24.0).reshape(4, 6)}
    exec(RAVELS, plain)
    ip.user_ns.update(X=np.arange(24.0).reshape(4, 6))
    ip.run_cell_magic("gpu", "--quiet --to-host", RAVELS)
    for name in "Xrstuv":
        np.testing.assert_array_equal(ip.user_ns[name], plain[name], err_msg=name)


def test_a_ravel_method_of_anything_else_is_its_own(ip):
    """The cell's ``v.ravel(...)`` calls go through the extension's builtin: another object's
    ravel is called as it is, and an error shows the cell's line."""
    ip.run_cell_magic("gpu", "--quiet", "class R:\n    def ravel(self, k=1):\n"
                      "        return k * 2\n\nn = R().ravel(k=4)\n")
    assert ip.user_ns["n"] == 8
    err = ip.run_cell("%%gpu --quiet\nx = 1\nm = [1].ravel()\n").error_in_exec
    assert isinstance(err, AttributeError) and str(err) == "'list' object has no attribute 'ravel'"
    frames, tb = [], err.__traceback__  # the cell's own frames: not in a .py file
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.endswith(".py"):
            frames.append(tb.tb_lineno)
        tb = tb.tb_next
    assert frames[-1] == 2 and "m" not in ip.user_ns
