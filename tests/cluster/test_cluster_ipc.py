"""%%gpu --cluster through CUDA IPC (device slots of the kernel's GPU that the workers open):
the decision on given facts; on the CPU fallback, a real LocalCluster still goes through
shared memory as before, and a run whose device slot cannot be made falls back with a note;
on the H200 (``gpu``), a real ``dask_cuda.LocalCUDACluster``: the same results as the kernel
for element-wise, row-wise and reduced cells, the report naming the transport, a failing
block leaving no slot, handle or budget behind, and the fallbacks' notes."""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import HAS_GPU
from slotcells import BODY, ROWS, on_host, reduce_cell, run_quiet

import cupy_magic
from cupy_magic.backend import BudgetExceeded
from cupy_magic.cluster import devring, devslots, transport
from cupy_magic.cluster.inputs import worker_addresses
from cupy_magic.cluster.ring import SLOTS_PER_WORKER
from cupy_magic.cluster.transport import Transport

HERE = {"host": "node1", "backend": "cupy", "uuid": "GPU-aaaa", "opened": True, "why": ""}


# --- the decision, on given facts ------------------------------------------------------
def test_only_workers_on_this_kernels_gpu_get_device_slots():
    same = transport.same_device
    assert same("node1", "GPU-aaaa", {"tcp://a:1": HERE, "tcp://b:2": HERE}) == ""
    assert same("node1", "", {"tcp://a:1": HERE}) == (
        "this kernel runs on the CPU fallback (no GPU to share)")
    assert same("node1", "GPU-aaaa", {}) == "no workers to ask"
    assert same("node1", "GPU-aaaa", {"tcp://a:1": HERE, "tcp://b:2": {**HERE, "host": "n2"}}
                ) == "worker tcp://b:2 runs on 'n2', this kernel on 'node1'"
    assert same("node1", "GPU-aaaa", {"tcp://a:1": {**HERE, "backend": "host"}}) == (
        "worker tcp://a:1 runs on the CPU fallback")
    # dask-cuda numbers every worker's GPU 0: the UUID tells them apart
    assert same("node1", "GPU-aaaa", {"tcp://a:1": {**HERE, "uuid": "GPU-bbbb"}}) == (
        "worker tcp://a:1 computes on GPU GPU-bbbb, this kernel on GPU-aaaa")
    closed = same("node1", "GPU-aaaa", {"tcp://a:1": {**HERE, "opened": False,
                                                      "why": "CUDARuntimeError: invalid"}})
    assert closed == ("worker tcp://a:1 could not open this kernel's device memory "
                      "(CUDARuntimeError: invalid)")
    assert "could not say where it runs" in same("node1", "GPU-aaaa", {"tcp://a:1": OSError()})


def test_device_slots_must_fit_the_kernels_budget():
    room = transport.device_room_reason
    assert room(64 << 20, 8, 1, 1 << 30) == "" and room(64 << 20, 8, 1, None) == ""
    assert room(64 << 20, 0, 1, 0) == ""  # no block, no slot
    # three slots (the ring's per worker) of 128 MiB and a page, rounded to 2 MiB
    why = room(64 << 20, 8, 1, 256 << 20)
    assert why == ("the device slots need 390.00 MiB (3 of 130.00 MiB) and this kernel's "
                   "budget has 256.00 MiB left; give a larger budget (%vram_budget) or "
                   "smaller blocks (--batch-bytes)")
    assert room(64 << 20, 2, 4, 260 << 20) == ""  # two blocks: two slots


def test_the_report_names_the_ipc_transport_and_why_not():
    ipc = Transport("ipc")
    assert ipc.place and ipc.describe().startswith(
        "CUDA IPC on this kernel's GPU (3 device slots per worker, from this kernel's budget;")
    kept = Transport("ipc", "--reduce s is a Dask tree reduction of the blocks' results")
    assert not kept.place and "for the inputs" in kept.describe()
    assert "results are joined on the workers from their futures (--reduce s" in \
        kept.describe()
    shm = Transport("shm", "", "worker tcp://a:1 runs on the CPU fallback")
    assert shm.place and shm.describe().endswith(
        "; not CUDA IPC: worker tcp://a:1 runs on the CPU fallback")
    assert Transport("shm").describe() == Transport("shm", "", "").describe()
    assert "not CUDA IPC" not in Transport("shm").describe()


def test_ipc_can_be_turned_off_and_on(ip):
    before = transport.use_ipc(False)
    try:
        why = transport.check_devices(None, ("tcp://a:1",), cupy_magic.backend.current())
        assert why == "CUDA IPC is off (cupy_magic.cluster.transport.use_ipc(True) turns it on)"
    finally:
        assert transport.use_ipc(before) is False


def test_device_memory_outside_the_pool_is_held_against_the_budget(ip):
    be = cupy_magic.backend.current()
    cupy_magic.set_budget(64 << 20)
    try:
        left = be.budget_left()
        be.reserve(16 << 20, "this cell's device slots")
        assert be.reserved() == 16 << 20 and be.budget_left() == left - (16 << 20)
        assert be.pool_limit(be.home) == (64 << 20) - (16 << 20)
        with pytest.raises(BudgetExceeded) as err:
            be.reserve(left, "this cell's device slots")
        assert str(err.value).startswith("this cell's device slots need ")
        assert "%vram_budget" in str(err.value) and "\n" not in str(err.value)
        assert be.reserved() == 16 << 20  # a refusal holds nothing more
        cupy_magic.set_budget(128 << 20)  # a new budget keeps what is held
        assert be.pool_limit(be.home) == (128 << 20) - (16 << 20)
        be.unreserve(16 << 20)
        assert be.reserved() == 0 and be.budget_left() == be.limit - be.pool_used()
    finally:
        be.unreserve(be.reserved())
        cupy_magic.set_budget(None)


def test_a_device_run_has_task_keys_of_its_own_that_still_name_the_cells_block():
    """A run that falls back runs the same blocks again; were its tasks' keys the device
    run's, a worker still executing a cancelled device task would hand its result (placed in
    a device slot) to the new task of that key. The keys differ; failures still name the
    block."""
    from cupy_magic.cluster.failure import CellBlocks
    from cupy_magic.cluster.ring import SlotRing

    cell = CellBlocks("c0ffee", starts=(0, 100, 200), sizes=(100, 100, 3))
    ring = devring.DeviceRing(None, ("tcp://a:1",), cupy_magic.backend.current(), "c0ffee-ipc")
    try:
        device = f"cupy-magic-c0ffee-block-2{ring.key_suffix}"
        plain = f"cupy-magic-c0ffee-block-2{SlotRing.key_suffix}"
    finally:
        ring.pool.shutdown()
    assert device != plain and plain == "cupy-magic-c0ffee-block-2"
    assert cell.index(device) == 2 and cell.index(plain) == 2
    assert cell.blocks([device]) == "block 3 of 3 (rows 200:203)"
    assert cell.index("cupy-magic-c0ffee-block-2-shm") is None


# --- on a real LocalCluster (CPU fallback) ---------------------------------------------
@pytest.fixture
def x(ip):
    x = np.random.default_rng(1).random((1003, 4))
    ip.user_ns["x"] = x
    return x


# with the kernel on the host backend a GPU machine's LocalCluster workers still find the
# GPU (backend 'cupy') and CUDA makes the buffer: these two describe a machine without one
NO_GPU_HERE = pytest.mark.skipif(HAS_GPU, reason="describes a machine without a GPU: here the "
                                 "workers find the GPU and CUDA makes the device buffer")


@NO_GPU_HERE
def test_real_cpu_workers_say_where_they_run_and_are_not_given_device_slots(ip, joined, x):
    if cupy_magic.backend.current().is_gpu:
        pytest.skip("the CPU fallback's variant")
    workers = worker_addresses(joined)
    facts = joined.run(devslots.device_facts, b"", b"token")
    assert set(facts) == set(workers)
    for fact in facts.values():
        assert fact["backend"] == "host" and fact["uuid"] == "" and not fact["opened"]
        assert fact["why"] == "it runs on the CPU fallback"
    kernel = __import__("socket").gethostname()
    assert {f["host"] for f in facts.values()} == {kernel}
    assert transport.same_device(kernel, "GPU-aaaa", facts) == (
        f"worker {workers[0]} runs on the CPU fallback")
    shared = run_quiet(ip, BODY, f"--to-host --cluster {ROWS}", "ymnk")
    info = cupy_magic.last_report().batch
    assert info.transport == Transport("shm")  # as before: no word of CUDA IPC on a CPU
    np.testing.assert_allclose(shared["y"], np.sqrt(x) * 2 + 1, rtol=1e-12)


@NO_GPU_HERE
def test_a_run_whose_device_slot_cannot_be_made_falls_back_with_a_note(
        ip, joined, x, monkeypatch):
    """Here CUDA refuses every device buffer (no driver): a run given CUDA IPC falls back to
    shared memory, says so in one line, and equals the kernel's run; nothing is held."""
    if cupy_magic.backend.current().is_gpu:
        pytest.skip("a GPU makes the slot: test_a_worker_that_cannot_open_a_slot_... below")
    from cupy_magic.cluster import execute

    kernel = run_quiet(ip, BODY, "--to-host", "ymnk")
    monkeypatch.setattr(execute, "choose", lambda *a, **k: Transport("ipc"))
    got = run_quiet(ip, BODY, f"--to-host --cluster {ROWS}", "ymnk")
    rep = cupy_magic.last_report()
    info = rep.batch
    assert info.transport.kind == "shm" and info.transport.place
    assert info.transport.not_ipc.startswith(
        "it fell back for this run: this kernel could not make a device slot of ")
    notes = [n for n in rep.notes if "CUDA IPC could not be used for this run" in n]
    assert len(notes) == 1 and "\n" not in notes[0]
    assert any("not CUDA IPC: it fell back for this run" in line for line in rep.text_lines())
    assert info.blocks == 11 and len({w.worker for w in info.workers}) == 2
    for name in "ymn":
        np.testing.assert_allclose(got[name], kernel[name], rtol=1e-12)
    assert got["k"] == 3
    assert cupy_magic.backend.current().reserved() == 0 and devring.leftover_bytes() == 0
    assert all(runs == {} for runs in joined.run(devslots.open_runs).values())


def test_a_late_block_of_a_closed_run_opens_nothing_and_cpu_workers_refuse_slots(ip):
    from cupy_magic.cluster.worker import BlockSpec

    assert devslots.close_run("run-1") == 0 and devslots.open_runs() == {}
    spec = BlockSpec("y = x + 1\n", "<gpu-cell-ipc>", ("np",), {}, ("y",), 1)
    task = devslots.DeviceTask("run-1", b"", 1 << 20, {}, 4096)
    if cupy_magic.backend.current().is_gpu:
        with pytest.raises(RuntimeError, match="the kernel closed run run-1"):
            devslots.run_device_block(spec, 0, 0, task, {})
    else:
        with pytest.raises(devslots.IpcUnavailable, match="runs on the CPU fallback"):
            devslots.run_device_block(spec, 0, 0, task, {})
    assert devslots.open_runs() == {}


# --- on the H200: a real LocalCUDACluster ----------------------------------------------
@pytest.fixture
def gpu_cluster(ip):
    """The shell with ``%gpu_cluster local`` (one LocalCUDACluster worker per GPU)."""
    pytest.importorskip("dask_cuda")
    from cupy_magic.cluster import connect

    if cupy_magic.backend.current().name != "cupy":
        pytest.skip("CUDA IPC needs the kernel on a GPU")
    ip.run_line_magic("gpu_cluster", "local")
    try:
        yield connect.client()
    finally:
        ip.run_line_magic("gpu_cluster", "off")


def _nothing_held(client, be, used: int) -> None:
    end = time.monotonic() + 10
    while any(client.run(devslots.open_runs).values()) and time.monotonic() < end:
        time.sleep(0.1)
    assert all(runs == {} for runs in client.run(devslots.open_runs).values())
    assert devring.leftover_bytes() == 0 and be.reserved() == 0
    assert be.pool_used() == used  # the slots never were the pool's; nothing else stayed


@pytest.mark.gpu
def test_ipc_results_equal_the_kernels_and_the_report_names_the_transport(ip, gpu_cluster):
    be = cupy_magic.backend.current()
    x = np.random.default_rng(2).random((40_000, 256), dtype=np.float32)  # 40 MiB
    ip.user_ns["x"] = x
    body = BODY + "w = x.astype(np.float64) * 3\n"  # results larger than the inputs
    kernel = run_quiet(ip, body, "--to-host", "ymnkw")
    used = be.pool_used()
    workers = len(worker_addresses(gpu_cluster))
    for _ in range(2):  # each run makes its device slots anew and frees them
        got = run_quiet(ip, body, "--to-host --cluster --batch-rows 5000", "ymnkw")
        rep = cupy_magic.last_report()
        info = rep.batch
        assert info.transport == Transport("ipc"), info.transport
        assert info.blocks == 8 and all(w.device != "CPU (NumPy)" for w in info.workers)
        assert info.copy_in_seconds > 0 and info.copy_out_seconds > 0
        said = next(t for t in rep.text_lines() if "cluster transport:" in t)
        assert "CUDA IPC on this kernel's GPU" in said and "device slots of" in said
        assert f"(in {info.copy_in_seconds * 1e3:.1f}, out " in said
        for name in "ymnw":
            assert got[name].dtype == kernel[name].dtype
            np.testing.assert_allclose(got[name], kernel[name], rtol=1e-6)
        assert got["k"] == 3
        # each run makes its ring anew: the blocks given a slot before the first result said
        # how large a result row is (one per slot) send their results (4x the inputs) back
        assert info.sent_back == min(info.blocks, SLOTS_PER_WORKER * workers)
        _nothing_held(gpu_cluster, be, used)
    transport.use_ipc(False)
    try:
        shm = run_quiet(ip, body, "--to-host --cluster --batch-rows 5000", "ymnkw")
        assert cupy_magic.last_report().batch.transport.kind == "shm"
    finally:
        transport.use_ipc(True)
    for name in "ymnw":  # the same blocks on the same worker: bit for bit
        np.testing.assert_array_equal(got[name], shm[name])


@pytest.mark.gpu
@pytest.mark.parametrize("rule", ["sum", "max", "mean", "concat"])
def test_reduced_cells_through_ipc_equal_the_shared_memory_path(ip, gpu_cluster, rule):
    x = np.random.default_rng(3).random((1003, 4))
    ip.user_ns["x"] = x
    body, line = reduce_cell(rule)
    got = run_quiet(ip, body, line, "ys")
    info = cupy_magic.last_report().batch
    assert info.transport.kind == "ipc" and not info.transport.place
    assert info.reduced == {"s": rule} and info.gathered == ("y",)
    transport.use_ipc(False)
    try:
        shm = run_quiet(ip, body, line, "ys")
        assert cupy_magic.last_report().batch.transport.not_ipc.startswith("CUDA IPC is off")
    finally:
        transport.use_ipc(True)
    np.testing.assert_array_equal(on_host(got["y"]), x * 2)
    np.testing.assert_array_equal(on_host(got["s"]), on_host(shm["s"]))


@pytest.mark.gpu
def test_a_failing_block_through_ipc_commits_nothing_and_leaves_nothing(ip, gpu_cluster):
    be = cupy_magic.backend.current()
    x = np.random.default_rng(4).random((1003, 4))
    ip.user_ns["x"] = x
    run_quiet(ip, "y = x + 1\n", f"--to-host --cluster {ROWS}", "y")
    used = be.pool_used()
    body = "y = x * 2\nif len(x) == 3:\n    raise ValueError('bad rows')\nz = y + 1\n"
    with pytest.raises(ValueError, match="bad rows"):
        cupy_magic.run_cell(body, ip.user_ns, to_host=True, cluster=True,
                            batch=cupy_magic.BatchOptions(rows=100), filename="<ipc-fail>")
    assert "y" not in ip.user_ns and "z" not in ip.user_ns
    _nothing_held(gpu_cluster, be, used)
    again = run_quiet(ip, "y = x * 3\n", f"--to-host --cluster {ROWS}", "y")
    assert cupy_magic.last_report().batch.transport.kind == "ipc"
    np.testing.assert_array_equal(again["y"], x * 3)


def _open_fails(on: bool) -> None:
    """In a worker: make (or stop making) its openings of the kernel's slots fail."""
    import cupy_magic.cluster.devslots as worker_side

    if on:
        worker_side._saved_open = worker_side.open_handle

        def broken(handle):
            raise RuntimeError("cudaErrorMapBufferObjectFailed: mapping failed")
        worker_side.open_handle = broken
    else:
        worker_side.open_handle = worker_side._saved_open


@pytest.mark.gpu
def test_a_worker_that_cannot_open_a_slot_falls_back_with_a_note(ip, gpu_cluster):
    be = cupy_magic.backend.current()
    x = np.random.default_rng(5).random((1003, 4))
    ip.user_ns["x"] = x
    run_quiet(ip, "y = x + 1\n", f"--to-host --cluster {ROWS}", "y")  # the GPU check passed
    assert cupy_magic.last_report().batch.transport.kind == "ipc"
    used = be.pool_used()
    gpu_cluster.run(_open_fails, True)
    try:
        got = run_quiet(ip, BODY, f"--to-host --cluster {ROWS}", "ymnk")
    finally:
        gpu_cluster.run(_open_fails, False)
    rep = cupy_magic.last_report()
    assert rep.batch.transport.kind == "shm"
    assert "mapping failed" in rep.batch.transport.not_ipc
    assert sum("CUDA IPC could not be used for this run" in n for n in rep.notes) == 1
    np.testing.assert_allclose(got["y"], np.sqrt(x) * 2 + 1, rtol=1e-12)
    _nothing_held(gpu_cluster, be, used)
    # a budget with no room for the device slots (three of 2 MiB): shared memory, and the
    # report says why
    cupy_magic.set_budget(4 << 20)
    try:
        run_quiet(ip, "y = x + 1\n", "--to-host --cluster --batch-rows 500", "y")
        said = cupy_magic.last_report().batch.transport
        assert said.kind == "shm" and said.not_ipc.startswith("the device slots need ")
    finally:
        cupy_magic.set_budget(None)
