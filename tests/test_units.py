"""Pure logic: sizes, budgets, estimates and the cell's names."""

from __future__ import annotations

import numpy as np
import pytest

from cupy_magic.backend.budget import parse_budget
from cupy_magic.units import (
    SizeError,
    estimate,
    estimate_array,
    format_bytes,
    parse_shape,
    parse_size,
)

GiB = 1024**3


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [("8GB", 8 * 10**9), ("8GiB", 8 * GiB), ("512MB", 512 * 10**6), ("1.5GiB", int(1.5 * GiB)),
     ("100 MiB", 100 * 2**20), ("2048", 2048), ("1kb", 1000), ("1e3MB", 10**9), ("3 B", 3)],
)
def test_parse_size(text, nbytes):
    assert parse_size(text) == nbytes


def test_parse_budget_forms():
    total = 80 * GiB
    assert parse_budget("50%", total).nbytes == 40 * GiB
    assert parse_budget("0.25", total).nbytes == 20 * GiB
    assert parse_budget("1", total).nbytes == total
    spec = parse_budget("8GB", total)
    assert (spec.nbytes, spec.fraction) == (8 * 10**9, None)
    assert spec.describe() == "8GB = 7.45 GiB"
    assert parse_budget("50%", total).describe() == "40.00 GiB (50% of the device)"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("81GiB", "larger than the device"), ("2", "for a size add a unit, e.g. 2GB"),
     ("0", "budget of 0"), ("150%", "at most 100%"), ("", "no budget given"),
     ("8XB", "unknown unit 'XB'")],
)
def test_parse_budget_refusals(text, fragment):
    with pytest.raises(SizeError, match=None) as info:
        parse_budget(text, 80 * GiB)
    assert fragment in str(info.value)


def test_fraction_without_device_size_asks_for_a_size():
    with pytest.raises(SizeError, match="device size is unknown"):
        parse_budget("50%", 0)


def test_format_bytes_names_binary_units():
    assert format_bytes(0) == "0 B"
    assert format_bytes(1023) == "1023 B"
    assert format_bytes(1024) == "1.00 KiB"
    assert format_bytes(1_600_000_000) == "1.49 GiB"
    assert format_bytes(-2 * GiB) == "-2.00 GiB"
    assert format_bytes(5 * 1024**5) == "5120.00 TiB"


def test_guides_example_estimate():
    est = estimate("20000x20000", "float32")
    assert est.elements == 400_000_000
    assert est.nbytes == 1_600_000_000
    assert f"{est.gib:.2f}" == "1.49"
    assert "400,000,000 elements x 4 bytes (float32)" in est.formula()
    assert estimate((10, 10)).nbytes == 800


def test_estimate_of_arrays_and_shapes():
    assert parse_shape("(3, 4)") == (3, 4)
    assert parse_shape("20000×20000") == (20000, 20000)
    assert estimate_array(np.zeros((3, 4), np.float32), "a").nbytes == 48
    with pytest.raises(SizeError, match="not an array"):
        estimate_array([1, 2], "lst")


@pytest.mark.parametrize("text", ["1e309GB", "1e400", "1e40GB"])
def test_absurd_sizes_are_refused_not_crashed(text):
    with pytest.raises(SizeError, match=None):
        parse_budget(text, 80 * GiB)


@pytest.mark.parametrize("text", ["0.00000000000000001", "1e-12%"])
def test_budgets_below_one_byte_are_refused(text):
    with pytest.raises(SizeError, match="less than one byte"):
        parse_budget(text, 80 * GiB)


def test_absurd_shapes_are_refused():
    with pytest.raises(SizeError, match="cannot read the shape"):
        parse_shape("1e400x2")




@pytest.mark.parametrize(("text", "fraction"), [("0.5", 0.5), ("5e-1", 0.5), (".5", 0.5),
                                                ("1e0", 1.0), ("1", 1.0), ("25E-2", 0.25)])
def test_a_bare_number_is_a_fraction_whatever_its_notation(text, fraction):
    assert parse_budget(text, 80 * GiB).fraction == fraction


@pytest.mark.parametrize(("text", "fix"), [("1e9", "e.g. 1e9B"), ("1000000000", "e.g. 1000000000B"),
                                           ("12", "e.g. 12GB"), ("1e400", "e.g. 8GB")])
def test_a_bare_number_above_one_asks_for_a_unit(text, fix):
    with pytest.raises(SizeError, match="fraction of the device, 0 to 1") as info:
        parse_budget(text, 80 * GiB)
    assert fix in str(info.value)


@pytest.mark.parametrize(("text", "fragment"), [
    ("2**10", "as 1024"), ("10 ** 3", "as 1000"), ("2**10x3", "not a power"),
    ("1.5e0x2", "whole numbers"), ("1e30x1e30", "more elements"), ("-5x3", "negative"),
])
def test_shapes_that_are_not_lengths_are_refused(text, fragment):
    with pytest.raises(SizeError) as info:
        parse_shape(text)
    assert fragment in str(info.value)


def test_shapes_in_e_notation_are_whole_lengths():
    assert parse_shape("1e3x2E2") == (1000, 200)
    assert parse_shape("20000*20000") == (20000, 20000)


@pytest.mark.parametrize(("dtype", "fragment"), [
    ("datetime64[ns]", "CuPy has no datetime64"), ("timedelta64", "timedelta64"),
    ("longdouble", "no extended precision"), ("clongdouble", "no extended precision"),
])
def test_dtypes_cupy_cannot_hold_are_not_priced(dtype, fragment):
    with pytest.raises(SizeError, match=None) as info:
        estimate("10x10", dtype)
    assert fragment in str(info.value)
    with pytest.raises(SizeError, match=r"^when: ") as info:
        estimate_array(np.zeros(3, dtype), "when")


def test_dtype_texts_are_numpys_own_for_every_dtype_seen_in_any_order():
    from cupy_magic.units import dtype_name, dtype_text

    plain = np.dtype([("a", "f8"), ("b", "f8")])
    aligned = np.dtype([("a", "f8"), ("b", "f8")], align=True)
    assert plain == aligned and str(plain) != str(aligned)  # equal, written apart
    for dt in (plain, aligned, plain, np.dtype("float32"), np.dtype("<U3")):
        assert dtype_text(dt) == str(dt) and dtype_name(dt) == dt.name
