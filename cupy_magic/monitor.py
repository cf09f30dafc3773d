"""One background sampler for every live panel: NVML, pool and budget figures as samples.

A :class:`Sampler` thread wakes every ``interval`` seconds on a fixed schedule (no drift),
takes one immutable :class:`Sample` per watched device from its :class:`Sources`, keeps two
minutes of history and hands both to its subscribers (the panels). Errors of a source or a
subscriber are written into the sample and a log, never raised into the user's cells.

Only this module (besides :mod:`cupy_magic.backend`) touches CuPy, and only through the live
backend object; only :mod:`cupy_magic.nvml` touches NVML.
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

from . import nvml
from .nvml import NA, DeviceReading
from .progress import CellProgress

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
    "shutdown",
    "watch_stream",
]

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 0.5
HISTORY_SECONDS = 120.0


@dataclass(frozen=True)
class PoolFigures:
    """The backend's pool at one instant (bytes); arena figures may be :data:`NA`.

    ``largest_free`` and ``arena_free`` come from the per-stream arenas of a pool that
    exposes them; ``fragmentation_note`` says why they are missing otherwise.
    """

    used: int = 0
    held: int = 0
    limit: int | None = None
    device_used: int = 0
    device_total: int = 0
    free_blocks: Any = NA
    largest_free: Any = NA
    arena_free: Any = NA
    arenas: int = 0
    pinned_free_blocks: Any = NA
    fragmentation_note: str = ""

    @property
    def cached_free(self) -> int:
        return max(0, self.held - self.used)

    @property
    def fragmentation(self) -> Any:
        """1 - largest free block / free bytes: 0 when all free bytes form one block."""
        if not isinstance(self.largest_free, int) or not isinstance(self.arena_free, int):
            return NA
        return 0.0 if self.arena_free == 0 else 1.0 - self.largest_free / self.arena_free


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


# --- pool introspection (CuPy through the backend object) --------------------------------

_watched_streams: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def watch_stream(stream: Any) -> None:
    """Include the arena of ``stream`` (a ``cupy.cuda.Stream``) in the fragmentation figure.

    The pool keeps one arena per stream and does not list them; the legacy default stream
    is always included. Streams are held weakly.
    """
    _watched_streams[int(stream.ptr)] = stream


def _entry_size(entry: Any) -> int:
    # CuPy 14 yields ((size, chunk_address), chunk) or (size, chunk): take the size.
    head = entry[0]
    return int(head[0] if isinstance(head, tuple) else head)


def arena_figures(pool: Any, stream_idents: Sequence[int]) -> tuple[Any, Any, int, str]:
    """Largest free block, free bytes and arena count over the given stream arenas.

    Returns ``(largest, free, arenas, note)``; ``largest`` and ``free`` are NA with a note
    when ``pool`` hides its arenas (CuPy's default ``MemoryPool`` does; a
    ``SingleDeviceMemoryPool`` has ``_debug_arena_get_index`` from CuPy 14.1).
    """
    index_of = getattr(pool, "_debug_arena_get_index", None)
    if index_of is None:
        return NA, NA, 0, "CuPy's default pool hides its arenas"
    largest, free, arenas = 0, 0, 0
    for ident in dict.fromkeys(stream_idents):
        sizes = [_entry_size(e) for e in index_of(ident)]
        if sizes:
            arenas += 1
            largest = max(largest, max(sizes))
            free += sum(sizes)
    return largest, free, arenas, ""


def pool_figures(be: Any, device: int) -> PoolFigures:
    """Read the pool of ``device`` from the backend ``be`` (in any thread)."""
    if not be.is_gpu:
        st = be.stats()
        return PoolFigures(st.used, st.held, st.limit, st.device_used, st.device_total,
                           fragmentation_note="no device pool on the host backend")
    cp = be.cp
    # Pool figures are per current device, and the current device is per thread.
    with cp.cuda.Device(device):
        st = be.stats()
        pool = be.pool
        pinned = cp.get_default_pinned_memory_pool().n_free_blocks()
        idents = [0, *_watched_streams.keys()]
        largest, free, arenas, note = arena_figures(pool, idents)
        return PoolFigures(st.used, st.held, st.limit, st.device_used, st.device_total,
                           free_blocks=int(pool.n_free_blocks()), largest_free=largest,
                           arena_free=free, arenas=arenas, pinned_free_blocks=int(pinned),
                           fragmentation_note=note)


class LiveSources:
    """The real sources: the live backend, NVML, the session budget and the running cell."""

    def __init__(self) -> None:
        self._handles: dict[tuple[str, int], Any] = {}

    def _backend(self) -> Any:
        from . import backend

        return backend.current()

    def _handle(self, device: int) -> Any:
        be = self._backend()
        key = (be.name, device)
        if key not in self._handles:
            if be.is_gpu:
                bus_id = be.cp.cuda.Device(device).pci_bus_id
                self._handles[key] = nvml.handle_for(bus_id)
            else:
                handles = nvml.visible_handles()
                self._handles[key] = handles[device] if device < len(handles) else NA
        return self._handles[key]

    def devices(self) -> list[str]:
        be = self._backend()
        count = be.cp.cuda.runtime.getDeviceCount() if be.is_gpu else len(nvml.visible_handles())
        names = [nvml.query("nvmlDeviceGetName", self._handle(i)) for i in range(count)]
        if not names:
            return [f"0: {be.info().name}"]
        return [f"{i}: {name if name is not NA else 'GPU'}" for i, name in enumerate(names)]

    def reading(self, device: int) -> DeviceReading:
        return nvml.read_device(self._handle(device))

    def pool(self, device: int) -> PoolFigures:
        return pool_figures(self._backend(), device)

    def host(self) -> tuple[int, int]:
        from .backend import HostBackend

        return HostBackend().device_memory()

    def budget(self) -> str:
        from . import session

        spec = session.budget_status().budget
        return spec.describe() if spec is not None else "off"

    def cell(self) -> CellProgress | None:
        from . import progress

        return progress.current()

    def status(self) -> tuple[str, str, str]:
        be = self._backend()
        why = "" if be.is_gpu else (be.info().reason or "host backend chosen")
        return be.name, why, nvml.reason()


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
            import cupy_magic

            cupy_magic.on_unload(shutdown)
        elif interval is not None:
            _shared.interval = interval
        return _shared


def shutdown() -> None:
    """Stop the shared sampler and forget it (run at ``%unload_ext``)."""
    global _shared
    with _shared_lock:
        sampler, _shared = _shared, None
    if sampler is not None:
        sampler.stop()


def release_cached(device: int = 0) -> tuple[int, int]:
    """Free the pool's cached blocks on ``device`` and the pinned pool's free blocks.

    Returns ``(device bytes released, pinned blocks released)`` (guide section 5).
    """
    from . import backend

    be = backend.current()
    if not be.is_gpu:
        return be.free_cached(), 0
    cp = be.cp
    with cp.cuda.Device(device):
        released = be.free_cached()
    pinned_pool = cp.get_default_pinned_memory_pool()
    before = pinned_pool.n_free_blocks()
    pinned_pool.free_all_blocks()
    return released, before - pinned_pool.n_free_blocks()
