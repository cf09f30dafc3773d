"""A real Jupyter kernel on the CPU fallback for tests: start it, run a cell, read iopub.

Shared by the kernel tests of the panel and of the "held by" section (imported through the
``pythonpath`` of pytest's settings).
"""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import start_new_kernel


def host_kernel_env(home: Path) -> dict[str, str]:
    """The environment of a python3 kernel on the host backend that writes nothing outside
    ``home`` and imports this checkout's package (``PYTHONPATH``: the installed one may be
    another worktree's)."""
    root = str(Path(__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    env = dict(os.environ, HOME=str(home), IPYTHONDIR=str(home / ".ipython"),
               CUPY_CACHE_DIR=str(home / ".cupy"), JUPYTER_RUNTIME_DIR=str(home / "rt"),
               MPLCONFIGDIR=str(home / ".mpl"), CUPY_MAGIC_BACKEND="host",
               PYTHONPATH=root + (os.pathsep + path if path else ""))
    env.pop("MPLBACKEND", None)  # the kernel's own: matplotlib-inline
    return env


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Any]:
    """A python3 kernel on the host backend, writing nothing outside ``tmp_path``."""
    env = host_kernel_env(tmp_path)
    km, kc = start_new_kernel(kernel_name="python3", env=env, cwd=str(tmp_path))
    try:
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def run_timed(kc: Any, code: str, timeout: float = 60) -> list[tuple[float, dict[str, Any]]]:
    """Execute ``code``; return every iopub message (with arrival time) until it is idle."""
    msg_id = kc.execute(code)
    got: list[tuple[float, dict[str, Any]]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        got.append((time.monotonic(), msg))
        if (msg["msg_type"] == "status" and msg["parent_header"].get("msg_id") == msg_id
                and msg["content"]["execution_state"] == "idle"):
            reply = kc.get_shell_msg(timeout=10)
            assert reply["content"]["status"] == "ok", reply["content"]
            return got
    raise AssertionError(f"the cell did not finish in {timeout} s: {code!r}")
