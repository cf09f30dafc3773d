"""False refusals of the row check (:mod:`cupy_magic.run.rowwise`) found by the row-wise
corpus (:mod:`parity_rowwise`): row-wise cells it stopped when batched on its own (or refused)
though their rows never mix, read now by their literal arguments (:mod:`.rowshapes`,
:mod:`.rowindex`); and the mixes those readings, or the corpus's probes, showed it let
through."""

from __future__ import annotations

import pytest

from cupy_magic.run.rowwise import check_cell

B = {"x": 2, "v": 1}


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
    check = check_cell(cell, B, {})
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
    "y = x.reshape(len(x) // 2, -1)", "y = x.reshape(-1, 2, 2)",
    "y = x.reshape(len(x), -1, order='F')", "y = np.einsum('ij->j', x)",
    "y = np.einsum('ji->ij', x)", "y = np.einsum('ii->i', x)", "y = np.moveaxis(x, 0, 1)",
    "y = np.expand_dims(x, 0)", "y = np.transpose(x)", "y = np.squeeze(x[:, :1])",
    "y = np.interp(0.5, v, x[:, 0])", "y = np.searchsorted(v, 0.5)",
    "y = np.take_along_axis(x, np.argsort(x, axis=1), axis=0)",
    "def f(a):\n    return a * 2\nf = np.cumsum\ny = f(v)",
])
def test_what_the_readings_do_not_cover_is_still_found(cell):
    assert check_cell(cell, B, {}).found
