"""Several devices of one host as one batch engine (``%%gpu --devices``).

One engine per device (:mod:`cupy_magic.backend.streams`: on a GPU its own streams, pool
arenas and page-locked staging buffers), made with that device current. Their slots are
numbered device by device, slot ``k * streams + s`` being stream ``s`` of the ``k``-th
device, so that the batch executor drives them as it drives one engine; which device a
batch goes to is the executor's choice (:mod:`cupy_magic.run.devices`). Every call that
queues work on a device runs with that device current.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from .base import Backend
from .cupy import CupyBackend
from .streams import Allocate, CupyEngine, HostEngine

__all__ = ["DeviceEngines"]


class DeviceEngines:
    """The engines of ``devices``, ``streams`` slots each, behind one engine's methods."""

    def __init__(self, be: Backend, devices: tuple[int, ...], streams: int,
                 allocate: Allocate) -> None:
        self.be, self.devices, self.per = be, devices, streams
        self.slots = len(devices) * streams
        self.busy_device: int | None = None  # the device a call over all of them is at
        self.engines: list[Any] = []
        for device in devices:
            with be.on_device(device):
                self.engines.append(
                    CupyEngine(be, streams, allocate) if isinstance(be, CupyBackend) else
                    HostEngine(streams, allocate, slow=getattr(be, "slow", {}).get(device, 1.0)))

    # --- slots and devices ----------------------------------------------------------------
    def device_of(self, slot: int) -> int:
        """The device number of a slot."""
        return self.devices[slot // self.per]

    def slot_of(self, device: int, stream: int) -> int:
        """The slot of ``device``'s ``stream``-th stream."""
        return self.devices.index(device) * self.per + stream

    def _at(self, slot: int) -> tuple[Any, int]:
        return self.engines[slot // self.per], slot % self.per

    @contextlib.contextmanager
    def on(self, slot: int) -> Iterator[None]:
        """The slot's device current and its stream in use."""
        engine, s = self._at(slot)
        with self.be.on_device(self.device_of(slot)), engine.on(s):
            yield

    # --- one batch (the executor calls these inside ``on(slot)``) -----------------------
    def start(self, slot: int) -> None:
        engine, s = self._at(slot)
        engine.start(s)

    def record(self, slot: int) -> None:
        engine, s = self._at(slot)
        with self.be.on_device(self.device_of(slot)):
            engine.record(s)

    def wait(self, slot: int) -> None:
        engine, s = self._at(slot)
        engine.wait(s)

    def done(self, slot: int) -> bool:
        """Whether the slot's last batch is finished (does not wait)."""
        engine, s = self._at(slot)
        return bool(engine.done(s))

    def upload(self, slot: int, name: str, arr: np.ndarray, a: int, b: int,
               dtype: np.dtype) -> Any:
        engine, s = self._at(slot)
        return engine.upload(s, name, arr, a, b, dtype)

    def download(self, slot: int, name: str, value: Any, out: np.ndarray, a: int, b: int) -> None:
        engine, s = self._at(slot)
        engine.download(s, name, value, out, a, b)

    def download_small(self, slot: int, value: Any, out: np.ndarray) -> None:
        engine, s = self._at(slot)
        engine.download_small(s, value, out)

    # --- the run ------------------------------------------------------------------------
    def small_rows(self, key: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A small page-locked host array (registered for every device)."""
        return self.engines[0].small_rows(key, shape, dtype)

    def allocate(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A full-length host array for a gathered result (page-locked for every device)."""
        return self.engines[0].allocate(shape, dtype)

    def _each(self) -> Iterator[tuple[int, Any]]:
        """Each device's engine with that device current; :attr:`busy_device` says which
        device an error in the loop came from."""
        for device, engine in zip(self.devices, self.engines, strict=True):
            self.busy_device = device
            with self.be.on_device(device):
                yield device, engine
        self.busy_device = None

    def warm(self, rows: int, peak_row: float,
             buffers: dict[str, tuple[np.ndarray, int, np.dtype]],
             slots: Iterable[int] | None = None) -> None:
        """Each device's engine's warm-up; ``slots``: each engine's own numbers (a run over
        several devices keeps all of them in flight and passes none)."""
        for _, engine in self._each():
            engine.warm(rows, peak_row, buffers, slots)

    def drain(self, quiet: bool = False) -> None:
        for _, engine in self._each():
            engine.drain(quiet)

    def close(self) -> None:
        for _, engine in self._each():
            engine.close()

    # --- host memory, shared by the devices ---------------------------------------------
    def direct(self, arr: np.ndarray, dtype: np.dtype) -> bool:
        return bool(self.engines[0].direct(arr, dtype))

    def finish_locking(self, arr: np.ndarray) -> None:
        self.engines[0].finish_locking(arr)

    def copy_home(self, dst: np.ndarray, src: np.ndarray) -> None:
        self.engines[0].copy_home(dst, src)

    def settle(self, arr: np.ndarray, dtype: np.dtype) -> None:
        self.engines[0].settle(arr, dtype)

    @property
    def staged_batches(self) -> int:
        return sum(e.staged_batches for e in self.engines)

    @property
    def staged_why(self) -> dict[str, str]:
        why: dict[str, str] = {}
        for engine in self.engines:
            for name, reason in engine.staged_why.items():
                why.setdefault(name, reason)
        return why

    def timeline(self) -> list[tuple[int, float, float]]:
        """No timeline across devices: each GPU's events have their own clock."""
        return []
