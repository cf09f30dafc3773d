"""``%gpu_cluster local`` while another process holds port 8787 (a second notebook's cluster,
a colleague's on a shared host): the cell shows the cluster, not distributed's warning that
"Port 8787 is already in use" (UI review, helper-s16j: it came up red under the cell)."""

from __future__ import annotations

import socket
import warnings
from collections.abc import Iterator

import pytest

from cupy_magic import backend as _backend


@pytest.fixture
def port_8787_taken() -> Iterator[None]:
    """Port 8787 held for the test (by this socket, or already by someone else)."""
    holder = socket.socket()
    try:
        holder.bind(("", 8787))
        holder.listen()
    except OSError:
        pass  # already taken: the same situation
    try:
        yield
    finally:
        holder.close()


def test_a_local_cluster_starts_quietly_when_port_8787_is_taken(ip, port_8787_taken, capfd):
    if _backend.current().is_gpu:  # a GPU kernel starts a LocalCUDACluster: the same keywords
        pytest.importorskip("dask_cuda", reason="a GPU kernel's local cluster needs dask-cuda")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            started = ip.run_line_magic("gpu_cluster", "local --workers 1")
        finally:
            ip.run_line_magic("gpu_cluster", "off")
    assert len(started.workers) == 1
    said = [str(w.message) for w in caught] + [capfd.readouterr().err]
    assert not [s for s in said if "already in use" in s], said
