"""The panel's per-worker rows, asked of the workers of the cluster in use.

Once a second (:data:`WORKER_EVERY`) the sampler thread asks the scheduler which workers
there are and each worker for its :func:`~.workers.worker_reading` (``Client.run``, one
call per worker so that a slow worker delays no other), and waits for the answers at most
``wait`` seconds. A question is asked in a daemon thread of its own and at most one per
worker (and one listing) is in flight: a worker that does not answer in time reads N/A
("no answer for 3.2 s") without being asked again until it answers or leaves, so a stopped
worker costs one thread, and the panel and the running cell never wait on it. A worker the
scheduler no longer lists is dropped from the rows. The client's own event loop does the
talking; nothing here blocks longer than ``wait``, and a read given the sampler's stop event
returns within :data:`STOP_POLL` of it being set (so a stopping sampler thread does not sit
out the workers' wait)."""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..cluster import connect
from ..cluster.inputs import scheduler_workers
from .rows import WorkerRow
from .workers import worker_reading, worker_row

__all__ = ["STOP_POLL", "WORKER_EVERY", "WORKER_WAIT", "ClusterRows"]

WORKER_WAIT = 0.5  # seconds a tick waits at most for the workers' answers
STOP_POLL = 0.05  # seconds between two looks at the stop event while waiting for answers
# Seconds between two rounds of questions: each costs the kernel about 1 ms of CPU for the
# listing and 2 ms per worker (Client.run through the client's event loop; measured on 2
# cores with a LocalCluster of 2 processes), so the rows follow the workers once a second
# while the device figures follow every tick.
WORKER_EVERY = 1.0


@dataclass
class _Question:
    future: cf.Future
    since: float


def _ask(call: Callable[[], Any]) -> _Question:
    """Run ``call`` in a daemon thread (it may never return: a stopped worker)."""
    future: cf.Future = cf.Future()

    def run() -> None:
        try:
            future.set_result(call())
        except BaseException as exc:  # the answer is the error, shown in the worker's row
            future.set_exception(exc)

    threading.Thread(target=run, name="cupy_magic-worker-rows", daemon=True).start()
    return _Question(future, time.monotonic())


def _wait(futures: list[cf.Future], deadline: float, stop: threading.Event | None) -> None:
    """Wait until every future is done or ``deadline`` (``time.monotonic()``) passes, and stop
    waiting once ``stop`` is set (looked at every :data:`STOP_POLL` seconds): a future cannot
    wake on an event, and the sampler's stop must not wait for a worker that never answers."""
    pending = list(futures)
    while pending and (stop is None or not stop.is_set()):
        left = deadline - time.monotonic()
        if left <= 0:
            return
        _, not_done = cf.wait(pending, left if stop is None else min(left, STOP_POLL))
        pending = list(not_done)


def _listing(client: Any) -> dict[str, str]:
    """Worker address -> name, as the scheduler lists them now."""
    workers = scheduler_workers(client)
    return {str(addr): str(info.get("name", "")) for addr, info in workers.items()}


def _reading(client: Any, address: str) -> Any:
    return client.run(worker_reading, workers=[address], on_error="return").get(address)


class ClusterRows:
    """The rows of the workers of the cluster in use (``connect.client()``), read from them.

    Parameters
    ----------
    client_of
        Returns the ``distributed.Client`` in use, or ``None`` (tests pass their own).
    every
        Seconds between two rounds of questions; a read sooner gives the last rows.
    """

    def __init__(self, client_of: Callable[[], Any] = connect.client,
                 every: float = WORKER_EVERY) -> None:
        self._client_of, self.every = client_of, every
        self._asked_at = -float("inf")
        self._client: Any = None
        self._names: dict[str, str] = {}
        self._listing: _Question | None = None
        self._asked: dict[str, _Question] = {}
        self._last: tuple[WorkerRow, ...] = ()
        self._lock = threading.Lock()
        self.address = ""  # the scheduler's, of the cluster last read

    def last(self) -> tuple[WorkerRow, ...] | None:
        """The rows of the last :meth:`read`, asking nothing; ``None`` without a cluster."""
        client = self._client_of()
        if client is None:
            return None
        return self._last if client is self._client else ()

    def read(self, wait: float = WORKER_WAIT,
             stop: threading.Event | None = None) -> tuple[WorkerRow, ...] | None:
        """A row per worker, waiting at most ``wait`` seconds for new answers, and no longer
        once ``stop`` is set (workers not heard from read N/A); ``None`` when no cluster is
        in use. Never raises for a worker or a scheduler that fails."""
        client = self._client_of()
        with self._lock:
            if client is not self._client:
                self._client, self._names, self._listing, self._asked = client, {}, None, {}
                self._last, self._asked_at = (), -float("inf")
                self.address = str(getattr(getattr(client, "scheduler", None), "address", ""))
            if client is None:
                return None
            if time.monotonic() - self._asked_at < self.every:
                return self._last
            self._asked_at = time.monotonic()
            deadline = self._asked_at + wait
            listing_note = self._list(client, deadline, stop)
            fresh = [self._asked.setdefault(a, _ask(lambda a=a: _reading(client, a)))
                     for a in self._names if a not in self._asked]
            _wait([q.future for q in fresh], deadline, stop)
            self._last = tuple(self._row(a, listing_note) for a in sorted(self._names))
            return self._last

    def _list(self, client: Any, deadline: float, stop: threading.Event | None) -> str:
        """Update the workers from the scheduler's listing; a note when it did not answer."""
        new = self._listing is None
        if new:
            self._listing = _ask(lambda: _listing(client))
        question = self._listing
        if new:
            _wait([question.future], deadline, stop)
        if not question.future.done():
            return f"the scheduler did not answer for {time.monotonic() - question.since:.1f} s"
        self._listing = None
        error = question.future.exception()
        if error is not None:
            return f"the scheduler: {type(error).__name__}: {error}".split("\n")[0][:120]
        self._names = question.future.result()
        for gone in set(self._asked) - set(self._names):
            del self._asked[gone]
        return ""

    def _row(self, address: str, listing_note: str) -> WorkerRow:
        question = self._asked.get(address)
        name = self._names.get(address, "")
        if question is None or not question.future.done():
            since = time.monotonic() - question.since if question is not None else 0.0
            return WorkerRow(address, name, note=f"no answer for {since:.1f} s")
        del self._asked[address]
        error = question.future.exception()
        row = worker_row(address, error if error is not None else question.future.result(),
                         name)
        return replace(row, note=listing_note) if listing_note else row
