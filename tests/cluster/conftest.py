"""A real ``distributed.LocalCluster`` of 2 worker processes on loopback, shared by a test
module and closed after it; each test joins it through ``cupy_magic.use_cluster``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

distributed = pytest.importorskip("distributed")
pytest.importorskip("dask.array")


@pytest.fixture(scope="module")
def local_client() -> Iterator:
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       host="127.0.0.1", dashboard_address=None)
    client = distributed.Client(cluster, timeout=30)
    yield client
    client.close(timeout=30)
    cluster.close(timeout=30)


@pytest.fixture
def joined(ip, local_client) -> Iterator:
    """The shell ``ip`` with the module's cluster in use."""
    import cupy_magic

    cupy_magic.use_cluster(local_client)
    yield local_client
    cupy_magic.use_cluster("off")
