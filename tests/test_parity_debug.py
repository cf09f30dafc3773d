"""Post-mortem debugging after a failed ``%%gpu`` cell. A failed cell frees its frames (their
device arrays go back to the pool); under ``%pdb on`` it keeps them, so that IPython's
debugger opens in the cell's frame with its values, as after a plain cell; ``%debug`` on a
cell that freed them says so in one line with the fix. Through a real IPython shell, on both
backends."""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest
from conftest import last_entry

from cupy_magic import backend
from cupy_magic.magics.postmortem import FREED_MESSAGE

BODY = "y = x * 2\ndef f(a):\n    loc = a + 1\n    return loc / undefined\nf(y)\n"
COMMANDS = "p int(loc.sum())\nup\np int(y.sum())\nq\n"


@pytest.fixture
def typed(ip, monkeypatch: pytest.MonkeyPatch):
    """What the user types at the debugger's prompt (a fresh debugger: IPython keeps its
    first one, with the stdout of the test that made it)."""
    monkeypatch.setattr(ip.InteractiveTB, "pdb", None)

    def feed(text: str) -> None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    return feed


@pytest.fixture
def pdb_on(ip):
    ip.run_line_magic("pdb", "on")
    yield ip
    ip.run_line_magic("pdb", "off")


def test_under_pdb_on_the_debugger_opens_in_the_cells_frame_with_its_values(pdb_on, typed,
                                                                           capsys):
    ip = pdb_on
    ip.user_ns["x"] = np.arange(3.0)
    typed(COMMANDS)
    result = ip.run_cell("%%gpu --quiet\n" + BODY, store_history=True)
    assert isinstance(result.error_in_exec, NameError)
    out = capsys.readouterr().out
    assert "----> 4     return loc / undefined" in out
    assert "\nipdb> 9\n" in out  # loc = x * 2 + 1 summed, in f's frame
    assert "ipdb> 6\n" in out  # y, up in the cell's own frame
    assert "y" not in ip.user_ns  # still a transaction: the failed cell committed nothing
    tb = last_entry(sys.last_traceback)
    assert tb.tb_frame.f_code.co_name == "f" and "loc" in tb.tb_frame.f_locals


def test_debug_on_a_cell_that_freed_its_frames_says_so_with_the_fix(ip, typed, capsys):
    ip.user_ns["x"] = np.arange(3.0)
    result = ip.run_cell("%%gpu --quiet\n" + BODY, store_history=True)
    assert isinstance(result.error_in_exec, NameError)
    tb = last_entry(sys.last_traceback)
    assert tb.tb_frame.f_locals == {}  # freed, as the README promises for the pool
    capsys.readouterr()
    typed("q\n")
    ip.run_line_magic("debug", "")
    err = capsys.readouterr().err
    assert FREED_MESSAGE in err and "%pdb on" in FREED_MESSAGE
    assert "\n" not in FREED_MESSAGE


def test_debug_after_a_plain_cell_says_nothing_more(ip, typed, capsys):
    ip.run_cell("def g():\n    here = 5\n    1 / 0\ng()", store_history=True)
    capsys.readouterr()
    typed("p here\nq\n")
    ip.run_line_magic("debug", "")
    seen = capsys.readouterr()
    assert FREED_MESSAGE not in seen.err and "ipdb> 5" in seen.out


@pytest.fixture
def verbose(ip):
    mode = ip.InteractiveTB.mode
    ip.run_line_magic("xmode", "Verbose")
    yield ip
    ip.run_line_magic("xmode", mode)


def test_a_verbose_traceback_shows_the_failed_cells_values_as_a_plain_cells(verbose, capsys):
    """``%xmode Verbose`` shows each frame's arguments and the values its line reads: the
    failed cell keeps its frames for it, as it does under ``%pdb on``."""
    body = "def bad(a):\n    b = a * 2\n    return b / zero\nzero = 0\nbad(3)\n"
    shown = []
    for cell in (body, "%%gpu --quiet\n" + body):
        capsys.readouterr()
        assert verbose.run_cell(cell, store_history=True).error_in_exec is not None
        text = capsys.readouterr().out
        shown.append([t for t in ("in bad(a=3)", "b = 6", "zero = 0") if t in text])
    assert shown[1] == shown[0] == ["in bad(a=3)", "b = 6", "zero = 0"]


@pytest.fixture
def mode(ip):
    """Put back the traceback mode after the test."""
    saved = ip.InteractiveTB.mode
    yield ip
    ip.run_line_magic("xmode", saved)


@pytest.mark.parametrize("xmode", ["Context", "Plain", "Minimal"])
def test_a_failed_cells_traceback_names_each_frames_arguments_then_its_values_are_freed(
        mode, xmode, capsys):
    """IPython names a frame's arguments (``in f(a)``, NumPy's ``in _sum(a, axis, ...)``)
    from its locals: the failed cell frees them after the traceback is shown, not before
    (``f(***failed resolving arguments***)``), and still before the next cell."""
    ip = mode
    ip.run_line_magic("xmode", xmode)
    ip.user_ns.update(x=np.arange(4.0), refs=[])
    body = ("import weakref\ny = x * 2\ndef f(a):\n    big = a * 3\n"
            "    refs.append(weakref.ref(big))\n    return a.sum(axis=5)\nf(y)\n")
    shown = []
    for cell in (body, "%%gpu --quiet\n" + body):
        capsys.readouterr()
        assert isinstance(ip.run_cell(cell, store_history=True).error_in_exec,
                          np.exceptions.AxisError)
        shown.append(capsys.readouterr().out)
    assert "failed resolving" not in shown[1]
    library = [] if backend.current().is_gpu else [  # CuPy's sum has no Python frame
        "in _sum(a, axis, dtype, out, keepdims, initial, where)"]
    for call in ["in f(a)", *library]:
        assert (call in shown[1]) == (call in shown[0]) == (xmode == "Context")
    assert refs_freed(ip.user_ns["refs"][1:])  # the %%gpu cell's: freed as the cell ended
    assert last_entry(sys.last_traceback).tb_frame.f_locals == {}


def refs_freed(refs: list) -> bool:
    return bool(refs) and all(ref() is None for ref in refs)


def test_a_failed_cell_called_from_python_frees_its_frames_before_it_returns(ip):
    """Outside a shell's cell (``run_cell_magic`` from Python) no traceback is shown for
    it: the frames are freed before the error reaches the caller."""
    ip.user_ns.update(x=np.arange(4.0), refs=[])
    with pytest.raises(ZeroDivisionError):
        ip.run_cell_magic("gpu", "--quiet", "import weakref\ndef f(a):\n    big = a * 3\n"
                          "    refs.append(weakref.ref(big))\n    1 / 0\nf(x)\n")
    assert refs_freed(ip.user_ns["refs"])
