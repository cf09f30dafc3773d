"""Runtime record of the host syncs a ``%%gpu`` cell performs, counted per cell line.

CuPy declares a synchronisation by calling ``cupy._core.syncdetect._declare_synchronize()``
from ``ndarray.get()`` (which ``float``, ``bool``, ``repr``, ``item``, ``tolist``, boolean-mask
indexing, ``nonzero`` and ``unique`` all reach) and from ``Device.synchronize()``. It looks that
function up on the module at every call, so replacing the module attribute sees every declared
sync. It is private API: :class:`SyncRecorder` guards the lookup, reports ``available=False``
when it is missing, and the report words each row as a "possible host sync". Syncs CuPy does
not declare (``Stream.synchronize``, pageable copies, pool growth) are not seen.

Wait time
---------
The hook runs *before* the copy that waits, so timing the original call measures nothing. With
``measure_wait=True`` the hook synchronises the current stream itself and times that: the time
the host waits for queued GPU work, which the sync that follows would have waited anyway. That
is exact for the implicit syncs (``float(x)``, ``print(x)``, ``x.get()`` on the current stream)
but adds a wait that was not there for ``get(stream=other, blocking=False)``, so it is off by
default and ``wait_seconds`` is then ``None``.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType, ModuleType, TracebackType
from typing import Any

from .lint import SyncFinding

__all__ = ["HostSyncError", "MergedSync", "SyncCount", "SyncRecorder", "merge", "uncharged"]

_MODES = ("warn", "error")


class HostSyncError(RuntimeError):
    """Raised in ``--syncs error`` mode at the first host sync of a cell."""

    def __init__(self, line: int, code: str) -> None:
        self.line = line
        self.code = code
        super().__init__(
            f"possible host sync at cell line {line}: `{code}` (--syncs error stops at the first"
            " one; use --syncs warn (syncs='warn' from Python) to run the cell and count them)"
        )

    def __reduce__(self) -> tuple[Any, ...]:  # pickled as made: HostSyncError(line, code)
        return type(self), (self.line, self.code), self.__dict__


@dataclass(frozen=True)
class SyncCount:
    """How often one cell line declared a sync while the cell ran."""

    line: int
    code: str
    count: int
    wait_seconds: float | None


@dataclass(frozen=True)
class MergedSync:
    """One report row: the static findings and the runtime count of one cell line."""

    line: int
    code: str
    findings: tuple[SyncFinding, ...]
    count: int | None
    wait_seconds: float | None

    @property
    def in_loop(self) -> bool:
        """Whether the static check saw the line inside a loop (or it synced more than once)."""
        return any(f.in_loop for f in self.findings) or (self.count or 0) > 1

    def describe(self) -> str:
        """Plain text: "line 7 `if x.max() > 0:`: 1,000 host syncs (inside a loop); ..."."""
        loop = " (inside a loop)" if self.in_loop else ""
        if self.count is None:
            what = self.findings[0].why if self.findings else "possible host sync"
        elif self.count == 0:
            what = f"{self.findings[0].why if self.findings else ''}; not seen while it ran"
        elif self.findings:
            plural = "" if self.count == 1 else "s"
            what = f"{self.count:,} host sync{plural}"
        else:
            plural = "" if self.count == 1 else "s"
            what = f"{self.count:,} possible host sync{plural}"
        wait = f", {self.wait_seconds * 1e3:,.1f} ms waiting" if self.wait_seconds else ""
        fix = f"; instead: {self.findings[0].fix}" if self.findings else ""
        return f"line {self.line} `{self.code}`: {what}{wait}{loop}{fix}"


class _Hook:
    """The one wrapper installed over ``_declare_synchronize`` while any recorder is active.

    Recorders register here instead of each wrapping the function, so that recorders may exit
    in any order and the original is restored exactly when the last one leaves.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: tuple[SyncRecorder, ...] = ()
        self.module: ModuleType | None = None
        self.original: Callable[[], None] | None = None

    def declare(self) -> None:
        for recorder in self.active:
            recorder._on_sync(sys._getframe(1))
        if self.original is not None:
            self.original()

    def add(self, recorder: SyncRecorder, module: ModuleType) -> None:
        with self.lock:
            if not self.active:
                self.module = module
                self.original = module._declare_synchronize
                module._declare_synchronize = self.declare
            self.active = (*self.active, recorder)

    def remove(self, recorder: SyncRecorder) -> None:
        with self.lock:
            self.active = tuple(r for r in self.active if r is not recorder)
            if self.active or self.module is None:
                return
            # Someone who wrapped us after we installed keeps their wrapper; ours passes
            # straight through once no recorder is active.
            if self.module._declare_synchronize == self.declare:
                self.module._declare_synchronize = self.original
            self.module = None
            self.original = None


_HOOK = _Hook()


def _syncdetect() -> tuple[ModuleType | None, str]:
    """Return CuPy's syncdetect module, or None and why it cannot be hooked."""
    try:
        syncdetect = sys.modules.get("cupy._core.syncdetect") or \
            importlib.import_module("cupy._core.syncdetect")  # found at once once imported
    except ImportError as exc:
        return None, f"CuPy's sync declaration is not importable ({exc})"
    if not callable(getattr(syncdetect, "_declare_synchronize", None)):
        return None, "this CuPy has no cupy._core.syncdetect._declare_synchronize to hook"
    return syncdetect, ""


class SyncRecorder:
    """Count the syncs CuPy declares while a cell runs, per line of the cell.

    Parameters
    ----------
    code_filename : str
        The filename the cell was compiled with (``compile(src, code_filename, "exec")``);
        a sync is charged to the innermost frame running that code.
    source : str
        The cell source, for the code of each line.
    mode : {"warn", "error"}
        "error" raises :class:`HostSyncError` at the first sync charged to the cell.
    measure_wait : bool
        Synchronise the current stream in the hook and time it (see the module docstring).

    Attributes
    ----------
    counts : list of SyncCount
        Per line, sorted by line; filled on exit.
    outside_cell : int
        Syncs on the recording thread that no cell frame was running (the runner's own).
    available : bool
        False when CuPy or its sync declaration is missing; nothing is recorded then.
    reason : str
        Why the record is not available; empty otherwise.
    """

    def __init__(
        self, code_filename: str, source: str, mode: str = "warn", *, measure_wait: bool = False
    ) -> None:
        if mode not in _MODES:
            raise ValueError(f"sync mode must be 'warn' or 'error', got {mode!r}")
        self.code_filename = code_filename
        self.mode = mode
        self.measure_wait = measure_wait
        self.lines = source.splitlines()
        self.counts: list[SyncCount] = []
        self.outside_cell = 0
        self.available = False
        self.reason = "the recorder has not been entered"
        self._tally: dict[int, int] = {}
        self._waits: dict[int, float] = {}
        self._thread: int | None = None
        self._stream_sync: Callable[[], None] | None = None

    def __enter__(self) -> SyncRecorder:
        if self._thread is not None:
            raise RuntimeError("a SyncRecorder cannot be entered twice; make a new one")
        module, self.reason = _syncdetect()
        self.available = module is not None
        self._thread = threading.get_ident()
        if module is not None:
            if self.measure_wait:
                self._stream_sync = _current_stream_sync()
            _HOOK.add(self, module)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _HOOK.remove(self)
        self.counts = [
            SyncCount(
                line, self._code(line), n, self._waits.get(line) if self.measure_wait else None
            )
            for line, n in sorted(self._tally.items())
        ]

    def _code(self, line: int) -> str:
        return self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""

    def _on_sync(self, frame: FrameType | None) -> None:
        if threading.get_ident() != self._thread or getattr(_UNCHARGED, "on", False):
            return
        while frame is not None and frame.f_code.co_filename != self.code_filename:
            frame = frame.f_back
        if frame is None:
            self.outside_cell += 1
            return
        line = frame.f_lineno
        self._tally[line] = self._tally.get(line, 0) + 1
        if self.mode == "error":
            raise HostSyncError(line, self._code(line))
        if self._stream_sync is not None:
            start = time.perf_counter()
            self._stream_sync()
            self._waits[line] = self._waits.get(line, 0.0) + time.perf_counter() - start


_UNCHARGED = threading.local()


@contextlib.contextmanager
def uncharged() -> Iterator[None]:
    """While inside, on this thread, a declared sync is not charged to the running cell (a
    value the cell shows through ``sys.displayhook`` is read for the user, as a plain cell
    shows it, also under ``--syncs error``)."""
    before = getattr(_UNCHARGED, "on", False)
    _UNCHARGED.on = True
    try:
        yield
    finally:
        _UNCHARGED.on = before


def _current_stream_sync() -> Callable[[], None] | None:
    """Return a function that waits for the current CUDA stream, or None without a GPU."""
    try:
        import cupy
    except ImportError:
        return None
    if not cupy.cuda.is_available():
        return None
    return lambda: cupy.cuda.get_current_stream().synchronize()


def merge(findings: list[SyncFinding], counts: list[SyncCount] | None) -> list[MergedSync]:
    """Join static findings and runtime counts into one row per cell line.

    Parameters
    ----------
    findings : list of SyncFinding
        From :func:`cupy_magic.syncs.lint_cell`.
    counts : list of SyncCount or None
        From :attr:`SyncRecorder.counts`; None when there was no runtime record (CPU
        fallback, ``available=False``): rows then carry ``count=None``.

    Returns
    -------
    list of MergedSync
        One row per line, sorted; a line with findings that did not sync at runtime gets
        ``count=0``, a runtime line without a finding becomes a "possible host sync" row.
    """
    by_line: dict[int, list[SyncFinding]] = {}
    for finding in findings:
        by_line.setdefault(finding.line, []).append(finding)
    counted = {c.line: c for c in counts or ()}
    rows = []
    for line in sorted(by_line.keys() | counted.keys()):
        found = tuple(by_line.get(line, ()))
        count = counted.get(line)
        code = count.code if count is not None else found[0].code
        if count is not None:
            n: int | None = count.count
        else:
            n = None if counts is None else 0
        wait = count.wait_seconds if count is not None else None
        rows.append(MergedSync(line, code, found, n, wait))
    return rows
