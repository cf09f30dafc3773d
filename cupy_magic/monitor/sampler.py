"""One background sampler for every live panel: NVML, pool and budget figures as samples.

A :class:`Sampler` thread wakes every ``interval`` seconds on a fixed schedule (no drift),
takes one immutable :class:`Sample` per watched device from its :class:`Sources`, keeps two
minutes of history and hands both to its subscribers (the panels). A source that raises, or
returns something other than its figures (``None``), gives :data:`~.nvml.NA` figures for that
sample and a line in ``Sample.errors``; the next good sample is whole again. Each error is
logged once (one line; the traceback only at DEBUG), and never raised or printed into the
user's cells: this module's logger has a ``NullHandler``, so nothing reaches ``stderr`` (the
running cell, in a kernel) unless the user configures logging.

The figures come from :mod:`cupy_magic.monitor.sources`, which reaches CuPy only through the live
backend object; only :mod:`cupy_magic.monitor.nvml` touches NVML.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import sys
import threading
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..lifecycle import on_unload
from ..run.progress import CellProgress
from .gather import WORKER_WAIT, ClusterRows
from .nvml import NA, DeviceReading
from .rows import DeviceRow, WorkerRow
from .sources import (
    POOL_UNAVAILABLE,
    LiveSources,
    PoolFigures,
    arena_figures,
    byte_pair,
    is_instance,
    pool_figures,
    release_cached,
    sampled_row,
    strings_of,
)

__all__ = ["Clock", "ClusterRows", "DeviceRow", "LiveSources", "PoolFigures", "Sample", "Sampler",
           "Subscription", "WorkerRow", "arena_figures", "get_sampler", "pool_figures",
           "release_cached", "sampler_threads", "shared_sampler", "shutdown"]

log = logging.getLogger(__name__)
# A library's logger: without this, Python's last-resort handler would print warnings from the
# sampler thread to stderr, which a kernel shows inside whichever cell runs at the time.
log.addHandler(logging.NullHandler())

DEFAULT_INTERVAL = 0.5
THREAD_NAME = "cupy_magic-sampler"  # every sampler's thread (sampler_threads finds them so)
HISTORY_SECONDS = 120.0
MIN_INTERVAL = 0.05  # shorter spins a core on sampling and drawing
MAX_INTERVAL = 3600.0  # longer is a panel that never moves (and 1e308 overflows Event.wait)
# The thread's waits (between ticks, and for the workers' answers in one) watch its stop
# event: it ends within a source call or a panel draw (ms), and stop()'s join returns then.
# This only bounds an unload held by a call that never returns (NVML stuck in a driver).
STOP_TIMEOUT = 10.0


@dataclass(frozen=True)
class Sample:
    """Everything a panel draws, for one device at one instant.

    ``devices`` has a compact row per visible device when there are several (the detailed
    one included); ``workers`` a row per worker of the cluster in use, read from the
    workers (``None`` without a cluster), and ``cluster`` its scheduler's address.
    """

    time: float
    wall_time: float
    device: int
    backend: str
    reading: DeviceReading
    pool: PoolFigures
    budget: str
    host_used: Any  # bytes, or NA when host memory could not be read
    host_total: Any
    cell: CellProgress | None
    why_no_gpu: str = ""
    nvml_note: str = ""
    errors: tuple[str, ...] = ()
    devices: tuple[DeviceRow, ...] = ()
    workers: tuple[WorkerRow, ...] | None = None
    cluster: str = ""


class Sources(Protocol):
    """Where samples come from; tests inject fakes."""

    def devices(self) -> list[str]: ...
    def reading(self, device: int) -> DeviceReading: ...
    def row(self, device: int) -> DeviceRow: ...
    def pool(self, device: int) -> PoolFigures: ...
    def host(self) -> tuple[int, int]: ...
    def budget(self) -> str: ...
    def cell(self) -> CellProgress | None: ...
    def status(self) -> tuple[str, str, str]: ...


class Clock:
    """Monotonic time and interruptible waiting; tests substitute a fake that jumps."""

    def now(self) -> float:
        return time.monotonic()

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.wait(timeout)


@dataclass(eq=False)
class Subscription:
    """One panel's interest: the device it shows and the callback that draws a sample."""

    callback: Callable[[Sample, Sequence[Sample]], None]
    device: int = 0
    id: int = field(default_factory=itertools.count().__next__)


class Sampler:
    """The background thread that samples watched devices on a fixed schedule.

    Parameters
    ----------
    sources
        Where figures come from (default :class:`LiveSources`).
    interval
        Seconds between samples.
    clock
        Time source and waiter (default monotonic time and ``Event.wait``).
    history_seconds
        How much history to keep per device.
    workers
        The cluster's per-worker rows (default: those of the cluster in use).
    """

    def __init__(self, sources: Sources | None = None, interval: float = DEFAULT_INTERVAL,
                 clock: Clock | None = None, history_seconds: float = HISTORY_SECONDS,
                 workers: ClusterRows | None = None) -> None:
        self.sources: Sources = sources if sources is not None else LiveSources()
        self.workers = workers if workers is not None else ClusterRows()
        self.clock = clock or Clock()
        self.history_seconds = history_seconds
        self._interval = self.check_interval(interval)
        self._subs: list[Subscription] = []
        self._history: dict[int, deque[Sample]] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._paused = False
        self._thread: threading.Thread | None = None
        self._logged: set[str] = set()
        self.ticks = 0

    @staticmethod
    def check_interval(interval: float) -> float:
        """Return ``interval`` as a float, or raise ``ValueError`` outside the allowed range."""
        ok = isinstance(interval, (int, float)) and not isinstance(interval, bool) \
            and MIN_INTERVAL <= interval <= MAX_INTERVAL
        if not ok:  # NaN fails both comparisons
            raise ValueError(f"the sampling interval must be between {MIN_INTERVAL:g} and "
                             f"{MAX_INTERVAL:g} seconds, got {interval!r}; e.g. "
                             f"{DEFAULT_INTERVAL}")
        return float(interval)

    # --- control ------------------------------------------------------------------------
    @property
    def interval(self) -> float:
        return self._interval

    @interval.setter
    def interval(self, seconds: float) -> None:
        self._interval = self.check_interval(seconds)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def paused(self) -> bool:
        return self._paused

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False

    def subscribe(self, callback: Callable[[Sample, Sequence[Sample]], None],
                  device: int = 0) -> Subscription:
        """Start delivering samples of ``device`` to ``callback``; starts the thread."""
        sub = Subscription(callback, device)
        with self._lock:
            self._subs.append(sub)
        self.start()
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Stop delivering to ``sub``; the thread stops when no subscriber is left (checked
        as it is told to stop: a subscribe() on another thread keeps it, or starts anew)."""
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)
            if self._subs:
                return
        self.stop(only_idle=True)

    @property
    def subscriptions(self) -> tuple[Subscription, ...]:
        with self._lock:
            return tuple(self._subs)

    def start(self) -> None:
        with self._lock:
            if self.running:
                return
            self._stop = stop = threading.Event()
            # its own event: read later from self, it could be the next start()'s
            thread = threading.Thread(target=self._run, args=(stop,), name=THREAD_NAME,
                                      daemon=True)
            # At interpreter exit only ask the thread to stop; never join from a finalizer.
            weakref.finalize(thread, stop.set)
            self._thread = thread
            thread.start()

    def stop(self, timeout: float = STOP_TIMEOUT, only_idle: bool = False) -> None:
        """Stop the thread and wait for it to end, at most ``timeout`` seconds (no wait when
        called from the thread itself; ``only_idle``: not if it has subscribers); a thread
        still running then is logged as a warning with what it is doing (it ends when that
        returns)."""
        with self._lock:  # as start(): one that came between the two would be orphaned
            if only_idle and self._subs:
                return
            self._stop.set()
            thread, self._thread = self._thread, None
        if thread is None or thread is threading.current_thread():
            return
        thread.join(timeout)
        if thread.is_alive():
            frame = sys._current_frames().get(thread.ident or -1)
            where = " < ".join(f"{f.name} ({os.path.basename(f.filename)}:{f.lineno})"
                               for f in traceback.extract_stack(frame)[:-4:-1]) if frame else "?"
            log.warning("thread %s still runs %.1f s after it was asked to stop, in %s; it "
                        "ends when that returns", thread.name, timeout, where)

    # --- sampling -----------------------------------------------------------------------
    def history(self, device: int) -> tuple[Sample, ...]:
        with self._lock:
            return tuple(self._history.get(device, ()))

    def _log_once(self, key: str, message: str, exc: BaseException | None = None) -> None:
        """Log ``message`` the first time ``key`` (a source and an error kind) fails."""
        if key in self._logged:
            return
        self._logged.add(key)
        log.warning("sampler %s (logged once)", message)
        if exc is not None:
            log.debug("sampler %s", message, exc_info=exc)

    def _guard(self, what: str, errors: list[str], func: Callable[[], Any], default: Any,
               valid: Callable[[Any], bool] | None = None) -> Any:
        """``func()``, or ``default`` with a line in ``errors`` if it raises or is not
        ``valid``; never raises."""
        try:
            value = func()
        except Exception as exc:  # a sampler must outlive any source failure; it is reported
            message = f"{what}: {type(exc).__name__}: {exc}".split("\n")[0]
            errors.append(message)
            self._log_once(f"{what}: {type(exc).__name__}", message, exc)
            return default
        if valid is not None and not valid(value):
            shown = repr(value)
            shown = shown if len(shown) <= 40 else f"{shown[:37]}..."
            message = f"{what}: the source returned {shown}"
            errors.append(message)
            self._log_once(f"{what}: {type(value).__name__}", message)
            return default
        return value

    def sample(self, device: int = 0, workers_wait: float | None = None,
               stop: threading.Event | None = None) -> Sample:
        """Take one sample of ``device`` now (in the calling thread); never raises.

        A source that fails gives :data:`~.nvml.NA` figures (never zeros it did not read).
        With several devices, every one gets a compact row. The cluster's workers are asked
        again, waiting at most ``workers_wait`` seconds and not once ``stop`` is set;
        ``None`` shows their last answers and asks nothing (a redraw on the main thread).
        """
        src, guard = self.sources, self._guard
        errors: list[str] = []
        backend, why, nvml_note = guard("status", errors, src.status, (NA, "", ""),
                                        strings_of(3))
        reading = guard("nvml", errors, lambda: src.reading(device), DeviceReading(),
                        is_instance(DeviceReading))
        pool = guard("pool", errors, lambda: src.pool(device), POOL_UNAVAILABLE,
                     is_instance(PoolFigures))
        host_used, host_total = guard("host memory", errors, src.host, (NA, NA), byte_pair)
        budget = guard("budget", errors, src.budget, NA, is_instance(str))
        cell = guard("cell", errors, src.cell, None, is_instance((CellProgress, type(None))))
        count = len(guard("devices", errors, src.devices, [], is_instance(list)))
        rows = tuple(
            sampled_row(device, backend, reading, pool, budget) if i == device
            else guard(f"device {i}", errors, lambda i=i: src.row(i), DeviceRow(i),
                       is_instance(DeviceRow))
            for i in range(count)) if count > 1 else ()
        workers = guard("cluster workers", errors,
                        lambda: self.workers.last() if workers_wait is None
                        else self.workers.read(workers_wait, stop=stop), None)
        return Sample(
            time=self.clock.now(), wall_time=time.time(), device=device, backend=backend,
            reading=reading, pool=pool, budget=budget, host_used=host_used,
            host_total=host_total, cell=cell, why_no_gpu=why, nvml_note=nvml_note,
            errors=tuple(errors), devices=rows, workers=workers,
            cluster=self.workers.address if workers is not None else "",
        )

    def tick(self, stop: threading.Event | None = None) -> None:
        """Sample every watched device once and deliver the samples; the workers' answers
        are not waited for once ``stop`` is set (the thread's stop event)."""
        subs = self.subscriptions
        wait = min(WORKER_WAIT, self._interval)
        for device in dict.fromkeys(s.device for s in subs):
            sample = self.sample(device, workers_wait=wait, stop=stop)
            with self._lock:
                ring = self._history.setdefault(device, deque())
                ring.append(sample)
                while ring and ring[0].time < sample.time - self.history_seconds:
                    ring.popleft()
                history = tuple(ring)
            for sub in subs:
                if sub.device == device:
                    self._deliver(sub, sample, history)
        self.ticks += 1

    def _deliver(self, sub: Subscription, sample: Sample, history: tuple[Sample, ...]) -> None:
        self._guard("panel update", [], lambda: sub.callback(sample, history), None)

    def _run(self, stop: threading.Event) -> None:
        clock = self.clock
        deadline = clock.now()
        try:
            while True:
                deadline += self._interval
                late = clock.now() - deadline
                if late > 0:
                    # Fell behind (a slow sample, a suspended laptop): skip missed ticks
                    # instead of bursting to catch up.
                    deadline += math.ceil(late / self._interval) * self._interval
                if clock.wait(stop, max(0.0, deadline - clock.now())):
                    break
                if not self._paused:
                    # Sources and panels are guarded already; this keeps the thread alive
                    # (and its traceback out of the user's cell) whatever else goes wrong.
                    self._guard("tick", [], lambda: self.tick(stop), None)
        finally:
            log.debug("sampler thread stopped after %d ticks", self.ticks)


_shared: Sampler | None = None
_shared_lock = threading.Lock()


def sampler_threads() -> list[threading.Thread]:
    """The samplers' threads alive in this process (any sampler's, by :data:`THREAD_NAME`)."""
    return [t for t in threading.enumerate() if t.name == THREAD_NAME and t.is_alive()]


def get_sampler(interval: float | None = None, sources: Sources | None = None) -> Sampler:
    """The one sampler shared by every panel; ``interval`` changes its period. A new one
    reads ``sources`` (default: new :class:`LiveSources`); a running one keeps its own."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Sampler(sources, DEFAULT_INTERVAL if interval is None else interval)
            on_unload(shutdown)
        elif interval is not None:
            _shared.interval = interval
        return _shared


def shared_sampler() -> Sampler | None:
    """The sampler the panels share, or ``None`` before the first panel (or after unload)."""
    return _shared


def shutdown() -> None:
    """Stop the shared sampler and forget it (run at ``%unload_ext``)."""
    global _shared
    with _shared_lock:
        sampler, _shared = _shared, None
    if sampler is not None:
        sampler.stop()
