"""%%gpu --cluster through shared memory on a real LocalCluster of 2 worker processes on this
host (CPU fallback; the ``cupy`` variants run on the H200 with CuPy workers): the same results
as the kernel and as the scatter path, over blocks with an uneven last one; the report names
the transport; a failing block commits nothing and leaves the ring usable and no segment
behind; off and unload unlink every segment; and the decision's own facts."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from conftest import failed_block
from slotcells import BODY, ROWS, on_host, reduce_cell, run_quiet

import cupy_magic
from cupy_magic.cluster import shm, slots, transport
from cupy_magic.cluster.inputs import worker_addresses
from cupy_magic.cluster.ring import SLOTS_PER_WORKER

SHM = "/dev/shm"

pytestmark = pytest.mark.skipif(not os.path.isdir(SHM), reason="no /dev/shm to list here")


def segments() -> set[str]:
    """The shared-memory segments this process (its kernel: the test's shell) made."""
    return {n for n in os.listdir(SHM) if n.startswith(slots.segment_prefix())}


def worker_slots(client) -> dict[str, list[str]]:
    """The slots each worker process has open."""
    return client.run(slots.open_slots)


def cell_tasks(client) -> list[str]:
    """The scheduler's tasks made for %%gpu cells (their keys start with cupy-magic-)."""
    return client.run_on_scheduler(
        lambda dask_scheduler: [str(k) for k in dask_scheduler.tasks if "cupy-magic" in str(k)])


pytestmark = pytest.mark.usefixtures("shm_only")  # the shared-memory slots, not CUDA IPC


@pytest.fixture
def x(ip):
    x = np.random.default_rng(1).random((1003, 4))
    ip.user_ns["x"] = x
    return x


def test_element_and_row_wise_cells_equal_the_kernel_and_the_scatter_path(ip, joined, x):
    before = segments()
    kernel = run_quiet(ip, BODY, "--to-host", "ymnk")
    shared = run_quiet(ip, BODY, f"--to-host --cluster {ROWS}", "ymnk")
    info = cupy_magic.last_report().batch
    assert info.transport.kind == "shm" and info.transport.place
    assert info.blocks == 11 and info.total_rows == 1003
    assert info.scattered == () and info.gathered == ("m", "n", "y")
    assert len({w.worker for w in info.workers}) == 2  # both workers read slots
    lines = cupy_magic.last_report().text_lines()
    assert any("cluster transport: shared memory on this host (a ring of 3 slots per worker;"
               in line for line in lines)
    # the kernel's copies, split: inputs into the slots, row results out of them
    assert info.copy_in_seconds > 0 and info.copy_out_seconds > 0
    assert any(f"(in {info.copy_in_seconds * 1e3:.1f}, out {info.copy_out_seconds * 1e3:.1f})"
               in line for line in lines)
    # the same cell rebinding its input takes the scatter path, and says why
    scattered = run_quiet(ip, "x = x + 0\n" + BODY, f"--to-host --cluster {ROWS}", "ymnk")
    info = cupy_magic.last_report().batch
    assert info.transport.kind == "scatter" and info.transport.why == (
        "the cell changes its input x")
    assert info.scattered == ("x",) and info.blocks == 11
    np.testing.assert_array_equal(ip.user_ns["x"], x)
    # y kept on the workers: the inputs go through the slots, y stays a Dask array there
    kept = run_quiet(ip, BODY, f"--to-host m,n,k --cluster {ROWS}", "ymnk")
    info = cupy_magic.last_report().batch
    assert info.transport.kind == "shm" and not info.transport.place
    assert "y stays on the workers" in info.transport.why and info.kept == ("y",)
    assert info.blocks == 11 and hasattr(kept["y"], "dask")
    assert info.copy_in_seconds > 0 and info.copy_out_seconds == 0  # no rows through slots
    for name in "ymn":
        got = shared[name]
        assert isinstance(got, np.ndarray) and got.dtype == kernel[name].dtype
        np.testing.assert_array_equal(got, scattered[name])
        np.testing.assert_array_equal(got, on_host(kept[name]))
        np.testing.assert_allclose(got, kernel[name], rtol=1e-12)
    assert shared["k"] == scattered["k"] == kept["k"] == kernel["k"] == 3
    ring = shm.slot_names()
    assert 0 < len(ring) <= 2 * SLOTS_PER_WORKER and segments() - before == set(ring)
    again = run_quiet(ip, BODY, f"--to-host --cluster {ROWS}", "y")
    np.testing.assert_array_equal(again["y"], shared["y"])
    assert shm.slot_names() == ring  # the same slots, reused by the next cell


def test_results_larger_than_their_slots_come_back_whole_and_the_slots_grow(ip, joined):
    x = np.random.default_rng(3).random((1_000_000, 4), dtype=np.float32)  # 16 MB
    ip.user_ns["x"] = x
    # 16 bytes of input a row, 121 of results: the first blocks' slots are too small
    body = ("w = x.astype(np.float64)\nr = np.repeat(x, 5, axis=1).reshape(len(x), 5, 4)\n"
            "c = (x > 0.5).sum(axis=1)\nb = x[:, 0] > 0.5\n")
    kernel = run_quiet(ip, body, "--to-host", "wrcb")
    first = run_quiet(ip, body, "--to-host --cluster --batch-rows 50000", "wrcb")
    info = cupy_magic.last_report().batch
    assert info.transport.kind == "shm" and info.blocks == 20
    assert 0 < info.sent_back < info.blocks  # sent back until the slots grew
    assert any(f"{info.sent_back} of 20 blocks sent their row results back" in line
               for line in cupy_magic.last_report().text_lines())
    for name in "wrcb":
        assert first[name].dtype == kernel[name].dtype
        np.testing.assert_array_equal(first[name], kernel[name])
    second = run_quiet(ip, body, "--to-host --cluster --batch-rows 50000", "wrcb")
    assert cupy_magic.last_report().batch.sent_back == 0  # every block fits a grown slot
    for name in "wrcb":
        np.testing.assert_array_equal(second[name], kernel[name])


def test_several_batched_inputs_of_other_shapes_and_dtypes_share_a_slot(ip, joined):
    rng = np.random.default_rng(4)
    a = rng.random(1003, dtype=np.float32)
    b = rng.integers(-50, 50, (1003, 2, 3)).astype(np.int16)
    bt = np.asfortranarray(rng.random((1003, 5)))[:, ::2]  # neither C- nor F-ordered rows
    ip.user_ns.update(a=a, b=b, bt=bt, w=np.arange(3.0))
    body = "y = a[:, None, None] * b + w\nz = bt.sum(axis=1) + a\n"
    kernel = run_quiet(ip, body, "--to-host", "yz")
    shared = run_quiet(ip, body, f"--to-host --cluster {ROWS}", "yz")
    info = cupy_magic.last_report().batch
    assert info.transport.kind == "shm" and info.batched == ("a", "b", "bt")
    assert info.shared == ("w",) and info.blocks == 11
    for name in "yz":
        assert shared[name].dtype == kernel[name].dtype
        np.testing.assert_allclose(shared[name], kernel[name], rtol=1e-12)


def test_a_cell_without_rows_is_refused_as_the_scatter_path_refuses_it(ip, joined, x):
    from IPython.core.error import UsageError

    body = "t = x.sum(axis=0) * 2\n"  # no row axis and no rule
    with pytest.raises(UsageError) as shared:
        ip.run_cell_magic("gpu", f"--quiet --to-host --cluster {ROWS}", body)
    with pytest.raises(UsageError) as scattered:
        ip.run_cell_magic("gpu", f"--quiet --to-host q --cluster {ROWS}", body + "q = 1\n")
    assert str(shared.value) == str(scattered.value)
    assert "--reduce t=sum" in str(shared.value) and "t" not in ip.user_ns


def test_a_failing_block_commits_nothing_and_leaves_the_ring_usable(ip, joined, x):
    before = segments()
    run_quiet(ip, "y = x + 1\n", f"--to-host --cluster {ROWS}", "y")  # the ring exists
    made = segments() - before
    ip.user_ns.pop("y", None)
    body = "y = x * 2\nif len(x) == 3:\n    raise ValueError('bad rows')\nz = y + 1\n"
    with pytest.raises(ValueError, match="bad rows") as info:
        cupy_magic.run_cell(body, ip.user_ns, to_host=True, cluster=True,
                            batch=cupy_magic.BatchOptions(rows=100),
                            filename="<cluster-shm-fail>")
    notes, filename, line = failed_block(info.value)
    assert "block 11 of 11 (rows 1,000:1,003) failed on worker tcp://127.0.0.1:" in notes
    assert "nothing committed" in notes
    assert filename == "<cluster-shm-fail>" and line == 3
    assert "y" not in ip.user_ns and "z" not in ip.user_ns
    end = time.monotonic() + 10
    while cell_tasks(joined) and time.monotonic() < end:
        time.sleep(0.1)
    assert cell_tasks(joined) == []
    # slots a block still used were unlinked; none is left behind beyond the ring's own
    assert segments() - before <= made and segments() - before == set(shm.slot_names())
    again = run_quiet(ip, "y = x * 3\n", f"--to-host --cluster {ROWS}", "y")
    np.testing.assert_array_equal(on_host(again["y"]), x * 3)
    assert cupy_magic.last_report().batch.transport.kind == "shm"
    assert segments() - before == set(shm.slot_names())


def test_off_and_unload_unlink_every_segment_and_the_workers_close_theirs(
        ip, joined, x):
    before = segments()
    run_quiet(ip, "y = x + 1\n", f"--to-host --cluster {ROWS}", "y")
    ring = set(shm.slot_names())
    assert ring and ring <= segments()
    opened = {n for names in worker_slots(joined).values() for n in names}
    assert opened == ring  # each worker opened its own slots
    cupy_magic.use_cluster("off")
    assert segments() - before == set() and shm.slot_names() == []
    assert all(names == [] for names in worker_slots(joined).values())
    cupy_magic.use_cluster(joined)
    run_quiet(ip, "y = x + 1\n", f"--to-host --cluster {ROWS}", "y")
    assert segments() - before
    ip.run_line_magic("unload_ext", "cupy_magic")
    try:
        assert segments() - before == set() and shm.slot_names() == []
        assert all(names == [] for names in worker_slots(joined).values())
    finally:
        ip.run_line_magic("load_ext", "cupy_magic")


@pytest.mark.parametrize("rule", ["sum", "max", "mean", "concat"])
def test_reduced_results_equal_the_scatter_path_with_inputs_through_the_slots(
        ip, joined, x, rule):
    body, line = reduce_cell(rule)
    shared = run_quiet(ip, body, line, "ys")
    info = cupy_magic.last_report().batch
    assert info.transport.kind == "shm" and not info.transport.place
    assert info.transport.why.startswith("--reduce s is a Dask tree reduction")
    assert info.reduced == {"s": rule} and info.gathered == ("y",) and info.scattered == ()
    said = next(t for t in cupy_magic.last_report().text_lines()
                if "shared memory on this host for the inputs" in t)
    # the results line says y's rows were gathered: the transport line does not contradict it
    assert "gathered where --to-host asks" in said and "stay on the workers" not in said
    scattered = run_quiet(ip, "x = x + 0\n" + body, line, "ys")
    assert cupy_magic.last_report().batch.transport.kind == "scatter"
    np.testing.assert_array_equal(shared["y"], scattered["y"])
    np.testing.assert_array_equal(shared["s"], scattered["s"])  # the same tree, same sums
    np.testing.assert_array_equal(shared["y"], x * 2)


def test_dask_inputs_keep_their_blocks_where_they_are(ip, joined, x):
    da = pytest.importorskip("dask.array")
    ip.user_ns["xd"] = da.from_array(x, chunks=(300, 4))
    ip.run_cell_magic("gpu", "--quiet --to-host", "y = xd * 2\n")
    assert cupy_magic.last_report().batch.transport.kind == "dask"
    np.testing.assert_array_equal(ip.user_ns["y"], x * 2)


# --- the decision, on given facts ------------------------------------------------------
def test_workers_on_another_host_or_without_the_kernels_memory_are_scattered_to():
    here = {"host": "node1", "opened": True, "why": ""}
    assert transport.same_host("node1", {"tcp://a:1": here, "tcp://b:2": here}) == ""
    elsewhere = transport.same_host("node1", {"tcp://a:1": here,
                                        "tcp://b:2": {**here, "host": "node2"}})
    assert elsewhere == "worker tcp://b:2 runs on 'node2', this kernel on 'node1'"
    closed = transport.same_host("node1", {"tcp://a:1": {**here, "opened": False,
                                                   "why": "FileNotFoundError: no such file"}})
    assert "could not open this kernel's shared memory (FileNotFoundError" in closed
    assert "could not say where it runs" in transport.same_host("node1", {"tcp://a:1": OSError()})
    assert transport.same_host("node1", {}) == "no workers to ask"
    assert transport.Transport("scatter", elsewhere).describe() == (
        "scatter and gather over the network (worker tcp://b:2 runs on 'node2', this kernel "
        "on 'node1')")


def test_what_the_cell_needs_decides_the_inputs_and_the_results_way():
    x = np.zeros((10, 2))
    objects = np.empty(10, object)
    assert transport.scatter_reason(["x"], {"x": x}, {"y"}) == ""
    assert transport.scatter_reason(["x"], {"x": x}, {"x", "y"}) == "the cell changes its input x"
    assert transport.scatter_reason(["o"], {"o": objects}, {"y"}) == "o holds Python objects"
    kept = transport.futures_reason
    assert kept({"y"}, {}, True) == "" and kept({"y"}, {}, ["y"]) == ""
    assert kept({"y", "s"}, {"s": "sum"}, True).startswith("--reduce s is a Dask tree ")
    assert kept({"y", "z"}, {}, ["y"]) == "z stays on the workers (no --to-host)"
    assert kept({"y", "z"}, {}, False) == "y, z stay on the workers (no --to-host)"


def test_the_host_check_asks_real_workers_and_leaves_no_probe(joined):
    workers = worker_addresses(joined)
    before = segments()
    assert transport.check_hosts(joined, workers) == ""  # a LocalCluster on this host
    assert segments() == before  # the probes are gone
    assert transport.check_hosts(joined, workers) == ""


def _open_fails(on: bool) -> None:
    """In a worker: make (or stop making) its host check raise as it opens the probe."""
    import cupy_magic.cluster.slots as worker_slots_module

    if on:
        worker_slots_module._saved_open = worker_slots_module._open_segment

        def broken(name, tracker):
            raise RuntimeError("the probe could not be read")
        worker_slots_module._open_segment = broken
    else:
        worker_slots_module._open_segment = worker_slots_module._saved_open


def test_a_host_check_a_worker_failed_is_asked_again_next_cell(joined):
    workers = worker_addresses(joined)
    transport.forget()
    joined.run(_open_fails, True, workers=[workers[0]])
    try:
        why = transport.check_hosts(joined, workers)
    finally:
        joined.run(_open_fails, False, workers=[workers[0]])
    assert why.startswith(f"worker {workers[0]} could not say where it runs")
    assert "the probe could not be read" in why
    assert transport.check_hosts(joined, workers) == ""  # not kept: asked again, and shared


def test_on_the_cpu_fallback_no_slot_is_page_locked(ip, joined, x):
    from cupy_magic.backend.cupy import probe_cupy

    if probe_cupy()[0] is not None:  # the workers pick their backend themselves
        pytest.skip("workers on a GPU machine lock their slots: the gpu test below")
    run_quiet(ip, "y = x + 1\n", f"--to-host --cluster {ROWS}", "y")
    opened = worker_slots(joined)
    assert any(opened.values())
    assert all(names == [] for names in joined.run(slots.locked_slots).values())


@pytest.mark.gpu
def test_on_a_gpu_each_worker_locks_its_slots_once_and_the_results_equal_the_kernels(ip):
    """On the H200: a LocalCUDACluster's worker reads its blocks from slots it page-locked
    once (cudaHostRegister), and writes its row results there; off unlocks and unlinks."""
    pytest.importorskip("dask_cuda")
    from cupy_magic import backend
    from cupy_magic.cluster import connect

    if backend.current().name != "cupy":
        pytest.skip("the host variant: test_on_the_cpu_fallback_no_slot_is_page_locked")
    before = segments()
    x = np.random.default_rng(2).random((40_000, 256), dtype=np.float32)  # 40 MiB
    ip.user_ns["x"] = x
    body = "y = np.sqrt(x * x + 1)\nn = (x * 2).sum(axis=1)\nk = 3\n"
    kernel = run_quiet(ip, body, "--to-host", "ynk")
    ip.run_line_magic("gpu_cluster", "local")
    try:
        client = connect.client()
        for run in range(2):
            got = run_quiet(ip, body, "--to-host --cluster --batch-rows 5000", "ynk")
            info = cupy_magic.last_report().batch
            assert info.transport.kind == "shm" and info.blocks == 8, info.transport
            assert all(w.device != "CPU (NumPy)" for w in info.workers)
            np.testing.assert_allclose(got["y"], kernel["y"], rtol=1e-6)
            np.testing.assert_allclose(got["n"], kernel["n"], rtol=1e-5)
            assert got["k"] == 3 and got["y"].dtype == np.float32
            # y (40 MiB) is one of the kernel's result blocks, reused by later results
            assert not got["y"].flags.owndata
            ring = set(shm.slot_names())
            opened = client.run(slots.open_slots)
            locked = client.run(slots.locked_slots)
            assert locked == opened and all(locked.values()), (opened, locked)
            assert {n for names in locked.values() for n in names} <= ring
            if run == 0:
                first = (ring, locked)
        assert (ring, locked) == first  # the same slots, still locked: locked once
    finally:
        ip.run_line_magic("gpu_cluster", "off")
    assert shm.slot_names() == [] and segments() - before == set()


def test_a_host_without_room_for_the_slots_is_scattered_to():
    free = shm.room()
    assert free is not None and free > 0  # this host has a /dev/shm to measure
    assert transport.room_reason(1 << 20, 8, 2) == ""
    why = transport.room_reason(free, 8, 2)  # six slots as large as all there is
    assert why.startswith(f"{shm.SHM_DIR} has ") and "docker run --shm-size" in why
    assert transport.room_reason(free, 0, 2) == ""  # no block, no slot


def test_the_host_check_makes_no_probe_without_room_for_it():
    """A write past a full /dev/shm kills the kernel (SIGBUS; a container's default is 64
    MiB): the check of the workers' host makes no probe segment then, and says why."""
    page = slots.ALIGN
    assert transport.probe_room(None, 2) == ""  # the system does not say: as before
    assert transport.probe_room(4 * page, 2) == ""
    why = transport.probe_room(page, 2)
    assert why.startswith(f"{shm.SHM_DIR} has 4.00 KiB free, too little even to check")
    assert "docker run --shm-size" in why
    assert transport.probe_room(0, 1) != ""


def test_a_slot_detached_while_a_block_opens_it_is_closed_after_that_block(ip):
    """A Ctrl-C retires a slot whose block may be opening it on a worker when the next cell
    detaches it: the opening then must not stay mapped (and page-locked) in the worker."""
    from multiprocessing import shared_memory

    seg = shared_memory.SharedMemory(create=True, size=slots.ALIGN)
    try:
        assert slots.detach([seg.name]) == 0  # not open here yet: only noted
        slot = slots._attach(seg.name, slots.tracker_id())  # the late opening
        assert slot.detached and seg.name not in slots.open_slots()
        slots._leave(slot)  # the block ends: the opening closes
        assert slot.seg.buf is None and slot.pin is None
    finally:
        seg.close()
        seg.unlink()


def test_a_superseded_run_of_a_block_writes_nothing_into_a_slot_given_to_another(ip):
    """A run the scheduler gave up on (the block ran again on another worker) may finish
    after the kernel gave its slot to the next block: it must not write its results over
    that block's. The slot's header holds the use the kernel gave it last."""
    from multiprocessing import shared_memory

    from cupy_magic.cluster.worker import BlockSpec

    rows, align = 8, slots.ALIGN
    seg = shared_memory.SharedMemory(create=True, size=4 * align)
    try:
        mem = np.frombuffer(seg.buf, np.uint8)
        x = slots.view(mem, align, (rows,), np.float64)
        x[:] = np.arange(rows)
        places = {"x": (align, (rows,), np.dtype(np.float64))}
        spec = BlockSpec("y = x + 1\n", "<gpu-cell-superseded>", ("np",), {}, ("y",), 1,
                         to_host=True)
        header = slots.view(mem, 0, (1,), slots.HEADER)
        result = slots.view(mem, 2 * align, (rows,), np.float64)
        header[0] = 7  # the kernel's current use of the slot
        done = slots.run_slot_block(spec, 0, 0, slots.SlotTask(
            seg.name, places, 2 * align, slots.tracker_id(), True, 7), {})
        assert done["placed"] == {"y": 2 * align}
        np.testing.assert_array_equal(result, np.arange(rows) + 1)
        result[:] = -1  # the next block's results, say
        with pytest.raises(RuntimeError, match="was given to another block"):
            slots.run_slot_block(spec, 0, 0, slots.SlotTask(
                seg.name, places, 2 * align, slots.tracker_id(), True, 6), {})
        assert (result == -1).all()  # untouched
        del mem, x, header, result
    finally:
        slots.detach([seg.name])
        seg.close()
        seg.unlink()


def test_once_a_slot_grew_the_rings_smaller_slots_grow_before_they_are_used_again():
    """A cell's first blocks ask for slots sized by their inputs (their results are not known
    yet); a worker's slot left small by an earlier cell must not take them, or their results
    come back over the socket though the ring has grown (seen on the H200's 16 cores)."""
    ring = shm.Ring(None, ("w",))
    try:
        small = [ring.take(100, 10), ring.take(100, 10)]
        for slot in small:
            ring.give_back(slot)
        grown = ring.take(3 << 20, 10)  # a block that learned its results' size
        ring.give_back(grown)
        assert grown.capacity >= 3 << 20
        taken = [ring.take(100, 10) for _ in range(2)]  # the next cell's first blocks
        assert [s.capacity >= grown.capacity for s in taken] == [True, True]
    finally:
        ring.close(workers=False)

