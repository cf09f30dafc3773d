"""An input handed to a notebook function that only reads it needs no watch
(``run/readers.py``); one handed to a function that may change it, in any way, still comes
back changed as from a plain cell. Through a real shell: the functions are defined in cells,
whose source the shell keeps."""

from __future__ import annotations

import numpy as np
import pytest

import cupy_magic
from cupy_magic import backend
from cupy_magic.run.plan import plan_cell

READS = [
    ("def total(a):\n    return (a * 2.0 + 1.0).sum()\n", "s = total(x)"),
    ("def total(a, k=2.0):\n    y = a\n    return (y * k).sum() + a[1:].mean()\n",
     "s = total(x, 3.0)"),
    ("def total(w, a):\n    return np.dot(a, w).sum()\n", "s = total(w, x)"),
    ("def total(a, *, k):\n    return np.sqrt(a * k).sum()\n", "s = total(k=2.0, a=x)"),
    ("def total(a):\n    print(len(a))\n    return float(a.max())\n", "s = total(x)"),
]

SWAP = "def f(a):\n    return a.sum()\ndef g(a):\n    a[0] = 99\n    return 0\n"

CHANGES = [
    ("def f(a):\n    a.sort()\n", "f(x)"),
    ("def f(a):\n    a[0] = 7\n    return a.sum()\n", "s = f(x)"),
    ("def g(a):\n    a += 1\ndef f(a):\n    g(a)\n", "f(x)"),
    ("def f(a, b):\n    b += a\n", "f(w[0], x)"),
    ("def f(a):\n    return a\n", "y = f(x)\ny += 1"),
    ("def f(a):\n    return a.T\n", "y = f(x)\ny[0] = -1"),
    ("def f(*a):\n    a[0][0] = 1\n", "f(x)"),
    ("def f(**k):\n    k['a'][0] = 1\n", "f(a=x)"),
    ("def f(a):\n    a[1] = 5\n    yield 1\n", "n = list(f(x))"),
    ("def f(a):\n    np.add(a, 1, out=a)\n", "f(x)"),
    ("def f(a):\n    a.shape = (3, 2)\n", "f(x)"),
    ("def f(a):\n    keep.append(a)\nkeep = []\n", "f(x)\nkeep[-1][0] = 3"),
    ("def f(a):\n    def inner():\n        a[0] = 2\n    inner()\n", "f(x)"),
    ("def deco(fn):\n    def w(a):\n        a[0] = 8\n        return fn(a)\n    return w\n"
     "@deco\ndef f(a):\n    return a.sum()\n", "s = f(x)"),
    ("def f(a):\n    return a.sum()\ndef g(a):\n    a -= 1\n", "f = g\nf(x)"),
    ("def f(a):\n    return a.sum()\ndef g(a):\n    a -= 1\n",
     "def f(a):\n    a *= 2\nf(x)"),
    # the cell or a function it calls rebinding or swapping the function (a review's finds)
    (SWAP, "r = [f(x) for f in (g,)]"),
    (SWAP, "match g:\n    case f:\n        s = f(x)"),
    (SWAP, "f.__code__ = g.__code__\ns = f(x)"),
    (SWAP, "setattr(f, '__code__', g.__code__)\ns = f(x)"),
    (SWAP, "import __main__\n__main__.f = g\ns = f(x)"),
    (SWAP + "def swap():\n    f.__code__ = g.__code__\n", "swap()\ns = f(x)"),
    ("import sys\ndef f(a):\n    sys._getframe(0).f_locals['a'][0] = 99\n    return a.sum()\n",
     "s = f(x)"),
]


def _plan(ip, cell: str):
    be = backend.current()
    return plan_cell(cell, ip.user_ns, "<test-cell>", False, None, be)


def _plain(defs: str, cell: str) -> dict:
    ns = {"np": np, "x": np.arange(6.0), "w": np.arange(36.0).reshape(6, 6)}
    exec(defs, ns)
    exec(cell, ns)
    return ns


@pytest.mark.parametrize(("defs", "cell"), READS)
def test_a_function_that_only_reads_its_argument_leaves_it_unwatched(ip, defs, cell):
    ip.run_cell("import numpy as np")
    ip.run_cell(defs)
    x, w = np.arange(6.0), np.arange(36.0).reshape(6, 6)
    ip.user_ns.update(x=x, w=w)
    assert "x" in _plan(ip, cell).only_read
    ip.run_cell_magic("gpu", "--quiet --to-host", cell)
    assert ip.user_ns["x"] is x and np.array_equal(x, np.arange(6.0))
    assert np.isclose(ip.user_ns["s"], _plain(defs, cell)["s"])


@pytest.mark.parametrize(("defs", "cell"), CHANGES)
def test_a_function_that_may_change_its_argument_is_watched_and_its_change_comes_back(
        ip, defs, cell):
    """Against the same cell run plain in the same shell (whose namespace is ``__main__``'s)."""
    def fresh() -> None:
        ip.run_cell("import numpy as np")
        ip.run_cell(defs)
        ip.user_ns.update(x=np.arange(6.0), w=np.arange(36.0).reshape(6, 6))

    fresh()
    assert ip.run_cell(cell).success
    want = ip.user_ns["x"]
    fresh()
    assert "x" not in _plan(ip, cell).only_read
    ip.run_cell_magic("gpu", "--quiet --to-host", cell)
    got = np.asarray(backend.current().to_host(ip.user_ns["x"])
                     if backend.current().is_device_array(ip.user_ns["x"]) else ip.user_ns["x"])
    assert got.shape == want.shape and got.tobytes() == want.tobytes(), (got, want)


def test_a_cell_importing_all_of_a_module_trusts_no_function(ip, tmp_path, monkeypatch):
    """``from helpers import *`` may rebind any name the cell then calls."""
    (tmp_path / "helpers_star.py").write_text("def f(a):\n    a[0] = 99\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ip.run_cell("def f(a):\n    return a.sum()\n")
    ip.user_ns["x"] = np.arange(6.0)
    assert "x" in _plan(ip, "s = f(x)").only_read
    assert "x" not in _plan(ip, "from helpers_star import *\ns = f(x)").only_read
    ip.run_cell_magic("gpu", "--quiet --to-host", "from helpers_star import *\ns = f(x)")
    got = ip.user_ns["x"]
    got = backend.current().to_host(got) if backend.current().is_device_array(got) else got
    assert got[0] == 99


def test_a_function_not_made_in_a_cell_is_not_trusted(ip, tmp_path):
    """A function whose source is a file (it may have changed since the function was made)
    or none at all (``exec`` of a string) is taken for one that may change its argument."""
    import importlib.util

    ns: dict = {"np": np}
    exec(compile("def total(a):\n    return a.sum()\n", "<no source>", "exec"), ns)
    path = tmp_path / "readers_module.py"
    path.write_text("def total(a):\n    return a.sum()\n")
    spec = importlib.util.spec_from_file_location("readers_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for total in (ns["total"], module.total):
        ip.user_ns.update(total=total, x=np.arange(6.0))
        assert "x" not in _plan(ip, "s = total(x)").only_read


def test_a_batched_cell_over_a_reading_function_runs_each_batch_unwatched(ip, poisoned):
    ip.run_cell("def total(a):\n    return (a * 2.0 + 1.0).sum(axis=1)\n")
    x = np.arange(1200.0).reshape(400, 3)
    ip.user_ns["x"] = x
    assert "x" in _plan(ip, "s = total(x)").only_read
    ip.run_cell_magic("gpu", "--quiet --batch --batch-rows 60 --to-host", "s = total(x)")
    assert cupy_magic.last_report().batch.batches > 1 and ip.user_ns["x"] is x
    np.testing.assert_array_equal(ip.user_ns["s"], (x * 2.0 + 1.0).sum(axis=1))
