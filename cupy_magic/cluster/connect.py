"""The cluster in use: a local one this kernel started, or one it joined (an address or a
``distributed.Client``); what its workers run cells on.

``local`` starts ``dask_cuda.LocalCUDACluster`` (one worker per visible GPU) when the kernel
runs on a GPU, and a ``distributed.LocalCluster`` of worker processes on loopback on the CPU
fallback. Every worker gets :class:`~cupy_magic.cluster.worker.BudgetPlugin`.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import re
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .. import lifecycle
from ..backend import Backend
from ..units import format_bytes, short_repr, whole
from . import abandoned, deathlog, shm, transport
from .worker import worker_facts

__all__ = ["CONNECT_TIMEOUT", "LOCAL_CPU_WORKERS", "ClusterError", "ClusterStatus",
           "ClusterTypeError", "ClusterValueError", "WorkerFacts", "client", "close",
           "ensure_budget", "in_use", "leave_unreachable", "live", "status", "use"]

CONNECT_TIMEOUT = 10  # seconds to reach a scheduler before giving up
LOCAL_CPU_WORKERS = 2  # worker processes of ``local`` on the CPU fallback (at most the cores)
INSTALL = "pip install 'cupy-magic[dask]'"


class ClusterError(RuntimeError):
    """The cluster cannot be used as asked; the message names the value and the fix."""


class ClusterValueError(ClusterError, ValueError):
    """A value the cluster calls refuse (``n_workers=0``, ``'lcoal'``), a ``ValueError`` as
    the package's other functions raise for one."""


class ClusterTypeError(ClusterError, TypeError):
    """A value of a type the cluster calls refuse (``use_cluster(3)``), a ``TypeError``."""


@dataclass(frozen=True)
class WorkerFacts:
    """One worker as ``%gpu_cluster show`` lists it."""

    address: str
    backend: str
    device: str
    total_bytes: int
    budget: str
    nthreads: int | None = None

    def describe(self) -> str:
        unit = "VRAM" if self.backend == "cupy" else "host memory (CPU fallback)"
        threads = f", {self.nthreads} thread{'s' * (self.nthreads != 1)}" \
            if self.nthreads else ""
        return (f"{self.address}: {self.device} [{self.backend}], {format_bytes(self.total_bytes)}"
                f" {unit}, budget {self.budget}{threads}")


@dataclass(frozen=True)
class ClusterStatus:
    """The cluster in use (``%gpu_cluster show``), or none."""

    kind: str = ""
    address: str = ""
    workers: list[WorkerFacts] = field(default_factory=list)

    def describe(self) -> str:
        """One line: which cluster is in use, or that cells run in this kernel."""
        if not self.kind:
            return "cluster: none (cells run in this kernel; %gpu_cluster local starts one)"
        n = len(self.workers)
        return f"cluster: {self.kind} at {self.address}, {n} worker{'s' * (n != 1)}"

    def __str__(self) -> str:
        return "\n".join([self.describe(), *(f"  {w.describe()}" for w in self.workers)])

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))


# owned: this kernel opened the client (local, or an address), so leaving closes it; a
# Client handed to use() is the caller's and stays open
_state: dict[str, Any] = {"client": None, "cluster": None, "kind": "", "budget": None,
                          "owned": False, "address": ""}


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise ClusterError(f"a cluster needs dask and distributed, which are not installed; "
                           f"{INSTALL}") from None
    return distributed


def client() -> Any:
    """The ``distributed.Client`` in use, or ``None``."""
    return _state["client"]


@contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Start worker processes with SIGINT ignored (they inherit it): Jupyter interrupts a
    kernel by signalling its whole process group, which would kill a local cluster's
    workers at the first Ctrl-C instead of only stopping the cell."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def in_use() -> str:
    """Which cluster is in use, in words without asking its workers (``""`` for none)."""
    return "" if _state["client"] is None else f"{_state['kind']} at {_state['address']}"


def live() -> Any:
    """The ``distributed.Client`` in use, checked to be connected; ``None`` for none.

    Raises
    ------
    ClusterError
        When its client is closed or reconnecting (:func:`leave_unreachable` says why and the fix).
    """
    c = _state["client"]
    if c is None or c.status == "running":
        return c
    raise ClusterError(leave_unreachable())


def leave_unreachable() -> str:
    """Leave the cluster in use if its client was closed (``client.close()``,
    ``cluster.close()``), as ``%gpu_cluster off`` does, and say why it cannot be reached, with
    the fix; one whose client is reconnecting is kept (its scheduler may come back)."""
    c, where = _state["client"], in_use()
    if c is not None and c.status in ("connecting", "newly-created"):
        return (f"the scheduler of the cluster in use ({where}) does not answer (its client "
                "is reconnecting: the scheduler was closed or the network is down); run the "
                "cell again once it is back, or leave it with %gpu_cluster off and start one "
                "with %gpu_cluster local")
    close()
    return (f"the cluster in use ({where}) was closed outside cupy_magic (its client is "
            f"{getattr(c, 'status', 'gone')}: client.close() or cluster.close()); cupy_magic "
            "has left it: start another with %gpu_cluster local, or join one with "
            "%gpu_cluster tcp://HOST:8786")


# No dashboard; the scheduler's HTTP server (health and metrics) still starts, on port 8787
# unless told otherwise, and warns in the cell when another cluster or notebook holds that
# port: a free port instead, which nobody needs to know.
_QUIET_SCHEDULER = {"dashboard_address": None, "scheduler_kwargs": {"dashboard_address": ":0"}}


def _start_local(be: Backend, n_workers: int | None) -> tuple[Any, str]:
    distributed = _distributed()
    if be.is_gpu:
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError:
            raise ClusterError("%gpu_cluster local on a GPU needs dask-cuda, which is not "
                               "installed; pip install 'cupy-magic[dask-cuda]' (or join a "
                               "cluster: %gpu_cluster tcp://HOST:8786)") from None
        gpus = be.device_count()
        if n_workers is not None and not 1 <= n_workers <= gpus:
            raise ClusterValueError(f"--workers {n_workers}: a local GPU cluster has one worker "
                                    f"per GPU and this machine shows {gpus}; give --workers 1 "
                                    f"to {gpus}, or %gpu_backend host first for a cluster of "
                                    "CPU processes")
        with _sigint_ignored():  # its keywords reach LocalCluster's
            cluster = LocalCUDACluster(n_workers=n_workers, **_QUIET_SCHEDULER)
        return cluster, "LocalCUDACluster (one worker per GPU)"
    workers = n_workers or max(1, min(LOCAL_CPU_WORKERS, os.cpu_count() or 1))
    with _sigint_ignored():
        cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1,
                                           processes=True, host="127.0.0.1",
                                           **_QUIET_SCHEDULER)
    return cluster, "local CPU cluster (LocalCluster of processes, CPU fallback)"


_HOST_PORT = re.compile(r"^[\w.\-\[\]:]+:\d+$")  # 10.0.0.5:8786, [::1]:8786: no scheme


def _address(target: str) -> str:
    """``target`` as a scheduler address, refused when it is none."""
    text = str(target).strip()
    if "://" in text:
        return text
    if _HOST_PORT.match(text):
        raise ClusterValueError(f"{text!r} has no scheme; a scheduler address is written "
                                f"with one, e.g. tcp://{text} (%gpu_cluster tcp://{text}, "
                                f"use_cluster('tcp://{text}'))")
    raise ClusterValueError(f"{text!r} is not a scheduler address; give one such as "
                            "tcp://10.0.0.5:8786, or local, off or show")


def _join(target: Any, timeout: float) -> tuple[Any, str]:
    distributed = _distributed()
    if isinstance(target, distributed.Client):
        return target, "a Client's cluster"
    text = _address(target)
    try:
        return distributed.Client(text, timeout=timeout), "joined cluster"
    except (OSError, TimeoutError) as exc:
        why = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise ClusterError(f"cannot reach a Dask scheduler at {text} within {timeout:g} s "
                           f"({why}); check the address the scheduler printed, or start one "
                           "here with %gpu_cluster local (use_cluster('local') from Python)"
                           ) from None


def use(target: Any, be: Backend, *, n_workers: int | None = None,
        timeout: float | None = None) -> ClusterStatus:
    """Start (``"local"``), join (an address or a ``Client``) or leave (``None``/``"off"``)
    a cluster, or only show it (``"show"``); return :func:`status`."""
    word = target.strip().lower() if isinstance(target, str) else None  # local, off, show
    local = word == "local"
    _check_target(target, word)  # what the target is first: the options' checks read it
    if timeout is not None and not (word is not None and "://" in word):
        raise ClusterValueError(f"timeout={short_repr(timeout)} is for joining a scheduler at "
                                "an address (local starts its own, a Client is joined already); "
                                f"e.g. %gpu_cluster tcp://HOST:8786 --timeout {CONNECT_TIMEOUT} "
                                f"(use_cluster('tcp://HOST:8786', timeout={CONNECT_TIMEOUT}))")
    timeout = CONNECT_TIMEOUT if timeout is None else timeout
    if n_workers is not None and not local:
        raise ClusterValueError(f"n_workers={short_repr(n_workers)} is for a local cluster "
                                "only (an address or a Client brings its workers); e.g. "
                                f"%gpu_cluster local --workers {LOCAL_CPU_WORKERS} (use_cluster("
                                f"'local', n_workers={LOCAL_CPU_WORKERS}))")
    if target is None or word == "off":
        close()
        return status()
    if word == "show":
        return status()  # as %gpu_cluster show
    _check(n_workers, timeout)  # before close(): a bad call keeps the cluster
    n_workers, timeout = whole(n_workers), float(timeout)
    close()
    if local:
        cluster, kind = _start_local(be, n_workers)
        _state.update(cluster=cluster, client=_distributed().Client(cluster), kind=kind,
                      owned=True)
        _state["address"] = str(_state["client"].scheduler.address)
        from .plugin import QuietPlugin  # its workers share this terminal: no block's log

        _state["client"].register_plugin(QuietPlugin(), name=QuietPlugin.name)
        deathlog.install()  # its scheduler and nannies log here: not what a cell's line says
    else:
        joined, kind = _join(target, timeout)
        _state.update(client=joined, kind=kind, owned=joined is not target,
                      address=str(joined.scheduler.address))
    lifecycle.on_unload(close)
    ensure_budget(be, force=True)
    return status()


def _check_target(target: Any, word: str | None) -> None:
    """Refuse a target that is neither a word, an address nor a ``Client`` (a
    :class:`ClusterTypeError`), or a text that is no address (a :class:`ClusterValueError`)."""
    if target is None or word in ("local", "off", "show"):
        return
    if isinstance(target, str):
        _address(target)  # refused here, before close(); _join reads it again
    elif not isinstance(target, _distributed().Client):
        raise ClusterTypeError(f"use_cluster({short_repr(target)}): give 'local', an address "
                               "such as 'tcp://10.0.0.5:8786', a distributed.Client, or None "
                               "to leave")


def _check(n_workers: Any, timeout: Any) -> None:
    """Refuse a worker count or timeout that cannot work, naming it and the fix: of another
    type than a number, a :class:`ClusterTypeError`; a number out of range (or not whole), a
    :class:`ClusterValueError`."""
    if n_workers is not None and (whole(n_workers) or 0) < 1:
        error = ClusterValueError if _is_number(n_workers) else ClusterTypeError
        raise error(f"--workers must be a whole number of at least 1, got "
                    f"{short_repr(n_workers)}; e.g. %gpu_cluster local --workers "
                    f"{LOCAL_CPU_WORKERS} (use_cluster('local', n_workers={LOCAL_CPU_WORKERS}))")
    if not _is_number(timeout) or not 0 < timeout < math.inf:
        error = ClusterValueError if _is_number(timeout) else ClusterTypeError
        raise error(f"timeout={short_repr(timeout)} is not a number of seconds above 0; "
                    f"e.g. %gpu_cluster tcp://HOST:8786 --timeout {CONNECT_TIMEOUT} "
                    f"(use_cluster('tcp://HOST:8786', timeout={CONNECT_TIMEOUT}))")


def _is_number(value: Any) -> bool:
    """Whether ``value`` is a real number (not a bool): of the type a count or a timeout is."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def ensure_budget(be: Backend, force: bool = False) -> None:
    """Put the kernel's budget in force on every worker (again when it changed)."""
    c = _state["client"]
    if c is None or (not force and _state["budget"] == be.budget):
        return
    local = _state["cluster"] is not None
    backend = ("cupy" if be.is_gpu else "host") if local else None
    from .plugin import BudgetPlugin

    c.register_plugin(BudgetPlugin(backend, be.budget), name=BudgetPlugin.name)
    _state["budget"] = be.budget


def status() -> ClusterStatus:
    """The cluster in use and its workers (asks each worker), or an empty status; a
    :class:`ClusterError` when it cannot be reached (:func:`live`)."""
    c = live()
    if c is None:
        return ClusterStatus()
    facts = c.run(worker_facts)
    workers = [WorkerFacts(addr, f["backend"], f["device"], f["total_bytes"], f["budget"],
                           f["nthreads"]) for addr, f in sorted(facts.items())]
    return ClusterStatus(_state["kind"], _state["address"], workers)


def close() -> None:
    """Leave the cluster in use: unlink the shared-memory slots (:func:`.shm.release`),
    close the client this kernel opened (``local`` or an address; a ``Client`` passed in
    stays open) and the cluster it started."""
    c, cluster, owned = _state["client"], _state["cluster"], _state["owned"]
    _state.update(client=None, cluster=None, kind="", budget=None, owned=False, address="")
    steps = [transport.forget, abandoned.forget, deathlog.uninstall,
             shm.release]  # the workers close their slots while the client still reaches them
    if cluster is not None and c is not None:
        steps.append(lambda: _stop_busy_workers(c, cluster))
    if c is not None and owned:
        steps.append(c.close)
    if cluster is not None:
        steps.append(cluster.close)
    failed: BaseException | None = None
    for step in steps:  # every step, whatever failed before: a cluster left running (its
        try:  # scheduler and worker processes) would outlive the kernel's use of it
            step()
        except Exception as exc:
            failed = failed or exc
    if failed is not None:
        raise failed


STOP_SECONDS = 10.0  # for a busy worker to stop before its nanny kills it


def _stop_busy_workers(c: Any, cluster: Any) -> None:
    """Stop the workers of the kernel's own cluster, when they still run blocks of an
    interrupted cell, without waiting for those blocks (a running block cannot be stopped,
    and its cell is gone); then the cluster closes as usual. Closed as usual at once, each
    nanny asked such a worker to close, waited 4 s for its thread, killed it and said so in
    red, and the worker's own log said so again."""
    from .plugin import TASK_PREFIX

    if abandoned.running(c, TASK_PREFIX):
        with contextlib.suppress(Exception):  # what could not stop, cluster.close() kills
            cluster.sync(_stop_now, list(cluster.workers.values()))


async def _stop_now(nannies: list[Any]) -> None:
    """Tell each nanny that its worker leaves for good (no restart), and stop the worker
    through the nanny's own channel, without waiting for its executor's threads."""
    import asyncio

    async def stop(nanny: Any) -> None:
        process = getattr(nanny, "process", None)
        if process is None or not hasattr(nanny, "close_gracefully"):
            return  # a worker in this process, or one stopped already
        nanny.close_gracefully(reason="cupy-magic: the kernel leaves its cluster")
        await process.kill(timeout=STOP_SECONDS, executor_wait=False,
                           reason="cupy-magic: the kernel leaves its cluster")

    await asyncio.gather(*(stop(n) for n in nannies))
