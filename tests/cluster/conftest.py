"""A real ``distributed.LocalCluster`` of 2 worker processes on loopback, shared by a test
module and closed after it; each test joins it through ``cupy_magic.use_cluster``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

distributed = pytest.importorskip("distributed")
pytest.importorskip("dask.array")

import cupy_magic  # noqa: E402 - after the skips: the cluster layer needs distributed
from cupy_magic.cluster import connect, transport  # noqa: E402


@pytest.fixture(scope="module")
def local_client() -> Iterator:
    # the scheduler's HTTP server on a free port, as %gpu_cluster local's: on 8787, taken by
    # another cluster, it warns (and distributed leaves its first socket unclosed)
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       host="127.0.0.1", **connect._QUIET_SCHEDULER)
    try:
        client = distributed.Client(cluster, timeout=30)
        try:
            yield client
        finally:
            client.close(timeout=30)
    finally:  # a cluster left running would count against later modules' host budgets
        cluster.close(timeout=30)


@pytest.fixture
def joined(ip, local_client) -> Iterator:
    """The shell ``ip`` with the module's cluster in use."""
    cupy_magic.use_cluster(local_client)
    yield local_client
    cupy_magic.use_cluster("off")


@pytest.fixture
def shm_only() -> Iterator[None]:
    """For a test of the shared-memory slots: on a GPU whose workers share this kernel's GPU
    the blocks would go by CUDA IPC (test_cluster_ipc.py tests that path)."""
    before = transport.use_ipc(False)
    yield
    transport.use_ipc(before)
