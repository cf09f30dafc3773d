"""%%gpu cells over Dask arrays on a real LocalCluster of 2 worker processes (CPU fallback):
the same results as the cell run in this kernel, blocks per worker, a failing block that
leaves nothing behind, and one-line refusals with the fix."""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import cell_error, failed_block
from IPython.core.error import UsageError
from test_parity import CHAINS

import cupy_magic

da = pytest.importorskip("dask.array")


def cell_tasks(client) -> list[str]:
    """The scheduler's tasks made for %%gpu cells (their keys start with cupy-magic-)."""
    return client.run_on_scheduler(
        lambda dask_scheduler: [str(k) for k in dask_scheduler.tasks if "cupy-magic" in str(k)])


def worker_keys(client) -> int:
    """Keys the workers hold, in all."""
    return sum(client.run(lambda dask_worker: len(dask_worker.data)).values())


def _in_kernel(ip, body: str, line: str, names: list[str]) -> dict:
    ip.run_cell_magic("gpu", f"--quiet --to-host {line}".strip(), body)
    return {n: ip.user_ns[n] for n in names}


def _settled(client, before: int, timeout: float = 10.0) -> tuple[list[str], int]:
    """Wait for the scheduler to forget the cell's tasks and the workers their keys."""
    end = time.monotonic() + timeout
    while True:
        tasks, keys = cell_tasks(client), worker_keys(client)
        if (not tasks and keys <= before) or time.monotonic() > end:
            return tasks, keys
        time.sleep(0.1)


@pytest.fixture
def data(ip):
    rng = np.random.default_rng(0)
    x = rng.random((1000, 4))
    ip.user_ns.update(x=x, xd=da.from_array(x, chunks=(300, 4)))
    return x


def test_element_wise_equals_the_kernel_and_stays_a_dask_array(ip, joined, data):
    body = "y = np.sqrt(XX) * 2 + 1\n"
    ref = _in_kernel(ip, body.replace("XX", "x"), "", ["y"])["y"]
    ip.run_cell_magic("gpu", "--quiet", body.replace("XX", "xd"))
    y = ip.user_ns["y"]
    assert isinstance(y, da.Array) and y.chunks[0] == (300, 300, 300, 100)
    # the blocks stay on the workers' devices: CuPy on a GPU worker (an outside cluster's
    # workers pick their backend themselves), NumPy on a CPU one
    computed = y.compute()
    np.testing.assert_array_equal(getattr(computed, "get", lambda: computed)(), ref)
    rep = cupy_magic.last_report()
    assert rep.batch.blocks == 4 and sum(w.blocks for w in rep.batch.workers) == 4
    assert len(rep.batch.workers) == 2  # both processes ran blocks
    assert rep.batch.kept == ("y",)
    assert any("cluster worker tcp://127.0.0.1" in line for line in rep.text_lines())


def test_row_wise_and_to_host_equal_the_kernel(ip, joined, data):
    body = "m = XX - XX.mean(axis=1, keepdims=True)\nn = np.linalg.norm(XX, axis=1)\n"
    ref = _in_kernel(ip, body.replace("XX", "x"), "", ["m", "n"])
    ip.run_cell_magic("gpu", "--quiet --to-host", body.replace("XX", "xd"))
    for name in ("m", "n"):
        assert isinstance(ip.user_ns[name], np.ndarray)
        np.testing.assert_allclose(ip.user_ns[name], ref[name], rtol=1e-12)


@pytest.mark.parametrize("rule", ["sum", "min", "max", "mean", "any", "all", "concat"])
def test_reduced_results_equal_the_batched_kernel_run(ip, joined, data, rule):
    body = ("t = (XX > 0.5).sum(axis=0) if RULE in ('sum', 'mean') else XX.max(axis=0)\n"
            "t = (XX > 0.5).any(axis=0) if RULE in ('any', 'all') else t\n")
    body = body.replace("RULE", repr(rule))
    ip.run_cell_magic("gpu", f"--quiet --to-host --batch-rows 300 --reduce t={rule}",
                      body.replace("XX", "x"))
    ref = ip.user_ns.pop("t")
    ip.run_cell_magic("gpu", f"--quiet --to-host --reduce t={rule}", body.replace("XX", "xd"))
    np.testing.assert_allclose(ip.user_ns["t"], ref)
    assert cupy_magic.last_report().batch.reduced == {"t": rule}


def test_cluster_flag_chunks_and_scatters_numpy_inputs_and_shares_the_small_one(
        ip, joined, data):
    ip.user_ns["w"] = np.arange(4.0)
    body = "y = x * w\ns = y.sum()\n"
    ref = _in_kernel(ip, body, "", ["y", "s"])
    ip.user_ns.pop("y"), ip.user_ns.pop("s")
    ip.run_cell_magic("gpu", "--quiet --to-host --cluster --batch-rows 250 --reduce s=sum",
                      body)
    np.testing.assert_allclose(ip.user_ns["y"], ref["y"])
    np.testing.assert_allclose(ip.user_ns["s"], ref["s"])
    info = cupy_magic.last_report().batch
    assert info.batched == ("x",) and info.shared == ("w",) and info.blocks == 4
    # the workers share this host's memory: x is cut into blocks that go through the
    # shared-memory slots (device slots by CUDA IPC where the workers share this kernel's
    # GPU), not scattered (test_cluster_shm.py compares both paths)
    assert info.transport.kind in ("shm", "ipc") and info.scattered == ()


def test_a_failing_block_commits_nothing_names_block_worker_line_and_leaves_nothing(
        ip, joined, data):
    before = worker_keys(joined)
    ip.user_ns.pop("y", None)
    body = "y = xd * 2\nif len(xd) == 100:\n    raise ValueError('bad rows')\nz = y + 1\n"
    with pytest.raises(ValueError, match="bad rows") as info:
        cupy_magic.run_cell(body, ip.user_ns, filename="<cluster-fail>")
    notes, filename, line = failed_block(info.value)
    assert "block 4 of 4 (rows 900:1,000) failed on worker tcp://127.0.0.1:" in notes
    assert "nothing committed" in notes
    assert filename == "<cluster-fail>" and line == 3
    assert "y" not in ip.user_ns and "z" not in ip.user_ns
    tasks, keys = _settled(joined, before)
    assert tasks == [] and keys <= before


def test_bad_inputs_are_one_line_errors_with_the_fix(ip, joined, data):
    ip.user_ns["xc"] = da.from_array(data, chunks=(250, 2))
    with pytest.raises(UsageError, match=r"xc = xc.rechunk\(\{1: -1\}\)") as e1:
        ip.run_cell_magic("gpu", "--quiet", "y = xc + 1\n")
    with pytest.raises(UsageError, match=r"--reduce s=sum") as e2:
        ip.run_cell_magic("gpu", "--quiet", "s = xd.sum()\n")
    for err in (e1, e2):
        assert "\n" not in str(err.value)
    assert "s" not in ip.user_ns
    assert cell_tasks(joined) == [] or _settled(joined, 10**9)[0] == []


def test_a_dask_input_of_unknown_chunk_sizes_is_one_line_and_its_fix_runs(ip, joined, data):
    ip.user_ns["xm"] = xm = ip.user_ns["xd"][ip.user_ns["xd"][:, 0] > 0.5]  # a boolean mask
    with pytest.raises(UsageError, match=r"xm = xm.compute_chunk_sizes\(\)") as err:
        ip.run_cell_magic("gpu", "--quiet --to-host", "y = xm * 2\n")
    assert "\n" not in str(err.value) and "y" not in ip.user_ns
    ip.user_ns["xm"] = xm.compute_chunk_sizes()
    ip.run_cell_magic("gpu", "--quiet --to-host", "y = xm * 2\n")
    np.testing.assert_array_equal(ip.user_ns.pop("y"), data[data[:, 0] > 0.5] * 2)


def test_a_dask_input_without_a_cluster_says_how_to_start_one(ip, data):
    cupy_magic.use_cluster("off")
    with pytest.raises(UsageError, match=r"no cluster is in use; start one with "
                                         r"%gpu_cluster local") as err:
        ip.run_cell_magic("gpu", "--quiet", "y = xd + 1\n")
    assert "\n" not in str(err.value) and "xd.compute()" in str(err.value)


ANNOTATED = "def f(x: int) -> int:\n    return x\nann = f.__annotations__\ny = XX * 2\n"


def test_annotations_on_the_workers_are_the_kernels_with_its_future_flags(
        ip, joined, data, plain_flags):
    # worker.py imports annotations from __future__: the blocks must not compile under it
    for future, expected in ((False, {"x": int, "return": int}),
                             (True, {"x": "int", "return": "int"})):
        if future:
            assert ip.run_cell("from __future__ import annotations").success
        assert ip.run_cell(ANNOTATED.replace("XX", "x")).success
        plain = ip.user_ns.pop("ann")
        kernel = _in_kernel(ip, ANNOTATED.replace("XX", "x"), "", ["ann"])["ann"]
        ip.user_ns.pop("ann")
        ip.run_cell_magic("gpu", "--quiet", ANNOTATED.replace("XX", "xd"))
        assert cupy_magic.last_report().batch.blocks == 4  # ran on the workers
        assert ip.user_ns["ann"] == kernel == plain == expected


@pytest.mark.parametrize("body, line", [("y = = XX\n", 1), ("y = XX * 2\nreturn y\n", 2)])
@pytest.mark.parametrize("how", ["--cluster", "dask"])
def test_a_syntax_error_is_reported_before_the_missing_cluster(ip, data, body, line, how):
    cupy_magic.use_cluster("off")
    source = body.replace("XX", "x" if how == "--cluster" else "xd")
    flags = "--quiet --cluster" if how == "--cluster" else "--quiet"
    with pytest.raises(UsageError, match=rf"syntax error in the %%gpu cell, line {line}: ") \
            as err:
        ip.run_cell_magic("gpu", flags, source)
    assert "cluster" not in str(err.value)
    with pytest.raises(UsageError, match=r"^--cluster asks for a cluster and no cluster is "
                                         r"in use; start one with %gpu_cluster local"):
        ip.run_cell_magic("gpu", "--quiet --cluster", "y = x * 2\n")  # no syntax error
    assert "y" not in ip.user_ns


def test_a_syntax_error_with_a_cluster_in_use_sends_nothing(ip, joined, data):
    with pytest.raises(UsageError, match=r"syntax error in the %%gpu cell, line 2: "
                                         r"'return' outside function"):
        ip.run_cell_magic("gpu", "--quiet", "y = xd * 2\nreturn y\n")
    assert cell_tasks(joined) == [] and "y" not in ip.user_ns


def test_a_cluster_that_cannot_be_reached_is_one_line_with_the_fix(ip):
    t0 = time.monotonic()
    with pytest.raises(UsageError, match=r"cannot reach a Dask scheduler at "
                                         r"tcp://127.0.0.1:9 within 2 s") as err:
        ip.run_line_magic("gpu_cluster", "tcp://127.0.0.1:9 --timeout 2")
    assert "\n" not in str(err.value) and "%gpu_cluster local" in str(err.value)
    assert time.monotonic() - t0 < 30
    with pytest.raises(UsageError, match=r"'localhost:8786' has no scheme; a scheduler address "
                                         r"is written with one, e\.g\. tcp://localhost:8786"):
        ip.run_line_magic("gpu_cluster", "localhost:8786")
    with pytest.raises(UsageError, match="'lcoal' is not a scheduler address"):
        ip.run_line_magic("gpu_cluster", "lcoal")


def worker_copies(client) -> dict[str, int]:
    """Shared device copies each worker holds now."""
    from cupy_magic.cluster.worker import shared_copies

    return client.run(shared_copies)


def test_a_shared_input_is_copied_to_each_worker_once_per_cell_and_dropped_after(
        ip, joined, data):
    ip.user_ns.update(w=np.arange(4.0), xs=da.from_array(data, chunks=(100, 4)))
    body = "y = XX * w + w.sum()\n"
    ref = _in_kernel(ip, body.replace("XX", "x"), "", ["y"])["y"]
    for _ in range(2):  # a second cell's w is a copy of its own, not the first one's key
        ip.run_cell_magic("gpu", "--quiet --to-host", body.replace("XX", "xs"))
        np.testing.assert_array_equal(ip.user_ns["y"], ref)
        info = cupy_magic.last_report().batch
        assert info.blocks == 10 and info.shared == ("w",)
        uploads = {w.worker: w.uploads for w in info.workers}
        assert uploads and all(n == 1 for n in uploads.values()), uploads  # not one per block
        assert any("2 device copies for 10 blocks" in line or "1 device copy for 10 blocks"
                   in line for line in cupy_magic.last_report().text_lines())
        assert sum(worker_copies(joined).values()) == 0  # dropped when the cell ended


def test_a_shared_input_the_cell_changes_gets_a_copy_per_block(ip, joined, data):
    ip.user_ns.update(w=np.arange(4.0), xs=da.from_array(data, chunks=(250, 4)))
    ip.run_cell_magic("gpu", "--quiet --to-host --reduce w=max",
                      "w += 1\ny = xs * w\n")
    np.testing.assert_array_equal(ip.user_ns["y"], data * (np.arange(4.0) + 1))
    info = cupy_magic.last_report().batch
    assert sum(w.uploads for w in info.workers) == info.blocks == 4


def test_a_failing_cell_drops_the_workers_shared_copies(ip, joined, data):
    ip.user_ns.update(w=np.arange(4.0))
    body = "y = xd * w\nif len(xd) == 100:\n    raise ValueError('bad rows')\n"
    with pytest.raises(ValueError, match="bad rows"):
        cupy_magic.run_cell(body, ip.user_ns, filename="<cluster-shared-fail>")
    assert "y" not in ip.user_ns
    end = time.monotonic() + 10
    while sum(worker_copies(joined).values()) and time.monotonic() < end:
        time.sleep(0.1)
    assert sum(worker_copies(joined).values()) == 0


@pytest.mark.parametrize("line, name", [("--quiet --to-host", "xd"),
                                        ("--quiet --to-host --cluster", "x")])
def test_a_cell_that_mixes_its_blocks_rows_is_refused_before_any_task(ip, joined, data, line,
                                                                      name):
    """Blocks see only their rows: ``x - x.mean()`` would subtract each block's own mean."""
    before = len(cell_tasks(joined))
    with pytest.raises(UsageError) as info:
        ip.run_cell_magic("gpu", line, f"z = {name} - {name}.mean()\n")
    msg = str(info.value)
    assert "\n" not in msg and "batches would give other results than NumPy" in msg
    assert f"line 1 `z = {name} - {name}.mean()`" in msg and "in blocks" in msg
    assert "z" not in ip.user_ns and len(cell_tasks(joined)) == before


def test_a_cluster_run_says_the_shells_ast_transformers_are_not_applied(ip, joined, data,
                                                                       monkeypatch):
    """The workers compile the cell's text; a kernel's AST transformers stay in it."""
    import ast

    monkeypatch.setattr(ip, "ast_transformers", [ast.NodeTransformer()])
    assert ip.run_cell("%%gpu --quiet\ny = xd * 2\n").success
    notes = cupy_magic.last_report().notes
    assert any("AST transformers (ast_transformers) are not applied" in n for n in notes)
    monkeypatch.setattr(ip, "ast_transformers", [])
    assert ip.run_cell("%%gpu --quiet\ny = xd * 2\n").success
    assert not any("ast_transformers" in n for n in cupy_magic.last_report().notes)


@pytest.mark.parametrize("chain", CHAINS)
def test_a_chained_error_on_a_worker_keeps_its_cause_and_context_as_in_a_plain_cell(
        ip, joined, data, capsys, chain):
    """Pickled back from the worker, the cell's error is still chained as the cell raised
    it: the traceback shows the error it was handling, at its line, as a plain cell's does."""
    body, sentence = CHAINS[chain]
    seen = []
    for cell in ("y = x + 1\n" + body, "%%gpu --quiet\ny = xd + 1\n" + body):
        capsys.readouterr()
        err = ip.run_cell(cell, store_history=True).error_in_exec
        shown = capsys.readouterr().out
        seen.append((type(err), type(err.__cause__), type(err.__context__),
                     err.__suppress_context__, sentence is not None and sentence in shown,
                     "KeyError" in shown, "----> 3" in shown.split("ValueError")[0]))
    assert seen[1] == seen[0]
    assert seen[0][4] == (sentence is not None)


def test_an_error_of_the_extensions_own_on_a_worker_is_the_kernels_one_line(ip, joined,
                                                                           data):
    """A ``CupyLimit`` raised in a block comes back as itself, its one line as the kernel's
    run gives it; it pickled as a bare ``Exception`` of its repr before (its keyword-only
    arguments), seen on the H100 as ``Exception: BlockFailed('block 2 of 7 ...')``."""
    from cupy_magic import backend
    from cupy_magic.compat.advice import CupyLimit

    if backend.current().is_gpu:
        pytest.skip("a device array has .get(); the pickling is the same code on both")
    body = "y = {x} + 1\nz = y.get()\n"
    errors = [ip.run_cell(f"%%gpu --quiet\n{body.format(x=name)}").error_in_exec
              for name in ("x", "xd")]
    assert all(isinstance(e, CupyLimit) for e in errors), errors
    assert type(errors[1]) is type(errors[0]) and str(errors[1]) == str(errors[0])
    assert "line 2 `z = y.get()`" in str(errors[1]) and "\n" not in str(errors[1])
    assert (errors[1].function, errors[1].line, errors[1].kind) == \
        (errors[0].function, errors[0].line, errors[0].kind)
    assert "y" not in ip.user_ns and "z" not in ip.user_ns


def test_the_progress_of_a_cluster_cell_counts_blocks_as_its_report_does(ip, joined, data):
    from cupy_magic.run import progress

    seen: list = []
    progress.add_listener(seen.append)
    try:
        ip.run_cell_magic("gpu", "--quiet --to-host", "y = np.sqrt(xd) * 2\n")
    finally:
        progress.remove_listener(seen.append)
    counted = [s for s in seen if s.batches_total]
    assert counted and {s.unit for s in counted} == {"block"}
    assert counted[-1].batches_done == counted[-1].batches_total == 4  # xd's 4 chunks
    assert counted[-1].units == "blocks"


def test_a_reduced_scalar_is_reported_as_the_numpy_scalar_it_is(ip, joined, data):
    """``--reduce s=sum`` over blocks gives a NumPy scalar, as a plain cell's ``x.sum()``:
    the report says so, as the in-kernel batched run's does, not "a Python object"."""
    for line in ("--batch --batch-rows 250", "--cluster --batch-rows 250"):
        ip.run_cell_magic("gpu", f"--quiet {line} --reduce s=sum", "s = x.sum()\n")
        if not isinstance(ip.user_ns["s"], np.generic):  # a GPU's run may keep a 0-d array
            continue
        text = "\n".join(cupy_magic.last_report().text_lines())
        assert "s: numpy.float64 on the host (a NumPy scalar, where CuPy gives a 0-d " \
            "device array)" in text, text


@pytest.mark.parametrize(("last", "noted"), [("print('done')", False), ("y.sum()", True)])
def test_a_cluster_run_notes_the_last_expression_only_where_a_plain_cell_shows_one(
        ip, joined, data, last, noted):
    ip.run_cell_magic("gpu", "--quiet --cluster --batch-rows 250", f"y = x * 2\n{last}\n")
    said = [n for n in cupy_magic.last_report().notes if "last expression" in n]
    assert said == (["the cell's last expression is not shown in a cluster run (each block "
                     "has its own); assign it and join it with --reduce"] if noted else [])


@pytest.mark.parametrize(("body", "name"), [("y = xd\ny += 1\n", "xd"),
                                            ("z = xd * 2\nv = w\nv += 1\n", "w")])
def test_a_change_through_another_name_is_refused_on_the_cluster(ip, joined, data, body, name):
    """A plain cell leaves the input changed; the blocks cannot write it back: refused in one
    line naming the input, nothing committed (before, the change was silently dropped)."""
    w = np.arange(4.0)
    ip.user_ns["w"] = w
    with pytest.raises(UsageError, match=(
            f"the cell changes '{name}' through another name than its own .* which a run on a "
            r"cluster cannot write back; change it through its name")):
        ip.run_cell_magic("gpu", "--quiet --to-host", body)
    assert ip.user_ns["w"] is w and w.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert not {"y", "z", "v"} & set(ip.user_ns)


@pytest.mark.parametrize("cell, rule", [
    ("m = f32.mean()", "m=mean"), ("s = u8.sum(dtype=np.uint8)", "s=sum"),
    ("s = i32.sum(axis=0, dtype=np.int32)", "s=sum"), ("s = float(f64.sum())", "s=sum"),
    ("s = int(i32.sum())", "s=sum"), ("b = bool((f64 > 0.99).any())", "b=any")])
def test_a_reduced_result_has_the_type_and_dtype_of_the_unbatched_one(ip, joined, cell, rule):
    """The blocks' partials are joined into their own type, as the batched kernel run's."""
    rng = np.random.default_rng(0)
    data = {"f32": rng.random((400, 3), dtype=np.float32), "f64": rng.random((400, 3)),
            "u8": rng.integers(0, 256, (400, 3), dtype=np.uint8),
            "i32": rng.integers(2**30, 2**31 - 1, (400, 3), dtype=np.int32)}
    plain = dict(data, np=np)
    exec(cell, plain)
    name = rule.split("=")[0]
    ip.user_ns.update(data)
    ip.run_cell_magic("gpu", f"--quiet --to-host --cluster --batch-rows 150 --reduce {rule}",
                      cell)
    got, want = ip.user_ns[name], plain[name]
    assert type(got) is type(want) and getattr(got, "dtype", None) == getattr(want, "dtype", None)
    if np.asarray(want).dtype.kind in "iub":
        assert np.array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_a_blocks_list_result_is_refused_with_the_fix_that_works(ip, joined):
    """A list per block: the fix is a cell of its own, not a --reduce rule."""
    ip.user_ns["x"] = np.arange(800.0).reshape(400, 2)
    msg = cell_error(ip, "y = x * 2\nt = [1, 2]\nt.append(len(y))\n",
                     "--cluster --batch-rows 150")
    assert "compute it in a cell of its own, or run this one whole" in msg
    assert "--reduce t=" not in msg and "t" not in ip.user_ns
