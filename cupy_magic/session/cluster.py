"""``%gpu_cluster`` as functions: the Dask cluster cells run on, and when a cell goes there."""

from __future__ import annotations

from typing import Any

from .. import backend as _backend
from ..cluster import connect
from ..cluster.connect import ClusterError, ClusterStatus
from ..cluster.execute import ClusterExecutor
from ..cluster.inputs import dask_inputs
from ..run.batching import BatchOptions

__all__ = ["ClusterError", "ClusterStatus", "cluster_remote", "cluster_status", "use_cluster"]


def use_cluster(target: Any = "local", *, n_workers: int | None = None,
                timeout: float | None = None) -> ClusterStatus:
    """Run ``%%gpu`` cells over Dask arrays on a cluster (``%gpu_cluster``).

    Parameters
    ----------
    target
        ``"local"``: start ``dask_cuda.LocalCUDACluster`` (one worker per GPU) on a GPU, a
        ``distributed.LocalCluster`` of worker processes on loopback on the CPU fallback;
        an address (``"tcp://10.0.0.5:8786"``) or a ``distributed.Client``: join that
        cluster; ``None`` or ``"off"``: leave it (a local one is closed); ``"show"``: change
        nothing.
    n_workers
        Worker processes of a local CPU cluster (default
        :data:`~cupy_magic.cluster.connect.LOCAL_CPU_WORKERS`, at most the cores); on a GPU,
        how many GPUs get a worker (default all; more than the GPUs is refused).
    timeout
        Seconds to reach a scheduler at an address (default
        :data:`~cupy_magic.cluster.connect.CONNECT_TIMEOUT`); refused with any other target.

    Returns
    -------
    ClusterStatus
        The cluster and its workers (backend, device, memory, budget), as
        :func:`cluster_status`.

    Raises
    ------
    ValueError
        A target, ``n_workers`` or ``timeout`` that cannot be used (``'lcoal'``,
        ``n_workers=0``, an address without ``tcp://``, a timeout without an address).
    TypeError
        One of a type that cannot be (``use_cluster(3)``, ``n_workers='2'``).
    cupy_magic.cluster.connect.ClusterError
        When Dask is missing or the scheduler cannot be reached (the two above are
        ClusterErrors too); the message says the fix.
    """
    return connect.use(target, _backend.current(), n_workers=n_workers, timeout=timeout)


def cluster_status() -> ClusterStatus:
    """The cluster in use and its workers (``%gpu_cluster show``), or an empty status."""
    return connect.status()


def cluster_remote(source: str, namespace: dict[str, Any], cluster: bool,
                   batch: BatchOptions | None, fallback: bool,
                   syncs: str) -> ClusterExecutor | None:
    """The executor a cell runs on: the cluster's when it reads Dask arrays or asks for
    ``--cluster``; ``None`` runs it in this kernel.

    Whether a cluster is in use is the executor's to check when it is called: the cell is
    compiled by then, so a syntax error is reported first, as a plain cell reports it.
    """
    darrs = dask_inputs(source, namespace)
    if not (darrs or cluster):
        return None
    return ClusterExecutor(darrs, batch, cluster, source, fallback, syncs)
