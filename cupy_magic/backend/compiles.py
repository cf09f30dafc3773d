"""Kernel compilation while a ``%%gpu`` cell runs: how many kernels, how long, on which lines.

CuPy builds a kernel the first time a process meets it (an operation on new dtypes, a
reduction over a new block size, an ``ElementwiseKernel``). In CuPy 14 every build goes
through ``cupy.cuda.compiler._compile_with_cache_cuda``: it makes the cache key, loads the
cubin from the kernel cache (``CUPY_CACHE_DIR``, by default ``~/.cupy/kernel_cache``) when it
is there, and otherwise compiles it with NVRTC (``_compile_using_nvrtc_no_warning``) or nvcc
(``compile_using_nvcc``) and saves it. Kernels met before in the process are memoised above
that and reach none of it. The functions call each other through the module's globals, so
replacing the module attributes sees every build: the outer call is timed and charged to the
innermost frame of the cell's code, and a call of one of the inner two marks it as a real
compile (otherwise it was a load from the cache; the first build of a process also
preprocesses an empty file with NVRTC to read the compiler's version, which counts there).

It is private API: :class:`CompileRecord` looks the functions up when it is entered,
restores them when the last record leaves, and says "compile time not measured" when they
are missing. Timing windows (:func:`timed`) add up the build time spent inside them, so the
GPU time measured with CUDA events around a cell can leave out the host's compiling.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType, ModuleType, TracebackType
from typing import Any

from ..source import line_code

__all__ = ["Build", "CompileRecord", "NoCompiles", "Window", "timed"]

OUTER = "_compile_with_cache_cuda"
INNER = ("_compile_using_nvrtc_no_warning", "compile_using_nvcc")


@dataclass(frozen=True)
class Build:
    """One kernel build CuPy did for the cell."""

    line: int | None  # the cell line that asked for it; None outside the cell's lines
    code: str
    seconds: float
    compiled: bool  # False: its cubin was loaded from the kernel cache
    timed: bool  # inside a timing window (:func:`timed`): left out of the GPU time


@dataclass(eq=False)  # each block its own: list.remove must find this one, not an equal one
class Window:
    """Build seconds spent on this thread while a :func:`timed` block ran."""

    seconds: float = 0.0


@dataclass
class _Call:
    compiled: bool = False


@dataclass
class _Thread(threading.local):
    calls: list[_Call] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)


_LOCAL = _Thread()


@contextmanager
def timed() -> Iterator[Window]:
    """Add up the kernel-build seconds spent on this thread inside the block (while a
    :class:`CompileRecord` is active; 0 otherwise)."""
    window = Window()
    _LOCAL.windows.append(window)
    try:
        yield window
    finally:
        _LOCAL.windows.remove(window)


class _Hook:
    """The one set of wrappers over CuPy's compiler while any record is active (the sync
    record's pattern: records register here, the originals come back when the last leaves)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: tuple[CompileRecord, ...] = ()
        self.module: ModuleType | None = None
        self.originals: dict[str, Callable[..., Any]] = {}
        self.wrappers: dict[str, Callable[..., Any]] = {}
        # the last wrappers made, reused while the module's functions are the same ones
        # (making them took part of a cell's fixed cost, every cell: issue 20)
        self.made: tuple[ModuleType | None, dict[str, Any], dict[str, Any]] = (None, {}, {})

    def add(self, record: CompileRecord, module: ModuleType) -> None:
        with self.lock:
            if not self.active:
                self.module = module
                self.originals = {n: getattr(module, n) for n in (OUTER, *INNER)
                                  if callable(getattr(module, n, None))}
                made_for, made_from, made = self.made
                if made_for is not module or made_from != self.originals:
                    made = {n: (self._outer if n == OUTER else self._inner)(f)
                            for n, f in self.originals.items()}
                    self.made = (module, self.originals, made)
                self.wrappers = made
                for name, wrapper in self.wrappers.items():
                    setattr(module, name, wrapper)
            self.active = (*self.active, record)

    def remove(self, record: CompileRecord) -> None:
        with self.lock:
            self.active = tuple(r for r in self.active if r is not record)
            if self.active or self.module is None:
                return
            for name, wrapper in self.wrappers.items():
                if getattr(self.module, name, None) is wrapper:  # not wrapped again since
                    setattr(self.module, name, self.originals[name])
            self.module, self.originals, self.wrappers = None, {}, {}

    def _outer(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def build(*args: Any, **kwargs: Any) -> Any:
            if _LOCAL.calls:  # nested: part of the build already timed
                return original(*args, **kwargs)
            call = _Call()
            _LOCAL.calls.append(call)
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                _LOCAL.calls.pop()
                self._done(time.perf_counter() - t0, call.compiled, sys._getframe(1))
        return build

    def _inner(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def compile_(*args: Any, **kwargs: Any) -> Any:
            if _LOCAL.calls:
                _LOCAL.calls[-1].compiled = True
                return original(*args, **kwargs)
            t0 = time.perf_counter()  # called outside a cached build: a compile of its own
            try:
                return original(*args, **kwargs)
            finally:
                self._done(time.perf_counter() - t0, True, sys._getframe(1))
        return compile_

    def _done(self, seconds: float, compiled: bool, frame: FrameType | None) -> None:
        for window in _LOCAL.windows:
            window.seconds += seconds
        for record in self.active:
            record._on_build(frame, seconds, compiled, bool(_LOCAL.windows))


_HOOK = _Hook()


def _compiler(module: ModuleType | None = None) -> tuple[ModuleType | None, str]:
    """Return CuPy's compiler module (or ``module``), or None and why it cannot be hooked."""
    if module is None:
        try:
            module = sys.modules.get("cupy.cuda.compiler") or \
                importlib.import_module("cupy.cuda.compiler")
        except ImportError as exc:
            return None, f"CuPy's compiler is not importable ({exc})"
    missing = [n for n in (OUTER, INNER[0]) if not callable(getattr(module, n, None))]
    if missing:
        return None, f"this CuPy has no cupy.cuda.compiler.{missing[0]} to hook"
    return module, ""


def cache_place(module: ModuleType | None) -> str:
    """Where CuPy keeps what it compiles, in words."""
    if os.environ.get("CUPY_CACHE_IN_MEMORY", "").lower() in ("1", "true", "yes", "on"):
        return "in this process's memory only (CUPY_CACHE_IN_MEMORY is set)"
    backend = getattr(module, "_kernel_cache_backend", None)
    where = getattr(backend, "_cache_dir", None)
    if where is None and backend is not None and type(backend).__name__ != \
            "DiskKernelCacheBackend":
        return f"by CuPy's kernel cache backend {type(backend).__name__}"
    where = where or os.environ.get("CUPY_CACHE_DIR") or "~/.cupy/kernel_cache"
    home = os.path.expanduser("~")
    short = "~" + where[len(home):] if home != "/" and where.startswith(home + os.sep) else where
    set_by = "CUPY_CACHE_DIR" if os.environ.get("CUPY_CACHE_DIR") else "CuPy's default"
    return f"in {short} ({set_by})"


class CompileRecord:
    """Record the kernels CuPy builds while a cell runs, charged to the cell's lines.

    Parameters
    ----------
    code_filename : str
        The filename the cell was compiled with; a build is charged to the innermost frame
        running that code (its line quoted by :func:`cupy_magic.source.line_code`).
    module : module, optional
        The compiler module to hook; CuPy's ``cupy.cuda.compiler`` when omitted (tests pass
        a scripted one).

    Attributes
    ----------
    builds : list of Build
        In the order they happened, on the thread that entered the record.
    available : bool
        False when CuPy's compiler cannot be hooked: nothing is recorded, and the report
        says "compile time not measured".
    reason : str
        Why it is not available; empty otherwise.
    cache : str
        Where compiled kernels are kept for next time, in words; read when the record closes
        with builds (empty otherwise: reading it costs about 25 us, every cell).
    """

    applies = True  # the GPU builds kernels; the CPU fallback does not (NoCompiles)

    def __init__(self, code_filename: str, module: ModuleType | None = None) -> None:
        self.code_filename = code_filename
        self._module = module
        self.builds: list[Build] = []
        self.available = False
        self.reason = "the record has not been entered"
        self.cache = ""
        self._thread: int | None = None
        self._hooked: ModuleType | None = None

    def __enter__(self) -> CompileRecord:
        if self._thread is not None:
            raise RuntimeError("a CompileRecord cannot be entered twice; make a new one")
        module, self.reason = _compiler(self._module)
        self._thread = threading.get_ident()
        self.available = module is not None
        self._hooked = module or self._module
        if module is not None:
            _HOOK.add(self, module)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        _HOOK.remove(self)
        if self.builds:
            self.cache = cache_place(self._hooked)

    def _on_build(self, frame: FrameType | None, seconds: float, compiled: bool,
                  timed: bool) -> None:
        if threading.get_ident() != self._thread:
            return
        while frame is not None and frame.f_code.co_filename != self.code_filename:
            frame = frame.f_back
        line = frame.f_lineno if frame is not None else None
        code = line_code(self.code_filename, line)
        self.builds.append(Build(line, code, seconds, compiled, timed))

    # --- figures ------------------------------------------------------------------------
    @property
    def compiled(self) -> list[Build]:
        return [b for b in self.builds if b.compiled]

    @property
    def loaded(self) -> list[Build]:
        return [b for b in self.builds if not b.compiled]

    @property
    def seconds(self) -> float:
        """Seconds of every build (compiles and loads from the cache)."""
        return sum(b.seconds for b in self.builds)

    @property
    def timed_seconds(self) -> float:
        """Build seconds inside the timed run: what the GPU time leaves out."""
        return sum(b.seconds for b in self.builds if b.timed)

    @property
    def warmup(self) -> list[Build]:
        """Builds of the cell's lines outside the timed run: those of a ``--warmup`` run."""
        return [b for b in self.builds if b.line is not None and not b.timed]

    def by_line(self) -> list[tuple[int | None, str, int, float, bool]]:
        """``(line, code, kernels, seconds, in the warm-up)`` of the compiles, by cell line
        (builds outside the cell's lines last, as line None)."""
        rows: dict[tuple[int | None, bool], list[Build]] = {}
        for b in self.compiled:
            rows.setdefault((b.line, b.line is not None and not b.timed), []).append(b)
        order = sorted(rows, key=lambda k: (k[0] is None, k[0] or 0, not k[1]))
        return [(k[0], rows[k][0].code, len(rows[k]), sum(b.seconds for b in rows[k]), k[1])
                for k in order]


class NoCompiles(CompileRecord):
    """The CPU fallback's record: NumPy runs code compiled in advance, so nothing to count."""

    applies = False

    def __init__(self, reason: str = "no compilation on the CPU fallback") -> None:
        super().__init__("")
        self.reason = reason

    def __enter__(self) -> NoCompiles:
        return self
