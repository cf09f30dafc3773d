"""NumPy on the host: the fallback without a GPU, and a baseline to compare against."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
import tracemalloc
import weakref
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any

import numpy as np

from ..source import line_code
from ..units import format_bytes
from .base import (
    Backend,
    BudgetExceeded,
    DeviceInfo,
    Transfer,
    _Measurement,
    address,
)
from .writes import holders, host_changed, host_copy_of, host_mark


def _host_ram_total() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def _host_ram_used() -> int:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            fields = {ln.split(":")[0]: int(ln.split()[1]) * 1024 for ln in fh if ":" in ln}
        return fields["MemTotal"] - fields.get("MemAvailable", fields.get("MemFree", 0))
    except (OSError, KeyError, ValueError, IndexError):
        return 0


DEVICES_ENV = "CUPY_MAGIC_HOST_DEVICES"


def host_base(array: np.ndarray) -> np.ndarray:
    """The array whose memory ``array`` uses: its last ``.base`` that is an array (itself
    when it owns its memory); a view keeps that whole allocation alive."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def host_devices() -> int:
    """How many devices the host backend stands for: ``CUPY_MAGIC_HOST_DEVICES`` (default 1),
    so that ``%%gpu --devices 0,1`` can be taught and tested on a machine without a GPU."""
    text = os.environ.get(DEVICES_ENV, "").strip() or "1"
    try:
        return max(1, int(text))
    except ValueError:
        raise ValueError(f"{DEVICES_ENV}={text!r} is not a whole number; e.g. "
                         f"{DEVICES_ENV}=2") from None


class _Traced:
    """The figures of one block measured with tracemalloc (the whole process's bytes)."""

    def __init__(self, base: int) -> None:
        self.base = base  # traced bytes as it began
        self.now = base  # traced bytes at the last line
        self.failed = 0  # what failed requests left (NumPy's, on a MemoryError): not counted
        self.own = 0  # what the extension's own work kept (:meth:`HostBackend.uncounted`)
        self.carried = 0  # the figure before the extension's own work reset the peak

    def figure(self, top: int) -> int:
        """The block's bytes at tracemalloc's peak ``top`` (since the last reset), or before
        the extension's own work if more."""
        return max(top - self.base - self.failed - self.own, self.carried)

    def carry(self, top: int) -> None:
        """Keep the figure at ``top`` before tracemalloc's peak is reset."""
        self.carried = self.figure(top)


class HostBackend(Backend):
    """NumPy on the CPU: the fallback without a GPU, and a baseline to compare against.

    The "pool" is the memory the cell's Python and NumPy allocations hold, followed with
    :mod:`tracemalloc` while a cell runs; the budget is enforced at every line of the cell.
    :meth:`pool_used` reads it from any thread, so the panel's sampler sees the running cell.
    tracemalloc follows the whole process and cannot tell threads apart: what other threads
    allocate while a cell runs counts as the cell's (a sampler tick on the live sources: about
    20 KB for a moment, 1.7 KB kept in its history). Objects that only the cyclic garbage
    collector frees (a batch's namespace and the functions the cell defines, which point at
    each other) are not held: before a line is refused they are collected, as CuPy's pool
    collects garbage before it gives up on an allocation, so a refusal never depends on when
    the collector last ran (that is, on what ran before the cell).
    """

    name = "host"
    is_gpu = False
    notes_device_arrays = True

    def __init__(self, reason: str = "", devices: int | None = None) -> None:
        super().__init__()
        self.xp = np
        self.reason = reason
        self.devices = host_devices() if devices is None else devices
        if self.devices < 1:
            raise ValueError(f"a host backend needs at least 1 device, got {self.devices}; "
                             f"e.g. {DEVICES_ENV}=2")
        # Device number -> how many times slower its batches run (sleeps after each batch),
        # so that the dealing of batches by throughput shows on the CPU (tests, teaching).
        self.slow: dict[int, float] = {}
        # Arrays that cells produced stand for device arrays: they are not moved again.
        self._resident: weakref.WeakValueDictionary[int, np.ndarray] = \
            weakref.WeakValueDictionary()
        # the blocks being measured now, innermost last; shared by every thread (not
        # thread-local) so that the panel's sampler thread reads the cell's live figure
        self._measures: list[_Traced] = []

    def info(self) -> DeviceInfo:
        return DeviceInfo(backend=self.name, name="CPU (NumPy)", total_bytes=_host_ram_total(),
                          reason=self.reason)

    def device_memory(self, device: int | None = None) -> tuple[int, int]:
        return _host_ram_used(), _host_ram_total()

    def device_count(self) -> int:
        return self.devices

    def device_name(self, device: int) -> str:
        return "CPU (NumPy)" if self.devices == 1 else f"CPU (NumPy) standing for device {device}"

    def is_device_array(self, obj: object) -> bool:
        # issubclass(type(obj), ...), not isinstance: that asks an object's own __class__,
        # which may raise (a proxy's __getattribute__)
        return issubclass(type(obj), np.ndarray) and self._resident.get(id(obj)) is obj

    def keep_on_device(self, obj: object) -> None:
        if isinstance(obj, np.ndarray):
            self._resident[id(obj)] = obj

    def to_device(self, array: np.ndarray) -> Transfer:
        t0 = time.perf_counter()
        out = host_copy_of(array)  # like an upload: the cell's writes stay in the copy
        return Transfer(out, time.perf_counter() - t0, int(array.nbytes), pinned=False)

    def allocation(self, array: Any) -> tuple[int, Any, int]:
        base = host_base(array)
        whole = base.reshape(-1, order="A").view(np.uint8)
        return id(base), whole, address(array) - address(whole)

    def view_of(self, copy: Any, offset: int, shape: tuple[int, ...],
                strides: tuple[int, ...], dtype: np.dtype) -> Any:
        return np.ndarray(shape, dtype, buffer=copy, offset=offset, strides=strides)

    def watch(self, copies: list[Any], weak: Sequence[bool] = ()) -> Any:
        # each copy's checksums now, not the arrays they were made from (which the cell may
        # change through another reference)
        return [(held, host_mark(np.asarray(copy)))
                for held, copy in zip(holders(copies, weak), copies, strict=True)]

    def changed(self, token: Any) -> list[bool]:
        # a copy gone by now (held weakly) reads as changed
        return [copy is None or host_changed(np.asarray(copy), mark)
                for copy, mark in ((held(), mark) for held, mark in token)]

    def to_host(self, array: Any) -> np.ndarray:
        self._resident.pop(id(array), None)
        return np.asarray(array)

    def resident_bases(self) -> dict[int, np.ndarray]:
        """The allocations of the arrays earlier cells left "on the device", by ``id`` of
        their :func:`host_base` (a view and its base are one allocation)."""
        bases = map(host_base, list(self._resident.values()))
        return {id(b): b for b in bases}

    def resident_bytes(self) -> int:
        """Bytes of the arrays earlier cells left "on the device" (in host RAM here), each
        allocation once."""
        return sum(int(a.nbytes) for a in self.resident_bases().values())

    def pool_used(self, device: int | None = None) -> int:
        """Bytes of earlier cells' arrays plus what the running cell holds now (any thread);
        the devices a host backend stands for share the host's memory."""
        return self.resident_bytes() + self.cell_bytes()

    def cell_bytes(self) -> int:
        """Bytes the running cell's allocations hold now (0 between cells); any thread."""
        measures = self._measures
        if not measures or not tracemalloc.is_tracing():
            return 0
        state = measures[-1]  # (the innermost: its own work left out)
        return max(0, tracemalloc.get_traced_memory()[0] - state.base - state.own)

    def pool_held(self, device: int | None = None) -> int:
        return self.pool_used()

    def free_cached(self) -> int:
        return 0

    @contextlib.contextmanager
    def uncounted(self) -> Iterator[None]:
        """The extension's own work inside a cell (a NumPy function's wrapper, built on its
        first use in the process: ~110 KB of compiling for a moment): what it allocates, held
        or for a moment, is not the cell's, as it is not in a GPU's pool. The peak before it
        still counts; its bytes kept after it do not. tracemalloc cannot tell threads apart:
        what another thread allocates during those few milliseconds is left out too."""
        if not self._measures or not tracemalloc.is_tracing():
            yield
            return
        before, top = tracemalloc.get_traced_memory()
        for state in self._measures:
            state.carry(top)
        try:
            yield
        finally:
            kept = max(0, tracemalloc.get_traced_memory()[0] - before)
            tracemalloc.reset_peak()
            for state in self._measures:
                state.own += kept
                state.now += kept  # (a MemoryError after it counts from there)

    @contextlib.contextmanager
    def track_memory(self, code_filename: str,
                     device: int | None = None) -> Iterator[_Measurement]:
        started = not tracemalloc.is_tracing()
        if started:
            tracemalloc.start()
        state = _Traced(tracemalloc.get_traced_memory()[0])
        self._measures.append(state)
        tracemalloc.reset_peak()
        held = self.resident_bytes()  # earlier cells' arrays count, as they do in a GPU pool
        m = _Measurement(start_bytes=held, peak_bytes=held)
        limit = self.limit_of(self.home if device is None else device)
        on = "" if device is None or self.devices == 1 else f" on device {device}"

        last_line: dict[int, int] = {}

        unwinding: set[int] = set()  # frames an exception is leaving: let it pass unchanged

        def without_garbage(top: int) -> int:
            """The line's figure less what collecting cyclic garbage frees (held then, but
            unreachable); tracemalloc's peak starts again from what is left."""
            before = tracemalloc.get_traced_memory()[0]
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            state.now = after
            return state.figure(top) - max(0, before - after)

        def local_trace(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "exception":
                unwinding.add(id(frame))
                if issubclass(arg[0], MemoryError):
                    state.failed += max(0, tracemalloc.get_traced_memory()[0] - state.now)
                    tracemalloc.reset_peak()
            elif event == "line" or (event == "return" and id(frame) not in unwinding):
                unwinding.discard(id(frame))  # a line runs: any exception was caught
                now, top = tracemalloc.get_traced_memory()
                state.now = now
                peak = held + state.figure(top)
                culprit = last_line.get(id(frame), frame.f_lineno)
                last_line[id(frame)] = frame.f_lineno
                if limit is not None and peak > limit:
                    peak = held + without_garbage(top)
                if limit is not None and peak > limit:
                    code = line_code(code_filename, culprit)
                    earlier = (f", {format_bytes(held)} of it arrays from earlier cells"
                               if held else "")
                    raise BudgetExceeded(
                        f"line {culprit} `{code}` took the cell to {format_bytes(peak)} of host "
                        f"memory{earlier}, over the budget{on} of {format_bytes(limit)}",
                        line=culprit)
                state.carried = 0  # in `seen` now
                seen[0] = max(seen[0], peak)
            return local_trace

        def global_trace(frame: FrameType, event: str, arg: Any) -> Any:
            return local_trace if frame.f_code.co_filename == code_filename else None

        seen = [0]  # the peak so far (tracemalloc's is reset when a line goes over)
        old_trace = sys.gettrace()
        if limit is not None:
            sys.settrace(global_trace)
        try:
            yield m
        finally:
            if limit is not None:
                sys.settrace(old_trace)
            top = tracemalloc.get_traced_memory()[1]
            m.peak_bytes = max(seen[0], held + max(0, top - state.base - state.own,
                                                   state.carried))
            self._measures.remove(state)
            if started:
                tracemalloc.stop()

    @contextlib.contextmanager
    def time_device(self) -> Iterator[_Measurement]:
        m = _Measurement()
        t0 = time.perf_counter()
        try:
            yield m
        finally:
            m.seconds = time.perf_counter() - t0
