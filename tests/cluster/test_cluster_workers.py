"""The scheduler's list of the cluster's workers (:func:`~cupy_magic.cluster.inputs.
scheduler_workers`), which deals a cell's blocks, picks its transport and names the workers
a failed cell lost, on a real LocalCluster of 2 worker processes: every worker, every time,
from a ``distributed`` with or without ``n_workers``.

``Client.scheduler_info()`` returns the client's cached identity, which the client's own
refresh (``distributed.client.scheduler-info-interval``, 2 s) replaces with one listing no
workers: a refresh landing between that call's fetch and its return read no worker, and a
``--cluster`` cell then went by scatter ("no workers to ask") instead of shared memory. Here
the refresh runs every millisecond, so that window is hit within a few calls."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import cupy_magic
from cupy_magic.cluster.inputs import scheduler_workers, worker_addresses

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")

CALLS = 300  # about a third of them read no worker through the client's cache (1 ms refresh)


@pytest.fixture
def refreshing(local_client) -> Iterator:
    """Another client of the module's cluster, refreshing its cached identity every 1 ms."""
    with dask.config.set({"distributed.client.scheduler-info-interval": "1ms"}):
        client = distributed.Client(local_client.scheduler.address, timeout=30,
                                    set_as_default=False)
    yield client
    client.close(timeout=30)


def test_every_worker_is_read_while_the_client_refreshes_its_cached_identity(refreshing):
    every = tuple(sorted(refreshing.sync(refreshing.scheduler.identity, n_workers=-1)
                         ["workers"]))
    assert len(every) == 2
    seen = [worker_addresses(refreshing) for _ in range(CALLS)]
    assert [s for s in seen if s != every] == []


def test_a_cluster_cell_goes_through_shared_memory_while_the_client_refreshes(ip, refreshing,
                                                                              shm_only):
    """The cells' transport, every time: a cell that read no worker went by scatter."""
    x = np.random.default_rng(3).random((1003, 4))
    ip.user_ns["x"] = x
    cupy_magic.use_cluster(refreshing)
    try:
        ways = []
        for _ in range(25):
            ip.run_cell_magic("gpu", "--quiet --to-host --cluster --batch-rows 250",
                              "y = x * 2\n")
            moved = cupy_magic.last_report().batch.transport
            ways.append(f"{moved.kind} {moved.why}".strip())
            np.testing.assert_array_equal(ip.user_ns.pop("y"), x * 2)
    finally:
        cupy_magic.use_cluster("off")
    assert set(ways) == {"shm"}, ways


def test_every_worker_is_read_from_a_distributed_with_or_without_n_workers(local_client):
    class Older:  # a distributed whose scheduler's identity took no n_workers (it listed all)
        sync = staticmethod(local_client.sync)

        class scheduler:  # the client's attribute of that name
            @staticmethod
            def identity(**kwargs):
                if kwargs:
                    raise TypeError(f"identity() got an unexpected keyword argument "
                                    f"{next(iter(kwargs))!r}")
                return local_client.scheduler.identity(n_workers=-1)

    every = local_client.sync(local_client.scheduler.identity, n_workers=-1)["workers"]
    assert scheduler_workers(local_client).keys() == every.keys() \
        == scheduler_workers(Older()).keys()
    assert worker_addresses(Older()) == tuple(sorted(every)) and len(every) == 2
