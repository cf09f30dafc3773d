"""Ctrl-C through a real Jupyter kernel: a %%gpu cell over a Dask array on the kernel's own
``%gpu_cluster local`` is interrupted (``KernelManager.interrupt_kernel``) while its blocks
run; it commits nothing, its tasks and keys leave the cluster, the workers survive the
interrupt, the kernel runs the next cell, and ``off`` leaves no worker process behind."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator

import psutil
import pytest

distributed = pytest.importorskip("distributed")
jupyter_client = pytest.importorskip("jupyter_client")

from cupy_magic.cluster import slots  # noqa: E402  (after the skips)
from cupy_magic.cluster.inputs import worker_addresses  # noqa: E402

pytestmark = pytest.mark.kernel

ANSI = re.compile(r"\x1b\[[0-9;]*m")
SLOW_CELL = """%%gpu --quiet
y = xd * 2
for i in range(40):
    time.sleep(0.05)
"""


class Kernel:
    """A real python3 kernel on the CPU fallback, run cell by cell."""

    def __init__(self) -> None:
        self.km = jupyter_client.KernelManager(kernel_name="python3")
        self.km.start_kernel(env={**os.environ, "CUPY_MAGIC_BACKEND": "host"})
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(self, code: str, timeout: float = 60) -> tuple[dict, str]:
        """Run ``code``; return the reply's content and the text the cell printed."""
        out: list[str] = []

        def hook(msg: dict) -> None:
            content = msg["content"]
            out.append(content.get("text", ""))  # a print may come in several stream pieces,
            data = content.get("data", {})        # joined as they came
            if "text/plain" in data:
                out.append(data["text/plain"] + "\n")
            out.extend(ANSI.sub("", t) + "\n" for t in content.get("traceback", []))

        reply = self.kc.execute_interactive(code, timeout=timeout, output_hook=hook)
        return reply["content"], "".join(out)

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


@pytest.fixture
def kernel() -> Iterator[Kernel]:
    k = Kernel()
    yield k
    k.close()


START = ("%load_ext cupy_magic\nimport os, time\nimport numpy as np\n"
         "import dask.array as da\nimport cupy_magic\n"
         "_ = cupy_magic.use_cluster('local', n_workers=2)\n")  # every test's first cell starts so


def _tasks(client, state: str | None = None) -> list[str]:
    return client.run_on_scheduler(
        lambda dask_scheduler, state=state: [
            str(k) for k, t in dask_scheduler.tasks.items()
            if "cupy-magic" in str(k) and (state is None or t.state == state)])


def _worker_keys(client) -> int:
    return sum(client.run(lambda dask_worker: len(dask_worker.data)).values())


def _until(check, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            pytest.fail(f"not within {timeout:g} s: {what}")
        time.sleep(0.1)


def _interrupted(kernel, watch, cell: str) -> dict:
    """Run ``cell``, press Ctrl-C once two of its blocks run, and return the cell's reply."""
    msg_id = kernel.kc.execute(cell)
    _until(lambda: len(_tasks(watch, "processing")) >= 2, 60, "blocks running")
    kernel.km.interrupt_kernel()
    reply = kernel.kc.get_shell_msg(timeout=30)
    assert reply["parent_header"]["msg_id"] == msg_id
    return reply


def test_ctrl_c_cancels_the_cells_blocks_commits_nothing_and_the_kernel_goes_on(kernel):
    reply, text = kernel.run(
        START + "print('ADDR', cupy_magic.cluster_status().address)\n"
        "x = np.random.default_rng(0).random((800, 4))\nxd = da.from_array(x, chunks=(100, 4))",
        timeout=120)
    assert reply["status"] == "ok", text
    address = re.search(r"ADDR (tcp://\S+)", text).group(1)
    watch = distributed.Client(address, timeout=30)
    try:
        pids = sorted(watch.run(os.getpid).values())
        assert len(pids) == 2
        before = _worker_keys(watch)
        reply = _interrupted(kernel, watch, SLOW_CELL)
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        tb = ANSI.sub("", "\n".join(reply["content"]["traceback"]))
        assert "futures on the cluster cancelled, nothing committed" in tb
        _until(lambda: not _tasks(watch) and _worker_keys(watch) <= before, 20,
               "the cell's tasks and keys gone from the cluster")
        assert sorted(watch.run(os.getpid).values()) == pids  # Ctrl-C killed no worker
        reply, text = kernel.run("print('COMMITTED', [n for n in ('y', 'i') if n in dir()])")
        assert "COMMITTED []" in text
        reply, text = kernel.run("%%gpu --quiet --to-host\nz = xd + 1")
        assert reply["status"] == "ok", text
        reply, text = kernel.run("print('SAME', bool(np.array_equal(z, x + 1)))")
        assert "SAME True" in text
    finally:
        watch.close()
    reply, text = kernel.run("%gpu_cluster off")
    assert reply["status"] == "ok", text
    _until(lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status()
                           != psutil.STATUS_ZOMBIE for p in pids), 20,
           "the local cluster's worker processes gone after %gpu_cluster off")


SLOW_SHM_CELL = """%%gpu --quiet --to-host --cluster --batch-rows 100
y = x * 2
for i in range(40):
    time.sleep(0.05)
"""


def _segments(pid: int) -> set[str]:
    """The shared-memory segments the kernel of process ``pid`` made."""
    return {n for n in os.listdir("/dev/shm") if n.startswith(slots.segment_prefix(pid))}


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm to list here")
def test_ctrl_c_through_shared_memory_keeps_the_ring_usable_and_off_unlinks_it(kernel):
    reply, text = kernel.run(
        START + "from cupy_magic.cluster import shm\n"
        "print('ADDR', cupy_magic.cluster_status().address, 'PID', os.getpid())\n"
        "x = np.random.default_rng(0).random((800, 4))", timeout=120)
    assert reply["status"] == "ok", text
    pid = int(re.search(r"PID (\d+)", text).group(1))
    before = _segments(pid)
    address = re.search(r"ADDR (tcp://\S+)", text).group(1)
    watch = distributed.Client(address, timeout=30)
    shown = "print('VIA', cupy_magic.last_report().batch.transport.kind, *shm.slot_names())"
    try:
        reply, text = kernel.run("%%gpu --quiet --to-host --cluster --batch-rows 100\n"
                                 "w = x + 1")
        assert reply["status"] == "ok", text
        reply, text = kernel.run(shown)
        assert reply["status"] == "ok" and "VIA shm" in text, text
        reply = _interrupted(kernel, watch, SLOW_SHM_CELL)
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        tb = ANSI.sub("", "\n".join(reply["content"]["traceback"]))
        assert "futures on the cluster cancelled, nothing committed" in tb
        _until(lambda: not _tasks(watch), 20, "the cell's tasks gone from the cluster")
        reply, text = kernel.run("print('COMMITTED', [n for n in ('y', 'i') if n in dir()])")
        assert "COMMITTED []" in text
        # the slots blocks still used were unlinked: no segment beyond the ring's own
        reply, text = kernel.run(shown)
        ring = set(re.search(r"VIA shm(.*)", text).group(1).split())
        assert _segments(pid) - before == ring
        reply, text = kernel.run("%%gpu --quiet --to-host --cluster --batch-rows 100\n"
                                 "z = x + 1")
        assert reply["status"] == "ok", text
        reply, text = kernel.run(f"print('SAME', bool(np.array_equal(z, x + 1)))\n{shown}")
        assert "SAME True" in text and "VIA shm" in text
    finally:
        watch.close()
    reply, text = kernel.run("%gpu_cluster off")
    assert reply["status"] == "ok", text
    assert _segments(pid) - before == set()


LONG_BLOCKS_CELL = """%%gpu --quiet --to-host --cluster --batch-rows 100
y = x * 2
time.sleep(BLOCK_SECONDS)
"""
RED = re.compile(r"distributed\.\S+ - (WARNING|ERROR)|Traceback|Error\b")


def test_ctrl_c_of_long_blocks_says_where_the_kernel_was_and_the_next_cell_why_it_waits(kernel):
    """Ctrl-C of a cluster cell whose blocks run long: its one line says what the kernel
    waited for and which blocks still run on which workers (it blamed cell line 1, which
    never ran in the kernel, and said nothing of them); the next cluster cell waits for
    them first, and its report says how long and why (the wait was its own "ms outside the
    busiest worker's blocks"); leaving the cluster while such blocks run prints nothing red
    (the nannies waited 4 s, killed the workers and said so, and the workers too)."""
    reply, text = kernel.run(
        START + "BLOCK_SECONDS = 6\n"
        "print('ADDR', cupy_magic.cluster_status().address)\n"
        "x = np.random.default_rng(0).random((800, 4))", timeout=120)
    assert reply["status"] == "ok", text
    address = re.search(r"ADDR (tcp://\S+)", text).group(1)
    watch = distributed.Client(address, timeout=30)
    try:
        workers = list(worker_addresses(watch))
        reply = _interrupted(kernel, watch, LONG_BLOCKS_CELL)
        interrupted = time.monotonic()
    finally:
        watch.close()
    content = reply["content"]
    assert content["ename"] == "KeyboardInterrupt"
    tb = ANSI.sub("", "\n".join(content["traceback"]))
    assert tb == f"KeyboardInterrupt: {content['evalue']}", tb  # one line, no cell line
    line = content["evalue"]
    assert "\n" not in line and "line 1" not in line, line
    assert "interrupted while waiting for the cell's blocks on the cluster" in line, line
    assert "futures on the cluster cancelled, nothing committed" in line, line
    assert "blocks 1, 2 of 8 still run on " in line, line
    assert all(w in line for w in workers), (workers, line)
    assert "the next cluster cell waits for them first" in line, line
    reply, text = kernel.run("%%gpu --to-host --cluster --batch-rows 100\nz = x + 1\n"
                             "BLOCK_SECONDS = 0.01")
    assert reply["status"] == "ok", text
    assert time.monotonic() - interrupted > 3  # it did wait for the blocks
    note = re.search(r"note ([\d,.]+) ms waiting for blocks 1, 2 of 8 of In \[\d+\] on "
                     r"(\S+), (\S+) to end first: that cell was interrupted", text)
    assert note is not None, text
    assert float(note.group(1).replace(",", "")) > 1000, text
    outside = re.search(r"([\d.]+) ms outside the busiest worker's blocks", text)
    assert outside is not None and float(outside.group(1)) < 1000, text
    reply, text = kernel.run("print('SAME', bool(np.array_equal(z, x + 1)))")
    assert "SAME True" in text
    # again, and leave the cluster for another while the blocks still run
    msg_id = kernel.kc.execute(LONG_BLOCKS_CELL.replace("y = x * 2", "BLOCK_SECONDS = 20\ny = x"))
    time.sleep(2)
    kernel.km.interrupt_kernel()
    reply = kernel.kc.get_shell_msg(timeout=30)
    assert reply["parent_header"]["msg_id"] == msg_id
    assert "still run on" in reply["content"]["evalue"], reply["content"]["evalue"]
    kernel.run("pass")  # a request right after an error may be aborted by the kernel
    t0 = time.monotonic()
    reply, text = kernel.run("%gpu_cluster local --workers 2", timeout=120)
    switched = time.monotonic() - t0
    assert reply["status"] == "ok", text
    reply, later = kernel.run("time.sleep(5)")  # what the old workers and nannies say late
    assert RED.findall(text + later) == [], text + later
    assert switched < 6, switched  # no 4 s wait for a block that cannot be stopped
    reply, text = kernel.run("%%gpu --quiet --to-host --cluster --batch-rows 100\nz = x + 1",
                             timeout=60)
    assert reply["status"] == "ok", text
    reply, text = kernel.run("print('WAITED', 'waiting for' in ' '.join("
                             "cupy_magic.last_report().notes))")
    assert "WAITED False" in text, text  # those blocks were another cluster's
    reply, text = kernel.run("%gpu_cluster off")
    assert reply["status"] == "ok", text


LOG_LINE = re.compile(r" - distributed\.\S+ - (WARNING|ERROR) - (.*)")
KILLER_CELLS = {  # the block holding row 500 ends the process of whichever worker runs it
    "dask": "%%gpu --quiet --to-host\nif xd[0, 0] == MARK:\n    os.kill(os.getpid(), 9)\n"
            "y = xd + 1",
    "shm": "%%gpu --quiet --to-host --cluster --batch-rows 100\nif x[0, 0] == MARK:\n"
           "    os.kill(os.getpid(), 9)\ny = x + 1",
}
SETTLE = ("time.sleep(2)\nfrom cupy_magic.cluster import connect\n"
          "connect.client().wait_for_workers(2, timeout=60)")  # the nannies restarted them


def test_a_worker_dying_mid_cell_is_the_cells_one_line_not_distributeds_log_too(kernel):
    """On the kernel's own local cluster, whose scheduler and nannies log into the notebook:
    a worker killed mid-cell is told by the cell's one line alone (distributed's "Removing
    worker", "Couldn't gather", "Restarting worker" lines said it again, in red). A worker
    that dies between cells, and a cluster the user joined, keep distributed's lines."""
    reply, text = kernel.run(
        START + "x = np.random.default_rng(3).random((1000, 4))\n"
        "xd = da.from_array(x, chunks=(100, 4))\nMARK = x[500, 0]", timeout=120)
    assert reply["status"] == "ok", text
    # between cells: nothing of the kind is held back
    reply, text = kernel.run("from cupy_magic.cluster import connect\n"
                             "os.kill(min(connect.client().run(os.getpid).values()), 9)\n"
                             "time.sleep(3)")
    reply, later = kernel.run(SETTLE)
    assert reply["status"] == "ok", later
    assert "Restarting worker" in text + later, text + later
    for how, cell in KILLER_CELLS.items():
        reply, text = kernel.run(cell)
        assert reply["status"] == "error", (how, text)
        line = reply["evalue"]
        assert "\n" not in line and "nothing committed" in line, line
        assert "died during the cell" in line or "ended the process" in line, line
        reply, later = kernel.run(SETTLE)  # what the nannies log after the cell
        assert reply["status"] == "ok", later
        noise = LOG_LINE.findall(text + later)
        assert noise == [], (how, noise)
        assert (text + later).count(line) == 1, text + later
    # a cluster the user started and joined: its logging is the user's, left as it was
    reply, text = kernel.run(
        "%gpu_cluster off\nfrom distributed import LocalCluster\n"
        "uc = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, "
        "host='127.0.0.1', dashboard_address=None)\n"
        "_ = cupy_magic.use_cluster(uc.scheduler_address)", timeout=120)
    assert reply["status"] == "ok", text
    reply, text = kernel.run(KILLER_CELLS["dask"])
    assert reply["status"] == "error", text
    reply, later = kernel.run(SETTLE)
    assert LOG_LINE.search(text + later), text + later
    reply, text = kernel.run("%gpu_cluster off\nuc.close()", timeout=60)
    assert reply["status"] == "ok", text
