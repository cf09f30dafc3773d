"""``np.random.default_rng()`` in cells: NumPy's Generator methods CuPy lacks (``rng.normal``,
``rng.choice``, ...) are refused in one line with the CuPy way, or run by NumPy under
``--fallback``; the methods CuPy has run on the array module's Generator. Through a real
shell, on both backends (the CPU fallback checks against CuPy's Generator too)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import cell_error

import cupy_magic
from cupy_magic.compat.generator import CheckedGenerator


def test_a_method_cupy_lacks_is_one_line_with_the_cupy_way(ip, cupy_names):
    ip.user_ns.pop("n", None)
    msg = cell_error(ip, "rng = np.random.default_rng(0)\nu = rng.random(3)\n"
                         "n = rng.choice(5, 3)\n", "--to-host")
    assert msg == ("Generator.choice at line 3 `n = rng.choice(5, 3)`: CuPy has no "
                   "Generator.choice; instead: a[rng.integers(0, len(a), size)] (draws with "
                   "replacement), or run the cell with %%gpu --fallback (NumPy on the host for "
                   "this call)")
    assert "n" not in ip.user_ns and "u" not in ip.user_ns


def test_fallback_runs_numpys_generator_from_the_same_seed_and_reports_it(ip, cupy_names):
    ip.run_cell_magic("gpu", "--to-host --fallback --quiet",
                      "rng = np.random.default_rng(7)\nn = rng.choice(50, 6)\n")
    np.testing.assert_array_equal(ip.user_ns["n"], np.random.default_rng(7).choice(50, 6))
    [row] = cupy_magic.last_report().fallbacks
    assert row.function == "Generator.choice" and row.calls == 1 and row.line == 2
    # the user namespace keeps the array module's own Generator, not the cell's wrapper
    rng = ip.user_ns["rng"]
    assert not isinstance(rng, CheckedGenerator)
    assert type(rng).__module__.split(".")[0] in ("numpy", "cupy")


def test_a_generator_from_an_earlier_cell_is_checked_too(ip, cupy_names):
    ip.run_cell_magic("gpu", "--quiet", "rng = np.random.default_rng(1)\n")
    msg = cell_error(ip, "p = rng.permutation(5)\n")
    assert msg.startswith("Generator.permutation at line 1 `p = rng.permutation(5)`: CuPy has "
                          "no Generator.permutation; instead: x[np.argsort(rng.random(len(x)))]")
    ip.run_cell_magic("gpu", "--quiet --to-host", "u = rng.random(4)\n")  # CuPy has random
    assert ip.user_ns["u"].shape == (4,) and not isinstance(ip.user_ns["rng"], CheckedGenerator)


@pytest.mark.parametrize("method", ["integers", "standard_normal", "uniform", "random"])
def test_methods_cupy_has_are_not_touched(ip, method):
    args = {"integers": "(0, 10, 3)"}.get(method, "(3,)" if method != "uniform" else "(0, 1, 3)")
    ip.run_cell_magic("gpu", "--quiet --to-host", f"v = np.random.default_rng(3).{method}{args}\n")
    assert ip.user_ns["v"].shape == (3,) and cupy_magic.last_report().fallbacks == []


NORMALS = ["rng.normal(2.0, 0.5, 6)", "rng.normal()", "rng.normal(size=(2, 3))",
           "rng.normal([0.0, 10.0], 2.0)", "rng.normal(loc=[[1.0], [2.0]], scale=[1.0, 3.0])",
           "rng.normal(0, [1, 2], size=(4, 2))", "rng.lognormal(0.5, 0.25, 5)",
           "rng.lognormal(size=3)"]


@pytest.mark.parametrize("call", NORMALS)
def test_normal_and_lognormal_run_on_the_device_with_numpys_numbers(ip, xp, cupy_names, call):
    # made from standard_normal as NumPy makes them: with NumPy's Generator (the CPU
    # fallback) the very numbers of NumPy's method from the same seed; on the GPU, CuPy's
    ip.run_cell_magic("gpu", "--quiet --to-host", f"rng = np.random.default_rng(7)\nn = {call}\n")
    want = eval(call, {"rng": np.random.default_rng(7)})
    got = np.asarray(ip.user_ns["n"])
    assert got.shape == np.shape(want) and got.dtype == np.float64
    assert cupy_magic.last_report().fallbacks == []
    if xp is np:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("call, error", [
    ("rng.normal(0, -1.0)", "scale < 0"), ("rng.lognormal(0, [1.0, -1.0])", "sigma < 0"),
    ("rng.normal([0.0, 1.0], size=3)", "shape mismatch")])
def test_normal_refuses_what_numpy_refuses(ip, cupy_names, call, error):
    ip.run_cell_magic("gpu", "--quiet", "rng = np.random.default_rng(7)\n")
    msg = cell_error(ip, f"n = {call}\n")
    assert error in msg
    with pytest.raises(ValueError):
        eval(call, {"rng": np.random.default_rng(7)})


def test_device_normal_draws_a_normal_distribution(ip):
    ip.run_cell_magic("gpu", "--quiet --to-host",
                      "rng = np.random.default_rng(11)\nn = rng.normal(3.0, 2.0, 200_000)\n")
    n = ip.user_ns["n"]
    assert abs(n.mean() - 3.0) < 0.03 and abs(n.std() - 2.0) < 0.03


def test_the_cells_generator_is_a_generator_to_isinstance_and_default_rng(ip, xp, cupy_names):
    """Libraries take a Generator after ``isinstance(rng, np.random.Generator)`` (SciPy's
    ``random_state=``, pandas' ``sample``), and ``default_rng(rng)`` is ``rng`` itself: one
    the cell makes, and on the CPU fallback one an earlier plain cell made (NumPy's, checked
    in the cell; on a GPU it stays NumPy's, not the cell's module's)."""
    ip.run_cell("rng0 = np.random.default_rng(5)")
    gens = "(rng, rng0)" if xp is np else "(rng,)"
    ip.run_cell_magic("gpu", "--quiet", "rng = np.random.default_rng(1)\n"
                      f"ok = [isinstance(g, np.random.Generator) for g in {gens}]\n"
                      f"same = [np.random.default_rng(g) is g for g in {gens}]\n")
    assert ip.user_ns["ok"] == ip.user_ns["same"] == [True] * (2 if xp is np else 1)


def test_normal_on_numpys_generator_gives_numpys_own_types(ip, xp):
    """On the CPU fallback ``rng.normal()`` is NumPy's Python float and ``size=()`` its 0-d
    array (on a GPU, CuPy's 0-d array: README)."""
    if xp is not np:
        pytest.skip("NumPy's Generator is the CPU fallback's")
    ip.run_cell_magic("gpu", "--quiet", "rng = np.random.default_rng(3)\n"
                      "draws = [rng.normal(), rng.normal(0, 1), rng.lognormal(), "
                      "rng.normal(size=())]\n")
    ref = np.random.default_rng(3)
    want = [ref.normal(), ref.normal(0, 1), ref.lognormal(), ref.normal(size=())]
    got = ip.user_ns["draws"]
    assert [type(v) for v in got] == [type(v) for v in want] == [float, float, float, np.ndarray]
    assert [float(v) for v in got] == [float(v) for v in want]
