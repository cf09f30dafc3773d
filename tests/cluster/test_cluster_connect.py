"""%gpu_cluster local, show and off on the CPU fallback (a LocalCluster of processes that
leaves no process behind), and leaving a cluster joined by address or by Client."""

from __future__ import annotations

import os
import time

import psutil
import pytest

import cupy_magic
from cupy_magic.cluster import connect


def _gone(pids: list[int], timeout: float = 20.0) -> list[int]:
    """The processes of ``pids`` still alive after ``timeout`` seconds (zombies count gone)."""
    end = time.monotonic() + timeout
    while True:
        alive = [p for p in pids if psutil.pid_exists(p)
                 and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive or time.monotonic() > end:
            return alive
        time.sleep(0.2)


def _scheduler_clients(client) -> int:
    return client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.clients))


def test_local_starts_processes_show_lists_them_and_off_leaves_none(ip):
    started = ip.run_line_magic("gpu_cluster", "local --workers 2")
    assert "LocalCluster of processes" in started.kind and len(started.workers) == 2
    shown = ip.run_line_magic("gpu_cluster", "show")
    assert [w.address for w in shown.workers] == [w.address for w in started.workers]
    assert all(w.address.startswith("tcp://127.0.0.1:") and w.backend == "host"
               for w in shown.workers)
    assert shown.address in str(shown) and "2 workers" in str(shown)
    assert "cluster: local CPU cluster" in cupy_magic.session.describe_device()
    pids = list(connect.client().run(os.getpid).values())
    me = psutil.Process()
    assert len(set(pids)) == 2 and all(p != me.pid for p in pids)
    assert set(pids) <= {c.pid for c in me.children(recursive=True)}
    cluster = connect._state["cluster"]
    assert ip.run_line_magic("gpu_cluster", "off").kind == ""
    assert connect.client() is None and cluster.status.name == "closed"
    assert _gone(pids) == []
    assert "cluster" not in cupy_magic.session.describe_device()


def test_leaving_a_joined_address_closes_the_client_this_kernel_opened(ip, local_client):
    before = _scheduler_clients(local_client)
    ip.run_line_magic("gpu_cluster", local_client.scheduler.address)
    mine = connect.client()
    assert mine is not local_client and mine.status == "running"
    assert _scheduler_clients(local_client) == before + 1
    ip.run_line_magic("gpu_cluster", "off")
    assert mine.status == "closed"
    end = time.monotonic() + 10
    while _scheduler_clients(local_client) > before and time.monotonic() < end:
        time.sleep(0.1)
    assert _scheduler_clients(local_client) == before


def test_leaving_a_client_passed_in_leaves_it_open(ip, local_client):
    cupy_magic.use_cluster(local_client)
    assert connect.client() is local_client
    cupy_magic.use_cluster("off")
    assert connect.client() is None and local_client.status == "running"
    assert local_client.submit(sum, [1, 2]).result(timeout=30) == 3


@pytest.fixture(autouse=True)
def _left(ip):
    yield
    cupy_magic.use_cluster("off")
