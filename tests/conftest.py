"""Shared fixtures: a real IPython shell, backends, and a clean $HOME for everything."""

from __future__ import annotations

import atexit
import bisect
import json
import os
import shutil
import signal
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import pytest

# the `kernel` fixture (a real Jupyter kernel on the CPU fallback) for the kernel tests
pytest_plugins = ["host_kernel"]

# Kernels, IPython and CuPy write under $HOME: point them at a throwaway folder before any
# of them is imported, so the tests write nothing into the real home or the repo.
_HOME = Path(tempfile.mkdtemp(prefix="cupy-magic-home-"))
for var, sub in (("HOME", ""), ("IPYTHONDIR", ".ipython"), ("CUPY_CACHE_DIR", ".cupy"),
                 ("JUPYTER_CONFIG_DIR", ".jupyter"), ("JUPYTER_RUNTIME_DIR", ".jupyter-rt"),
                 ("MPLCONFIGDIR", ".mpl")):
    os.environ[var] = str(_HOME / sub)
    (_HOME / sub).mkdir(parents=True, exist_ok=True)
os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")
# removed when the run ends (by the process that made it), so runs leave no folders in /tmp
_HOME_PID = os.getpid()
atexit.register(lambda: os.getpid() == _HOME_PID and shutil.rmtree(_HOME, ignore_errors=True))

# The Ctrl-C tests send SIGINT to this process: a run started with SIGINT ignored (a background
# job of a non-interactive shell, `pytest ... &` in a script) never sees it, and their cells
# loop on for hours. Python's own handler, as under a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True, scope="module")
def no_cluster_left() -> Iterator[None]:
    """A Dask cluster a test module leaves running is closed after it, and the module fails
    by name: its idle scheduler and workers allocate in this process, which the CPU
    fallback's budget (tracemalloc, process-wide) counted against later modules' cells
    (dozens of batched tests refused 'over the budget', 1,500 tests after the leak)."""
    yield
    if "distributed" not in sys.modules:
        return
    from distributed.core import Status
    from distributed.deploy.spec import SpecCluster

    left = [c for c in list(SpecCluster._instances)
            if getattr(c, "status", Status.closed) not in (Status.closed, Status.failed)]
    for cluster in left:
        cluster.close(timeout=30)
    assert not left, f"this module left {len(left)} Dask cluster(s) running: {left}"


@pytest.fixture(autouse=True, scope="module")
def no_sampler_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """A panel sampler's thread a test module leaves running is stopped after it, with a
    warning that names the module: its ticks allocate in this process, which the CPU
    fallback's budget counts against later cells, as a cluster's do (on 2026-12-07 one
    left by an unknown module refused 108 batched tests of tests/run in two whole-suite
    runs out of five; tests/test_lifecycle.py fails on such a thread at its own setup)."""
    from cupy_magic.monitor.sampler import THREAD_NAME, sampler_threads

    before = set(sampler_threads())
    yield
    left = [t for t in sampler_threads() if t not in before]
    for thread in left:
        owner = getattr(getattr(thread, "_target", None), "__self__", None)  # Sampler._run
        if owner is not None and hasattr(owner, "stop"):
            owner.stop()
    if left:
        warnings.warn(f"{request.module.__name__} left {len(left)} {THREAD_NAME} "
                      "thread(s) running; stopped", pytest.PytestWarning, stacklevel=1)


def gpu_available() -> bool:
    try:
        import cupy
    except ImportError:
        return False
    try:
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # CUDARuntimeError without a driver: no GPU here
        return False


HAS_GPU = gpu_available()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--shard", default=None, metavar="K/N",
        help="run only the K-th of N stretches of the tests in collection order, balanced "
             "by their files' time on the GPU (tests/gpu-times.json; a file never timed "
             "counts its tests at the mean); scripts/gpu-check's GPU_CHECK_SHARD spreads one "
             "run over device calls")

TIMES = Path(__file__).with_name("gpu-times.json")


def file_weights(files: dict[str, int], times: dict[str, list[float]]) -> dict[str, float]:
    """Each file's expected seconds: ``times`` gives seconds and tests measured for a file
    (``tests/gpu-times.json``, from a gpu-check run's junit.xml), scaled to the tests it has
    now; a file never measured counts its tests at the measured files' mean per test."""
    measured = [times[f] for f in files if f in times and times[f][1] > 0]
    per_test = (sum(t for t, _ in measured) / sum(n for _, n in measured)) if measured else 1.0
    return {f: (times[f][0] / times[f][1] * n if f in times and times[f][1] > 0
                else per_test * n) for f, n in files.items()}


def shard_of(weights: list[float], count: int) -> list[int]:
    """Each test's group (0 to ``count - 1``), the tests in collection order: ``count``
    stretches of about equal weight, a test in the stretch that holds its middle. A file is
    split only where a stretch ends (its module fixtures then set up once more), so a file
    longer than a group no longer makes one group of its own; the same tests and weights
    always give the same groups."""
    if not sum(weights):
        weights = [1.0] * len(weights)
    total, n = sum(weights), len(weights)
    middles, before = [], 0.0  # each test's middle, in groups (non-decreasing)
    for weight in weights:
        middles.append((before + weight / 2) / total * count)
        before += weight
    if n < count:  # fewer tests than groups: some stay empty
        return [min(count - 1, int(m)) for m in middles]
    # no group left empty (pytest would exit 5, counted as failed): group k starts at the
    # first test whose middle lies in it, moved on past the previous start, and back so that
    # each later group keeps a test
    starts = [0]
    for k in range(1, count):
        starts.append(min(max(bisect.bisect_left(middles, k), starts[-1] + 1), n - (count - k)))
    return [bisect.bisect_right(starts, i) - 1 for i in range(n)]


def _shard(text: str) -> tuple[int, int]:
    k, sep, n = text.partition("/")
    if sep and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n):
        return int(k), int(n)
    raise pytest.UsageError(f"--shard {text!r}: give K/N with 1 <= K <= N, e.g. --shard 1/3")


@pytest.hookimpl(trylast=True)  # after -m and -k: the stretches share the tests selected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("shard"):
        k, n = _shard(config.getoption("shard"))
        path = [item.nodeid.split("::")[0] for item in items]
        files: dict[str, int] = {}
        for name in path:
            files[name] = files.get(name, 0) + 1
        times = json.loads(TIMES.read_text())["seconds"] if TIMES.is_file() else {}
        seconds = file_weights(files, times)
        group = shard_of([seconds[name] / files[name] for name in path], n)
        mine = [g == k - 1 for g in group]
        config.hook.pytest_deselected(items=[i for i, m in zip(items, mine, strict=True)
                                             if not m])
        items[:] = [i for i, m in zip(items, mine, strict=True) if m]
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with CuPy (none visible here)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def cupy_names() -> None:
    """Skip where CuPy is not installed: the CPU fallback checks a cell's calls against
    CuPy's names and signatures only where CuPy can be imported (``compat.spec``), as in CI;
    a plain ``pip install -e '.[test]'`` has no CuPy."""
    pytest.importorskip("cupy", reason="the calls are checked against CuPy's names; "
                        "pip install cupy-cuda13x (importable without a GPU)")


@pytest.fixture(scope="session")
def shell():
    """The one real IPython InteractiveShell of the test session."""
    from IPython.testing.globalipapp import start_ipython

    return start_ipython()


BACKENDS = ["host", pytest.param("cupy", marks=pytest.mark.gpu)]


def loaded(shell, monkeypatch: pytest.MonkeyPatch, backend: str) -> Iterator:
    """Load the extension on ``backend``; afterwards unload it and drop the test's names."""
    import numpy as np

    monkeypatch.setenv("CUPY_MAGIC_BACKEND", backend)
    shell.run_line_magic("load_ext", "cupy_magic")
    shell.user_ns["np"] = np
    keep = set(shell.user_ns)
    yield shell
    shell.run_line_magic("unload_ext", "cupy_magic")
    for name in set(shell.user_ns) - keep:
        del shell.user_ns[name]


@pytest.fixture(params=BACKENDS)
def ip(request: pytest.FixtureRequest, shell, monkeypatch: pytest.MonkeyPatch) -> Iterator:
    """A shell with the extension loaded on one backend (host always, cupy on a GPU)."""
    yield from loaded(shell, monkeypatch, request.param)


@pytest.fixture
def gip(shell, monkeypatch: pytest.MonkeyPatch) -> Iterator:
    """A shell with the extension loaded on CuPy alone (for tests marked ``gpu``)."""
    yield from loaded(shell, monkeypatch, "cupy")


@pytest.fixture
def xp(ip):
    """The array module cells run on for this backend."""
    from cupy_magic import backend

    return backend.current().xp


@pytest.fixture
def plain_flags(shell) -> Iterator[None]:
    """Put back the shell's ``from __future__`` flags after the test: cells that import from
    ``__future__`` leave them set, and the shell serves the whole session."""
    saved = shell.compile.flags
    yield
    shell.compile.flags = saved


def cell_error(ip, cell: str, line: str = "") -> str:
    """The message of the error a ``%%gpu line`` cell over ``cell`` stops with."""
    result = ip.run_cell(f"%%gpu {line}\n{cell}")
    assert result.error_in_exec is not None, "the cell should have stopped"
    return str(result.error_in_exec)


@pytest.fixture
def poisoned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gathered outputs of batched cells start as garbage, so a row no batch wrote shows."""
    import numpy as np

    from cupy_magic.run import batched

    def empty(shape, dtype, alloc=np.empty):
        out = alloc(shape, dtype)
        out.view(np.uint8)[...] = 0xA5
        return out

    monkeypatch.setattr(batched, "_empty_output", empty)


def last_entry(tb: TracebackType | None) -> TracebackType:
    """The innermost entry of a traceback (where the error was raised)."""
    assert tb is not None
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def failed_block(exc: BaseException) -> tuple[str, str, int]:
    """A failed run's notes (joined), and the file and line its traceback ends at."""
    last = last_entry(exc.__traceback__)
    return (" ".join(getattr(exc, "__notes__", [])), last.tb_frame.f_code.co_filename,
            last.tb_lineno)
