"""The batch planner: options, which inputs are batched, batch sizes, joining partial results."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from cupy_magic.run.batching import (
    COST_SHARE,
    DEFAULT_STREAMS,
    MAX_BATCH_BYTES,
    MAX_STREAMS,
    PROMISE,
    RULES,
    BatchCost,
    BatchOptions,
    BatchPlan,
    PayingBudget,
    budget_to_pay,
    probe_held_small,
    probe_rows,
    select_inputs,
    size_rows,
)
from cupy_magic.run.errors import CellError
from cupy_magic.run.inflight import batches_in_flight, in_flight_line
from cupy_magic.run.reduce import combine


def test_parse_defaults_and_lists():
    opts = BatchOptions.parse()
    assert not opts.requested and opts.streams == 3 and opts.names is None
    opts = BatchOptions.parse("*", reduce=["total=sum,lo=min", "m=MEAN"])
    assert opts.requested and opts.names is None
    assert opts.reduce == {"total": "sum", "lo": "min", "m": "mean"}
    opts = BatchOptions.parse("x, y", rows="1_000", streams="2")
    assert opts.names == ("x", "y") and opts.rows == 1000 and opts.streams == 2
    assert BatchOptions.parse(nbytes="512MB").nbytes == 512_000_000


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"streams": "0"}, ["--streams must be at least 1, got 0", "--streams 3"]),
    ({"streams": "two"}, ["'two'", "--streams 3"]),
    ({"rows": "0"}, ["--batch-rows must be at least 1, got 0", "--batch-rows 100000"]),
    ({"rows": "1.5"}, ["'1.5'", "--batch-rows 100000"]),
    ({"nbytes": "12XB"}, ["--batch-bytes 12XB", "512MB"]),
    ({"rows": "10", "nbytes": "1MB"}, ["not both"]),
    ({"reduce": ["total"]}, ["'total'", "--reduce total=sum"]),
    ({"reduce": ["total=avg"]}, ["'avg'", "sum, min, max, mean, any, all, concat"]),
    ({"batch": "1x"}, ["'1x'", "--batch x,y"]),
    ({"streams": "100000000"}, ["--streams 100000000 is too many", f"at most {MAX_STREAMS}",
                                "--streams 3"]),
    ({"streams": "10**23"}, ["'10**23'", "--streams 3"]),
    ({"reduce": ["total=sum", "total=max"]}, ["two rules, sum and max", "--reduce total=sum"]),
    ({"nbytes": "0"}, ["--batch-bytes 0", "more than 0 bytes; e.g. %%gpu --batch-bytes 512MB "
                                          "(BatchOptions(nbytes='512MB'))"]),
])
def test_bad_options_name_the_value_and_the_fix(kwargs, words):
    with pytest.raises(CellError) as info:
        BatchOptions.parse(**kwargs)
    for word in words:
        assert word in str(info.value)
    assert "\n" not in str(info.value)


def test_streams_are_bounded_from_python_too():
    assert BatchOptions(streams=MAX_STREAMS).streams == MAX_STREAMS
    with pytest.raises(CellError, match=f"at most {MAX_STREAMS}"):
        BatchOptions(streams=MAX_STREAMS + 1)
    with pytest.raises(CellError, match=f"at most {MAX_STREAMS}"):
        BatchOptions.parse(default_streams=10**23)
    assert BatchOptions.parse(reduce=["t=sum", "t=SUM"]).reduce == {"t": "sum"}
    assert BatchOptions.parse().streams == DEFAULT_STREAMS


def test_default_batches_the_inputs_with_the_largest_leading_length():
    inputs = {"x": np.zeros((100, 3)), "y": np.zeros(100), "w": np.zeros((3, 3)),
              "s": np.zeros(())}
    names, total = select_inputs(inputs, BatchOptions())
    assert sorted(names) == ["x", "y"] and total == 100


def test_explicit_batch_names_are_checked():
    inputs = {"x": np.zeros((100, 3)), "k": np.zeros((50, 3)), "s": np.zeros(())}
    assert select_inputs(inputs, BatchOptions(names=("k",))) == (["k"], 50)
    with pytest.raises(CellError, match=r"'z', which is not a NumPy input.*x \(100, 3\)"):
        select_inputs(inputs, BatchOptions(names=("z",)))
    with pytest.raises(CellError, match="different leading lengths"):
        select_inputs(inputs, BatchOptions(names=("x", "k")))
    with pytest.raises(CellError, match="0-d"):
        select_inputs(inputs, BatchOptions(names=("s",)))


def test_probe_rows_are_small_and_avoid_other_lengths():
    assert probe_rows(10_000_000, 4, set(), None) == 2**20  # 4 MiB of rows
    assert probe_rows(100, 8, {12}, None) == 13  # 100 // 8 = 12 is a length of another axis
    assert probe_rows(100, 8, set(), 7) == 7
    assert probe_rows(5, 8, set(), 70) == 5
    assert probe_rows(10_000, 1000, set(), None, free=160_000) == 10  # 1/16 of the budget


def test_size_rows_fits_the_budget_with_a_margin():
    rows, why = size_rows(1_000_000, 8, 40.0, 12_000_000, 3, BatchOptions())
    assert rows == int(12_000_000 * 0.8 / (3 * 40)) and "measured" in why
    assert 3 * rows * 40 <= 12_000_000 * 0.8
    rows, why = size_rows(10**9, 4, 12.0, None, 3, BatchOptions())
    assert rows == 128 * 2**20 // 4 and "128 MiB" in why
    assert size_rows(100, 8, 1.0, None, 3, BatchOptions(rows=7))[0] == 7
    assert size_rows(100, 8, 1.0, None, 3, BatchOptions(nbytes=80))[0] == 10
    with pytest.raises(CellError, match="one row of the batched inputs needs"):
        size_rows(100, 8, 1e6, 1000, 3, BatchOptions())


def test_plan_text_says_why_the_promise_and_the_plan():
    plan = BatchPlan(("x",), ("w",), 1000, 8, 3, "the inputs need 8 KiB", 20, 100, 11, 24.0,
                     "measured", ("y",), {"t": "sum"})
    text = str(plan)
    for word in ("x over the leading axis", "1,000 rows", "the inputs need 8 KiB", PROMISE,
                 "first batch 20 rows", "100 rows per batch", "11 batches", "3 streams",
                 "in flight", "w", "y (rows gathered", "t (sum)"):
        assert word in text
    assert plan.in_flight_bytes == 3 * 100 * 24


@pytest.mark.parametrize("rule", RULES)
def test_combine_matches_numpy_on_the_whole(rule):
    rng = np.random.default_rng(1)
    data = rng.random((37, 4)) - 0.3
    cuts = [0, 5, 6, 20, 37]
    parts = []
    for a, b in itertools.pairwise(cuts):
        block = data[a:b]
        part = {"sum": block.sum(0), "min": block.min(0), "max": block.max(0),
                "mean": block.mean(0), "any": (block > 0.6).any(0),
                "all": (block > -0.2).all(0), "concat": block[block[:, 0] > 0.5, 0]}[rule]
        parts.append((part, b - a))
    whole = {"sum": data.sum(0), "min": data.min(0), "max": data.max(0), "mean": data.mean(0),
             "any": (data > 0.6).any(0), "all": (data > -0.2).all(0),
             "concat": data[data[:, 0] > 0.5, 0]}[rule]
    np.testing.assert_allclose(combine(rule, parts, np), whole)


def test_combine_python_scalars():
    assert combine("sum", [(3, 2), (4, 5)], np) == 7
    assert combine("mean", [(1.0, 1), (4.0, 3)], np) == pytest.approx(3.25)
    assert combine("max", [(1, 1), (9, 1)], np) == 9
    mean = combine("mean", [(1, 2), (2, 2)], np)  # a mean of Python ints is a float
    assert mean == 1.5 and type(mean) is float


def test_a_fixed_first_batch_steps_off_other_axis_lengths():
    from cupy_magic.run.batching import probe_rows

    assert probe_rows(10, 8, {3}, 3) == 2
    assert probe_rows(10, 8, {1, 2, 3}, 3) == 4
    assert probe_rows(2**30, 4, {7}, 2**25) == 2**25  # huge inputs: found at once


# --- batches that pay for themselves (issue 20) ----------------------------------------------
# 1 MB moved in 0.1 ms: 10 GB/s. A cost of 2 ms is 10% of 20 ms of transfer, 200 MB: 25M rows
# of 8 bytes, more than the 16,777,216 rows of 128 MiB.
COST = BatchCost(seconds=2e-3, moved_seconds=1e-4, moved_bytes=10**6)


def test_batch_cost_figures():
    assert COST.rate == pytest.approx(1e10)
    assert COST.rows_to_pay(8) == 25_000_000
    assert COST.share(25_000_000, 8) == pytest.approx(COST_SHARE)
    assert COST.share(2_500_000, 8) == pytest.approx(1.0)
    assert COST.transfer_seconds(25_000_000, 8) == pytest.approx(0.02)
    assert BatchCost(1e-3, 0.0, 10).rows_to_pay(8) == 1  # an upload too quick to time
    assert BatchCost(0.0, 1e-3, 10).rows_to_pay(8) == 1  # nothing to pay for


def test_costly_batches_grow_past_128_mib_without_a_budget():
    rows, why = size_rows(10**9, 8, 8.0, None, 3, BatchOptions(), COST)
    assert rows == 25_000_000 and "so that the cost of a batch (2.00 ms" in why
    assert size_rows(10**9, 8, 8.0, None, 3, BatchOptions())[0] == 128 * 2**20 // 8
    cheap = BatchCost(1e-4, 1e-4, 10**6)  # pays at 1.25M rows: 128 MiB stays
    assert size_rows(10**9, 8, 8.0, None, 3, BatchOptions(), cheap)[0] == 128 * 2**20 // 8
    assert size_rows(1000, 8, 8.0, None, 3, BatchOptions(), COST)[0] == 1000


def test_costly_batches_stop_at_the_largest_measured_size():
    dear = BatchCost(0.1, 1e-4, 10**6)  # pays at 1.25e9 rows
    rows, why = size_rows(10**10, 8, 8.0, None, 3, BatchOptions(), dear)
    assert rows == MAX_BATCH_BYTES // 8 and "at most 1.00 GiB" in why


def test_fixed_sizes_win_over_the_cost():
    assert size_rows(10**9, 8, 8.0, None, 3, BatchOptions(rows=1000), COST) == \
        (1000, "--batch-rows")
    assert size_rows(10**9, 8, 8.0, None, 3, BatchOptions(nbytes=800), COST)[0] == 100


def test_the_budget_holds_costly_batches_back_and_names_the_budget_that_pays():
    free, limit = 30_000_000, 40_000_000  # 10 MB in use
    rows, why = size_rows(10**9, 8, 16.0, free, 3, BatchOptions(), COST)
    assert rows == int(free * 0.8 / (3 * 16)) == 500_000 and "free budget" in why
    full = budget_to_pay(rows, 10**9, 8, 16.0, 3, COST, free, limit).budget
    assert full == 10_000_000 + 3 * 25_000_000 * 16 * 10 // 8  # 1.51 GB
    rows_then = size_rows(10**9, 8, 16.0, full - (limit - free), 3, BatchOptions(), COST)[0]
    assert rows_then == 25_000_000  # with that budget the batches pay for themselves
    assert budget_to_pay(rows, 10**9, 8, 16.0, 3, COST, None, None) is None
    assert budget_to_pay(25_000_000, 10**9, 8, 16.0, 3, COST, free, limit) is None
    assert budget_to_pay(rows, 600_000, 8, 16.0, 3, COST, free, limit).budget == \
        10_000_000 + 3 * 600_000 * 16 * 10 // 8  # never more rows than the input has
    # a full batch's bytes beyond its rows (run.inflight): each of the 3 in flight needs them
    with_fixed = budget_to_pay(rows, 10**9, 8, 16.0, 3, COST, free, limit, fixed=40_000)
    assert with_fixed.budget == full + 3 * 40_000 * 10 // 8


def test_a_first_batch_held_small_sizes_the_paying_batches_at_the_large_upload_rate():
    # the first batch moved 10 GB/s; a large page-locked upload on this device 40 GB/s
    fast = COST.with_large_rate(4e10)
    assert fast.rate == pytest.approx(1e10) and fast.pay_rate == pytest.approx(4e10)
    assert fast.rows_to_pay(8) == 4 * COST.rows_to_pay(8) == 100_000_000
    # the share said of this run's batches stays at the rate they moved
    assert fast.share(500_000, 8) == COST.share(500_000, 8)
    # a slower large rate, or none, changes nothing
    assert COST.with_large_rate(1e9).rows_to_pay(8) == COST.rows_to_pay(8)
    assert COST.with_large_rate(None).pay_rate == COST.rate
    free, limit = 30_000_000, 40_000_000
    full = budget_to_pay(500_000, 10**9, 8, 16.0, 3, fast, free, limit).budget
    assert full == 10_000_000 + 3 * 100_000_000 * 16 * 10 // 8
    # under the budget named, the batches the planner sizes (at the same rate) pay
    rows_then = size_rows(10**9, 8, 16.0, full - (limit - free), 3, BatchOptions(), fast)[0]
    assert rows_then == 100_000_000 and fast.share(rows_then, 8) <= COST_SHARE
    plan = BatchPlan(("x",), (), 10**9, 8, 3, "r", 1000, 500_000, 2001, 16.0, "free budget",
                     cost=fast, full_speed=PayingBudget(full, 100_000_000))
    assert ("batches of 100,000,000 rows (762.94 MiB) (sized at the 40.00 GB/s of a large "
            "page-locked upload, measured at load: the budget held the first batch too small "
            "to show a large batch's rate) would keep the cost under 10%") in str(plan)
    assert "sized at the" not in str(BatchPlan(("x",), (), 10**9, 8, 3, "r", 1000, 500_000,
                                               2001, 16.0, "free budget", cost=COST,
                                               full_speed=PayingBudget(full, 25_000_000)))


def test_the_budget_named_stays_under_the_one_that_would_run_the_cell_whole():
    free, limit = 30_000_000, 40_000_000  # 10 MB in use; paying batches need a 1.51 GB budget
    whole = 800_000_000  # from this budget on, the inputs fit and the cell runs unbatched
    full = budget_to_pay(500_000, 10**9, 8, 16.0, 3, COST, free, limit, whole)
    assert full.capped and full.budget == whole - 1
    assert full.rows == int((whole - 1 - 10_000_000) * 0.8 / (3 * 16))  # 13,166,666
    # the planner, under that budget, sizes batches of those rows (the budget holds them)
    rows_then = size_rows(10**9, 8, 16.0, full.budget - 10_000_000, 3, BatchOptions(), COST)[0]
    assert rows_then == full.rows
    plan = BatchPlan(("x",), (), 10**9, 8, 3, "r", 1000, 500_000, 2001, 16.0, "free budget",
                     cost=COST, full_speed=full)
    assert ("but a budget that holds them also holds the cell's inputs whole, and a cell whose "
            "inputs fit runs unbatched, without streaming; a VRAM budget of 762.94 MiB, the "
            "largest that keeps it batched, allows batches of 13,166,666 rows (19% of their "
            "transfer time at the first batch's rate)") in str(plan)
    assert plan.full_speed_budget == whole - 1
    # a whole-run budget above what paying batches need changes nothing
    assert not budget_to_pay(500_000, 10**9, 8, 16.0, 3, COST, free, limit, 2 * 10**9).capped
    # already about as large as batches get under that cap: no larger budget to name, and
    # the report says why
    at_cap = budget_to_pay(13_000_000, 10**9, 8, 16.0, 3, COST, free, limit, whole)
    assert at_cap.capped and not at_cap.grows(13_000_000)
    there = BatchPlan(("x",), (), 10**9, 8, 3, "r", 1000, 13_000_000, 78, 16.0, "free budget",
                      cost=COST, full_speed=at_cap)
    assert there.full_speed_budget is None
    assert ("a budget that holds them also holds the cell's inputs whole, and a cell whose "
            "inputs fit runs unbatched, without streaming; this VRAM budget is about the "
            "largest that keeps it batched") in str(there)


def test_a_budget_that_grows_batches_a_little_is_still_named_unless_capped():
    plan = BatchPlan(("x",), (), 10**9, 8, 3, "r", 1000, 500_000, 2001, 16.0, "free budget",
                     cost=COST, full_speed=PayingBudget(30_000_000, 510_000))
    assert plan.full_speed_budget == 30_000_000 and "would allow them" in str(plan)
    assert COST.with_large_rate(float("inf")).pay_rate == COST.rate  # no rate: ignored


def test_a_first_batch_is_held_small_only_by_a_budget_that_shrinks_it():
    row = 24  # bytes per row; without a budget the first batch is 4 MiB of rows
    unheld = probe_rows(10**8, row, set(), None)
    assert unheld == 4 * 2**20 // row
    small = probe_rows(10**8, row, set(), None, 16 * 2**20)  # a 16 MiB budget: 1 MiB
    assert small < unheld and probe_held_small(small, 10**8, row, None, 16 * 2**20)
    assert not probe_held_small(unheld, 10**8, row, None, 2**30)  # room for a full one
    assert not probe_held_small(unheld, 10**8, row, None, None)  # no budget
    assert not probe_held_small(small, 10**8, row, 1000, 16 * 2**20)  # --batch-rows
    tiny = probe_rows(800, row, set(), None, 16 * 2**20)  # 800 rows: an eighth, not the budget
    assert tiny == probe_rows(800, row, set(), None)
    assert not probe_held_small(tiny, 800, row, None, 16 * 2**20)


def test_the_plan_says_what_a_batch_costs_and_what_holds_it_back():
    plan = BatchPlan(("x",), (), 10**9, 8, 3, "the inputs need 8 GB", 1000, 500_000, 2001,
                     16.0, "measured 16 B per row in the pool; ...", cost=COST,
                     full_speed=PayingBudget(1_510_000_000, 25_000_000))
    text = str(plan)
    for word in ("batch cost: 2.00 ms per batch of kernel launches and Python beyond its "
                 "upload (measured on the first batch; upload 10.00 GB/s): 500% of the 0.40 ms "
                 "a batch of 500,000 rows takes to upload, over the 10% a batch should cost",
                 "held small by the budget: batches of 25,000,000 rows (190.73 MiB) would keep "
                 "the cost under 10%; a VRAM budget of 1.41 GiB would allow them"):
        assert word in text
    host = BatchPlan(("x",), (), 10**9, 8, 3, "r", 1000, 25_000_000, 41, 16.0, "s",
                     cost=BatchCost(2e-3, 1e-4, 10**6, host=True))
    words = "\n".join(host.lines(host=True))
    assert "Python and NumPy work beyond copying its rows" in words
    assert "on the CPU fallback that copy in host RAM stands in for the transfer" in words
    assert "10% of the 20.00 ms a batch of 25,000,000 rows takes to copy, within" in words
    assert "GB/s" not in words and "held small" not in words
    fixed = BatchPlan(("x",), (), 10**9, 8, 3, "r", 1000, 1000, 10**6, 16.0, "--batch-rows",
                      cost=COST)
    assert "held small by --batch-rows: batches of 25,000,000 rows" in str(fixed)


def test_a_first_batch_over_the_budget_is_measured_again_on_half_its_rows():
    from cupy_magic.run.batching import probe_again

    assert probe_again(1250, set()) == 625
    assert probe_again(1250, {625, 624}) == 623  # never another axis length
    assert probe_again(3, set()) == 1
    assert probe_again(1, set()) is None  # one row over the budget: nothing smaller


def test_batches_in_flight_fit_the_margin_with_a_full_batch_s_fixed_bytes():
    """run.inflight: as many batches of rows x bytes per row plus the fixed bytes as fit
    80% of the free budget, between one and --streams."""
    # H100, x.max() under 160KB: 1,178 rows of 36.1 B, and 38,367 bytes of CUB's beyond them
    assert batches_in_flight(160_000, 1_178, 36.1, 0, 3) == 3  # 42.5 KB each: 3 fit 128 KB
    assert batches_in_flight(160_000, 1_178, 36.1, 38_367, 3) == 1  # 80.9 KB each
    assert batches_in_flight(160_000, 1_178, 36.1, 20_000, 3) == 2  # 62.5 KB each
    assert batches_in_flight(160_000, 1_178, 36.1, 200_000, 3) == 1  # none fits: still one
    assert batches_in_flight(10**9, 1_000, 8.0, 0, 3) == 3  # never more than the streams
    line = in_flight_line(1, 3, 1_178, 38_367, host=False)
    assert line.startswith("  batch in flight: 1 of 3 streams: a full batch of 1,178 rows "
                           "took 37.47 KiB in the pool beyond its rows") and "CUB" in line
    host_line = in_flight_line(2, 3, 414, 19_374, host=True)
    assert "2 of 3 batches" in host_line and "in memory" in host_line
    assert "CUB" not in host_line and "run at once" not in host_line
