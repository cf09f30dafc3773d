"""Batched runs against NumPy, cell by cell (:mod:`parity_corpus`): each cell runs once in
plain NumPy and twice through a real shell as ``%%gpu --quiet --to-host``, batched on
request (``--batch --batch-rows 3000``: seven equal batches, so a value every batch agrees
on is not told apart by its batch) and on its own (the inputs over a small budget). Each run
must give NumPy's results (values to rtol 1e-12, NaN positions, dtypes, shapes, printed
text) or stop with a one-line error that names the place and a fix; never a silently
different result, never an error that is not a refusal."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import numpy as np
import pytest
from IPython.core.error import UsageError
from parity_corpus import CELLS, ELEMENTWISE, ROW_REDUCTIONS, SMALL_OPERANDS, WHERE_CLIP_CAST

from cupy_magic.backend.base import BudgetExceeded

N = 21_000  # 7 batches of 3,000 rows
ASKED = "--batch --batch-rows 3000"
BUDGET = "160KB"  # under v (164 KiB) and x (656 KiB): every cell is batched on its own
INPUTS = ("x", "v", "w", "b", "cen")
FIXES = ("--reduce", "--batch", "cell of its own", "%vram_budget", "run it whole")
# cells that must run batched in both ways: their rows never mix
ROW_WISE = {c for group in (ELEMENTWISE, ROW_REDUCTIONS, WHERE_CLIP_CAST) for c in group}
ROW_WISE |= {c for c in SMALL_OPERANDS if "einsum" not in c and "tensordot" not in c
             and "outer" not in c}


def _inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"x": rng.random((N, 4)), "v": rng.random(N), "w": rng.random((4, 4)),
            "b": rng.random(4), "cen": rng.random((3, 4))}


def _results(ns: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in ns.items()
            if not k.startswith("_") and k != "np" and not callable(v)}


def _numpy(cell: str) -> tuple[dict[str, Any], str]:
    """The cell's results and printed text in plain NumPy."""
    ns: dict[str, Any] = {"np": np, **_inputs()}
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


def outcome(ip, cell: str, rules: str, asked: bool) -> str:
    """'same', 'refused', or what went wrong ('DIFFERS: ...', 'ERROR: ...')."""
    want, printed = _numpy(cell)
    for name in set(ip.user_ns) & (set(want) | set(INPUTS)):
        del ip.user_ns[name]
    ip.user_ns.update(_inputs())
    line = "--quiet --to-host" + (f" --reduce {rules}" if rules else "")
    if asked:
        line += " " + ASKED
    else:
        ip.run_line_magic("vram_budget", BUDGET)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), np.errstate(all="ignore"):
            ip.run_cell_magic("gpu", line, cell)
    except (UsageError, BudgetExceeded) as err:
        return "refused" if _refusal(err) else f"ERROR: not one line naming a fix: {err}"
    except Exception as err:  # any other error is a defect here
        return f"ERROR: {type(err).__name__}: {err}"
    finally:
        if not asked:
            ip.run_line_magic("vram_budget", "off")
    wrong = [f"{k}: {d}" for k, v in want.items()
             if (d := "missing" if k not in ip.user_ns else _differs(v, ip.user_ns[k]))]
    if out.getvalue() != printed:
        wrong.append(f"printed {out.getvalue()[:60]!r}, NumPy {printed[:60]!r}")
    return "same" if not wrong else "DIFFERS: " + "; ".join(wrong)


@pytest.mark.parametrize(("cell", "rules"), CELLS,
                         ids=[f"{i}" for i in range(len(CELLS))])
def test_a_batched_cell_gives_numpy_s_results_or_is_refused(ip, cell, rules):
    got = {how: outcome(ip, cell, rules, how == "asked") for how in ("asked", "on its own")}
    assert all(g in ("same", "refused") for g in got.values()), got
    if cell in ROW_WISE and not rules:
        assert set(got.values()) == {"same"}, got


def test_the_corpus_is_large_and_varied():
    assert len(CELLS) >= 150 and len({c for c, _ in CELLS}) >= 140
