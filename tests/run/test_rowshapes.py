"""False refusals of the row check (:mod:`cupy_magic.run.rowwise`) found by the row-wise
corpus (:mod:`parity_rowwise`): row-wise cells it stopped when batched on its own (or refused)
though their rows never mix, read now by their literal arguments (:mod:`.rowshapes`,
:mod:`.rowindex`); and the mixes those readings, or the corpus's probes, showed it let
through."""

from __future__ import annotations

import pytest

from cupy_magic.run.rowwise import check_cell

B = {"x": 2, "v": 1}
T = {"x": (4,), "v": ()}  # a row's shape: x has 4 columns


@pytest.mark.parametrize("cell", [
    "f = np.hstack([x, np.log1p(x)])",
    "f = np.concatenate([x, x ** 2], axis=-1)",
    "pair = np.stack([x[:, 0], v], axis=-1)",
    "p = np.stack([x[:, 0], x[:, 1]], axis=1)\nq = p.sum(-1)",
    "bins = np.digitize(v, [0.25, 0.5, 0.75])",
    "y = np.interp(v, [0.0, 0.5, 1.0], [0.0, 1.0, 0.0])",
    "y = np.select([v < 0.3, v < 0.7], [0.0, 1.0], default=2.0)",
    "y = np.polyval([1.0, -2.0, 0.5], v)",
    "d = np.linalg.norm(x[:, None, :] - cen[None, :, :], axis=-1)\nlab = np.argmin(d, axis=1)",
    "dmin = ((x[:, None] - cen) ** 2).sum(-1).min(axis=1)",
    "diff = x[:, np.newaxis, :] - cen\nd2 = np.einsum('nkd,nkd->nk', diff, diff)",
    "y = np.einsum('ij,jk->ik', x, w)",
    "z = np.einsum('ij,j->i', x, b)",
    "oh = np.zeros((x.shape[0], 4))\noh[np.arange(x.shape[0]), x.argmax(axis=1)] = 1",
    "picked = x[np.arange(len(x)), x.argmax(axis=1)]",
    "m = x[x[:, 0] > 0.5]\nz = m[np.arange(len(m)), 0]",
    "f = lambda a: np.sin(a) ** 2\ny = f(x) + f(v)[:, None]",
    "c0, c1, c2, c3 = x.T\ny = c0 * c1 - c2 * c3",
    "acc = v * 0\nfor col in x.T:\n    acc = acc + col ** 2",
    "y = x.T.T",
    "y = x.reshape(len(x), -1)",
    "y = x.reshape(x.shape[0], 2, 2).sum(axis=2)",
    "y = np.reshape(x, (len(x), 2, 2))",
    "y = np.moveaxis(x.reshape(len(x), 2, 2), -1, 1)",
    "y = np.swapaxes(x[:, :, None], 1, 2)",
    "y = np.transpose(x[:, :, None], (0, 2, 1))",
    "y = x[:, :, None].transpose(0, 2, 1)",
    "y = np.expand_dims(x, 1)",
    "y = np.squeeze(x[:, :1], axis=1)",
    "y = np.take_along_axis(x, np.argsort(x, axis=1), axis=1)",
    "y = np.c_[x, v]",
    "lab = x.argmax(axis=1)\ny = cen[lab]\nz = np.eye(4)[lab]",
])
def test_a_row_wise_cell_is_not_stopped(cell):
    check = check_cell(cell, B, {}, trailing=T)
    assert check.found == [] and check.over_rows == frozenset()


@pytest.mark.parametrize("cell", [  # each ran, and committed other values than NumPy's
    "s = x.sum(axis=0)\ny = s[x.argmax(1)]",
    "for m in x.mean(axis=0, keepdims=True):\n    y = x - m",
    "y = x[:, int(v.sum()) % 4]",
    "y = x[:, v > 0.5]",
    "y = np.c_[x, v.sum()]",
    "y = np.r_[v, v]",
    "t = cen[x.argmax(1)].mean(axis=0)\ny = x - t",
    "c0, c1, c2, c3 = x.T\ny = c0 - c0.mean()",
    "for col in x.T:\n    y = col - col.mean()",
    "y = x.T.T - x.mean()",
    "f = lambda a: a - a.mean()\ny = f(v)",
    "y = np.hstack([v, v])",
    "y = np.digitize(v, np.quantile(v, [0.25, 0.5]))",
    "y = np.einsum('ij,ij->i', x, x - x.mean(0))",
    "m = x[x[:, 0] > 0.5]\ny = x[np.arange(len(m))]",
    "x = x[x[:, 0] > 0.5]\ny = v[np.arange(len(x))]",
])
def test_a_mix_is_certain(cell):
    found = check_cell(cell, B, {}).found
    assert found and any(m.certain for m in found)


@pytest.mark.parametrize("cell", [  # the readings stop short of these
    "y = x.reshape(len(x) // 2, -1)", "y = x.reshape(-1, 8)", "y = x.reshape(-1, 2)",
    "a = x[:, 1:3]\ny = a.reshape(-1, 4)", "y = np.squeeze(x @ w)",
    "a = x[:, :1]\nif ALPHA:\n    a = x\ny = np.squeeze(a)", "y = np.squeeze(x[:, :k])",
    "y = x.reshape(len(x), -1, order='F')", "y = np.einsum('ij->j', x)",
    "y = np.einsum('ji->ij', x)", "y = np.einsum('ii->i', x)", "y = np.moveaxis(x, 0, 1)",
    "y = np.expand_dims(x, 0)", "y = np.transpose(x)",
    "y = np.interp(0.5, v, x[:, 0])", "y = np.searchsorted(v, 0.5)",
    "y = np.take_along_axis(x, np.argsort(x, axis=1), axis=0)",
    "def f(a):\n    return a * 2\nf = np.cumsum\ny = f(v)",
])
def test_what_the_readings_do_not_cover_is_still_found(cell):
    assert check_cell(cell, B, {}, trailing=T).found


@pytest.mark.parametrize("cell", [
    # n, a name for the batch's own row count, sizes and indexes its rows
    "n = x.shape[0]\noh = np.zeros((n, 4))\noh[np.arange(n), x.argmax(axis=1)] = 1\ndel n",
    "n = len(x)\noh = np.zeros((n, 3))\noh[np.arange(n), (v * 3).astype(int)] = 1.0\ndel n",
    "n, d = x.shape\noh = np.zeros((n, d))\noh[np.arange(n), np.argmax(x, axis=1)] = 1\ndel n",
    "n = len(v)\npicked = x[np.arange(n), x.argmin(1)]\ndel n",
    # transposes that bring the rows back to the leading axis
    "y = np.vstack([x[:, 0], v]).T", "y = (x.T * b[:, None]).T", "y = (w @ x.T).T",
    "feats = np.array([x[:, 0], x[:, 1] * x[:, 2], v]).T", "y = np.stack([x[:, 0], v]).T",
    "col = np.atleast_2d(v).T", "y = np.vstack([v, v ** 2, v ** 3]).T @ b[:3]",
    "y = np.transpose(np.tanh(w @ x.T + b[:, None]))", "z = (x.T - x.mean(axis=1)).T",
    "y = np.vstack([x[:, 0], v]).transpose()", "y = np.where(x.T > 0.5, x.T, -v).T",
    # reshapes to a row's own elements, squeezes of known axes of 1
    "y = x.reshape(-1, 2, 2)", "y = np.reshape(x, (-1, 2, 2))", "y = v.reshape(-1)",
    "a = x[:, 1:3]\ny = a.reshape(-1, 2, 1)", "y = x.reshape(-1, 2, 2).reshape(-1, 4)",
    "a = x[:, :1]\ny = np.squeeze(a)", "y = x[:, 1:2].squeeze()",
    "y = np.squeeze(x.astype(np.float32)[:, 3, None])",
    # a data scientist's cells the check stopped
    "poly = np.hstack([np.ones((len(x), 1)), x, x ** 2])",
    "logp = x - np.logaddexp.reduce(x, axis=1)[:, None]",
    "y = np.maximum.reduce([x[:, 0], x[:, 1], x[:, 2]])",
    "low2 = np.sort(np.partition(x, 1, axis=1)[:, :2], axis=1)",
    "top2 = np.argpartition(-x, 2, axis=1)[:, :2]", "top2 = x.argpartition(2, axis=1)",
    "y = np.repeat(v[:, None], 4, axis=1) * x", "hit = np.isin(np.floor(v * 10), [1, 3, 5])",
    "spec = np.abs(np.fft.rfft(x, axis=1))",
    "def center():\n    return x - x.mean(axis=1, keepdims=True)\ny = center()",
])
def test_a_row_wise_cell_the_check_stopped_or_refused_runs(cell):
    """Each was refused for certain, stopped as unseen, or left its result over the rows
    (so never kept) before the readings of :mod:`.rowturns`, :mod:`.rowsizes` and the
    count names."""
    check = check_cell(cell, B, {}, trailing=T)
    assert check.found == [] and check.over_rows == frozenset(), check


@pytest.mark.parametrize("cell", [  # each ran batched, and committed other values than NumPy's
    "y = (x.T - x.T.mean(axis=1, keepdims=True)).T",  # (but the third, refused before)
    "y = (x.T / x.T.sum(axis=1)[:, None]).T",
    "y = np.vstack([v, v]).T - v.mean()",
    "y = (x.T - x.mean(axis=0)[:, None]).T",
    "y = x.T.reshape(len(x), -1)",
    "y = x.sum(axis=0).reshape(x.shape[0], -1)",
    "def center():\n    return x - x.mean(axis=0)\ny = center()",
    "def total():\n    return v.sum()\ndef scale():\n    return v / total()\ny = scale()",
    "y = np.abs(np.fft.rfft(v))",
    "y = np.fft.fft(x, axis=0)",
    "y = np.partition(v, 3)",
    # refused before, and must stay so under the count names (test_a_row_wise_cell_the_
    # check_stopped...): n names another array's rows, or x changed after n counted it
    "m = x[x[:, 0] > 0.5]\nn = len(m)\ny = x[np.arange(n)]",
    "n = len(x)\nx = x[x[:, 0] > 0.5]\noh = np.zeros((n, 4))\noh[np.arange(n), 0] = 1",
    "if ALPHA:\n    n = len(x)\nelse:\n    n = 5\ny = x[np.arange(n)]",
])
def test_a_mix_the_new_readings_could_let_through_is_certain(cell):
    found = check_cell(cell, B, {}, trailing=T).found
    assert found and any(m.certain for m in found), found


@pytest.mark.parametrize(("cell", "over"), [  # values over the rows, never kept or joined
    ("h = np.histogram(v, bins=3000, range=(0, 1))[0]", {"h"}),
    ("cnt = np.bincount((v * 10).astype(int), minlength=10)", {"cnt"}),
    ("p = np.maximum.reduce(x)", {"p"}),
    ("t = x.T", {"t"}),
])
def test_a_value_over_the_rows_is_named_for_the_run_to_refuse(cell, over):
    """The batched run and the cluster refuse such a result even where its leading axis
    has as many entries as a batch or block has rows (``RowCheck.over_rows``)."""
    check = check_cell(cell, B, {}, trailing=T)
    assert check.found == [] and check.over_rows == over
