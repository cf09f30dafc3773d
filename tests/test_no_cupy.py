"""Where CuPy is not installed, the CPU fallback cannot check a cell against CuPy's names,
options and dtypes: the load line and ``%gpu_fallback`` say so, and how to turn the check on.

The shell without CuPy runs in a process of its own in which ``import cupy`` fails
(``sys.modules["cupy"] = None``), as it does where CuPy was never installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

NO_CUPY = textwrap.dedent('''
    import sys
    sys.modules["cupy"] = None  # import cupy raises ImportError, as without the package
    import numpy as np
    from IPython.core.interactiveshell import InteractiveShell
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "cupy_magic")
    print("fallback:", ip.run_line_magic("gpu_fallback", ""))
    ip.user_ns["np"] = np
    result = ip.run_cell("%%gpu --quiet\\nn = sum(1 for _ in np.nditer(np.ones(3)))")
    print("nditer:", "ran" if result.success else "stopped")
''')


def _without_cupy(env_backend: str = "") -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "CUPY_MAGIC_BACKEND"}
    if env_backend:
        env["CUPY_MAGIC_BACKEND"] = env_backend
    done = subprocess.run([sys.executable, "-c", NO_CUPY], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.parametrize("backend", ["", "host"])
def test_without_cupy_the_load_line_says_its_limits_are_not_checked(backend: str) -> None:
    load, fallback, nditer = _without_cupy(backend)
    assert load.startswith("cupy_magic: ")
    assert "CuPy is not installed" in load and "CuPy's limits are not checked" in load
    assert "pip install cupy-cuda13x" in load and "cupy-cuda12x" in load
    assert load.endswith("budget off")
    assert load.count("pip install") == 1  # the missing package's advice once, not twice
    assert fallback.startswith("fallback: off (CuPy is not installed: CuPy's limits are not")
    assert nditer == "nditer: ran"  # what the note warns of: a GPU would stop this cell


def test_with_cupy_the_load_line_has_no_such_note(cupy_names: None, shell: Any,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CUPY_MAGIC_BACKEND", "host")
    shell.run_line_magic("load_ext", "cupy_magic")
    try:
        assert "not checked" not in capsys.readouterr().out
        assert shell.run_line_magic("gpu_fallback", "") == "off"
    finally:
        shell.run_line_magic("unload_ext", "cupy_magic")
