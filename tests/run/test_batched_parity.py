"""Batched runs against NumPy, cell by cell (:mod:`parity_corpus`): each cell runs once in
plain NumPy and twice through a real shell as ``%%gpu --quiet --to-host``, batched on
request (``--batch --batch-rows 3000``: seven equal batches, so a value every batch agrees
on is not told apart by its batch) and on its own (the inputs over a small budget). Each run
must give NumPy's results (values to rtol 1e-12, NaN positions, dtypes, shapes, printed
text) or stop with a one-line error that names the place and a fix (:mod:`parity_check`);
never a silently different result, never an error that is not a refusal."""

from __future__ import annotations

import numpy as np
import pytest
from IPython.core.error import UsageError
from parity_check import ASKED, CUPY_REFUSED, compare, inputs, judged
from parity_corpus import CELLS, ROW_WISE
from parity_rowwise import CUPY_LACKS, EARLIER, MIXING, MUST_RUN, NOT_YET, SCALAR_TOTALS

from cupy_magic import backend

BUDGET = "160KB"  # under v (164 KiB) and x (656 KiB): every cell is batched on its own


def outcome(ip, cell: str, rules: str, asked: bool, earlier: dict | None = None) -> str:
    """'same', 'refused', or what went wrong ('DIFFERS: ...', 'ERROR: ...')."""
    line = "--quiet --to-host" + (f" --reduce {rules}" if rules else "")
    if asked:
        return compare(ip, cell, f"{line} {ASKED}", earlier=earlier)
    ip.run_line_magic("vram_budget", BUDGET)
    try:
        return compare(ip, cell, line, earlier=earlier)
    finally:
        ip.run_line_magic("vram_budget", "off")


@pytest.mark.parametrize(("cell", "rules"), CELLS,
                         ids=[f"{i}" for i in range(len(CELLS))])
def test_a_batched_cell_gives_numpy_s_results_or_is_refused(ip, cell, rules):
    got = {how: outcome(ip, cell, rules, how == "asked") for how in ("asked", "on its own")}
    assert all(g in ("same", "refused") for g in got.values()), got
    if cell in ROW_WISE and not rules:
        assert set(got.values()) == {"same"}, got


def test_the_corpus_is_large_and_varied():
    assert len(CELLS) >= 150 and len({c for c, _ in CELLS}) >= 140


@pytest.mark.parametrize(("cell", "rules"), MUST_RUN,
                         ids=[f"{i}" for i in range(len(MUST_RUN))])
def test_a_row_wise_cell_runs_batched_and_gives_numpy_s_results(ip, cell, rules):
    """A data scientist's row-wise cells (:mod:`parity_rowwise`): refusing one is a false
    refusal, which leaves batching unusable for them; only on the cupy backend, a cell of
    :data:`~parity_rowwise.CUPY_LACKS` is refused by the compat layer, naming --fallback."""
    got = {how: judged(outcome(ip, cell, rules, how == "asked", EARLIER))
           for how in ("asked", "on its own")}
    lacks = backend.current().name == "cupy" and cell in CUPY_LACKS
    assert set(got.values()) == ({CUPY_REFUSED} if lacks else {"same"}), got


@pytest.mark.xfail(strict=True, reason="stopped by the batched run: see parity_rowwise.NOT_YET")
@pytest.mark.parametrize("cell", NOT_YET, ids=[f"{i}" for i in range(len(NOT_YET))])
def test_a_row_wise_cell_the_batched_run_still_stops(ip, cell):
    got = {how: outcome(ip, cell, "", how == "asked", EARLIER) for how in ("asked", "on its own")}
    assert set(got.values()) == {"same"}, got


@pytest.mark.parametrize("cell", SCALAR_TOTALS, ids=[f"{i}" for i in range(len(SCALAR_TOTALS))])
def test_a_numpy_scalar_over_a_batch_s_rows_is_refused_both_ways(ip, cell):
    """A constant (``eps = np.float32(1e-3)``) is kept where every batch agrees; a batch's
    total is not, though seven equal batches agree on ``(x > -1).sum()``."""
    got = {how: judged(outcome(ip, cell, "", how == "asked"))
           for how in ("asked", "on its own")}
    assert set(got.values()) <= {"refused", CUPY_REFUSED}, got


@pytest.mark.parametrize("cell", MIXING, ids=[f"{i}" for i in range(len(MIXING))])
def test_a_cell_that_mixes_rows_is_refused_both_ways(ip, cell):
    """Each once ran batched and committed other values than NumPy's (a function reading a
    total through a global, a turned-back transpose of a centred value, counts in as many
    bins as a batch has rows), or is a classic of porting (min-max scaling by columns)."""
    got = {how: judged(outcome(ip, cell, "", how == "asked"))
           for how in ("asked", "on its own")}
    assert set(got.values()) <= {"refused", CUPY_REFUSED}, got


def test_an_array_over_the_rows_with_a_batch_s_length_is_refused_not_joined(ip):
    """np.histogram's counts in 3,000 bins have as many entries as a batch of 3,000 rows:
    the row check reads them as a value over the rows, so the run refuses to join them as
    rows (it joined them into 21,000 counts) and commits nothing."""
    cell = "y = v * 2\nh = np.histogram(v, bins=3000, range=(0, 1))[0]"
    ip.user_ns.update(inputs())
    for name in ("y", "h"):
        ip.user_ns.pop(name, None)
    with pytest.raises(UsageError) as err:
        ip.run_cell_magic("gpu", f"--quiet --to-host {ASKED}", cell)
    msg = str(err.value)
    assert "\n" not in msg and "'h'" in msg and "3000 entries on its leading axis" in msg
    assert "--reduce h=sum" in msg and "y" not in ip.user_ns and "h" not in ip.user_ns
    ip.run_cell_magic("gpu", f"--quiet --to-host {ASKED} --reduce h=sum", cell)
    want = np.histogram(inputs()["v"], bins=3000, range=(0, 1))[0]
    np.testing.assert_array_equal(ip.user_ns["h"], want)


@pytest.mark.parametrize("cell", ["y = np.squeeze(x[:, :1])", "y = x[:, :1].squeeze()"])
def test_a_squeeze_of_a_one_row_batch_is_refused_not_joined(ip, cell):
    """np.squeeze drops a batch of one row's row axis too: the row check cannot know the
    batches' sizes, so the run refuses that batch's result (21,001 rows in batches of
    3,000: the last has one) and commits nothing; in batches of two rows or more it runs."""
    x = inputs()["x"]
    for rows, refused in ((len(x) + 1, True), (len(x) - 1, False)):  # last batch: 1, 2,999
        given = np.resize(x, (rows, 4))
        ip.user_ns.update(x=given)
        ip.user_ns.pop("y", None)
        if refused:
            with pytest.raises(UsageError, match=r"'y'.* in batch 8 \(1 rows\)"):
                ip.run_cell_magic("gpu", f"--quiet --to-host {ASKED}", cell)
            assert "y" not in ip.user_ns
        else:
            ip.run_cell_magic("gpu", f"--quiet --to-host {ASKED}", cell)
            np.testing.assert_array_equal(ip.user_ns["y"], given[:, 0])


JOINS = [
    ("m = f32.mean()", "m=mean"), ("m = f32.mean(axis=0)", "m=mean"),
    ("m = f16.mean()", "m=mean"), ("s = f32.sum()", "s=sum"),
    ("s = u8.sum(dtype=np.uint8)", "s=sum"), ("s = i32.sum(axis=0, dtype=np.int32)", "s=sum"),
    ("s = float(f64.sum())", "s=sum"), ("s = int(i32.sum())", "s=sum"),
    ("s = int((f64 > 0.5).sum())", "s=sum"), ("m = float(f64.max())", "m=max"),
    ("b = bool((f64 > 0.99).any())", "b=any"),
]


@pytest.mark.parametrize("cell, rule", JOINS)
def test_a_joined_result_has_the_type_and_dtype_of_the_unbatched_one(ip, cell, rule):
    """``--reduce`` joins the batches' partials into the partials' own type: a ``float32``
    mean stays ``float32``, a ``uint8`` or ``int32`` sum wraps in its dtype as NumPy's does,
    ``float(...)`` and ``int(...)`` stay Python numbers."""
    rng = np.random.default_rng(0)
    data = {"f32": rng.random((40, 3), dtype=np.float32), "f64": rng.random((40, 3)),
            "u8": rng.integers(0, 256, (40, 3), dtype=np.uint8),
            "i32": rng.integers(2**30, 2**31 - 1, (40, 3), dtype=np.int32)}
    data["f16"] = data["f32"].astype(np.float16)
    plain = dict(data, np=np)
    exec(cell, plain)
    name = rule.split("=")[0]
    ip.user_ns.update(data)
    ip.run_cell_magic("gpu", f"--quiet --to-host --batch --batch-rows 7 --reduce {rule}", cell)
    got, want = ip.user_ns[name], plain[name]
    assert type(got) is type(want) and getattr(got, "dtype", None) == getattr(want, "dtype", None)
    if np.asarray(want).dtype.kind in "iub":
        assert np.array_equal(got, want)  # integer sums wrap alike whatever the order
    else:
        np.testing.assert_allclose(got, want, rtol=2e-3 if "16" in cell else 1e-5)
