"""The cells of the batched-parity test (:mod:`test_batched_parity`): realistic NumPy cells
over a batched input ``x`` (float64, (N, 4)) and ``v`` (N,), with small unbatched inputs
``w`` (4, 4), ``b`` (4,) and ``cen`` (3, 4) (k-means centroids).

Each entry is ``(cell, rules)``: ``rules`` the ``--reduce`` option for results without a row
axis ("" for none). A rule that does not join its result as NumPy would (``m = x.mean()``
with ``m=sum``) is there on purpose: it must be refused, never silently accepted.
"""

from __future__ import annotations

__all__ = ["CELLS", "ROW_WISE"]

ELEMENTWISE = [
    "y = np.sqrt(np.abs(x)) * 2 + 1",
    "y = np.exp(-x ** 2) * np.sin(3 * x)",
    "y = np.log1p(x) - np.log(x + 1)",
    "y = x * v[:, None]",
    "y = (x - 0.5) ** 3 / (1 + x)",
    "y = np.hypot(x[:, 0], x[:, 1])",
    "y = np.arctan2(x[:, 1], x[:, 0])",
    "y = np.maximum(x, 0.3) - np.minimum(x, 0.7)",
    "y = np.floor(x * 10) / 10",
    "y = np.round(x, 3)",
    "y = x.round(2)",
    "y = np.tanh(v) + np.cosh(v / 10)",
    "y = np.power(x, 1.5)",
    "y = x // 0.1 + x % 0.1",
    "y = -x + abs(x - 0.5)",
    "y = np.sign(x - 0.5) * np.square(x)",
    "y = np.isclose(x, 0.5, atol=0.01)",
    "y = np.logical_and(x > 0.2, x < 0.8)",
    "y = np.log(x - 0.5)",  # NaN and -inf where x <= 0.5
    "y = np.nan_to_num(np.log(x - 0.5))",
    "y = np.expm1(v) / np.exp2(v)",
    "y = np.degrees(np.arccos(x))",
]

ROW_REDUCTIONS = [
    "s = x.sum(axis=1)",
    "m = x.mean(axis=-1)",
    "m = x.mean(axis=1, keepdims=True)",
    "s = np.std(x, axis=1)",
    "n = np.linalg.norm(x, axis=1)",
    "r = x.max(axis=1) - x.min(axis=1)",
    "p = np.prod(x + 1, axis=-1)",
    "a = np.any(x > 0.95, axis=1)",
    "c = np.count_nonzero(x > 0.5, axis=1)",
    "i = x.argmax(axis=1)",
    "i = np.argmin(x, axis=-1)",
    "med = np.median(x, axis=1)",
    "q = np.percentile(x, 90, axis=1)",
    "r = np.ptp(x, axis=1)",
    "z = (x - x.mean(axis=1, keepdims=True)) / x.std(axis=1, keepdims=True)",
    "e = np.exp(x)\nsm = e / e.sum(axis=1, keepdims=True)",
    "lse = np.log(np.sum(np.exp(x), axis=1))",
    "var = np.var(x, axis=1, ddof=1)",
]

SMALL_OPERANDS = [
    "y = x * b",
    "y = x + b[None, :]",
    "y = (x - b) / (b + 1)",
    "y = x @ w",
    "y = x @ w + b",
    "y = np.dot(x, w)",
    "y = x.dot(w.T)",
    "y = np.matmul(x, w[:, :2])",
    "y = x @ b",
    "y = np.einsum('ij,jk->ik', x, w)",
    "y = np.tensordot(x, w, axes=1)",
    "y = np.outer(v, b)",
    "h = np.tanh(x @ w) @ w.T",
    "y = np.where(x > 0.5, x, b)",
    "y = np.where(x > 0.5, x @ w, 0.0)",
    "y = x[:, None, :] * b[None, :, None]",
]

WHERE_CLIP_CAST = [
    "y = np.where(x > 0.5, 1.0, -1.0)",
    "y = np.where(v > 0.5, v, np.nan)",
    "y = np.clip(x, 0.2, 0.8)",
    "y = x.clip(min=0.1)",
    "y = np.clip(x, b, 1.0)",
    "y = x.astype(np.float32)",
    "y = (x * 100).astype(np.int64)",
    "y = (x > 0.5).astype(int).sum(axis=1)",
]

MASKS_AND_COLUMNS = [
    "y = x[x[:, 0] > 0.5]",  # fewer rows than the batch: no row axis
    ("y = x[x[:, 0] > 0.5]", "y=concat"),
    "mask = x[:, 0] > x[:, 1]\ny = np.where(mask[:, None], x, 0)",
    "y = x.copy()\ny[y < 0.2] = 0",
    "y = x * (x > 0.5)",
    "k = (x > 0.5).sum(axis=1)",
    ("sel = v[v > 0.9]", "sel=concat"),
    "y = x[:, [0, 2]]",
    "y = x[:, ::-1]",
    "y = x[:, 1:3] * 2",
    "y = x[..., 0]",
    "y = x[:, np.array([3, 1])]",
    "y = np.take(x, [0, 1], axis=1)",
]

IN_PLACE = [
    "x *= 2",
    "x[:, 0] = 0",
    "x += b",
    "y = x.copy()\ny[:, 1] += v",
    "v -= v.mean()",
    "x[:, 0] = x[:, 1] + x[:, 2]",
    "np.sqrt(x, out=x)",
    "y = np.empty_like(x)\ny[:] = x * 2",
    "x[x > 0.9] = 0.9",
]

LOOPS_AND_FUNCTIONS = [
    "acc = np.zeros_like(x)\nfor k in range(4):\n    acc += x ** k",
    "y = x.copy()\nfor _ in range(3):\n    y = np.sqrt(y)",
    "tot = 0.0\nfor j in range(x.shape[1]):\n    tot = tot + x[:, j]",
    "cols = []\nfor j in range(4):\n    cols.append(x[:, j] * j)\ny = np.stack(cols, axis=1)",
    "y = v.copy()\nfor i in range(len(v)):\n    y[i] = v[i] * 2",
    ("s = 0.0\nfor j in range(4):\n    s += x[:, j].sum()", "s=sum"),
    "i = 0\nwhile i < 3:\n    x = x * 0.5\n    i += 1",
    "total = 0.0\nfor row in x:\n    total += row.sum()",
    ("total = 0.0\nfor row in x:\n    total += row.sum()", "total=sum"),
    "def f(a):\n    return a * 2 + 1\ny = f(x)",
    "def unit(a):\n    return a / np.linalg.norm(a, axis=1, keepdims=True)\ny = unit(x)",
    "def center(a):\n    return a - a.mean(axis=0)\ny = center(x)",
    "def g(a, k=2):\n    return a ** k\ny = g(x, 3) + g(v)[:, None]",
    "def stats(a):\n    return a.mean(axis=1), a.std(axis=1)\nm, s = stats(x)",
    "def halve(a, n):\n    return a if n == 0 else halve(a * 0.5, n - 1)\ny = halve(x, 3)",
    "f = lambda a: a * 2\ny = f(x)",
    "y = np.stack([x[:, j] ** 2 for j in range(4)], axis=1)",
    "sq = {j: x[:, j].sum() for j in range(4)}",
    "y = sum(x[:, j] for j in range(4))",
    "y = np.array([r.sum() for r in x])",
    "y = list(map(float, v[:5]))",
]

FORMATTING = [
    "msg = f'mean={x.mean():.4f}'",
    "msg = 'max %.3f' % v.max()",
    "print(f'{x.sum():.2f}')",
    "print(len(x))",
    "s = str(np.round(v.max(), 3))",
    "label = 'big' if v.max() > 0.99 else 'small'",
    "flag = bool(x.sum() > 40000)",
    "ok = float(x.min()) >= 0.0",
]

RANDOM = [
    "rng = np.random.default_rng(0)\ny = x + rng.normal(size=x.shape)",
    "np.random.seed(1)\ny = x + np.random.rand(*x.shape)",
    "y = x * np.random.default_rng(2).random(4)",
    "np.random.seed(3)\nidx = np.random.permutation(len(x))\ny = x[idx]",
    ("rng = np.random.default_rng(4)\nkeep = rng.random(len(v)) < 0.5\ny = v[keep]", "y=concat"),
    "noise = np.random.default_rng(5).standard_normal(len(v))\ny = v + noise",
]

ROW_COUNTS = [
    "i = np.arange(len(x))\ny = x[:, 0] * i",
    "n = x.shape[0]\ny = x / n",
    "n = len(x)",
    "k = x.shape[0] * 2",
    "y = x[:, 0] + np.arange(x.shape[0]) % 3",
    "nrows, ncols = x.shape",
    "size = x.size",
    "y = x / x.shape[1]",
]

TOTALS = [
    "u = np.unique(v.round(1))",
    "u, cnt = np.unique((v * 10).astype(int), return_counts=True)",
    ("h, edges = np.histogram(v, bins=10, range=(0, 1))", "h=sum,edges=max"),
    ("h, edges = np.histogram(v, bins=10)", "h=sum,edges=max"),
    "h, edges = np.histogram(v, bins=10)",
    ("q = np.percentile(v, [5, 50, 95])", "q=mean"),
    "q = np.percentile(v, [5, 50, 95])",
    "med = np.median(x, axis=0)",
    ("med = np.median(x, axis=0)", "med=mean"),
    ("mu = x.mean(axis=0)", "mu=mean"),
    ("mu = x.mean(axis=0)", "mu=sum"),
    ("t = x.sum()", "t=sum"),
    ("t = x.sum()", "t=mean"),
    ("mx = x.max(axis=0)", "mx=max"),
    ("mx = x.max(axis=0)", "mx=min"),
    ("mn = v.min()", "mn=min"),
    ("sd = x.std(axis=0)", "sd=mean"),
    ("big = (x > 0.99).any()", "big=any"),
    ("cnt = np.count_nonzero(v > 0.5)", "cnt=sum"),
    ("cnt = (v > 0.5).sum()", "cnt=sum"),
    ("n = len(x)", "n=sum"),
    ("p = np.prod(1 + v * 1e-6)", "p=sum"),
    ("y = x * 2", "y=sum"),
    ("mean = x.sum(axis=0) / len(x)", "mean=sum"),
    "t = x.sum()",
]

SCANS_AND_SORTS = [
    "c = np.cumsum(x, axis=1)",
    "c = np.cumsum(v)",
    "c = np.cumprod(x + 1, axis=-1)",
    "d = np.diff(x, axis=1)",
    "d = np.diff(v)",
    "r = np.roll(x, 1, axis=1)",
    "r = np.roll(v, 1)",
    "cv = np.convolve(v, [0.25, 0.5, 0.25], mode='same')",
    "s = np.sort(x, axis=1)",
    "s = np.sort(v)",
    "o = np.argsort(x, axis=1)",
    "o = np.argsort(v)",
    "o = np.lexsort((x[:, 1], x[:, 0]))",
    "s = -np.sort(-x, axis=-1)",
    "rk = x.argsort(axis=1).argsort(axis=1)",
    "top = np.partition(v, 10)[:10]",
]

STATISTICS = [
    "d2 = ((x[:, None, :] - cen[None, :, :]) ** 2).sum(axis=-1)\nlab = d2.argmin(axis=1)",
    "d2 = (x ** 2).sum(1)[:, None] - 2 * x @ cen.T + (cen ** 2).sum(1)[None, :]\n"
    "lab = np.argmin(d2, axis=1)",
    ("lab = np.argmin(((x[:, None, :] - cen) ** 2).sum(-1), axis=1)\n"
     "onehot = (lab[:, None] == np.arange(3)).astype(float)\n"
     "sums = onehot.T @ x\ncounts = onehot.sum(axis=0)", "sums=sum,counts=sum"),
    ("lab = np.argmin(((x[:, None, :] - cen) ** 2).sum(-1), axis=1)\nsums = np.zeros((3, 4))\n"
     "np.add.at(sums, lab, x)", "sums=sum"),
    ("g = x.T @ x", "g=sum"),
    ("g = x.T @ x", "g=mean"),
    "g = x.T @ x",
    ("c = np.cov(x.T)", "c=mean"),
    "c = np.cov(x, rowvar=False)",
    ("cc = np.corrcoef(x, rowvar=False)", "cc=mean"),
    "y = x - x.mean(axis=0)",
    "y = (x - x.min(axis=0)) / np.ptp(x, axis=0)",
    ("xc = x - b\ng = xc.T @ xc / (len(x) - 1)", "g=sum"),
    "z = (v - v.mean()) / v.std()",
    "y = x / np.linalg.norm(x)",
    ("s1 = x.sum(axis=0)\ns2 = (x ** 2).sum(axis=0)", "s1=sum,s2=sum"),
]

CELLS: list[tuple[str, str]] = [
    c if isinstance(c, tuple) else (c, "")
    for group in (ELEMENTWISE, ROW_REDUCTIONS, SMALL_OPERANDS, WHERE_CLIP_CAST,
                  MASKS_AND_COLUMNS, IN_PLACE, LOOPS_AND_FUNCTIONS, FORMATTING, RANDOM,
                  ROW_COUNTS, TOTALS, SCANS_AND_SORTS, STATISTICS)
    for c in group
]

# cells that must run batched (or in blocks) in every way: their rows never mix
ROW_WISE = {c for group in (ELEMENTWISE, ROW_REDUCTIONS, WHERE_CLIP_CAST) for c in group}
ROW_WISE |= {c for c in SMALL_OPERANDS if "einsum" not in c and "tensordot" not in c
             and "outer" not in c}
