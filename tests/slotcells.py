"""What the tests of ``%%gpu --cluster`` through slots (shared memory, CUDA IPC) share: the
cell they compare with the kernel, its block size, and how they run it and read a result."""

from __future__ import annotations

from typing import Any

import numpy as np

ROWS = "--batch-rows 100"  # 1003 rows: 11 blocks, the last of 3 rows
BODY = ("y = np.sqrt(x) * 2 + 1\nm = x - x.mean(axis=1, keepdims=True)\n"
        "n = np.linalg.norm(x, axis=1)\nk = 3\n")


def run_quiet(ip: Any, body: str, line: str, names: str) -> dict:
    """Run ``body`` as a quiet ``%%gpu`` cell with ``line``; take ``names`` (one letter
    each) out of the user's namespace."""
    ip.run_cell_magic("gpu", f"--quiet {line}".strip(), body)
    return {n: ip.user_ns.pop(n) for n in names}


def on_host(value: Any) -> Any:
    """A result as a host value: a Dask array computed, a CuPy array copied back."""
    value = value.compute() if hasattr(value, "compute") else value
    return value.get() if hasattr(value, "get") and not isinstance(value, np.ndarray) else value


def reduce_cell(rule: str) -> tuple[str, str]:
    """A cell whose ``s`` is joined by ``--reduce s=rule`` (a column total, or the rows
    past a threshold for ``concat``), and its magic line over blocks of ``ROWS``."""
    body = "y = x * 2\ns = y.sum(axis=0) if RULE != 'concat' else y[y[:, 0] > 1]\n"
    return body.replace("RULE", repr(rule)), f"--to-host --cluster {ROWS} --reduce s={rule}"
