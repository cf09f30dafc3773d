"""Which inputs a cell can only read (``run.aliases.only_read``): their copies need no watch."""

from __future__ import annotations

import numpy as np
import pytest

from cupy_magic import backend
from cupy_magic.run.aliases import MODULE_NAMES, only_read

MODULES = frozenset(MODULE_NAMES)


@pytest.mark.parametrize("source", [
    "s = x.sum()",
    "y = np.sqrt(x) * 2 + 1",
    "y = x.T @ w",
    "y = x[:, 0] * 2",
    "z = (x - x.mean(axis=0)) / x.std(axis=0)",
    "s = x.reshape(-1).sum()",
    "n = len(x)\nprint(x)",
    "y = np.linalg.norm(x, axis=1)",
    "y = x.astype(np.float32)\ny += 1",  # a copy
    "s = x.conj().sum()",
    "m = np.maximum(x, 0) > 1",
    "y = x\nfor _ in range(3):\n    y = y * 0.999 + 0.001",  # y is x, then new arrays
    "r = x[1:]\ns = r.sum()",
    "z = w.copy()\nz += x",  # x only read into z
])
def test_a_mention_consumed_at_once_only_reads(source):
    assert only_read(source, frozenset({"x"}), MODULES) == {"x"}


@pytest.mark.parametrize("source", [
    "y = x\ny += 1",
    "r = x[1:]\nr *= 10",
    "center(x)",
    "t = x.T\nt[0] = 1",
    "np.add(x, 1, out=y)",
    "for r in x:\n    r[:] = 0",
    "ys = [x]",
    "f = lambda: x",
    "def g():\n    return x.sum()",
    "y = np.asarray(x)",
    "y = np.ravel(x)",
    "y = x.astype(float, copy=False)\ny += 1",  # x itself where the dtype is float already
    "y = x.conj()\ny[0] = 1",  # a real array's conj() is the array
    "y = x if c else z",
    "y = x.flat",
    "y = x\ny += 1",
    "y = x\nz = y\nz[0] = 1",
    "y = x.T\nt = y.T\nt[0] = 1",
    "y = x\nys = [y]",
    "y = a = x\ny[0] = 1",
    "(y := x)[0] = 1",
    "y = x\ny.shape = (2, 3)",
    "x.T.shape = (6,)",
    "y = x\ndel y.shape",
    "np.ndarray.sort(x)",  # the method through its class sorts x in place (np.sort copies)
    "numpy.ndarray.fill(x, 0)",
])
def test_a_mention_that_may_alias_is_watched(source):
    assert only_read(source, frozenset({"x"}), MODULES) == frozenset()


def test_a_cell_that_only_reads_its_inputs_takes_no_checksums(ip, monkeypatch):
    be = backend.current()
    watched: list[list[str]] = []
    real = be.watch

    def counting(copies, weak=()):
        watched.append([c.shape for c in copies])
        return real(copies, weak)

    monkeypatch.setattr(be, "watch", counting)
    ip.user_ns.update(x=np.arange(6.0), w=np.ones(6))
    ip.run_cell_magic("gpu", "--quiet", "s = (x * w).sum()\ny = np.sqrt(x)")
    assert watched == []
    ip.run_cell_magic("gpu", "--quiet", "v = x\nv += 1")
    assert watched == [[(6,)]]
    assert np.asarray(backend.current().to_host(ip.user_ns["x"])
                      if be.is_device_array(ip.user_ns["x"]) else ip.user_ns["x"]).tolist() == \
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


@pytest.mark.parametrize(("source", "read"), [
    ("X = X * 2\nX += 1", {"X"}), ("s = X.sum()\nX = -X\nX[0] = 1", {"X"}),
    ("X = f(X)\nX = X * 2", set()), ("f(X)\nX = X * 2", set()),
    ("X = X[::-1]\nX[0] = 5\nX = X + 1", set()), ("R = [X]\nR[0] += 1\nX = X + 1", set()),
    ("Y = X[:2]\nX = X * 2\nY[0] = 7", set()), ("if c:\n    X = X * 2\nX += 1", set()),
    ("X = X.T\nX[0] = 1\nX = X * 2", set()),
])
def test_an_input_is_read_only_until_a_rebinding_to_new_memory(source, read):
    """``X = X * 2; X += 1`` changes the new array, not ``X``'s copy; ``X = f(X)`` may
    change the copy (``def f(a): a -= 1``), and so may a view bound before the rebinding."""
    from cupy_magic.run.aliases import read_until_rebound

    assert read_until_rebound(source, frozenset({"X"}), MODULES) == read
