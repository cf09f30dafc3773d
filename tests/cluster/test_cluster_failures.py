"""What a user on a shared server meets when the cluster misbehaves, on a real LocalCluster
of 2 worker processes (their nannies restart a worker that dies): a worker process killed in
the middle of a cell, a client or a cluster closed behind the extension's back, a Ctrl-C
that cancelled a gather. Each is one line naming what happened and the fix; nothing is
committed, no shared-memory segment is left beyond the ring, and the next cell runs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time

import distributed
import numpy as np
import pytest
from IPython.core.error import UsageError

import cupy_magic
from cupy_magic.cluster import connect, shm, slots
from cupy_magic.cluster.inputs import worker_addresses

da = pytest.importorskip("dask.array")

SHM = "/dev/shm"


def segments() -> set[str]:
    """The shared-memory segments this process (its kernel: the test's shell) made."""
    if not os.path.isdir(SHM):
        return set()
    return {n for n in os.listdir(SHM) if n.startswith(slots.segment_prefix())}


def cell_tasks(client) -> list[str]:
    """The scheduler's tasks made for %%gpu cells (their keys start with cupy-magic-)."""
    return client.run_on_scheduler(
        lambda dask_scheduler: [str(k) for k in dask_scheduler.tasks if "cupy-magic" in str(k)])


def _settled(client, timeout: float = 20.0) -> list[str]:
    end = time.monotonic() + timeout
    while cell_tasks(client) and time.monotonic() < end:
        time.sleep(0.1)
    return cell_tasks(client)


@pytest.fixture
def x(ip, local_client):
    local_client.wait_for_workers(2, timeout=60)  # restarted after an earlier test's kill
    x = np.random.default_rng(3).random((1000, 4))
    ip.user_ns.update(x=x, xd=da.from_array(x, chunks=(100, 4)))
    return x


# the block holding row 500 ends the process of whichever worker runs it
KILLER = ("import os\nif XX[0, 0] == MARK:\n    os.kill(os.getpid(), 9)\ny = XX + 1\n")


@pytest.mark.parametrize("how", ["--to-host --cluster --batch-rows 100", "--to-host"],
                         ids=["shared-memory", "dask-input"])
def test_a_worker_killed_mid_cell_is_one_line_naming_it_and_the_next_cell_runs(
        ip, joined, x, how):
    before = segments()
    name = "xd" if "--cluster" not in how else "x"
    ip.user_ns["MARK"] = x[500, 0]
    started = set(worker_addresses(connect.client()))
    ip.user_ns.pop("y", None)
    with pytest.raises(UsageError) as err:
        ip.run_cell_magic("gpu", f"--quiet {how}", KILLER.replace("XX", name))
    msg = str(err.value)
    assert "\n" not in msg and "nothing committed" in msg, msg
    named = [w for w in started if w in msg]
    assert named and ("died during the cell" in msg or "ended the process" in msg), msg
    assert "block 6 of 10" in msg or "blocks" in msg, msg
    assert "%gpu_cluster" in msg, msg
    assert "y" not in ip.user_ns
    assert _settled(joined) == []
    joined.wait_for_workers(2, timeout=60)  # the nannies restarted what died
    ip.run_cell_magic("gpu", f"--quiet {how}", f"y = {name} * 3\n")
    np.testing.assert_array_equal(ip.user_ns.pop("y"), x * 3)
    # the dead workers' slots are gone with the ring they belonged to; no segment is left
    # beyond the ring of the workers there are now
    assert segments() - before <= set(shm.slot_names())


def _clients(dask_scheduler) -> int:
    return len(dask_scheduler.clients)


def test_a_client_closed_behind_the_extensions_back_is_one_line_and_left(ip, local_client, x,
                                                                       shm_only):
    clients = local_client.run_on_scheduler(_clients)
    cupy_magic.use_cluster(local_client.scheduler.address)  # the kernel's own client
    address = local_client.scheduler.address
    ip.run_cell_magic("gpu", "--quiet --to-host --cluster --batch-rows 100", "y = x + 1\n")
    assert shm.slot_names()
    before = segments() - set(shm.slot_names())
    connect.client().close()
    t0 = time.monotonic()
    with pytest.raises(UsageError) as err:
        ip.run_cell_magic("gpu", "--quiet --to-host --cluster --batch-rows 100", "z = x + 2\n")
    msg = str(err.value)
    assert "\n" not in msg and f"joined cluster at {address}) was closed outside" in msg, msg
    assert "%gpu_cluster local" in msg and "z" not in ip.user_ns
    assert time.monotonic() - t0 < 5
    # left: its slots unlinked, show says none, the next cell runs in this kernel
    assert shm.slot_names() == [] and segments() <= before
    assert ip.run_line_magic("gpu_cluster", "show").kind == ""
    ip.run_cell_magic("gpu", "--quiet --to-host", "z = x + 2\n")
    np.testing.assert_array_equal(ip.user_ns.pop("z"), x + 2)
    assert local_client.run_on_scheduler(_clients) == clients  # the kernel's client left


def test_a_cluster_closed_behind_the_extensions_back_is_one_line_not_a_hang(ip, x):
    cluster = distributed.LocalCluster(n_workers=0, host="127.0.0.1",
                                       **connect._QUIET_SCHEDULER)
    try:
        ip.run_line_magic("gpu_cluster", cluster.scheduler_address)
        address = cluster.scheduler_address
    finally:
        cluster.close()
    t0 = time.monotonic()
    for cell in (lambda: ip.run_line_magic("gpu_cluster", "show"),
                 lambda: ip.run_cell_magic("gpu", "--quiet --cluster", "z = x + 2\n")):
        with pytest.raises(UsageError) as err:
            cell()
        msg = str(err.value)
        assert "\n" not in msg and address in msg and "does not answer" in msg, msg
        assert "%gpu_cluster off" in msg
    assert time.monotonic() - t0 < 5 and "z" not in ip.user_ns
    assert ip.run_line_magic("gpu_cluster", "off").kind == ""


def test_a_gather_a_ctrl_c_cancelled_before_it_started_leaves_the_next_cell_working(
        ip, joined, x):
    """A Ctrl-C during ``Future.result()`` cancels distributed's gather as ``sync`` does;
    cancelled before its first step, it stayed the client's pending gather and every later
    gather of the kernel failed with ``UnboundLocalError`` until a restart."""
    client = connect.client()
    [f] = client.scatter([1], hash=False)

    async def interrupted() -> bool:
        task = asyncio.ensure_future(client._gather([f]))
        for _ in range(100):
            await asyncio.sleep(0)
            if client._gather_future is not None:  # the gather is made, not started yet
                task.cancel()  # as sync() does on KeyboardInterrupt
                break
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return client._gather_future is not None and client._gather_future.cancelled()

    assert client.sync(interrupted)  # the client is left as a Ctrl-C can leave it
    ip.run_cell_magic("gpu", "--quiet --to-host --cluster --batch-rows 100", "y = x * 3\n")
    np.testing.assert_array_equal(ip.user_ns.pop("y"), x * 3)
    assert client.gather(f) == 1


@pytest.mark.parametrize(("how", "fix"), [
    ("--to-host --cluster --batch-rows 1", "give --batch-rows 2,000"),
    ("--to-host", "give xt = xt.rechunk({0: 2000})")], ids=["numpy", "dask"])
def test_thousands_of_tiny_blocks_are_refused_before_any_task_with_the_fix(
        ip, joined, x, how, fix):
    """5,000 blocks of one row took 18 to 50 s on these 2 workers (a task costs milliseconds)
    for what NumPy does in one: refused at once, with block sizes that are not."""
    t = np.random.default_rng(4).random((2000, 4))
    ip.user_ns.update(t=t, xt=da.from_array(t, chunks=(1, 4)))
    name = "xt" if "--cluster" not in how else "t"
    t0 = time.monotonic()
    with pytest.raises(UsageError) as err:
        ip.run_cell_magic("gpu", f"--quiet {how}", f"y = {name} + 1\n")
    msg = str(err.value)
    assert "\n" not in msg and f"{name} would run as 2,000 blocks of 32 B" in msg, msg
    assert fix.replace(",", "") in msg.replace(",", ""), msg
    assert time.monotonic() - t0 < 5 and cell_tasks(joined) == [] and "y" not in ip.user_ns


@pytest.mark.parametrize("how", ["--to-host --cluster", "--to-host"], ids=["numpy", "dask"])
def test_an_input_of_0_rows_is_one_line_naming_it_and_the_fix(ip, joined, x, how):
    ip.user_ns.update(t=x[:0], xt=da.from_array(x[:0], chunks=(100, 4)))
    name = "xt" if "--cluster" not in how else "t"
    with pytest.raises(UsageError) as err:
        ip.run_cell_magic("gpu", f"--quiet {how}", f"y = {name} + 1\n")
    msg = str(err.value)
    assert "\n" not in msg and f"batched input {name} has 0 rows" in msg, msg
    assert ("xt = xt.compute()" if name == "xt" else "without --cluster") in msg, msg



@pytest.mark.parametrize(("left", "words"), [
    ({"tcp://a": {0, 2}, "tcp://b": {2}}, "block 3 of 4 (rows 20:30) was on each, and may "
                                          "have ended their processes itself"),
    # the scheduler does not say which of the two was running: neither is named as the one
    ({"tcp://a": {0, 2}, "tcp://b": {0, 2, 3}}, "blocks 1, 3 of 4 were on each, and one of "
                                                "them may have ended their processes (Dask does "
                                                "not record which one was running)"),
    ({"tcp://a": {0}, "tcp://b": {1}}, "died during the cell (killed, out of memory, or their "
                                       "host went away?)"),
    ({"tcp://a": {1}}, "worker tcp://a (with block 2 of 4 (rows 10:20)) died during the cell "
                       "(killed, out of memory, or its host went away?)"),
])
def test_workers_that_died_are_named_in_one_line_that_agrees_in_number(left, words):
    from cupy_magic.cluster.failure import CellBlocks, died

    msg = died(left, CellBlocks("c", starts=(0, 10, 20, 30), sizes=(10, 10, 10, 10)))
    assert words in msg and "\n" not in msg and "nothing committed" in msg, msg


def test_ctrl_c_names_the_blocks_still_running_and_the_next_cell_waits_for_them(ip, joined):
    """What a Ctrl-C leaves on a real cluster (the cell's futures cancelled, one block
    still running on each worker): the interrupted cell's one line names them and their
    workers, and IPython shows that line alone; the next cluster cell waits until they end
    (its report's note says how long and why) and then runs as usual."""
    from cupy_magic.cluster import abandoned
    from cupy_magic.cluster.failure import CellBlocks, interrupted

    cell = CellBlocks("feedbeef", starts=(0, 100, 200, 300), sizes=(100, 100, 100, 100))
    futures = [joined.submit(time.sleep, 3, key=f"cupy-magic-feedbeef-block-{i}", pure=False)
               for i in range(4)]
    end = time.monotonic() + 30
    while len(abandoned.running(joined, "cupy-magic-feedbeef-")) < 2:
        assert time.monotonic() < end, "the blocks did not start"
        time.sleep(0.05)
    joined.cancel(futures)
    started = time.monotonic()
    exc = interrupted(joined, cell)
    line = str(exc)
    assert isinstance(exc, KeyboardInterrupt) and "\n" not in line, line
    assert exc._render_traceback_() == [f"KeyboardInterrupt: {line}"]
    assert "futures on the cluster cancelled, nothing committed" in line, line
    assert "blocks 1, 2 of 4 still run on " in line, line
    assert all(w in line for w in worker_addresses(joined)), line
    ip.user_ns["x"] = np.arange(400.0).reshape(100, 4)
    ip.run_cell_magic("gpu", "--quiet --to-host --cluster --batch-rows 25", "y = x + 1\n")
    assert time.monotonic() - started > 1.5  # the blocks took 3 s
    np.testing.assert_array_equal(ip.user_ns["y"], ip.user_ns["x"] + 1)
    notes = cupy_magic.last_report().notes
    assert any("ms waiting for blocks 1, 2 of 4 of " in n and "to end first: that cell was "
               "interrupted while they ran" in n for n in notes), notes
    assert abandoned.pending(joined) is None  # the cell after waits for nothing
    ip.run_cell_magic("gpu", "--quiet --to-host --cluster --batch-rows 25", "y = x + 2\n")
    assert not any("waiting for" in n for n in cupy_magic.last_report().notes)


def test_ctrl_c_before_any_block_was_sent_says_so(ip, joined):
    from cupy_magic.cluster.failure import CellBlocks, interrupted

    line = str(interrupted(joined, CellBlocks("0badcafe")))
    assert line == ("interrupted before the cell's blocks were sent; nothing of this cell ran "
                    "on the cluster, nothing committed"), line
