"""What ``%%gpu --lines`` needs from CuPy: timing marks on the stream, NVTX ranges, transfers.

:class:`EventMarks` records a CUDA event on the current stream at each statement boundary, so
the device time between two boundaries is the work the statement queued (plus any idle time
while the host ran Python or compiled). Events are reused once the device has passed them, so
a loop of 10,000 lines holds a few hundred, not 10,000.

:class:`TransferWatch` charges the copies between host and device that a cell's own lines
make (``x.get()`` and what reaches it: ``float(x)``, ``print(x)``, ``cp.asnumpy``; ``x.set``;
``cp.asarray``/``cp.array`` of a NumPy array) to the innermost frame of the cell's code, as
the sync record does. ``cupy.ndarray`` is a Python subclass of CuPy's compiled base class,
so a ``get`` or ``set`` put on it is what CuPy's own code reaches too; both are put back when
the watch ends. It is private behaviour: the watch says it is unavailable when the names are
missing.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

__all__ = ["EventMarks", "TransferWatch", "nvtx_ranges"]

_REUSE_AFTER = 256  # pending events before the passed ones are read and reused


class EventMarks:
    """CUDA events recorded on the current stream at statement boundaries, summed per key."""

    def __init__(self) -> None:
        import cupy

        self._cupy = cupy
        self._free: list[Any] = []
        self._pending: list[tuple[Any, Any]] = []  # (key of the interval it starts, event)
        self.seconds: dict[Any, float] = {}

    def mark(self, key: Any) -> None:
        """End the open interval here and start one charged to ``key`` (None: start none)."""
        event = self._free.pop() if self._free else self._cupy.cuda.Event()
        event.record(self._cupy.cuda.get_current_stream())
        self._pending.append((key, event))
        if len(self._pending) > _REUSE_AFTER:
            self._settle(block=False)

    def finish(self) -> dict[Any, float]:
        """Wait for the last mark and return the device seconds per key."""
        if self._pending:
            self._pending[-1][1].synchronize()
        self._settle(block=True)
        return self.seconds

    def _settle(self, block: bool) -> None:
        """Add up the intervals whose two ends the device has passed; reuse their events."""
        done = 0
        get = self._cupy.cuda.get_elapsed_time
        while done + 1 < len(self._pending):
            (key, start), (_, end) = self._pending[done], self._pending[done + 1]
            if not block and not end.done:
                break
            if key is not None:
                ms = get(start, end)
                self.seconds[key] = self.seconds.get(key, 0.0) + max(ms, 0.0) / 1e3
            self._free.append(start)
            done += 1
        del self._pending[:done]


def nvtx_ranges() -> tuple[Callable[[str], None], Callable[[], None]] | str:
    """CuPy's ``RangePush`` and ``RangePop``, or why NVTX ranges cannot be made."""
    try:
        from cupy.cuda import nvtx
    except ImportError as exc:
        return f"CuPy's NVTX module is not importable ({exc})"
    if not getattr(nvtx, "available", True):
        return "this CuPy was built without NVTX (cupy.cuda.nvtx.available is False)"
    return nvtx.RangePush, nvtx.RangePop


class TransferWatch:
    """Bytes and seconds of host-device copies, per line of the cell's code.

    Parameters
    ----------
    code_filename : str
        The filename the cell was compiled with; a copy is charged to the innermost frame
        running that code.

    Attributes
    ----------
    moved : dict
        ``line -> [bytes, seconds]``; the seconds include a sync's wait for queued work.
    available : bool
        False when CuPy's names are missing: nothing is recorded.
    """

    def __init__(self, code_filename: str) -> None:
        self.code_filename = code_filename
        self.moved: dict[int, list[float]] = {}
        self.available = False
        self._thread = threading.get_ident()
        self._depth = threading.local()
        self._saved: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> TransferWatch:
        import cupy

        base = getattr(cupy._core.core, "_ndarray_base", None)
        if base is None or "get" in vars(cupy.ndarray) or "set" in vars(cupy.ndarray):
            return self  # someone else wraps them, or a CuPy of another shape
        self.available = True
        for owner, name, size in ((cupy.ndarray, "get", _own_size),
                                  (cupy.ndarray, "set", _first_size),
                                  (cupy, "asarray", _first_size), (cupy, "array", _first_size)):
            original = getattr(owner, name)
            self._saved.append((owner, name, original))
            setattr(owner, name, self._wrap(original, size))
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for owner, name, original in reversed(self._saved):
            if isinstance(owner, type):  # the class: let the base class's method show again
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        self._saved.clear()

    def _wrap(self, original: Callable[..., Any],
              size: Callable[..., int]) -> Callable[..., Any]:
        def copy(*args: Any, **kwargs: Any) -> Any:
            if getattr(self._depth, "n", 0) or threading.get_ident() != self._thread:
                return original(*args, **kwargs)
            self._depth.n = 1
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self._depth.n = 0
                self._charge(size(*args, **kwargs), time.perf_counter() - t0,
                             sys._getframe(1))
        copy.__wrapped__ = original  # type: ignore[attr-defined]
        return copy

    def _charge(self, nbytes: int, seconds: float, frame: FrameType | None) -> None:
        while frame is not None and frame.f_code.co_filename != self.code_filename:
            frame = frame.f_back
        if frame is None or not nbytes:
            return
        row = self.moved.setdefault(frame.f_lineno, [0, 0.0])
        row[0] += nbytes
        row[1] += seconds


def _own_size(array: Any, *args: Any, **kwargs: Any) -> int:
    """``x.get()``: the bytes of ``x``."""
    return int(getattr(array, "nbytes", 0))


def _first_size(*args: Any, **kwargs: Any) -> int:
    """``x.set(host)``, ``cp.asarray(host)``: the bytes of the NumPy array given (0 when the
    argument is already on the device: a copy there moves nothing over PCIe)."""
    import numpy as np

    values = [*args, *kwargs.values()]
    host = next((v for v in values if isinstance(v, np.ndarray)), None)
    return int(host.nbytes) if host is not None else 0
