"""The proxy's fast path (benchmarks/compat_overhead.py): a call that needs nothing goes
straight to the array module; what it caches (dtypes known good, wrapper code per shape)
never changes what a cell is told, across --fallback and backends."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import cell_error as _error

import cupy_magic
from cupy_magic.compat import calls as calls_mod
from cupy_magic.compat.proxy import _flat_lines, array_module
from cupy_magic.compat.record import CompatRecord
from cupy_magic.compat.spec import UNSUPPORTED_KINDS

pytest.importorskip("cupy")


def test_known_good_dtype_does_not_survive_as_a_refusal_or_a_fallback(ip):
    ip.user_ns["x"] = np.arange(4.0)
    ip.run_cell_magic("gpu", "--to-host", "y = np.multiply(x, 2, dtype=np.float32)\n")
    assert ip.user_ns["y"].dtype == np.float32
    assert np.float32 in calls_mod.DTYPES_OK
    # the same function with a dtype CuPy has not: refused, then run under --fallback, then
    # refused again once the cell runs without it
    assert "CuPy has no dtype <U3" in _error(ip, "s = np.zeros(3, dtype='U3')")
    ip.run_cell_magic("gpu", "--fallback --to-host", "s = np.zeros(3, dtype='U3')\n"
                      "t = np.zeros(3, dtype=np.float32)\n")
    assert ip.user_ns["s"].dtype.kind == "U" and ip.user_ns["t"].dtype == np.float32
    (row,) = cupy_magic.last_report().fallbacks
    assert row.function == "np.zeros" and row.line == 1 and "<U3" in row.why
    assert "CuPy has no dtype <U3" in _error(ip, "s = np.zeros(3, dtype='U3')")
    assert not any(np.dtype(d).kind in UNSUPPORTED_KINDS for d in calls_mod.DTYPES_OK)


def test_an_option_refused_then_fallen_back_then_refused(ip):
    ip.user_ns["x"] = np.arange(6.0)
    cell = "for i in range(3):\n    s = np.mean(x)\n    w = np.nanmean(x, where=x > 2)\n"
    assert "CuPy's nanmean has no where= option" in _error(ip, cell)
    ip.run_cell_magic("gpu", "--fallback --to-host", cell)
    (row,) = cupy_magic.last_report().fallbacks
    assert (row.function, row.line, row.calls) == ("np.nanmean", 3, 3)
    assert "CuPy's nanmean has no where= option" in _error(ip, cell)
    ip.run_line_magic("gpu_fallback", "on")
    try:
        ip.run_cell_magic("gpu", "--to-host", cell)
        assert cupy_magic.last_report().fallbacks[0].calls == 3
    finally:
        ip.run_line_magic("gpu_fallback", "off")
    assert "CuPy's nanmean has no where= option" in _error(ip, cell)


def test_lists_counted_at_keywords_and_inside_loops(ip):
    ip.user_ns["x"] = np.arange(3.0)
    ip.run_cell_magic("gpu", "--to-host", "m = np.mean(a=[1.0, 2.0, 3.0])\n"
                      "for i in range(4):\n    y = np.add(x, [1.0, 2.0, 3.0])\n"
                      "z = np.multiply(x, 2, dtype=np.float64)\n")
    assert ip.user_ns["m"] == 2.0 and ip.user_ns["y"].tolist() == [1.0, 3.0, 5.0]
    rows = {r.line: r for r in cupy_magic.last_report().conversions}
    assert rows[1].counts == {"list": 1} and rows[1].functions == ("np.mean",)
    assert rows[3].counts == {"list": 4} and rows[3].functions == ("np.add",)
    assert set(rows) == {1, 3}


def test_ufunc_wrapper_carries_the_ufunc():
    module = array_module(np, CompatRecord("<c>", ""))
    add = module.add
    assert add.nin == 2 and add.nout == 1 and add.types == np.add.types
    assert add.reduce is add.reduce and add.reduce([1, 2, 3]) == 6
    assert module.conj is module.conjugate
    assert add(np.ones(2), [1, 2]).tolist() == [2.0, 3.0]


def test_ufunc_method_cupy_lacks_is_refused_when_called():
    module = array_module(np, CompatRecord("<c>", ""))
    if not isinstance(np.matmul, np.ufunc):
        pytest.skip("NumPy's matmul is not a ufunc here")
    with pytest.raises(AttributeError, match=r"CuPy has no matmul\.reduce"):
        module.matmul.reduce(np.ones((2, 2, 2)))


def test_wrappers_of_one_shape_share_code_with_one_line():
    module = array_module(np, CompatRecord("<c>", ""))
    assert module.add.__code__ is module.subtract.__code__
    code = module.add.__code__
    assert {line for _, _, line in code.co_lines()} == {code.co_firstlineno}
    # a code object the rewrite cannot read is kept as it is
    assert _flat_lines(test_ufunc_wrapper_carries_the_ufunc.__code__).co_name == \
        "test_ufunc_wrapper_carries_the_ufunc"


def test_new_cell_new_wrappers():
    first = array_module(np, CompatRecord("<a>", "", fallback=False))
    second = array_module(np, CompatRecord("<b>", "", fallback=True))
    assert first.nanmean is not second.nanmean
    with pytest.raises(NotImplementedError, match="where= option"):
        first.nanmean(np.arange(3.0), where=np.arange(3) > 0)
    assert second.nanmean(np.arange(3.0), where=np.arange(3) > 0) == 1.5
