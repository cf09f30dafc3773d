"""Fixes and advice found by running NumPy's own docstring examples under %%gpu
(``benchmarks/numpy_examples.py``): aliases keep their identity, NumPy's scalar types stay
types under --fallback, masked arrays keep their mask, scratch inputs may be written, and the
one-line refusals carry the CuPy way for options and dtype families."""

from __future__ import annotations

import numpy as np
import pytest

import cupy_magic
from cupy_magic.compat.advice import WAYS, limit_message

pytest.importorskip("cupy")


def test_aliases_keep_their_identity(ip):
    ip.run_cell_magic("gpu", "--to-host", "same = np.conj is np.conjugate\n"
                      "also = np.bitwise_invert is np.invert\ny = np.conj(np.array([1j]))\n")
    assert ip.user_ns["same"] is True and ip.user_ns["also"] is True
    assert ip.user_ns["y"].tolist() == [-1j]


def test_scalar_types_stay_types_under_fallback(ip):
    ip.run_cell_magic("gpu", "--fallback --to-host",
                      "sub = issubclass(np.bytes_, np.generic)\n"
                      "kind = np.dtype(np.datetime64).kind\n")
    assert ip.user_ns["sub"] is True and ip.user_ns["kind"] == "M"
    rows = {r.function: r for r in cupy_magic.last_report().fallbacks}
    assert rows["np.bytes_"].calls == 1 and rows["np.datetime64"].calls == 1
    assert "CuPy has no bytes_" in rows["np.bytes_"].why


def test_masked_array_keeps_its_mask_under_fallback(ip):
    ip.run_cell_magic("gpu", "--fallback --to-host",
                      "m = np.ma.array([1.0, 2.0, 3.0], mask=[0, 1, 0])\ns = m.sum()\n")
    assert isinstance(ip.user_ns["m"], np.ma.MaskedArray)
    assert ip.user_ns["m"].mask.tolist() == [False, True, False]
    assert ip.user_ns["s"] == 4.0


def test_overwrite_input_may_write_the_host_copy(ip):
    ip.user_ns["x"] = np.array([[1.0, np.nan, 2.0], [3.0, 4.0, 5.0]])
    ip.run_cell_magic("gpu", "--fallback --to-host",
                      "q = np.nanpercentile(x, 50, axis=1, overwrite_input=True)\n")
    assert ip.user_ns["q"].tolist() == [1.5, 4.0]
    (row,) = cupy_magic.last_report().fallbacks
    assert row.function == "np.nanpercentile" and row.to_host_bytes == 48


def test_refused_option_names_the_cupy_way(ip):
    ip.user_ns["x"] = np.arange(6.0)
    result = ip.run_cell("%%gpu\ns = np.max(x, where=x > 2)")  # NumPy wants initial= too
    message = str(result.error_in_exec)
    assert message.startswith("np.max at line 1") and WAYS["(where=)"] in message
    assert "\n" not in message


@pytest.mark.parametrize(("function", "kind", "detail", "key"), [
    ("np.sum", "option", "where=", "(where=)"),
    ("np.count_nonzero", "option", "keepdims=", "(keepdims=)"),
    ("np.indices", "option", "sparse=", "indices(sparse=)"),
    ("np.zeros", "dtype", "[('x', '<i4'), ('y', '<i4')]", "(dtype structured)"),
    ("np.array", "dtype", "<U1", "(dtype string)"),
    ("np.frombuffer", "dtype", "|S1", "(dtype string)"),
    ("np.array", "dtype", "object", "(dtype object)"),
    ("np.arange", "dtype", "datetime64[m]", "(dtype datetime)"),
    ("np.linalg.svdvals", "missing", "", "linalg.svdvals"),
    ("np.unpackbits", "option", "count=", "unpackbits"),
])
def test_the_cupy_way_by_option_dtype_family_and_name(function, kind, detail, key):
    text, fix = limit_message(function, 3, "y = ...", kind, detail)
    assert fix == WAYS[key] and f"instead: {WAYS[key]}, or run the cell" in text


def test_an_option_without_advice_still_offers_the_fallback():
    text, fix = limit_message("np.sort", 1, "s = np.sort(x, kind='stable')", "option",
                              "stable=")
    assert fix == "" and text.endswith("run the cell with %%gpu --fallback (NumPy on the host "
                                       "for this call)")
