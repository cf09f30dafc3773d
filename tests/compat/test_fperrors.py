"""NumPy's floating-point error settings in a ``%%gpu`` cell (``np.errstate``, ``np.seterr``,
...): CuPy has none of them. Reading them, ``'ignore'`` and ``'warn'`` run as NumPy's own (they
change nothing the device does); a mode that promises an exception or output is refused in
one line, with and without ``--fallback``. Through a real shell, on both backends."""

from __future__ import annotations

import numpy as np
import pytest


def test_ignore_and_restoring_the_settings_run_as_numpy(ip, xp):
    before = np.geterr()
    ip.user_ns["x"] = np.array([1.0, 0.0])
    result = ip.run_cell("%%gpu --quiet --to-host\n"
                         "with np.errstate(divide='ignore', invalid='ignore'):\n"
                         "    y = 1 / x\n"
                         "old = np.seterr(all='ignore')\n"
                         "inside = np.geterr()\n"
                         "np.seterr(**old)\n"
                         "handler = np.geterrcall()\n")
    assert result.success, result.error_in_exec
    np.testing.assert_array_equal(ip.user_ns["y"], [1.0, np.inf])
    assert ip.user_ns["old"] == before
    assert set(ip.user_ns["inside"].values()) == {"ignore"}
    assert np.geterr() == before  # restored by the cell, as NumPy code does
    assert ip.user_ns["handler"] is None


@pytest.mark.parametrize("flags", ["--quiet", "--quiet --fallback"])
@pytest.mark.parametrize(("call", "shown"), [
    ("np.errstate(divide='raise')", "divide='raise'"),
    ("np.seterr('call')", "all='call'"),
    ("np.seterr(over='print', under='ignore')", "over='print'"),
])
def test_a_mode_the_device_cannot_honour_is_refused_in_one_line(ip, xp, cupy_names, flags, call,
                                                              shown):
    before = np.geterr()
    ip.user_ns.pop("z", None)
    ip.user_ns["x"] = np.array([1.0, 0.0])
    result = ip.run_cell(f"%%gpu {flags}\nz = x + 1\nwith {call}:\n    w = 1 / x\n"
                         if "errstate" in call else f"%%gpu {flags}\nz = x + 1\n{call}\n")
    message = str(result.error_in_exec)
    assert "\n" not in message
    assert message.startswith(f"{call.split('(')[0]} at line 2 `")
    assert f"the GPU never checks floating-point errors, so {shown} cannot be honoured" in message
    assert "np.isfinite(y).all()" in message
    assert "z" not in ip.user_ns  # the cell is a transaction
    assert np.geterr() == before  # NumPy's settings untouched
