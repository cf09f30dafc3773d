"""Errors a cell raises end at its line, and say what was wrong (issue 17, points 4 to 6)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import last_entry
from IPython.core.error import UsageError

from cupy_magic import backend
from cupy_magic.backend import BudgetExceeded
from cupy_magic.backend.host import HostBackend
from cupy_magic.run.errors import explain_oom
from cupy_magic.syncs.record import HostSyncError
from cupy_magic.units import format_bytes


def run(ip, body: str, line: str = "--quiet"):
    return ip.run_cell(f"%%gpu {line}\n{body}", store_history=True)


def _shown(ip, exc: BaseException) -> str:
    """The traceback as IPython renders it (plain text, no colours)."""
    return re.sub(r"\x1b\[[0-9;]*m", "", ip.InteractiveTB.text(type(exc), exc, exc.__traceback__))


def _ends_at(ip, result, line: int, code: str) -> None:
    exc = result.error_in_exec
    assert exc is not None
    last = last_entry(exc.__traceback__)
    assert last.tb_frame.f_code.co_filename in ip.compile._filename_map
    assert last.tb_lineno == line and last.tb_frame.f_lineno == line
    text = _shown(ip, exc)
    after_hidden = text.split("skipping hidden")[-1].split(f"{type(exc).__name__}:")[0]
    assert f"----> {line} {code}" in after_hidden
    assert "cupy_magic" not in after_hidden and "with_traceback" not in after_hidden


# --- 4. every error ends at the cell's line --------------------------------------------------


def test_a_budget_error_during_the_cell_ends_at_the_line_that_went_over(ip):
    ip.run_line_magic("vram_budget", "1MB")
    result = run(ip, "y = np.ones(10**6)\nz = 2\n")
    assert isinstance(result.error_in_exec, BudgetExceeded)
    _ends_at(ip, result, 1, "y = np.ones(10**6)")
    assert "y" not in ip.user_ns


def test_inputs_refused_before_the_run_end_at_the_cell(ip):
    ip.run_line_magic("vram_budget", "1MB")
    ip.user_ns["x"] = np.ones((1, 1_000_000))
    result = run(ip, "y = x + 1\n")
    assert isinstance(result.error_in_exec, BudgetExceeded)
    _ends_at(ip, result, 1, "y = x + 1")


def test_an_out_of_memory_error_ends_at_the_line_that_asked(ip):
    result = run(ip, "a = 1\nz = np.ones(10**14)\n")
    assert isinstance(result.error_in_exec, MemoryError)
    _ends_at(ip, result, 2, "z = np.ones(10**14)")


def test_an_ordinary_error_still_ends_at_its_line(ip):
    result = run(ip, "a = 1\nb = 1 / 0\n")
    assert isinstance(result.error_in_exec, ZeroDivisionError)
    _ends_at(ip, result, 2, "b = 1 / 0")


def test_syncs_error_found_before_the_run_ends_at_the_line(ip):
    if backend.current().is_gpu:
        pytest.skip("on the GPU the runtime record raises while the cell runs (test_magics)")
    ip.user_ns["x"] = np.arange(4.0)
    result = run(ip, "y = x * 2\nif y.max() > 0:\n    y = -y\n", "--quiet --syncs error")
    assert isinstance(result.error_in_exec, HostSyncError)
    _ends_at(ip, result, 2, "if y.max() > 0:")


# --- 5. np.matrix ------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_a_matrix_input_is_refused_with_the_fix(ip):
    ip.user_ns["mat"] = np.matrix([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(UsageError, match=r"'mat' is a np.matrix.*np.asarray\(mat\)"):
        ip.run_cell_magic("gpu", "--quiet", "y = mat * mat\n")
    assert "y" not in ip.user_ns


# --- 6. what was asked, which input is too big ---------------------------------------------------


def test_a_broadcast_view_over_the_budget_is_named(ip):
    ip.run_line_magic("vram_budget", "1GB")
    ip.user_ns["x"] = np.broadcast_to(np.ones(1), (10**12,))
    with pytest.raises(UsageError) as info:
        ip.run_cell_magic("gpu", "--quiet", "y = x + 1\n")
    msg = str(info.value)
    left = format_bytes(backend.current().budget_left())  # 953.67 MiB less what is held now
    assert msg.startswith("input 'x' (a broadcast view of 8 B) would take 7.28 TiB on the "
                          f"device, more than the {left} the VRAM budget leaves")
    assert "inside the %%gpu cell" in msg and "y" not in ip.user_ns


def test_a_broadcast_view_larger_than_the_device_is_named_without_a_budget(ip):
    ip.user_ns["x"] = np.broadcast_to(np.ones(1), (10**14,))
    with pytest.raises(UsageError, match=r"'x' \(a broadcast view of 8 B\) would take "
                                         r"727.60 TiB on the device, more than the device's"):
        ip.run_cell_magic("gpu", "--quiet", "y = x + 1\n")


def test_a_small_broadcast_view_still_runs(ip):
    ip.user_ns["x"] = np.broadcast_to(np.arange(3.0), (4, 3))
    ip.run_cell_magic("gpu", "--quiet --to-host", "y = x + 1\n")
    assert ip.user_ns["y"].shape == (4, 3)


def test_a_request_that_never_allocated_is_told_as_asked(ip):
    result = run(ip, "z = np.ones(10**14)\n")
    msg = str(result.error_in_exec)
    assert "727.60 TiB" in msg and "z = np.ones(10**14)" in msg
    assert "reached 727" not in msg and "Try batching" in msg


def test_a_request_that_never_allocated_is_told_as_asked_under_a_host_budget(ip):
    if backend.current().is_gpu:
        pytest.xfail("host backend only")
    ip.run_line_magic("vram_budget", "1GB")
    msg = str(run(ip, "z = np.ones(10**14)\n").error_in_exec)
    assert "727.60 TiB" in msg and "took the cell to 727" not in msg


def test_numpy_out_of_memory_message_names_the_request_not_a_peak():
    be = HostBackend()
    exc = MemoryError("Unable to allocate 7.28 TiB for an array with shape (1000000000000,) "
                      "and data type float64")
    new = explain_oom(exc, be, peak=8 * 10**12 + 4096)
    assert isinstance(new, BudgetExceeded) and new.explained
    assert str(new).startswith("asked for 7.28 TiB (8,000,000,000,000 bytes), which was never "
                               "allocated: over the device's free memory")
    assert "reached" not in str(new)


def test_a_memory_error_the_cell_catches_does_not_count_against_a_host_budget(ip):
    if backend.current().is_gpu:
        pytest.skip("host backend only")
    ip.run_line_magic("vram_budget", "1GB")
    result = run(ip, "try:\n    z = np.ones(10**14)\nexcept MemoryError:\n    z = None\nw = 1\n")
    assert result.error_in_exec is None
    assert ip.user_ns["z"] is None and ip.user_ns["w"] == 1


SINGULAR = [("b = np.linalg.inv(a)", "Singular matrix"),
            ("b = np.linalg.solve(a, np.ones(3))", "Singular matrix"),
            ("from numpy.linalg import inv\nb = inv(a)", "Singular matrix"),
            ("b = np.linalg.matrix_power(a, -2)", "Singular matrix"),
            ("b = np.linalg.tensorinv(a, ind=1)", "Singular matrix"),
            ("b = np.linalg.inv(np.stack([a, a.T]))", "Singular matrix"),
            ("b = np.linalg.cholesky(a - 1)", "Matrix is not positive definite")]


@pytest.mark.parametrize(("body", "message"), SINGULAR)
def test_a_singular_matrix_stops_the_cell_with_numpys_linalg_error(ip, body, message):
    """NumPy raises ``LinAlgError`` for a singular (or not positive definite) matrix, where
    CuPy's default leaves garbage in the result silently: the cell stops with NumPy's error
    and message at its line, and ``b`` is not bound; a regular matrix still runs."""
    a = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 1.0, 1.0]])  # rank 2
    ip.user_ns.update(a=a)
    ip.user_ns.pop("b", None)
    exc = run(ip, body).error_in_exec
    assert isinstance(exc, np.linalg.LinAlgError) and str(exc) == message
    assert "b" not in ip.user_ns
    regular = np.eye(3) * 5.0 + np.arange(9.0).reshape(3, 3) / 10  # not symmetric
    if "cholesky" in body:  # symmetric, and a - 1 positive definite
        regular = regular + regular.T
    ip.user_ns.update(a=regular)
    assert run(ip, body, "--quiet --to-host").error_in_exec is None
    plain = {"np": np, "a": regular}
    exec(body, plain)  # NumPy's values: the matrix factored, not its transpose's garbage
    np.testing.assert_allclose(ip.user_ns["b"], plain["b"], rtol=1e-10, atol=1e-12)


def test_an_error_inside_numpy_shows_numpys_frames_and_none_of_the_checks_wrappers(ip, capsys):
    """A plain cell shows the cell's line, then NumPy's own frames; the checked call in front
    of NumPy's function (``<cupy_magic.compat wrapper N>``, ``Calls.failed``) is hidden (as
    shown when the cell fails: its frames are freed after)."""
    capsys.readouterr()
    result = run(ip, "a = np.zeros((2, 2))\nb = np.linalg.inv(a)\n")
    exc = result.error_in_exec
    assert type(exc).__name__ == "LinAlgError"
    text = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    cell = text.split("----> 2 b = np.linalg.inv(a)")[-1]
    assert "cupy_magic" not in cell and "factory.<locals>.call" not in cell
    assert "Could not get source" not in cell
    if not backend.current().is_gpu:  # NumPy's own frames, as after a plain cell
        assert "in inv(a)" in cell and "LinAlgError: Singular matrix" in cell
