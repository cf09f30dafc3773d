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
                         "n = rng.normal(0, 1, 5)\n", "--to-host")
    assert msg == ("Generator.normal at line 3 `n = rng.normal(0, 1, 5)`: CuPy has no "
                   "Generator.normal; instead: loc + scale * rng.standard_normal(size), or run "
                   "the cell with %%gpu --fallback (NumPy on the host for this call)")
    assert "n" not in ip.user_ns and "u" not in ip.user_ns


def test_fallback_runs_numpys_generator_from_the_same_seed_and_reports_it(ip, cupy_names):
    ip.run_cell_magic("gpu", "--to-host --fallback --quiet",
                      "rng = np.random.default_rng(7)\nn = rng.normal(2.0, 0.5, 6)\n")
    np.testing.assert_array_equal(ip.user_ns["n"], np.random.default_rng(7).normal(2.0, 0.5, 6))
    [row] = cupy_magic.last_report().fallbacks
    assert row.function == "Generator.normal" and row.calls == 1 and row.line == 2
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
