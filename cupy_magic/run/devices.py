"""A batched cell over several devices of one host (``%%gpu --devices 0,1 | all``).

One kernel thread drives every device, as it drives the streams of one: CuPy queues work
without waiting, so the devices run side by side while the host deals the next batch; the
cell's Python, its sync record, line tracer and ``Ctrl-C`` stay on the kernel's thread as in
any cell. Each device has its own engine (streams, pool arenas, staging buffers:
:class:`~cupy_magic.backend.devices.DeviceEngines`), pool and budget, and its own copy of
the inputs every batch shares.

Dealing (:class:`Dealer`): every device first gets one batch, in the order given; then each
batch goes to the device that would finish its share soonest at its measured rate, that is
rows dealt so far plus this batch over rows per second, so that shares follow throughput
and a slower or busier device gets fewer. A device's rate is re-measured whenever one of its
batches is seen finished: rows finished over the time it had a batch in flight, its first
left out (it pays for loading kernels and growing the pool); until a later batch of it finished,
a device counts at the mean rate of the others (all equal before any is measured).

Row results are gathered into the host arrays in row order whichever device ran a batch;
``--reduce`` partials go from each device to a host row per batch, joined on the host (the
rest, ``concat``'s, on the home device). The run is one transaction: a batch that fails on
any device stops the cell, names the device, drains every device and commits nothing.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..backend import Backend
from ..backend.devices import DeviceEngines
from . import batched as _batched
from .batched import BatchRun
from .batching import BatchOptions
from .errors import CellError
from .inputmoves import move_inputs
from .report import DeviceStat, InputMove, RunReport

__all__ = ["ALL", "Dealer", "DeviceLoad", "DeviceRun", "device_run", "devices_reason",
           "for_devices", "resolve_devices"]

ALL = "all"


def _visible(be: Backend) -> str:
    count = be.device_count()
    listed = ", ".join(map(str, range(count)))
    if be.is_gpu:
        return f"{count} visible device{'s' * (count != 1)} ({listed}; CUDA_VISIBLE_DEVICES " \
            "decides which)"
    return (f"the host backend stands for {count} device{'s' * (count != 1)} ({listed}; "
            "CUPY_MAGIC_HOST_DEVICES=2 before loading stands for two)")


def _numbers(spec: Any) -> tuple[str, list[int]]:
    """``(text as given, device numbers)``; a :class:`CellError` for what is none."""
    bad = CellError(f"--devices takes device numbers or {ALL}, got {spec!r}; e.g. "
                    f"%%gpu --devices 0,1 or %%gpu --devices {ALL} (devices=[0, 1] or "
                    f"'{ALL}' from Python)")
    if isinstance(spec, bool):
        raise bad
    if isinstance(spec, int):
        return str(spec), [spec]
    if isinstance(spec, str):
        parts = [p.strip() for p in spec.split(",")]
        if not all(p.isdigit() for p in parts):
            raise bad
        return spec.strip(), [int(p) for p in parts]
    if isinstance(spec, Iterable):
        numbers = list(spec)
        if not numbers or not all(isinstance(n, int) and not isinstance(n, bool)
                                  for n in numbers):
            raise bad
        return ",".join(map(str, numbers)), numbers
    raise bad


def resolve_devices(spec: Any, be: Backend) -> tuple[int, ...]:
    """``--devices`` as device numbers: ``"all"``, ``"0,1"``, ``1`` or ``[0, 1]``.

    Raises :class:`CellError` naming the value and the fix for anything else, a device
    named twice, or one that is not visible.
    """
    count = be.device_count()
    if isinstance(spec, str) and spec.strip().lower() == ALL:
        return tuple(range(count))
    text, numbers = _numbers(spec)
    twice = sorted({n for n in numbers if numbers.count(n) > 1})
    if twice:
        once = ",".join(map(str, dict.fromkeys(numbers)))
        raise CellError(f"--devices {text} names device {twice[0]} twice; name each once, "
                        f"e.g. %%gpu --devices {once} (devices='{once}' from Python)")
    missing = [n for n in numbers if not 0 <= n < count]
    if missing:
        keep = ",".join(str(n) for n in numbers if 0 <= n < count) or "0"
        raise CellError(f"--devices {text}: device {missing[0]} is not visible, {_visible(be)}; "
                        f"use --devices {keep} or --devices {ALL} (devices='{keep}' or "
                        f"'{ALL}' from Python)")
    return tuple(numbers)


def for_devices(spec: Any, batch: BatchOptions | None, remote: Any,
                lines: bool) -> BatchOptions:
    """The batch options of a ``--devices`` cell: batched, as with ``--batch``. Refuses, in
    one line, what a run over several devices cannot do."""
    if remote is not None:
        raise CellError(f"--devices {spec} runs the cell's batches on this host's GPUs, but the "
                        "cell reads a Dask array and runs on the cluster; drop --devices, or "
                        "compute the Dask array here first (x.compute())")
    if lines:
        raise CellError(f"--lines is not available with --devices {spec} (each device has its "
                        "own clock); drop one, e.g. %%gpu --lines on one device (lines=True "
                        "without devices= from Python)")
    opts = batch or BatchOptions()
    if opts.timeline:
        raise CellError(f"--timeline is not available with --devices {spec} (each device's "
                        "events have their own clock); drop one, e.g. %%gpu --batch --timeline "
                        "on one device (BatchOptions(forced=True, timeline=True) without "
                        "devices= from Python)")
    if not opts.graph:
        raise CellError(f"--no-graph is not available with --devices {spec}: batches dealt over "
                        "several devices are always launched op by op; drop --no-graph "
                        "(BatchOptions() without graph=False from Python)")
    return replace(opts, forced=True)


def devices_reason(inputs: dict[str, np.ndarray], devices: tuple[int, ...], reason: str) -> str:
    """Why the cell is batched when ``--devices`` is given (it always is); ``reason``: why
    the budget alone would batch it, or ``""``."""
    if not any(a.ndim >= 1 and a.shape[0] >= 1 for a in inputs.values()):
        raise CellError(f"--devices {','.join(map(str, devices))} deals batches of the cell's "
                        "NumPy inputs over devices, and the cell reads none with rows; use %%gpu "
                        "without --devices, or read the array with rows in the cell")
    dealt = f"--devices {','.join(map(str, devices))}: batches dealt over " \
        f"{len(devices)} device{'s' * (len(devices) != 1)}"
    return f"{dealt}; {reason}" if reason else dealt


@dataclass
class DeviceLoad:
    """What one device was dealt and what it finished (host clock)."""

    device: int
    batches: int = 0
    rows: int = 0
    done_batches: int = 0
    done_rows: int = 0
    busy: float = 0.0  # seconds with at least one of its batches in flight
    first: tuple[int, float] = (0, 0.0)  # rows and busy seconds of its first finished batch
    last_end: float = float("-inf")

    def rate(self) -> float | None:
        """Rows per second over its batches after the first (which pays for loading kernels
        and growing the pool); ``None`` until one of them finished."""
        rows, busy = self.done_rows - self.first[0], self.busy - self.first[1]
        return rows / busy if self.done_batches > 1 and rows > 0 and busy > 0 else None


class Dealer:
    """Which device gets the next batch: one each first, then by measured throughput."""

    def __init__(self, devices: Iterable[int]) -> None:
        self.loads = {d: DeviceLoad(d) for d in devices}

    def pick(self, rows: int) -> int:
        """The device for a batch of ``rows`` rows (it counts as dealt to it)."""
        fresh = [load for load in self.loads.values() if load.batches == 0]
        if fresh:
            chosen = fresh[0]
        else:
            rates = {d: load.rate() for d, load in self.loads.items()}
            known = [r for r in rates.values() if r]
            default = sum(known) / len(known) if known else 1.0  # unmeasured: the mean rate
            chosen = min(self.loads.values(),
                         key=lambda load: (load.rows + rows) / (rates[load.device] or default))
        chosen.batches += 1
        chosen.rows += rows
        return chosen.device

    def finished(self, device: int, rows: int, started: float, ended: float) -> None:
        """A batch of ``rows`` rows on ``device``, in flight from ``started`` to ``ended``."""
        load = self.loads[device]
        busy = max(0.0, ended - max(started, load.last_end))
        load.last_end = max(load.last_end, ended)
        load.busy += busy
        load.done_batches += 1
        load.done_rows += rows
        if load.done_batches == 1:
            load.first = (rows, busy)


@dataclass
class _Span:
    """The pool bytes a stretch of batches reached (what the batch run reads of it)."""

    start_bytes: int = 0
    peak_bytes: int = 0
    fresh: bool = True


def _global_names(code: Any) -> set[str]:
    """Every global name ``code`` reads, also inside the functions, lambdas and
    comprehensions it defines (``def f(v): return v @ w`` reads ``w``)."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _global_names(const)
    return names


class DeviceRun(BatchRun):
    """A :class:`BatchRun` whose batches are dealt over ``devices``."""
    fits_in_flight = False  # dealt over the devices' streams, each device its own budget

    def __init__(self, devices: tuple[int, ...], plan: Any, *args: Any) -> None:
        batched = args[2]  # BatchRun's names: the batched inputs
        changed = sorted((set(plan.inputs) - set(batched)) & plan.stored)
        if changed and len(devices) > 1:
            raise CellError(
                f"the cell changes the shared input {changed[0]!r}, and with --devices each "
                f"device has its own copy of it, so the copies would differ; give it a row per "
                f"row and batch it too (--batch {','.join([*batched, changed[0]])}), or change "
                "it in a cell of its own")
        self.devices = devices
        self.dealer = Dealer(devices)
        self.turn = dict.fromkeys(devices, 0)  # each device's next stream
        self.flight: dict[int, tuple[int, int, float, tuple[int, int, int]]] = {}
        self.peaks = dict.fromkeys(devices, 0)
        self.bases: dict[int, dict[str, Any]] = {}
        self.copied: set[str] = set()  # device arrays of earlier cells, copied per device
        self.span: _Span | None = None
        self.device = devices[0]  # the device of the batch being dealt (for errors)
        self.dealt = 0
        super().__init__(plan, *args)

    # --- the hooks of BatchRun ----------------------------------------------------------
    def engine(self) -> DeviceEngines:
        return DeviceEngines(self.be, self.devices, self.opts.streams,
                             lambda *a: _batched._empty_output(*a))

    def slot_for(self, i: int, a: int, b: int) -> int:
        return self.dealt

    def budget_left(self) -> int | None:
        """The least any device's budget leaves: batches are one size on every device."""
        left = [x for d in self.devices if (x := self.be.budget_left(d)) is not None]
        return min(left) if left else None

    @contextlib.contextmanager
    def tracked(self) -> Iterator[_Span]:
        """Each batch is followed on its own device (:meth:`batch`); this gathers them."""
        self.span = _Span()
        try:
            yield self.span
        finally:
            self.span = None

    def batch(self, i: int, a: int, b: int) -> None:
        """Deal the batch to a device, and run it there against that device's budget."""
        __tracebackhide__ = True
        self.dealt = slot = self._deal(i, a, b)
        device = self.device = self.eng.device_of(slot)
        self.base = self.bases[device]
        with self.be.track_memory(self.filename, device) as mem:
            super().batch(i, a, b)
        self.peaks[device] = max(self.peaks[device], mem.peak_bytes)
        if self.span is not None:
            if self.span.fresh:
                self.span.start_bytes, self.span.fresh = mem.start_bytes, False
            self.span.peak_bytes = max(self.span.peak_bytes, mem.peak_bytes)
        self.poll()

    def upload_shared(self, report: RunReport) -> dict[str, np.ndarray]:
        """Copy the inputs every batch shares to each device (one row each in the report)."""
        shared = {n: a for n, a in self.plan.inputs.items() if n not in self.inputs}
        device_arrays = {n: v for n in sorted(_global_names(self.plan.code))
                         if self.be.is_device_array(v := self.namespace.get(n))}
        changed = sorted(set(device_arrays) & self.plan.stored)
        if changed and len(self.devices) > 1:
            raise CellError(
                f"the cell changes {changed[0]!r}, a device array of an earlier cell, and with "
                "--devices each device has its own copy of it, so the copies would differ; "
                "change it in a cell of its own, or run this one without --devices")
        self.copied = set(device_arrays)
        rows: dict[str, InputMove] = {}
        for device in self.devices:
            self.device = device  # an error while copying names this device
            with self.be.on_device(device):
                moved, moves = move_inputs(self.plan.with_inputs(shared), self.dtype, self.be)
                moved.update({n: self.be.move_to(v, device) for n, v in device_arrays.items()})
            self.bases[device] = {**self.namespace, **self.plan.overrides, **moved}
            for m in moves:
                old = rows.get(m.name)
                rows[m.name] = m if old is None else replace(
                    old, nbytes=old.nbytes + m.nbytes, seconds=old.seconds + m.seconds,
                    saved_bytes=old.saved_bytes + m.saved_bytes)
        report.inputs = list(rows.values())
        self.base = self.bases[self.devices[0]]
        for arr in self.inputs.values():
            self.eng.finish_locking(arr)
        return shared

    def rest(self, first: int, rows: int, peak_row: float, bounds: list[tuple[int, int]]) -> int:
        __tracebackhide__ = True
        rows = super().rest(first, rows, peak_row, bounds)
        self.poll()  # drained: every batch is finished
        return rows

    def forget(self) -> None:
        """As one device's (a first batch measured again); the dealing starts over."""
        super().forget()
        self.dealer, self.turn = Dealer(self.devices), dict.fromkeys(self.devices, 0)
        self.flight.clear()

    def results(self) -> dict[str, Any]:
        """As one device's, the ``--reduce`` partials left on devices brought home."""
        home = self.be.home
        for name, parts in self.partials.items():
            self.partials[name] = [(self.be.move_to(v, home), r) for v, r in parts]
        with self.be.on_device(home):
            return super().results()

    def execute(self, report: Any, reason: str) -> tuple[dict[str, Any], Any]:
        __tracebackhide__ = True
        final, bp = super().execute(report, reason)
        report.devices = self.stats()
        names = dict.fromkeys(d.name for d in report.devices)
        report.device = f"devices {','.join(map(str, self.devices))}: {' / '.join(names)}"
        self.peak = max(self.peaks.values())
        report.budget_bytes = max((d.budget_bytes or 0 for d in report.devices), default=0) \
            or None
        return final, bp

    def tail(self) -> dict[str, Any]:
        """As one device's; the device arrays of earlier cells stay the user's own, not the
        copy on the device that ran the last batch."""
        kept = super().tail()
        for name in self.copied:
            kept[name] = self.namespace[name]
        return kept

    def abort(self) -> None:
        if self.eng.busy_device is not None:  # an error of a call over every device
            self.device = self.eng.busy_device
        super().abort()
        for base in self.bases.values():  # every device's copies, not only the last one's
            base.clear()
        self.bases.clear()

    def where(self, exc: BaseException) -> str:
        on = f" on device {self.device} ({self.be.device_name(self.device)})"
        text = super().where(exc)
        return text.replace(" failed;", f"{on} failed;", 1) if " failed;" in text else \
            text.replace(");", f"){on};", 1)

    # --- dealing --------------------------------------------------------------------------
    def _deal(self, i: int, a: int, b: int) -> int:
        """The slot for batch ``i``: the dealer's device, its next stream once free."""
        self.poll()
        device = self.device = self.dealer.pick(b - a)
        stream = self.turn[device]
        self.turn[device] = (stream + 1) % self.opts.streams
        slot = self.eng.slot_of(device, stream)
        if slot in self.flight:  # the slot's last batch must end before its reuse
            self.current = self.flight[slot][3]
            self.eng.wait(slot)
            self._finish(slot, time.perf_counter())
        self.flight[slot] = (device, b - a, time.perf_counter(), (i, a, b))
        return slot

    def poll(self) -> None:
        """Note the batches seen finished (a query; nothing waits)."""
        for slot in list(self.flight):
            try:
                finished = self.eng.done(slot)
            except BaseException:  # the device's error surfaced here: name its batch
                self.device, _, _, self.current = self.flight[slot]
                raise
            if finished:
                self._finish(slot, time.perf_counter())

    def _finish(self, slot: int, ended: float) -> None:
        device, rows, started, _ = self.flight.pop(slot)
        self.dealer.finished(device, rows, started, ended)

    def stats(self) -> list[DeviceStat]:
        """The report's row of each device."""
        return [DeviceStat(d, self.be.device_name(d), load.batches, load.rows,
                           load.rows * self.row_bytes, load.busy, self.peaks[d],
                           self.be.limit_of(d))
                for d, load in self.dealer.loads.items()]


def device_run(devices: tuple[int, ...]) -> Callable[..., DeviceRun]:
    """What :func:`~cupy_magic.run.batched.run_batched` builds its run with (``make``)."""
    return lambda *args: DeviceRun(devices, *args)
