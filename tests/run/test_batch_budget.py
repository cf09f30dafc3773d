"""Batches the budget sizes stay within it: the batches after the first are sized from what the
first held per row, and must hold no more than that (issue 20's measured first batch)."""

from __future__ import annotations

import numpy as np
import pytest
from IPython.core.error import UsageError
from run.test_batched import fresh, gpu, host

from cupy_magic import backend


def test_the_next_batches_hold_no_more_than_the_first_measured(ip, poisoned):
    """One stream: a batch may take 80% of the free budget, by the first batch's bytes per
    row. The rows of the inputs of each batch used to stay held while the next one ran (with
    the rest of its names, for the cell's last values), which the first batch never held: a
    third more here, and the cell stopped over its own budget (1.05 MiB of 976.56 KiB)."""
    ip.run_line_magic("vram_budget", "1MB")
    x = fresh((400_000,), "float64")
    ip.user_ns["x"] = x
    report = gpu(ip, "y = x * 2\n", "--streams 1")
    np.testing.assert_array_equal(ip.user_ns["y"], x * 2)
    bp = report.batch
    assert bp.streams == 1 and bp.rows > bp.first_rows and bp.batches > 3
    assert report.peak_pool_bytes <= 1_000_000
    if report.backend != "cupy":  # on the host the peak is the cell's bytes, one batch at a time
        assert report.peak_pool_bytes <= bp.rows * bp.peak_row_bytes  # what the plan allowed


def test_the_last_values_of_a_batched_cell_are_kept_without_its_input_rows(ip):
    """The batched inputs the cell only reads are the user's arrays again afterwards; the
    Python values it binds come from the last batch."""
    x = np.arange(1000.0)
    ip.user_ns["x"] = x
    gpu(ip, "y = x + 1\nn_rows = 7\n", "--batch-rows 300")
    assert ip.user_ns["x"] is x and ip.user_ns["n_rows"] == 7
    np.testing.assert_array_equal(ip.user_ns["y"], x + 1)


def test_the_inputs_to_cut_are_chosen_once(ip, poisoned, monkeypatch):
    """The row check, the warm-up and the batches cut the inputs _run_here chose: one
    select_inputs a batched cell (run_batched chose them a second time before)."""
    import cupy_magic.run.batched as batched_mod
    import cupy_magic.run.cell as cell_mod
    from cupy_magic.run.batching import select_inputs

    calls: list[list[str]] = []

    def counted(inputs, opts):
        calls.append(sorted(inputs))
        return select_inputs(inputs, opts)

    for mod in (cell_mod, batched_mod):
        if hasattr(mod, "select_inputs"):
            monkeypatch.setattr(mod, "select_inputs", counted)
    ip.user_ns["x"] = fresh((1001, 3), "float32")
    report = gpu(ip, "y = x * 2\n", "--batch --batch-rows 100")
    np.testing.assert_array_equal(ip.user_ns["y"], ip.user_ns["x"] * 2)
    assert report.batch.batches == 11
    assert calls == [["x"]]


def test_a_first_batch_over_the_budget_is_measured_again_on_fewer_rows(ip):
    """The first batch's inputs take 1/16 of the free budget; a cell that holds 24 copies of
    its rows at once (and, on the CPU fallback, the Python objects it builds once) takes
    that batch over the budget. Nothing is committed then, so the first batch runs again on
    half as many rows until it fits; the run stays within the budget and gives NumPy's
    result (refused before: 'line 3 ... over the budget')."""
    from cupy_magic.run.batching import probe_rows

    v = fresh((21_000,), "float64")
    ip.user_ns["v"] = v
    ip.run_line_magic("vram_budget", "160KB")
    cell = ("def stacked(a):\n    parts = [a * k for k in range(24)]\n    return sum(parts)\n"
            "y = stacked(v)\n")
    report = gpu(ip, cell, "--to-host y --batch")
    want = sum(v * k for k in range(24))
    np.testing.assert_allclose(ip.user_ns["y"], want, rtol=1e-12)
    bp = report.batch
    assert bp.first_rows < probe_rows(21_000, 8, set(), None, 160_000)  # measured again
    assert report.peak_pool_bytes <= 160_000


def test_one_row_over_the_budget_is_refused_in_one_line(ip):
    """Measured again down to one row, which still goes over: refused in one line that
    names the budget and a larger one as the fix (the host's words: 'over the budget of';
    a GPU's: 'over the VRAM budget of')."""
    ip.user_ns["v"] = fresh((21_000,), "float64")
    ip.run_line_magic("vram_budget", "160KB")
    result = ip.run_cell("%%gpu --quiet\nbig = np.ones(40_000)\ny = v * big[0]\n")
    err = result.error_in_exec
    assert err is not None and "\n" not in str(err)
    assert "budget of 156.25 KiB" in str(err) and "%vram_budget" in str(err)
    assert "y" not in ip.user_ns


def test_cyclic_garbage_of_earlier_batches_does_not_take_a_run_over(ip):
    """Each batch runs in a copy of the namespace, which the functions the cell defines
    point back at: a cycle that only the garbage collector frees. How much of it awaits the
    collector depended on what ran before (when it last ran) and on the names left in the
    namespace; the host counted it all, so a run of many batches went over the budget
    (here with the collector off and 300 names left over from earlier cells). It is
    collected before a line is refused, as CuPy's pool collects before it gives up."""
    import gc

    v = fresh((21_000,), "float64")
    ip.user_ns.update({f"left_{k}": np.zeros(3) for k in range(300)})
    ip.user_ns["v"] = v
    ip.run_line_magic("vram_budget", "160KB")
    gc.disable()
    try:
        report = gpu(ip, "def scale(a):\n    return (a - 0.5) * 2\ny = scale(v)\n",
                     "--to-host y --batch --batch-rows 100")
    finally:
        gc.enable()
    np.testing.assert_array_equal(ip.user_ns["y"], (v - 0.5) * 2)
    assert report.batch.batches == 210 and report.peak_pool_bytes <= 160_000


@pytest.mark.parametrize(("line", "rows"), [("--batch-bytes 1KB", 2), ("--batch-rows 100", 100),
                                            ("--batch-bytes 40KB", 100)])
def test_a_batch_size_asked_for_bounds_every_batch_the_first_too(ip, poisoned, line, rows):
    """--batch-bytes bounds the first, measuring batch as --batch-rows does (it was 250 rows,
    98 KiB, under --batch-bytes 1KB); a (2000, 50) float64 row is 400 bytes."""
    x = fresh((2000, 50), "float64")
    ip.user_ns["x"] = x
    bp = gpu(ip, "y = x * 2\n", f"--batch {line}").batch
    assert bp.first_rows == bp.rows == rows
    assert bp.first_rows * bp.row_bytes <= (1000 if "1KB" in line else 40_000)
    np.testing.assert_array_equal(ip.user_ns["y"], x * 2)


def test_batch_bytes_under_one_row_is_refused_with_the_smallest_that_works(ip):
    ip.user_ns.update(x=fresh((2000, 50), "float64"), y="before")
    with pytest.raises(UsageError) as info:
        gpu(ip, "y = x * 2\n", "--batch --batch-bytes 100B")
    assert str(info.value) == (
        "--batch-bytes 100 B is less than one row of the batched inputs (400 B); the smallest "
        "that works is --batch-bytes 400B, one row a batch (BatchOptions(nbytes=400) from "
        "Python)")
    assert ip.user_ns["y"] == "before"


def test_the_reduce_partials_of_many_batches_do_not_pile_up_on_the_device(ip):
    """Each batch's --reduce partial was kept on the device until the join, and CuPy holds
    at least 512 bytes for each: 210 batches of three 32-byte partials held 315 KiB, so the
    run went over a 160KB budget in no line of the cell (parity corpus cell 185). They go to
    a host row per batch now: the run stays under the budget, each result equals NumPy's,
    stays on the device without --to-host, and the pool holds only the results after."""
    from cupy_magic import backend

    x = fresh((21_000, 4), "float64")
    ip.user_ns["x"] = x
    ip.run_line_magic("vram_budget", "160KB")
    be = backend.current()
    before = be.pool_used()
    report = gpu(ip, "s1 = x.sum(axis=0)\ns2 = (x ** 2).sum(axis=0)\nm = x.max(axis=0)\n",
                 "--batch --batch-rows 100 --reduce s1=sum,s2=sum,m=max")
    assert report.batch.batches == 210 and report.peak_pool_bytes <= 160_000
    for name, want in (("s1", x.sum(axis=0)), ("s2", (x ** 2).sum(axis=0)),
                       ("m", x.max(axis=0))):
        got = ip.user_ns[name]
        assert be.is_device_array(got), name  # on the host backend: a resident array
        np.testing.assert_allclose(be.to_host(got), want, rtol=1e-12, err_msg=name)
    results = sum(ip.user_ns[n].nbytes for n in ("s1", "s2", "m"))
    assert be.pool_used() - before <= (3 * 512 if be.is_gpu else results)


# --- work that does not grow with a batch's rows (run.inflight) ------------------------------


def _plus_one(ip, cell: str = "y = x + 1.0"):
    """A row-wise cell over 21,000 x 4 float64 (656 KiB) under 160 KB: batched on its own;
    its report's plan, after checking ``y`` against NumPy's."""
    x = ip.user_ns["x"] = fresh((21_000, 4), "float64")
    ip.run_line_magic("vram_budget", "160KB")
    report = gpu(ip, cell, "--to-host --timeline")
    np.testing.assert_array_equal(ip.user_ns["y"], x + 1.0)
    assert report.peak_pool_bytes <= 160_000
    return report.batch


def test_a_full_batch_s_fixed_work_the_first_batch_missed_keeps_fewer_in_flight(ip):
    """A temporary that only a batch of more rows than the measuring one makes (as CUB's
    workspace for a full reduction on the GPU) is measured on the first full batch, run
    alone: the run keeps as many batches in flight as fit the budget with it, says so, and
    gives NumPy's result. (On the CPU they run one after another either way.)"""
    plain = _plus_one(ip)
    assert plain.lanes == plain.streams == 3 and plain.rows > plain.first_rows
    assert not any("in flight:" in s for s in plain.lines())  # nothing beyond its rows
    ws = 4_000  # 32,000 bytes in each full batch: three batches and three of it do not fit
    bp = _plus_one(ip, f"ws = np.ones({ws} if x.shape[0] > {plain.first_rows} else 1)\n"
                       "y = x + ws[0]\ndel ws")
    assert bp.first_rows == plain.first_rows and bp.rows > bp.first_rows  # (the step's side)
    # most of the 32,000 bytes (the first batch's rate already counts a little of them)
    assert ws * 8 // 4 < bp.batch_fixed <= ws * 8 + 1024, bp.batch_fixed
    assert bp.lanes < bp.streams == 3
    assert bp.lanes * (bp.rows * bp.peak_row_bytes + bp.batch_fixed) <= 0.8 * 160_000
    line = next(s for s in bp.lines() if "in flight:" in s)
    assert f"{bp.lanes} of 3" in line and f"{bp.rows:,} rows" in line, line
    # the batches ran on those slots alone (the first two on slot 0, the second measured)
    slots = [slot for slot, _, _ in bp.timeline]
    assert len(slots) == bp.batches and slots[:2] == [0, 0]
    assert set(slots) == set(range(bp.lanes)), slots


def test_batches_kept_fewer_in_flight_are_resized_for_those_in_flight(ip):
    """Fewer in flight than --streams: the batches after the full one are sized for those in
    flight, not for --streams (a third of the rows each, three times the batches, before;
    each batch's fixed cost paid that much more often), and that size runs alone first."""
    plain = _plus_one(ip)  # sized for 3 in flight
    bp = _plus_one(ip, f"ws = np.ones(4_000 if x.shape[0] > {plain.first_rows} else 1)\n"
                       "y = x + ws[0]\ndel ws")
    assert bp.lanes == bp.sized_for == 1
    assert bp.rows >= 2 * plain.rows and bp.batches <= plain.batches // 2 + 1, (bp.rows,
                                                                               plain.rows)
    assert bp.rows * bp.peak_row_bytes + bp.batch_fixed <= 0.8 * 160_000  # the margin
    plan = next(s for s in bp.lines(host=True) if "batch plan:" in s)
    assert "beyond a full batch's rows: 1 batch in flight fits 80% of the free budget" in plan
    assert "sized as if 1 were in flight" in plan and "kept as if" not in plan
    slots = [slot for slot, _, _ in bp.timeline]
    assert len(slots) == bp.batches and set(slots) == {0}


@pytest.mark.parametrize("reduce", [False, True])
def test_a_full_batch_over_the_budget_runs_again_on_fewer_rows(ip, reduce):
    """--streams 1 sizes a batch to 80% of the free budget by the first batch's bytes per
    row; work beyond its rows that only a full batch makes (80,000 bytes here; CUB's for a
    full reduction on the GPU) took it over, and the cell was refused at batch 2 ('over the
    budget ... Try batching the data'). Now that batch runs again on half its rows (nothing
    of it kept), and the report says why; NumPy's results, the --reduce partials of the
    batch over the budget not counted twice, within the budget."""
    x = ip.user_ns["x"] = fresh((21_000, 4), "float64")
    ip.run_line_magic("vram_budget", "160KB")
    cell = "ws = np.ones(10_000 if x.shape[0] > 400 else 1)\ny = x + ws[0]\ndel ws\n"
    line = "--to-host --timeline --streams 1"
    if reduce:
        cell, line = cell + "s = y.sum(axis=0)\n", line + " --reduce s=sum"
    report = gpu(ip, cell, line)
    np.testing.assert_array_equal(ip.user_ns["y"], x + 1.0)
    if reduce:
        np.testing.assert_allclose(ip.user_ns["s"], (x + 1.0).sum(axis=0), rtol=1e-12)
    bp = report.batch
    assert report.peak_pool_bytes <= 160_000 and bp.streams == bp.lanes == 1
    plan = next(s for s in bp.lines(host=True) if "batch plan:" in s)
    assert "rows over the budget (work beyond its rows that the first batch did not show): " \
           "fewer rows, a size that ran alone within it" in plan, plan
    over = int(plan.split("a full batch of ")[1].split(" rows")[0].replace(",", ""))
    assert bp.first_rows < bp.rows <= over // 2 and bp.batch_fixed > 60_000
    assert len(bp.timeline) == bp.batches == 1 + -(-(21_000 - bp.first_rows) // bp.rows)



@pytest.mark.gpu
@pytest.mark.parametrize("graphs", ["", "--no-graph"])
def test_a_full_reduction_under_a_small_budget_is_not_refused(gip, graphs):
    """On the H100, ``mx = x.max()`` batched under 160 KB was refused now and then (test
    file order decided it): its 3 streams' arenas each needed CUB's workspace on top of their
    rows, which the measuring batch of 312 rows did not show. Now: NumPy's result, five
    times in a row, within the budget, and no cached blocks released to make room."""
    ip, be = gip, backend.current()
    from cupy._core import _accelerator  # CuPy's own switch (CUPY_ACCELERATORS)

    cub = _accelerator.ACCELERATOR_CUB in _accelerator.get_reduction_accelerators()
    x = fresh((21_000, 4), "float64")
    for _ in range(5):
        ip.user_ns["x"] = x
        ip.run_line_magic("vram_budget", "160KB")
        releases = be.releases
        report = gpu(ip, "mx = x.max()", f"--to-host --reduce mx=max {graphs}")
        assert float(host(ip.user_ns["mx"])) == x.max()
        assert report.batch is not None and report.peak_pool_bytes <= 160_000
        assert be.releases == releases, report.batch.lines()
        if cub:  # why: a full batch took CUB's workspace beyond its rows (37 KiB on the H100)
            bp = report.batch
            assert bp.batch_fixed > 0 and bp.lanes < 3, bp.lines()
            assert bp.sized_for == bp.lanes, bp.lines()  # and the batches were sized for them


@pytest.mark.gpu
def test_a_full_reduction_on_one_stream_under_a_small_budget_is_not_refused(gip):
    """--streams 1 under 100 KB: a batch of 80% of the free budget by the measuring batch's
    bytes per row, plus CUB's workspace for x.max() (42 KB on the H100), is over the budget:
    that batch runs again on fewer rows (its partial not kept), and the cell gives NumPy's
    result within the budget."""
    ip, be = gip, backend.current()
    from cupy._core import _accelerator

    cub = _accelerator.ACCELERATOR_CUB in _accelerator.get_reduction_accelerators()
    x = ip.user_ns["x"] = fresh((21_000, 4), "float64")
    ip.run_line_magic("vram_budget", "100KB")
    before = be.pool_used()
    report = gpu(ip, "mx = x.max()\nmn = x.min()", "--to-host --reduce mx=max,mn=min --streams 1")
    assert float(host(ip.user_ns["mx"])) == x.max() and float(host(ip.user_ns["mn"])) == x.min()
    bp = report.batch
    assert bp is not None and report.peak_pool_bytes <= 100_000, bp.lines()
    assert be.pool_used() - before <= 2 * 512
    if cub:
        assert "rows over the budget" in next(s for s in bp.lines() if "plan:" in s), bp.lines()


def _measured(monkeypatch) -> list[tuple[int, str]]:
    """The full batches run alone and measured (run.inflight._measure, which still runs):
    (rows, "over" or "ok") in turn."""
    from cupy_magic.run import inflight

    log: list[tuple[int, str]] = []
    measure = inflight._measure

    def logged(run, i, a, rows, peak_row, retry):
        over = measure(run, i, a, rows, peak_row, retry)
        log.append((rows, "over" if over else "ok"))
        return over

    monkeypatch.setattr(inflight, "_measure", logged)
    return log


def _stepped(big: int, mid: int, above: int, lo: int = 320) -> str:
    """A row-wise cell whose batches of more than ``lo`` rows allocate ``mid`` float64 and
    those of more than ``above`` rows ``big``, beyond their rows."""
    return (f"n = x.shape[0]\nws = np.ones({big} if n > {above} else {mid} if n > {lo} else 1)\n"
            "y = x + ws[0]\ndel ws, n\n")


def test_a_resized_batch_over_the_budget_gives_way_to_the_last_size_that_ran(ip, monkeypatch):
    """Batches resized for fewer in flight, larger, can take more beyond their rows than the
    full batch measured (CUB's workspace does not grow with the rows; other work may): that
    size goes over the budget, and the run goes on with the last size that ran alone within
    it, measuring no more (before the fix: halved, below it, and grown again, three times
    over the budget in one run)."""
    if backend.current().is_gpu:
        pytest.skip("sizes set for the CPU fallback's bytes per row (the GPU's: the x.max() tests)")
    log = _measured(monkeypatch)
    x = ip.user_ns["x"] = fresh((21_000, 4), "float64")
    ip.run_line_magic("vram_budget", "160KB")
    report = gpu(ip, _stepped(16_000, 9_000, 500), "--to-host --streams 3")
    np.testing.assert_array_equal(ip.user_ns["y"], x + 1.0)
    assert [state for _, state in log] == ["ok", "over"], log
    bp = report.batch
    assert bp.rows == log[0][0] < log[1][0] and bp.lanes == 1 and bp.sized_for == 0
    assert report.peak_pool_bytes <= 160_000
    assert "a full batch of" in next(s for s in bp.lines(host=True) if "batch plan:" in s)


def test_a_full_batch_over_its_share_of_the_margin_is_made_smaller(ip, monkeypatch):
    """A full batch that ran alone within the budget but took more than 80% of it (work
    beyond its rows) was kept at that size, and a later batch of it went over the budget
    now and then; the batches are now sized so that one fits the margin with that work,
    and that size runs alone first."""
    if backend.current().is_gpu:
        pytest.skip("sizes set for the CPU fallback's bytes per row (the GPU's: the x.max() tests)")
    log = _measured(monkeypatch)
    x = ip.user_ns["x"] = fresh((21_000, 4), "float64")
    ip.run_line_magic("vram_budget", "160KB")
    report = gpu(ip, _stepped(13_000, 5_000, 450), "--to-host --streams 2")
    np.testing.assert_array_equal(ip.user_ns["y"], x + 1.0)
    bp = report.batch
    assert [state for _, state in log] == ["ok", "ok"] and log[1][0] < log[0][0], log
    assert bp.rows == log[1][0] and bp.lanes == bp.sized_for == 1
    assert bp.rows * bp.peak_row_bytes + bp.batch_fixed <= 0.8 * 160_000


def test_more_partial_rows_keeps_the_partials_kept_so_far():
    """Batches resized into more of them: each --reduce partial's host rows are made again,
    longer, those kept so far copied over and the partials pointing at them; a partial kept
    elsewhere (a device array) is left as it was."""
    from cupy_magic.backend.streams import HostEngine
    from cupy_magic.run.batchjoin import BatchJoin

    run = BatchJoin.__new__(BatchJoin)
    run.eng = HostEngine(1, np.empty)
    buf, other = np.arange(6.0).reshape(3, 2), np.ones(2)
    run.partial_rows = {"s": buf}
    run.partials = {"s": [(buf[0:1].reshape(2), 5), (buf[1:2].reshape(2), 5), (other, 3)]}
    run.more_partial_rows(5)
    rows = run.partial_rows["s"]
    assert rows.shape == (5, 2) and rows[:3].tolist() == buf.tolist()
    parts = run.partials["s"]
    assert all(np.shares_memory(v, rows) for v, _ in parts[:2])
    assert [v.tolist() for v, _ in parts[:2]] == [[0.0, 1.0], [2.0, 3.0]]
    assert parts[2][0] is other and [n for _, n in parts] == [5, 5, 3]
    run.more_partial_rows(4)  # rows enough: kept
    assert run.partial_rows["s"] is rows


def test_what_a_cell_does_outside_itself_counts_the_batch_run_again(ip):
    """A full batch over the budget runs again on fewer rows: what the cell did outside
    itself before it went over happened again, and the report's note counts every run
    (it counted the batches, one fewer than the appends)."""
    x = ip.user_ns["x"] = fresh((21_000, 4), "float64")
    ip.user_ns["hist"] = hist = []
    ip.run_line_magic("vram_budget", "160KB")
    report = gpu(ip, "hist.append(1)\n" + _stepped(10_000, 10_000, 400),
                 "--to-host --streams 1")
    np.testing.assert_array_equal(ip.user_ns["y"], x + 1.0)
    assert "over the budget" in next(s for s in report.batch.lines() if "plan:" in s)
    assert len(hist) == report.batch.batches + 1 == report.batch_runs
    [note] = [n for n in report.notes if "once per batch" in n]
    assert f"({len(hist)} times)" in note, note
