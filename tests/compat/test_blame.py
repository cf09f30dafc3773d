"""Warnings from a call a ``%%gpu`` cell makes point at the cell's line (compat/blame.py),
not at the wrapper in front of NumPy; through a real IPython shell."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from cupy_magic import backend
from cupy_magic.compat.blame import WRAPPER_FILE

CELL = "a = x * 2\nb = a + 1\nw = np.log(x - 5)\n"  # the warning is NumPy's, on line 3


def _warnings_of(ip: Any, line: str, cell: str) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = ip.run_cell(f"%%gpu {line}\n{cell}")
    assert result.success, result.error_in_exec
    return [w for w in caught if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize("line", ["--quiet", "--quiet --batch --batch-rows 100",
                                  "--quiet --lines"])
def test_a_numpy_warning_names_the_cells_line(ip: Any, line: str) -> None:
    if backend.current().is_gpu:
        pytest.skip("CuPy does not warn for the log of a negative number")
    ip.user_ns["x"] = np.random.default_rng(0).random((1000, 4))
    caught = _warnings_of(ip, line, CELL)
    assert caught, "NumPy warns for the log of a negative number"
    for w in caught:
        assert not w.filename.startswith(WRAPPER_FILE) and "cupy_magic" not in w.filename
        assert w.lineno == 3, (w.filename, w.lineno)
        assert "invalid value encountered in log" in str(w.message)


def test_a_warning_in_a_function_of_the_users_names_its_line(ip: Any) -> None:
    if backend.current().is_gpu:
        pytest.skip("CuPy does not warn for the log of a negative number")
    ip.user_ns["x"] = -np.ones(4)
    cell = "def f(v):\n    return np.log(v)\n\ny = f(x)\n"
    caught = _warnings_of(ip, "--quiet", cell)
    assert [w.lineno for w in caught] == [2]  # inside f, as in a plain cell


def test_warnings_outside_a_cell_are_left_as_they_are(ip: Any) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ip.run_cell("import warnings\nwarnings.warn('plain', UserWarning)")
    assert [w.lineno for w in caught if str(w.message) == "plain"] == [2]
    assert warnings.showwarning.__module__ == "warnings"  # the cell's hook is gone
