"""Running a cell of :mod:`parity_corpus` as ``%%gpu`` in a real shell and against plain
NumPy (used by ``test_batched_parity`` and ``test_cluster_parity``): the run must give
NumPy's results (values to rtol 1e-12, NaN positions, dtypes, shapes, printed text) or stop
with a one-line error that names the place and a fix."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import numpy as np
from IPython.core.error import UsageError

from cupy_magic.backend import current
from cupy_magic.backend.base import BudgetExceeded

__all__ = ["ASKED", "INPUTS", "N", "compare", "inputs"]

N = 21_000  # 7 batches (or blocks) of 3,000 rows
ASKED = "--batch --batch-rows 3000"  # batched on request: seven equal batches
INPUTS = ("x", "v", "w", "b", "cen")
FIXES = ("--reduce", "--batch", "cell of its own", "%vram_budget", "run it whole")


def inputs() -> dict[str, np.ndarray]:
    """The corpus's inputs: ``x`` (N, 4) and ``v`` (N,) batched, ``w``, ``b``, ``cen`` small."""
    rng = np.random.default_rng(0)
    return {"x": rng.random((N, 4)), "v": rng.random(N), "w": rng.random((4, 4)),
            "b": rng.random(4), "cen": rng.random((3, 4))}


def _results(ns: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in ns.items()
            if not k.startswith("_") and k != "np" and not callable(v)}


def _numpy(cell: str, earlier: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The cell's results and printed text in plain NumPy (``earlier``: names set before)."""
    ns: dict[str, Any] = {"np": np, **inputs(), **earlier}
    out = io.StringIO()
    with contextlib.redirect_stdout(out), np.errstate(all="ignore"):
        exec(cell, ns)  # the corpus's own cells
    return _results(ns), out.getvalue()


def _differs(want: Any, got: Any) -> str | None:
    """How ``got`` differs from NumPy's ``want`` (None: the same)."""
    if isinstance(want, (np.ndarray, np.generic)) or isinstance(got, (np.ndarray, np.generic)):
        a, b = np.asarray(want), np.asarray(got)
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{b.dtype} {b.shape}, NumPy's {a.dtype} {a.shape}"
        if a.dtype.kind in "fc" and not np.array_equal(np.isnan(a), np.isnan(b)):
            return "NaN at other places"
        try:
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-13, equal_nan=True)
        except AssertionError as err:
            return " ".join(str(err).split())[:200]
        return None
    if type(want) is not type(got) or want != got:
        return f"{got!r:.80}, NumPy's {want!r:.80}"
    return None


def _refusal(err: BaseException) -> bool:
    """A one-line error that names the place (a line or a result) and a fix."""
    msg = str(err)
    return ("\n" not in msg and ("line " in msg or "result '" in msg)
            and any(fix in msg for fix in FIXES))


def compare(ip: Any, cell: str, line: str, given: dict[str, Any] | None = None,
            earlier: dict[str, Any] | None = None) -> str:
    """Run ``%%gpu line`` over ``cell`` in the shell ``ip`` (its inputs: ``given``, else
    :func:`inputs`; ``earlier``: names an earlier cell set, constants) and compare it with
    NumPy: 'same', 'refused', or what went wrong ('DIFFERS: ...', 'ERROR: ...')."""
    earlier = earlier or {}
    want, printed = _numpy(cell, earlier)
    for name in set(ip.user_ns) & (set(want) | set(INPUTS) | set(earlier)):
        del ip.user_ns[name]
    ip.user_ns.update({**(inputs() if given is None else given), **earlier})
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), np.errstate(all="ignore"):
            ip.run_cell_magic("gpu", line, cell)
    except (UsageError, BudgetExceeded) as err:
        return "refused" if _refusal(err) else f"ERROR: not one line naming a fix: {err}"
    except Exception as err:  # any other error is a defect here
        return f"ERROR: {type(err).__name__}: {err}"
    wrong = [f"{k}: {d}" for k, v in want.items()
             if (d := "missing" if k not in ip.user_ns else _differs(v, ip.user_ns[k]))]
    if out.getvalue() != printed:
        wrong.append(f"printed {out.getvalue()[:60]!r}, NumPy {printed[:60]!r}")
    return "same" if not wrong else "DIFFERS: " + "; ".join(wrong)


CUPY_REFUSED = "refused: CuPy lacks it (CupyLimit naming --fallback)"


def judged(got: str) -> str:
    """``got`` as :func:`compare` gave it, except that on the cupy backend a one-line
    ``CupyLimit`` naming ``--fallback`` (the compat layer refusing a call CuPy cannot run
    as NumPy would) is :data:`CUPY_REFUSED`, a refusal."""
    if (current().name == "cupy" and got.startswith("ERROR: CupyLimit: ")
            and "\n" not in got and "--fallback" in got):
        return CUPY_REFUSED
    return got
