"""Batched cells whose full batches replay as CUDA graphs, through a real shell on the GPU
(issue 20, point 2): results equal NumPy's and the run launched op by op (--no-graph) bit
for bit, the report says what replayed, a cell a graph cannot hold falls back with its
reason, and the pool is left as without graphs. Written without a GPU: run on the H200."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import cupy_magic
from cupy_magic import backend
from cupy_magic.run.graphplan import REPLAY_GAIN

pytestmark = pytest.mark.gpu

PRICING = ("r, v = 0.02, 0.3\n"
           "d1 = (np.log(S / K) + (r + 0.5 * v * v) * T) / (v * np.sqrt(T))\n"
           "d2 = d1 - v * np.sqrt(T)\n"
           "cdf1 = 0.5 * (1 + np.tanh(0.7978845608 * (d1 + 0.044715 * d1 ** 3)))\n"
           "cdf2 = 0.5 * (1 + np.tanh(0.7978845608 * (d2 + 0.044715 * d2 ** 3)))\n"
           "call = S * cdf1 - K * np.exp(-r * T) * cdf2\n")


@pytest.fixture
def gip(shell, monkeypatch: pytest.MonkeyPatch) -> Iterator:
    """The shell on the GPU, under the issue's 16 MB budget (batches of ~37k float64 rows
    of three inputs, whose launches cost several times their transfer)."""
    from conftest import loaded

    for ip in loaded(shell, monkeypatch, "cupy"):
        assert backend.current().is_gpu
        ip.run_line_magic("vram_budget", "16MB")
        try:
            yield ip
        finally:
            ip.run_line_magic("vram_budget", "off")


def _run(ip, cell: str, line: str):
    ip.run_cell_magic("gpu", f"--quiet {line}", cell)
    return cupy_magic.last_report()


def _both(ip, cell: str, line: str, names: tuple[str, ...]):
    """The cell with graphs and with --no-graph: both reports and both runs' values."""
    pool_before = backend.current().pool_used()
    with_graphs = _run(ip, cell, line)
    got = {n: np.array(ip.user_ns[n]) for n in names}
    pool_graphs = backend.current().pool_used()
    launched = _run(ip, cell, f"{line} --no-graph")
    want = {n: np.array(ip.user_ns[n]) for n in names}
    pool_launched = backend.current().pool_used()
    # the pool is left as without graphs (results are on the host)
    assert pool_graphs == pool_before == pool_launched
    for n in names:  # the replays give the launched run's bits
        assert got[n].dtype == want[n].dtype and got[n].tobytes() == want[n].tobytes(), n
    return with_graphs, launched, got


def _graph_line(report) -> str:
    return next(line.strip() for line in report.batch.lines() if "batch graphs:" in line)


def _replayed(report) -> None:
    note = report.batch.graph
    assert note is not None and note.used, _graph_line(report)
    assert note.captured == report.batch.streams and note.why_not == ""
    assert note.replayed >= 8 and note.replay_seconds <= REPLAY_GAIN * note.launched_seconds
    assert _graph_line(report).startswith(
        f"batch graphs: {note.replayed} of {report.batch.batches} batches replayed as CUDA "
        f"graphs ({note.captured} captured")


def test_gpu_pricing_replays_and_equals_numpy(gip):
    rng = np.random.default_rng(0)
    n = 2_000_000  # 48 MB of input under 16 MB: ~50 batches
    inputs = {k: rng.random(n) + 0.5 for k in "SKT"}
    gip.user_ns.update(inputs)
    graphs, launched, got = _both(gip, PRICING, "--to-host call", ("call",))
    _replayed(graphs)
    assert "fixed cost per batch" in str(graphs)
    assert launched.batch.graph is not None and not launched.batch.graph.used
    assert _graph_line(launched) == "batch graphs: not used: off (--no-graph; " \
        "BatchOptions(graph=False))"
    ref = {"np": np, **inputs}
    exec(PRICING, ref)
    np.testing.assert_allclose(got["call"], ref["call"], rtol=1e-9, atol=1e-12)


def test_gpu_row_wise_normalisation_replays_and_equals_numpy(gip):
    x = np.random.default_rng(1).random((400_000, 16)).astype(np.float32)
    gip.user_ns["x"] = x
    cell = ("mu = x.mean(axis=1, keepdims=True)\nsd = x.std(axis=1, keepdims=True)\n"
            "z = (x - mu) / (sd + 1e-6)\n")
    graphs, _, got = _both(gip, cell, "--batch --to-host z", ("z",))
    _replayed(graphs)
    mu = x.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(got["z"], (x - mu) / (x.std(axis=1, keepdims=True) + 1e-6),
                               rtol=1e-4, atol=1e-5)


def _sines(y):
    for _ in range(10):
        y = np.sin(y) * 0.5 + 0.25
    return y


# ten rounds of three launches: a batch's launches cost several times its transfer, so that
# its replays are faster beyond doubt (with four launches a float64 batch's copies took
# about as long as its launches, and the check's timing could keep no graph)
SINES = "for _ in range(10):\n    y = np.sin(y) * 0.5 + 0.25\n"


def test_gpu_a_reduce_sum_cell_replays_its_partials_and_equals_numpy(gip):
    # 4M rows: ~30 full batches of ~133k rows under 16 MB (at 3M, 16 of ~178k rows left 13
    # replays for the 12 that three streams need, one batch from not trying graphs at all)
    x = np.random.default_rng(2).random(4_000_000)
    gip.user_ns["x"] = x
    cell = "y = np.sqrt(x) * 2 + 1\n" + SINES + "total = y.sum()\n"
    graphs, _, got = _both(gip, cell, "--batch --reduce total=sum --to-host", ("y", "total"))
    _replayed(graphs)
    want = _sines(np.sqrt(x) * 2 + 1)
    np.testing.assert_allclose(got["y"], want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got["total"], want.sum(), rtol=1e-12)


# why checked graphs may be refused without the run failing: the pool gave blocks back (a
# graph's buffers may have been among them), or the replays were no clear gain
SAFE_REFUSALS = ("the pool released cached blocks", "replayed ")


def test_gpu_a_row_free_array_is_checked_as_the_launched_batches_keep_it(gip):
    """w depends on no row: the launched batches keep it as a host array compared batch by
    batch, and the check compares the captured batch's w the same way (not as one number,
    which raised for an array of four and failed the run). The run succeeds with NumPy's
    and --no-graph's results; whether it replays is not the point: on the H200 (2026-12-05)
    the pool released cached blocks during the checks, and refusing graphs then is safe."""
    x = np.random.default_rng(5).random(4_000_000)
    gip.user_ns["x"] = x
    cell = "w = np.linspace(0.5, 2.0, 4) ** 2\ny = x * w[1] + w[3]\n" + SINES
    graphs, _, got = _both(gip, cell, "--batch --to-host", ("y", "w"))
    if graphs.batch.graph.used:
        _replayed(graphs)
    else:  # checked, then refused for a known safe reason
        why = graphs.batch.graph.why_not
        assert why.startswith(SAFE_REFUSALS), _graph_line(graphs)
    w = np.linspace(0.5, 2.0, 4) ** 2
    np.testing.assert_allclose(got["w"], w, rtol=1e-15)
    np.testing.assert_allclose(got["y"], _sines(x * w[1] + w[3]), rtol=1e-12, atol=1e-15)


def test_gpu_a_cell_with_a_host_sync_falls_back_with_the_reason(gip):
    x = np.random.default_rng(3).random(2_000_000)
    gip.user_ns["x"] = x
    cell = "y = x * 2\nif float(x.max()) > 2:\n    y = y + 1\n"
    report = _run(gip, cell, "--batch --to-host y")
    np.testing.assert_array_equal(gip.user_ns["y"], x * 2)
    assert not report.batch.graph.used
    assert _graph_line(report).startswith("batch graphs: not used: the cell may wait for the "
                                          "device at line 2")


def test_gpu_a_capture_that_fails_ends_cleanly_and_the_run_goes_on_launched(gip):
    """Indexing by a Python list makes CuPy copy the list to the device through pinned
    memory, which the capture refuses (a graph would read that batch's buffer again).
    2M rows: ~30 full batches of ~66k rows (at 600k, 8 were too few to try graphs at all,
    and the report gave that reason instead)."""
    x = np.random.default_rng(4).random((2_000_000, 4))
    gip.user_ns["x"] = x
    before = backend.current().pool_used()
    report = _run(gip, "y = x[:, [0, 2]] * 2\n", "--batch --to-host y")
    np.testing.assert_array_equal(gip.user_ns["y"], x[:, [0, 2]] * 2)
    assert backend.current().pool_used() == before
    note = report.batch.graph
    assert not note.used and note.captured == 0
    assert _graph_line(report).startswith("batch graphs: not used: the cell's work could not "
                                          "be captured")
    # the pinned allocator is CuPy's default again
    import cupy

    cupy.asarray([1.0, 2.0]).get()


def test_gpu_an_input_changed_in_place_by_replays_is_the_user_s_array_after(gip):
    """x changed in place by ten rounds of in-place launches: the replays write their rows
    into the captured input buffer, downloaded into the gathered rows, then into the user's
    array, which an earlier view sees; bit for bit the run launched op by op."""
    rng = np.random.default_rng(6)
    base = rng.random(4_000_000)
    cell = "for _ in range(10):\n    np.sin(x, out=x)\n    x *= 0.5\n    x += 0.25\n"
    runs = {}
    for line in ("--batch --batch-rows 100000", "--batch --batch-rows 100000 --no-graph"):
        x = base.copy()
        gip.user_ns.update(x=x, view=x[:1000], held=[x])
        report = _run(gip, cell, line)
        assert gip.user_ns["x"] is x and gip.user_ns["held"][0] is x
        np.testing.assert_array_equal(gip.user_ns["view"], x[:1000])
        assert report.batch.in_place == ("x",)
        runs[line] = (report, x)
    graphs, x = runs["--batch --batch-rows 100000"]
    if graphs.batch.graph.used:
        _replayed(graphs)
    else:
        assert graphs.batch.graph.why_not.startswith(SAFE_REFUSALS), _graph_line(graphs)
    assert x.tobytes() == runs["--batch --batch-rows 100000 --no-graph"][1].tobytes()
    want = base.copy()
    for _ in range(10):
        want = np.sin(want) * 0.5 + 0.25
    np.testing.assert_allclose(x, want, rtol=1e-12, atol=1e-15)
