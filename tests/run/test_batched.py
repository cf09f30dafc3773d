"""Batched %%gpu cells through a real shell, on each backend: results, plans, errors."""

from __future__ import annotations

import gc
import itertools

import numpy as np
import pytest
from IPython.core.error import UsageError

import cupy_magic
from cupy_magic import backend
from cupy_magic.run import progress


def gpu(ip, cell: str, line: str = ""):
    ip.run_cell_magic("gpu", f"--quiet {line}", cell)
    return cupy_magic.last_report()


def host(value):
    return value.get() if hasattr(value, "get") and not isinstance(value, np.ndarray) \
        else np.asarray(value)


def fresh(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "b":
        return rng.random(shape) > 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-1000, 1000, shape).astype(dtype)
    if np.dtype(dtype).kind == "c":
        return (rng.random(shape) + 1j * rng.random(shape)).astype(dtype)
    return rng.random(shape).astype(dtype)


# --- results equal the unbatched run --------------------------------------------------------


@pytest.mark.parametrize("shape", [(1001,), (1001, 3), (257, 5, 2)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "complex64", "bool"])
def test_batched_equals_unbatched(ip, poisoned, shape, dtype):
    x = fresh(shape, dtype, seed=hash((shape, dtype)) % 1000)
    ip.user_ns["x"] = x
    cell = "y = x * x\nz = x\n"
    gpu(ip, cell)
    whole_y = host(ip.user_ns["y"])
    report = gpu(ip, cell, "--batch --batch-rows 100")
    y, z = ip.user_ns["y"], ip.user_ns["z"]
    assert isinstance(y, np.ndarray) and y.shape == shape and y.dtype == whole_y.dtype
    np.testing.assert_array_equal(y, whole_y)
    np.testing.assert_array_equal(z, x)
    assert report.batch.batches == -(-shape[0] // 100) and report.batch.rows == 100
    assert report.outputs_by_name["y"].where == "host (rows gathered)"


@pytest.mark.parametrize(("rows", "streams", "batches"),
                         [(1000, 3, 2), (100, 2, 11), (333, 4, 4), (1, 3, 1001), (2000, 3, 1)])
def test_batch_counts_last_batch_of_one_row_and_streams(ip, poisoned, rows, streams, batches):
    x = fresh((1001, 2), "float64")
    ip.user_ns["x"] = x
    report = gpu(ip, "y = np.sqrt(x * x + 1)\n",
                 f"--batch --batch-rows {rows} --streams {streams}")
    np.testing.assert_allclose(ip.user_ns["y"], np.sqrt(x * x + 1), rtol=1e-12)
    assert report.batch.batches == batches and report.batch.streams == streams


def test_a_first_batch_smaller_than_the_rest_with_cast_rows(ip, poisoned):
    """The first batch is cut short (1000 is an axis length) and its rows are staged: growing
    the slot's staging buffers for the next batches must not reuse them too early."""
    x = fresh((9_000, 1000), "float32")  # 36 MB: large enough to be staged on a GPU
    ip.user_ns["x"] = x
    report = gpu(ip, "y = x.astype(np.float64) * 2\n",
                 "--batch --batch-rows 1000 --streams 2")
    assert report.batch.first_rows < report.batch.rows == 1000
    np.testing.assert_array_equal(ip.user_ns["y"], x.astype(np.float64) * 2)


def test_timeline_only_when_asked(ip):
    x = fresh((1001, 2), "float64")
    ip.user_ns["x"] = x
    report = gpu(ip, "y = np.sqrt(x * x + 1)\n", "--batch --batch-rows 100")
    assert report.batch.timeline == () and report.batch.overlap is None
    assert "timeline" not in str(report.batch) and "phases" not in str(report.batch)
    assert list(report.batch.phases) == ["setup", "first batch", "warm-up", "batches", "finish"]


def test_the_plan_keeps_a_timeline_of_every_batch(ip):
    x = fresh((1001, 2), "float64")
    ip.user_ns["x"] = x
    report = gpu(ip, "y = np.sqrt(x * x + 1)\n",
                 "--batch --batch-rows 100 --streams 3 --timeline")
    np.testing.assert_array_equal(ip.user_ns["y"], np.sqrt(x * x + 1))
    phases = report.batch.phases
    assert list(phases) == ["setup", "first batch", "warm-up", "batches", "finish"]
    assert all(v >= 0 for v in phases.values())
    assert sum(phases.values()) <= report.wall_seconds + 0.05
    assert "batch phases: setup" in str(report.batch)
    line = report.batch.timeline
    assert len(line) == report.batch.batches == 11
    assert [slot for slot, _, _ in line] == [i % 3 for i in range(11)]
    assert line[0][1] == 0.0 and all(0 <= a <= b for _, a, b in line)
    # a slot's batches follow one another: the next starts after the last one ended
    for slot in range(3):
        mine = [(a, b) for k, a, b in line if k == slot]
        assert all(b0 <= a1 + 1e-6 for (_, b0), (a1, _) in itertools.pairwise(mine))
    if not backend.current().is_gpu:  # one after the other on the host
        assert report.batch.overlap <= 1.0 + 1e-6
    assert "in flight on average" in str(report.batch)


@pytest.mark.parametrize("make", [
    lambda b: b[:, ::2], lambda b: np.asfortranarray(b), lambda b: b[::3], lambda b: b.T[:7].T,
])
def test_non_contiguous_inputs(ip, poisoned, make):
    x = make(fresh((600, 14), "float32"))
    assert not x.flags.c_contiguous
    ip.user_ns["x"] = x
    gpu(ip, "y = x * 3 - 1\n", "--batch --batch-rows 64")
    np.testing.assert_allclose(ip.user_ns["y"], x * 3 - 1, rtol=1e-6)


def test_batched_and_broadcast_shaped_inputs_and_shared_ones(ip, poisoned):
    x, c, w = fresh((500, 6), "float64"), fresh((500, 1), "float64", 1), fresh(6, "float64", 2)
    ip.user_ns.update(x=x, c=c, w=w)
    report = gpu(ip, "y = x * c + w\nn = c[:, 0] * 2\n", "--batch --batch-rows 77")
    np.testing.assert_allclose(ip.user_ns["y"], x * c + w)
    np.testing.assert_allclose(ip.user_ns["n"], c[:, 0] * 2)
    assert set(report.batch.batched) == {"x", "c"} and report.batch.shared == ("w",)


def test_explicit_batch_names_share_a_square_input(ip, poisoned):
    x, m = fresh((300, 300), "float64"), fresh((300, 300), "float64", 3)
    ip.user_ns.update(x=x, m=m)
    report = gpu(ip, "y = x @ m\n", "--batch x --batch-rows 50")
    np.testing.assert_allclose(ip.user_ns["y"], x @ m, rtol=1e-10)
    assert report.batch.batched == ("x",) and report.batch.shared == ("m",)


@pytest.mark.parametrize("rule", ["sum", "min", "max", "mean", "any", "all", "concat"])
def test_each_reduction(ip, poisoned, rule):
    x = fresh((1001, 3), "float64") - 0.5
    ip.user_ns["x"] = x
    expr = {"sum": "x.sum(axis=0)", "min": "x.min()", "max": "x.max(axis=0)",
            "mean": "x.mean(axis=0)", "any": "(x > 0.49).any()", "all": "(x > -0.4).all()",
            "concat": "x[x[:, 0] > 0.3, 0]"}[rule]
    gpu(ip, f"r = {expr}\n", f"--batch --batch-rows 90 --reduce r={rule}")
    expected = eval(expr, {"x": x})
    np.testing.assert_allclose(host(ip.user_ns["r"]), expected, rtol=1e-12)


def test_two_cells_over_the_same_array(ip, poisoned):
    x = fresh((5000, 4), "float32")
    ip.user_ns["x"] = x
    first = gpu(ip, "y = x + 1\n", "--batch --batch-rows 700")
    y1 = ip.user_ns["y"].copy()
    second = gpu(ip, "y = x + 1\n", "--batch --batch-rows 700")
    np.testing.assert_array_equal(ip.user_ns["y"], y1)
    np.testing.assert_array_equal(y1, x + 1)
    assert first.batch.batches == second.batch.batches == 8


# --- batching on its own, and what the report says -----------------------------------------


def test_a_batch_of_one_row_is_one_row_in_the_plan(ip, poisoned):
    ip.user_ns["x"] = fresh((10,), "float64")
    report = gpu(ip, "y = x * 2\n", "--batch --batch-rows 1")
    assert "first batch 1 row (measured" in str(report) and "then 1 row per batch" in str(report)


def test_inputs_over_the_budget_are_batched_within_it(ip, poisoned):
    ip.run_line_magic("vram_budget", "2MB")
    x = fresh((300_000,), "float64")  # 2.4 MB
    ip.user_ns["x"] = x
    report = gpu(ip, "y = np.sqrt(x) * 2\n")
    np.testing.assert_allclose(ip.user_ns["y"], np.sqrt(x) * 2)
    text = str(report)
    assert "over the leading axis" in text and "VRAM budget" in text
    assert "each row's results depend only on that row" in text
    assert "rows per batch" in text and "streams" in text and "in flight" in text
    assert report.batch.batches > 1
    assert report.peak_pool_bytes <= 2_000_000
    assert "<td" in report._repr_html_() and "in flight" in report._repr_html_()


def test_small_cells_are_not_batched(ip):
    ip.user_ns["x"] = np.arange(10.0)
    report = gpu(ip, "y = x + 1\n")
    assert report.batch is None


# --- mistakes: one line, naming the value and the fix ---------------------------------------


@pytest.mark.parametrize(("line", "words"), [
    ("--batch --streams 0", ["--streams must be at least 1, got 0", "--streams 3"]),
    ("--batch-rows 0", ["got 0", "--batch-rows 100000"]),
    ("--batch-bytes 5XB", ["5XB", "512MB"]),
    ("--batch --reduce t=avg", ["'avg'", "sum, min, max"]),
    ("--batch nope", ["'nope', which is not a NumPy input", "x (100, 2)"]),
    ("--batch --reduce q=sum", ["q, which the cell never assigns"]),
    ("--batch", ["'t'", "no row axis", "--reduce t=sum", "concat"]),
])
def test_bad_batch_options_and_results_without_a_rule(ip, line, words):
    ip.user_ns["x"] = np.ones((100, 2))
    with pytest.raises(UsageError) as info:
        gpu(ip, "y = x * 2\nt = x.sum()\n", line)
    for word in words:
        assert word in str(info.value)
    assert "\n" not in str(info.value)
    assert "y" not in ip.user_ns and "t" not in ip.user_ns


# --- failures commit nothing ------------------------------------------------------------------


def test_error_in_batch_7_names_it_and_commits_nothing(ip, poisoned):
    calls = []

    def check(block):
        calls.append(len(block))
        if len(calls) == 7:
            raise ValueError("bad rows")
        return block

    be = backend.current()
    start = be.pool_used()
    ip.user_ns.update(x=fresh((100, 3), "float64"), check=check, y="before")
    with pytest.raises(ValueError, match="bad rows") as info:
        gpu(ip, "y = check(x) + 1\nt = x.sum()\n", "--batch --batch-rows 10 --reduce t=sum")
    assert any("batch 7 of 10 (rows 60:70)" in note for note in info.value.__notes__)
    assert ip.user_ns["y"] == "before" and "t" not in ip.user_ns
    assert progress.current() is None
    assert be.pool_used() == start


def test_keyboard_interrupt_between_batches(ip, poisoned):
    def ctrl_c_after_batch_3(snap: progress.CellProgress) -> None:
        if snap.batches_total and snap.batches_done == 3:
            raise KeyboardInterrupt

    be = backend.current()
    start = be.pool_used()
    ip.user_ns.update(x=fresh((100, 3), "float64"))
    progress.add_listener(ctrl_c_after_batch_3)
    try:
        with pytest.raises(KeyboardInterrupt) as info:
            gpu(ip, "y = x + 1\n", "--batch --batch-rows 10")
    finally:
        progress.remove_listener(ctrl_c_after_batch_3)
    assert any("interrupted after batch 3 of 10" in note for note in info.value.__notes__)
    assert "y" not in ip.user_ns and progress.current() is None
    assert be.pool_used() == start


# --- GPU only: page-locked transfers ----------------------------------------------------------


@pytest.mark.gpu
def test_gpu_second_cell_finds_the_input_and_a_result_block_page_locked(ip, poisoned):
    if not backend.current().is_gpu:
        pytest.skip("the page-locked path exists on the GPU only")
    host_mem = backend.current().host
    x = fresh((6_000_000,), "float32")  # 24 MB: above the registration threshold
    ip.user_ns["x"] = x
    first = gpu(ip, "y = np.sqrt(x * x + 1)\n", "--batch --batch-rows 500000")
    # first touch: every batch staged once (the input is page-locked after the run)
    assert first.batch.staged_batches == first.batch.batches == 12
    assert first.batch.staged == {"x": "input not page-locked (yet)",
                                  "y": "result in new host memory"}
    assert "(x: input not page-locked (yet); y: result in new host memory)" in str(first.batch)
    ptr = ip.user_ns["y"].ctypes.data
    del ip.user_ns["y"]  # its page-locked block goes back to the cache
    gc.collect()
    assert host_mem.stats()["cached_bytes"] >= x.nbytes
    second = gpu(ip, "y = np.sqrt(x * x + 1)\n", "--batch --batch-rows 500000")
    np.testing.assert_allclose(ip.user_ns["y"], np.sqrt(x * x + 1), rtol=1e-6)
    # The input stays page-locked and the rows land in the reused block: nothing is staged.
    assert second.inputs[0].pinned and second.batch.staged_batches == 0
    assert second.batch.staged == {} and "staged" not in str(second.batch)
    assert ip.user_ns["y"].ctypes.data == ptr and host_mem.locked(ip.user_ns["y"])
    assert host_mem.stats()["cached_bytes"] == 0
    del ip.user_ns["y"]
    gc.collect()
    from cupy_magic.monitor import sampler as monitor

    _, _, released = monitor.release_cached(0)  # the panel's button
    assert released >= x.nbytes and host_mem.stats()["cached_bytes"] == 0


@pytest.mark.gpu
def test_gpu_arrays_the_extension_locked_still_work_with_plain_cupy(ip):
    """One registration per buffer: CuPy's own copies over a locked array must not fail."""
    if not backend.current().is_gpu:
        pytest.skip("the page-locked path exists on the GPU only")
    import cupy as cp

    x = fresh((300 * 2**20 // 24, 3), "float64")  # 300 MiB
    ip.user_ns["x"] = x
    report = gpu(ip, "y = x * 2 - 1\n", "--batch --batch-rows 1000003")
    y = ip.user_ns["y"]
    np.testing.assert_array_equal(y, x * 2 - 1)
    host_mem = backend.current().host
    host_mem.wait(host_mem.find(x))
    host_mem.wait(host_mem.find(y))
    assert host_mem.locked(x) and host_mem.locked(y)
    np.testing.assert_array_equal(cp.asarray(x).get(), x)  # plain CuPy, outside %%gpu
    np.testing.assert_array_equal(cp.asarray(y).get(), y)
    out = np.empty_like(y)
    cp.asarray(y).get(out=out)
    np.testing.assert_array_equal(out, y)
    assert report.batch.batches > 3
    whole = gpu(ip, "z = x * 2 - 1\n", "--to-host")  # unbatched: the locked upload
    np.testing.assert_array_equal(ip.user_ns["z"], x * 2 - 1)
    assert whole.inputs[0].pinned


def test_python_values_the_same_in_every_batch_are_kept(ip):
    ip.user_ns["x"] = np.arange(1000.0).reshape(500, 2)
    gpu(ip, "y = x\nfor k in range(3):\n    y = y + 1\nscale = 2.5\n", "--batch-rows 64")
    assert ip.user_ns["k"] == 2 and ip.user_ns["scale"] == 2.5
    np.testing.assert_array_equal(ip.user_ns["y"], ip.user_ns["x"] + 3)


def test_python_values_that_differ_between_batches_are_refused(ip):
    ip.user_ns["x"] = np.ones((500, 2))
    ip.user_ns["count"] = len  # a function the row check cannot see into
    with pytest.raises(UsageError, match=r"'n' is \d+ in batch 1 but \d+ in batch \d+: it depends "
                                         r"on the batch"):
        gpu(ip, "y = x * 2\nn = count(x)\n", "--batch-rows 64")
    assert "y" not in ip.user_ns and "n" not in ip.user_ns
    # len(x) the check reads as a batch's row count: refused in the first batch already
    with pytest.raises(UsageError, match=r"'n' \(int 64\) is a value over the batch's 64 rows"):
        gpu(ip, "y = x * 2\nn = len(x)\n", "--batch-rows 64")
    assert "y" not in ip.user_ns and "n" not in ip.user_ns


def test_streamed_inputs_say_their_time_is_the_whole_run_and_what_a_cast_saved(ip):
    ip.user_ns["x"] = np.ones((400, 3))
    gpu(ip, "y = x * 2\n", "--quiet --batch-rows 50 --dtype float32")
    move = cupy_magic.last_report().inputs[0]
    assert move.streamed and move.saved_bytes == 400 * 3 * 4
    assert "streamed: upload + compute + results" in str(cupy_magic.last_report())
    staged = cupy_magic.last_report().batch.staged  # what went through staging, and why
    assert staged == ({"x": "input cast to float32", "y": "result in new host memory"}
                      if backend.current().is_gpu else {})


def test_a_fixed_batch_size_equal_to_another_axis_does_not_pass_a_reduction_for_rows(ip):
    ip.user_ns["x"] = np.ones((9, 3))
    with pytest.raises(UsageError, match=r"'s'.*has no row axis"):
        gpu(ip, "s = x.sum(axis=0)\n", "--batch-rows 3")
    gpu(ip, "s = x.sum(axis=0)\n", "--batch-rows 3 --reduce s=sum")
    assert [float(v) for v in ip.user_ns["s"]] == [9.0, 9.0, 9.0]


def test_python_containers_that_differ_between_batches_are_refused(ip):
    ip.user_ns["x"] = np.arange(10.0)
    with pytest.raises(UsageError, match=r"'lst' is .* in batch 1 but .* in batch"):
        gpu(ip, "lst = [float(v) for v in x]\ny = x * 2\n", "--batch-rows 4")
    assert "lst" not in ip.user_ns and "y" not in ip.user_ns
    gpu(ip, "labels = ['a', 'b']\ny = x * 2\n", "--batch-rows 4")
    assert ip.user_ns["labels"] == ["a", "b"]


def test_a_cell_batched_with_batch_is_not_told_a_larger_budget_would_run_it_whole(ip):
    """Under --batch a cell stays batched whatever the budget: the budget its report names
    is the one that allows paying batches, not one kept under the inputs' size."""
    ip.run_line_magic("vram_budget", "1MB")
    x = fresh((400_000,), "float64")
    ip.user_ns["x"] = x
    report = gpu(ip, "y = x\nfor _ in range(30):\n    y = np.sin(y) * 0.5 + 0.25\n", "--batch")
    bp = report.batch
    assert bp.reason == "asked for with --batch"
    full = bp.full_speed
    assert full is not None and not full.capped
    assert full.budget > report.start_pool_bytes + x.nbytes  # over what fits x whole
    text = str(report)
    assert "would allow them" in text and "runs unbatched" not in text


def test_the_first_batch_measures_what_a_batch_costs(ip, poisoned):
    """Issue 20: the first batch's cost beyond its transfer is measured and reported; under a
    small budget the report names the budget at which the batches would pay for it."""
    ip.run_line_magic("vram_budget", "1MB")
    x = fresh((400_000,), "float64")
    ip.user_ns["x"] = x
    cell = "y = x\nfor _ in range(30):\n    y = np.sin(y) * 0.5 + 0.25\n"
    report = gpu(ip, cell)
    expect = x
    for _ in range(30):
        expect = np.sin(expect) * 0.5 + 0.25
    np.testing.assert_allclose(host(ip.user_ns["y"]), expect)
    bp = report.batch
    cost = bp.cost
    assert cost is not None and cost.host == (report.backend != "cupy")
    assert cost.moved_bytes == bp.first_rows * 8 and cost.moved_seconds > 0
    assert cost.seconds > 0  # 90 launches (or NumPy calls) and their Python
    text = str(report)
    assert "batch cost: " in text and "measured on the first batch" in text
    # 90 operations per batch against a few KiB to move: far over 10% on either backend
    assert cost.share(bp.rows, bp.row_bytes) > 0.1
    full = bp.full_speed
    assert full is not None and full.budget > 1_000_000 and full.rows > bp.rows
    assert "held small by the budget" in text
    # paying batches of 8-byte rows need more than x's 3.2 MB, which fits a budget over
    # the pool's bytes at the start plus x: the budget named stays just under that one
    whole = report.start_pool_bytes + x.nbytes
    assert full.budget < whole and full.capped
    assert f"the largest that keeps it batched, allows batches of {full.rows:,} rows" in text
    if report.backend != "cupy":
        assert "stands in for the transfer" in text and "GB/s" not in text
        assert cost.large_rate is None  # nothing uploads on the CPU fallback
    else:
        # the 1 MB budget held the first batch small: the paying batches, and the budget
        # named, are sized at the large page-locked upload measured at load (32 MiB: on any
        # GPU well over 1 GB/s), where that is faster than the small batch moved
        rate = backend.current().upload_rate()
        assert rate is not None and rate > 1e9 and cost.large_rate == rate
        assert cost.pay_rate == max(rate, cost.rate)
        assert ("sized at the" in text) == (rate > cost.rate)


@pytest.mark.parametrize(("last", "noted"), [
    ("print('done')", False), ("display(y.shape)", False), ("y.sum();", False),
    ("f(y)", True), ("y.sum()", True), ("display(1, display_id=True)", True)])
def test_a_batched_run_notes_the_last_expression_only_where_a_plain_cell_shows_one(
        ip, last, noted):
    """A batched run shows no last expression: it says so where a plain cell would have
    shown a value, not for ``print(...)`` or ``display(...)``, which give ``None``."""
    ip.user_ns["x"] = np.arange(40.0)
    cell = f"def f(v):\n    return v.shape\ny = x * 2\n{last}\n"
    assert ip.run_cell(f"%%gpu --quiet --batch --batch-rows 10\n{cell}").success
    said = [n for n in cupy_magic.last_report().notes if "last expression" in n]
    assert said == (["the cell's last expression is not shown in a batched run (each batch "
                     "has its own); assign it and join it with --reduce"] if noted else [])


@pytest.mark.parametrize(("cell", "noted"), [
    ("X = X * 2\nif X[0, 0] > 10:\n    X = X + 100\n", [2]),
    ("if X.sum() > 0:\n    y = X * 2\nelse:\n    y = X\n", [1]),
    ("y = X * 2\n", [])])
def test_a_batched_run_on_request_names_the_places_it_took_on_the_users_word(ip, cell, noted):
    """``--batch`` runs a cell whose row check cannot see at some place (a branch on a value
    over the batch's rows): the report names each such place, since a batch that breaks the
    promise there gives other results than NumPy (``X = X * 2; if X[0, 0] > 10`` gathers
    half old and half changed rows), and nothing after the run can tell."""
    ip.user_ns["X"] = np.arange(32.0).reshape(8, 4)
    assert ip.run_cell(f"%%gpu --quiet --batch --batch-rows 2\n{cell}").success
    said = [n for n in cupy_magic.last_report().notes if "on your word" in n]
    assert [int(n.split(" at line ")[1].split()[0]) for n in said] == noted
    assert all("(--batch)" in n and "run the cell whole to be sure" in n for n in said)
