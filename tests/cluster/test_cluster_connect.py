"""%gpu_cluster local, show and off on the CPU fallback (a LocalCluster of processes that
leaves no process behind), and leaving a cluster joined by address or by Client."""

from __future__ import annotations

import os
import time

import psutil
import pytest
from IPython.core.error import UsageError

import cupy_magic
from cupy_magic import backend as _backend
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
    if _backend.current().is_gpu:
        pytest.skip("a GPU kernel starts a LocalCUDACluster: the gpu test below")
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


def test_off_closes_the_local_cluster_even_when_its_client_fails_to_close(ip, monkeypatch):
    """A client that fails to close (a timeout under load) no longer leaves the cluster it
    started running: its scheduler and workers are closed all the same, and the client's
    error is shown, not swallowed."""
    if _backend.current().is_gpu:
        pytest.skip("a GPU kernel starts a LocalCUDACluster; the steps are the same")
    ip.run_line_magic("gpu_cluster", "local --workers 1")
    cluster, client = connect._state["cluster"], connect.client()
    pids = list(client.run(os.getpid).values())
    real_close = client.close

    def failing_close(*args, **kwargs):
        real_close(*args, **kwargs)
        raise TimeoutError("the client took too long to close")
    monkeypatch.setattr(client, "close", failing_close)
    with pytest.raises(TimeoutError, match="took too long"):
        ip.run_line_magic("gpu_cluster", "off")
    assert connect.client() is None and cluster.status.name == "closed"
    assert _gone(pids) == []


def _fails(n: int) -> float:
    return 1 / (n - n)


def test_a_failing_block_on_the_local_cluster_shows_only_the_cells_error(ip, capfd):
    """The workers of the local cluster write to this process's terminal: a block that fails
    shows the cell's clean error only, not the worker's "Compute Failed" log of it."""
    import numpy as np

    if _backend.current().is_gpu:
        pytest.skip("the local cluster of a GPU kernel needs dask-cuda; the log is the same")
    ip.run_line_magic("gpu_cluster", "local --workers 2")
    try:
        ip.user_ns["x"] = np.ones((4000, 8))
        result = ip.run_cell("%%gpu --cluster\ny3 = x * 2\nboom = y3[0, 0] / undefined\n")
        assert isinstance(result.error_in_exec, NameError)
        other = connect.client().submit(_fails, 1, key="not-a-cell-block")  # not the tool's
        with pytest.raises(ZeroDivisionError):
            other.result(timeout=30)
        end = time.monotonic() + 10
        err = ""
        while "not-a-cell-block" not in err and time.monotonic() < end:  # logs come late
            time.sleep(0.2)
            err += capfd.readouterr().err
    finally:
        ip.run_line_magic("gpu_cluster", "off")
    assert "Compute Failed" in err and "not-a-cell-block" in err  # other tasks still log
    assert "cupy-magic-" not in err and "run_slot_block" not in err


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


@pytest.mark.gpu
def test_local_on_a_gpu_is_a_local_cuda_cluster_of_cupy_workers_under_the_budget(ip):
    """On the H200: one dask-cuda worker per GPU, cells' blocks in CuPy, the pool limited."""
    pytest.importorskip("dask_cuda")
    import numpy as np

    from cupy_magic import backend

    da = pytest.importorskip("dask.array")
    if backend.current().name != "cupy":
        pytest.skip("the host run is test_local_starts_processes_show_lists_them_and_off_...")
    import cupy

    cupy_magic.set_budget("2GiB")
    started = ip.run_line_magic("gpu_cluster", "local")
    assert started.kind.startswith("LocalCUDACluster")
    assert len(started.workers) == cupy.cuda.runtime.getDeviceCount()
    assert all(w.backend == "cupy" and w.budget != "off" for w in started.workers)
    # the worker's backend installs its own pool (as the kernel's does): its limit
    limits = connect.client().run(
        lambda: __import__("cupy_magic.backend", fromlist=["current"]).current().pool
        .get_limit())
    assert set(limits.values()) == {2 << 30}
    x = np.arange(4000.0).reshape(1000, 4)
    ip.user_ns["xd"] = da.from_array(x, chunks=(250, 4))
    ip.run_cell_magic("gpu", "--quiet", "y = xd * 2\n")
    y = ip.user_ns["y"]
    assert type(y._meta).__module__.startswith("cupy")
    np.testing.assert_array_equal(cupy.asnumpy(y.compute()), x * 2)
    pids = list(connect.client().run(os.getpid).values())
    ip.run_line_magic("gpu_cluster", "off")
    assert _gone(pids) == []
    cupy_magic.set_budget(None)
    gpus = cupy.cuda.runtime.getDeviceCount()
    with pytest.raises(UsageError, match=f"--workers {gpus + 1}: a local GPU cluster"):
        ip.run_line_magic("gpu_cluster", f"local --workers {gpus + 1}")


@pytest.mark.parametrize("line", ["127.0.0.1:1 --timeout 2", "127.0.0.1:1"])
def test_an_address_without_a_scheme_is_named_as_one_with_or_without_a_timeout(ip, line):
    """``--timeout`` was refused as "for joining a scheduler at an address" although the
    target was one (without ``tcp://``): the target is read first, and its fix is its own
    address with the scheme."""
    with pytest.raises(UsageError) as info:
        ip.run_line_magic("gpu_cluster", line)
    msg = str(info.value)
    assert "\n" not in msg and "is for joining" not in msg, msg
    assert "'127.0.0.1:1' has no scheme" in msg and "%gpu_cluster tcp://127.0.0.1:1" in msg
    assert connect.client() is None
