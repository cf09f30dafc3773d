"""One background sampler for every live panel: NVML, pool and budget figures as samples.

A :class:`Sampler` thread wakes every ``interval`` seconds on a fixed schedule (no drift),
takes one immutable :class:`Sample` per watched device from its :class:`Sources`, keeps two
minutes of history and hands both to its subscribers (the panels). Errors of a source or a
subscriber are written into the sample and a log, never raised into the user's cells.

The figures come from :mod:`cupy_magic.monitor.sources`, which reaches CuPy only through the live
backend object; only :mod:`cupy_magic.monitor.nvml` touches NVML.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..lifecycle import on_unload
from ..run.progress import CellProgress
from .nvml import DeviceReading
from .sources import (
    LiveSources,
    PoolFigures,
    arena_figures,
    pool_figures,
    release_cached,
)

__all__ = [
    "Clock",
    "LiveSources",
    "PoolFigures",
    "Sample",
    "Sampler",
    "Subscription",
    "arena_figures",
    "get_sampler",
    "pool_figures",
    "release_cached",
    "shared_sampler",
    "shutdown",
]

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 0.5
HISTORY_SECONDS = 120.0


@dataclass(frozen=True)
class Sample:
    """Everything a panel draws, for one device at one instant."""

    time: float
    wall_time: float
    device: int
    backend: str
    reading: DeviceReading
    pool: PoolFigures
    budget: str
    host_used: int
    host_total: int
    cell: CellProgress | None
    why_no_gpu: str = ""
    nvml_note: str = ""
    errors: tuple[str, ...] = ()


class Sources(Protocol):
    """Where samples come from; tests inject fakes."""

    def devices(self) -> list[str]: ...
    def reading(self, device: int) -> DeviceReading: ...
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
    """

    def __init__(self, sources: Sources | None = None, interval: float = DEFAULT_INTERVAL,
                 clock: Clock | None = None, history_seconds: float = HISTORY_SECONDS) -> None:
        self.sources: Sources = sources if sources is not None else LiveSources()
        self.clock = clock or Clock()
        self.history_seconds = history_seconds
        self._interval = self._check_interval(interval)
        self._subs: list[Subscription] = []
        self._history: dict[int, deque[Sample]] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._paused = False
        self._thread: threading.Thread | None = None
        self._logged: set[str] = set()
        self.ticks = 0

    @staticmethod
    def _check_interval(interval: float) -> float:
        if not interval > 0 or math.isinf(interval):
            raise ValueError(f"the sampling interval must be a positive number of seconds, "
                             f"got {interval!r}; e.g. 0.5")
        return float(interval)

    # --- control ------------------------------------------------------------------------
    @property
    def interval(self) -> float:
        return self._interval

    @interval.setter
    def interval(self, seconds: float) -> None:
        self._interval = self._check_interval(seconds)

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
        """Stop delivering to ``sub``; the thread stops when no subscriber is left."""
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)
            empty = not self._subs
        if empty:
            self.stop()

    @property
    def subscriptions(self) -> tuple[Subscription, ...]:
        with self._lock:
            return tuple(self._subs)

    def start(self) -> None:
        with self._lock:
            if self.running:
                return
            self._stop = threading.Event()
            thread = threading.Thread(target=self._run, name="cupy_magic-sampler", daemon=True)
            # At interpreter exit only ask the thread to stop; never join from a finalizer.
            weakref.finalize(thread, self._stop.set)
            self._thread = thread
            thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the thread and wait for it (unless called from the thread itself)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self._thread = None

    # --- sampling -----------------------------------------------------------------------
    def history(self, device: int) -> tuple[Sample, ...]:
        with self._lock:
            return tuple(self._history.get(device, ()))

    def _guard(self, what: str, errors: list[str], func: Callable[[], Any], default: Any) -> Any:
        try:
            return func()
        except Exception as exc:  # a sampler must outlive any source failure; it is reported
            message = f"{what}: {type(exc).__name__}: {exc}".split("\n")[0]
            errors.append(message)
            if message not in self._logged:
                self._logged.add(message)
                log.warning("sampler %s", message, exc_info=exc)
            return default

    def sample(self, device: int = 0) -> Sample:
        """Take one sample of ``device`` now (in the calling thread); never raises."""
        src = self.sources
        errors: list[str] = []
        backend, why, nvml_note = self._guard("status", errors, src.status, ("?", "", ""))
        reading = self._guard("nvml", errors, lambda: src.reading(device), DeviceReading())
        pool = self._guard("pool", errors, lambda: src.pool(device), PoolFigures())
        host_used, host_total = self._guard("host memory", errors, src.host, (0, 0))
        return Sample(
            time=self.clock.now(), wall_time=time.time(), device=device, backend=backend,
            reading=reading, pool=pool, budget=self._guard("budget", errors, src.budget, "?"),
            host_used=host_used, host_total=host_total,
            cell=self._guard("cell", errors, src.cell, None), why_no_gpu=why,
            nvml_note=nvml_note, errors=tuple(errors),
        )

    def tick(self) -> None:
        """Sample every watched device once and deliver the samples."""
        subs = self.subscriptions
        for device in dict.fromkeys(s.device for s in subs):
            sample = self.sample(device)
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

    def _run(self) -> None:
        clock, stop = self.clock, self._stop
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
                    self.tick()
        finally:
            log.debug("sampler thread stopped after %d ticks", self.ticks)


_shared: Sampler | None = None
_shared_lock = threading.Lock()


def get_sampler(interval: float | None = None) -> Sampler:
    """The one sampler shared by every panel; ``interval`` changes its period."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Sampler(interval=interval or DEFAULT_INTERVAL)
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
