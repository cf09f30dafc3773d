"""The background first launch does not share a lazy import with the cells' thread
(cupy_magic.backend.preheat.finish_lazy_imports): a lazy module run by two threads at once
can deadlock, as ``cupyx`` did on an H100 (a first cell right after load hung)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types

import pytest

from cupy_magic.backend.preheat import finish_lazy_imports


def _lazy(tmp_path, monkeypatch, name: str) -> types.ModuleType:
    """A package ``name`` in ``sys.modules`` as ``importlib.util.LazyLoader`` leaves it (as
    ``cupy.random._generator`` leaves ``cupyx``): not run until its first attribute read."""
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("import sys\nsys.ran_lazily = True\nX = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delattr(sys, "ran_lazily", raising=False)
    spec = importlib.util.find_spec(name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def test_a_lazy_module_is_run_on_the_calling_thread(tmp_path, monkeypatch):
    module = _lazy(tmp_path, monkeypatch, "lazy_for_preheat")
    assert type(module) is not types.ModuleType and not hasattr(sys, "ran_lazily")
    finish_lazy_imports(("lazy_for_preheat", "not_imported_anywhere"))
    assert type(module) is types.ModuleType and sys.ran_lazily and module.X == 1
    assert "not_imported_anywhere" not in sys.modules  # what is not imported stays so
    finish_lazy_imports(("lazy_for_preheat",))  # a loaded module: nothing happens again


@pytest.mark.gpu
def test_gpu_cupyx_is_no_longer_lazy_when_the_first_launch_starts():
    code = ("import sys, cupy\n"
            "lazy = type(sys.modules['cupyx']).__name__\n"
            "from cupy_magic import backend\n"
            "be, _ = backend.select('cupy')\n"
            "print(lazy, type(sys.modules['cupyx']).__name__, be.preheated.wait(60))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    # CuPy leaves it lazy; the backend ran it before its thread started
    assert out.stdout.split() == ["_LazyModule", "module", "True"], out.stdout
