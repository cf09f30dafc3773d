"""Corpus of ``%%gpu`` cells with the lines that sync the host, for the static lint's figures.

Each cell is written as a user would write it; a line that syncs ends with the marker
``#!``. ``device`` names the arrays that are on the device when the cell starts. Cells marked
``hard`` hold patterns the lint is known not to follow (documented limits); they still count
in the figures.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

MARK = "#!"


@dataclass(frozen=True)
class CorpusCell:
    """One cell of the corpus."""

    name: str
    source: str
    device: tuple[str, ...] = ("x",)
    hard: bool = False

    @property
    def expected(self) -> frozenset[int]:
        """The 1-based lines that sync (marked ``#!``)."""
        return frozenset(
            i for i, text in enumerate(self.source.splitlines(), 1) if text.rstrip().endswith(MARK)
        )

    @property
    def judged(self) -> frozenset[int]:
        """The lines that count: not blank, not only a comment."""
        return frozenset(
            i
            for i, text in enumerate(self.source.splitlines(), 1)
            if text.strip() and not text.strip().startswith("#")
        )


def _cell(
    name: str, source: str, device: tuple[str, ...] = ("x",), hard: bool = False
) -> CorpusCell:
    return CorpusCell(name, textwrap.dedent(source).strip("\n") + "\n", device, hard)


SYNCING = [
    _cell(
        "print-in-loop",
        """
        for step in range(100):
            x = x * 0.5 + 1
            print(x.mean())  #!
        """,
    ),
    _cell(
        "if-max",
        """
        y = np.sqrt(np.abs(x))
        if y.max() > 0:  #!
            y = y / y.max()
        """,
    ),
    _cell(
        "while-converge",
        """
        err = np.linalg.norm(x)
        while err > 1e-6:  #!
            x = x * 0.5
            err = np.linalg.norm(x)
        """,
    ),
    _cell(
        "float-of-sum",
        """
        total = x.sum()
        mean = float(total) / x.size  #!
        """,
    ),
    _cell(
        "item-tolist",
        """
        best = x.argmax().item()  #!
        values = x[:5].tolist()  #!
        """,
    ),
    _cell(
        "asnumpy-get",
        """
        host = np.asnumpy(x * 2)  #!
        back = x.get()  #!
        """,
    ),
    _cell(
        "mask-compare",
        """
        positive = x[x > 0]  #!
        n_pos = len(positive)
        """,
    ),
    _cell(
        "mask-name-and-store",
        """
        mask = np.isfinite(x) & (x < 10)
        clean = x[mask]  #!
        x[~mask] = 0  #!
        """,
    ),
    _cell(
        "nonzero-unique-loop",
        """
        for k in range(10):
            idx = np.nonzero(x > k)[0]  #!
            u = np.unique(x[idx])  #!
        """,
    ),
    _cell(
        "iterate-array",
        """
        acc = 0
        for v in x:  #!
            acc = acc + v
        """,
    ),
    _cell("comprehension", "squares = [v * v for v in x]  #!\n"),
    _cell(
        "element-loop",
        """
        total = 0.0
        for i in range(len(x)):
            total += x[i]  #!
        """,
    ),
    _cell(
        "assert-allclose",
        """
        y = x / x.sum()
        assert np.allclose(y.sum(), 1.0)  #!
        """,
    ),
    _cell("conditional-expression", "scale = 1.0 if x.std() > 0 else 0.0  #!\n"),
    _cell("not-any", "ok = not np.isnan(x).any()  #!\n"),
    _cell(
        "fstring-device",
        """
        m = x.mean()
        label = f"mean = {m:.3f}"  #!
        """,
    ),
    _cell(
        "str-repr-format",
        """
        s = str(x.max())  #!
        r = repr(x)  #!
        t = "{:.2f}".format(x.min())  #!
        """,
    ),
    _cell(
        "plot",
        """
        import matplotlib.pyplot as plt
        y = np.cumsum(x)
        plt.plot(y)  #!
        plt.show()
        """,
    ),
    _cell(
        "plot-axes-loop",
        """
        fig, ax = plt.subplots()
        for k in range(3):
            ax.imshow(x * k)  #!
        """,
    ),
    _cell(
        "function-body",
        """
        def normalise(a):
            return a / float(a.max())  #!

        y = normalise(x)
        z = normalise(y)
        """,
    ),
    _cell(
        "function-result-truth",
        """
        def energy(a):
            return (a * a).sum()

        e = energy(x)
        if e > 1.0:  #!
            x = x / np.sqrt(e)
        """,
    ),
    _cell(
        "int-for-size",
        """
        n = int(x.sum())  #!
        buf = np.zeros(n)
        """,
    ),
    _cell(
        "device-shape",
        """
        k = x.argmax()
        out = np.zeros(k)  #!
        """,
    ),
    _cell(
        "bool-round",
        """
        flag = bool(x.any())  #!
        r = round(x.mean(), 2)  #!
        """,
    ),
    _cell(
        "python-sum-max",
        """
        s = sum(x)  #!
        hi = max(x.max(), 0.5)  #!
        """,
    ),
    _cell(
        "argwhere-flatnonzero-where",
        """
        hits = np.argwhere(x > 0.5)  #!
        flat = np.flatnonzero(x)  #!
        (rows,) = np.where(x > 0)  #!
        """,
    ),
    _cell(
        "while-element",
        """
        i = 0
        while x[i] < 0.5:  #!
            i += 1
        """,
    ),
    _cell("unpack-array", "a0, a1 = x[:2]  #!\n"),
    _cell(
        "augmented-then-print",
        """
        acc = 0.0
        acc += x.sum()
        print(acc)  #!
        """,
    ),
    _cell(
        "bincount-histogram",
        """
        counts = np.bincount(labels)  #!
        hist, edges = np.histogram(x, bins=20)  #!
        """,
        device=("x", "labels"),
    ),
    _cell(
        "range-of-device",
        """
        for i in range(x.argmax()):  #!
            pass
        """,
    ),
    _cell(
        "nested-training-log",
        """
        for epoch in range(10):
            for step in range(100):
                x = x - 0.01 * x
                if step % 10 == 0:
                    loss = (x * x).mean()
                    print(f"epoch {epoch} step {step} loss {loss}")  #!
        """,
    ),
    _cell("chained-compare", "inside = 0 < x.mean() < 1  #!\n"),
    _cell("intersect", "common = np.intersect1d(a, b)  #!\n", device=("a", "b")),
    _cell(
        "append-float-in-loop",
        """
        losses = []
        for step in range(50):
            x = x * 0.9
            losses.append(float((x * x).sum()))  #!
        """,
    ),
    _cell("print-many", 'print("max:", x.max(), "min:", x.min())  #!\n'),
    _cell("display", "display(x)  #!\n"),
    _cell("choice-with-p", "pick = np.random.choice(x, 5, p=w)  #!\n", device=("x", "w")),
    _cell(
        "standardise-then-print",
        """
        y = np.sqrt(x * x + 1)
        m = y.mean()
        s = y.std()
        z = (y - m) / s
        print(z.shape)
        print("mean", m)  #!
        """,
    ),
    _cell(
        "mask-from-input-comparison-in-function",
        """
        def clip_outliers(a, k):
            sd = a.std()
            keep = np.abs(a - a.mean()) < k * sd
            return a[keep]  #!

        y = clip_outliers(x, 3.0)
        """,
    ),
    _cell(
        "stats-through-function-table",
        """
        stats = {}
        for name, f in [("mean", np.mean), ("max", np.max)]:
            stats[name] = float(f(x))  #!
        """,
        hard=True,
    ),
    _cell(
        "mask-by-own-mean",
        """
        x = x[x > x.mean()]  #!
        y = np.sort(x)
        """,
    ),
    _cell(
        "map-float",
        """
        ys = list(map(float, x))  #!
        top = sorted(x)[-3:]  #!
        """,
    ),
    _cell(
        "lambda-conversion",
        """
        to_float = lambda a: float(a.sum())  #!
        v = to_float(x)
        """,
    ),
    _cell(
        "early-stop",
        """
        prev = x.sum()
        for it in range(1000):
            x = 0.5 * (x + 1.0 / x)
            cur = x.sum()
            if abs(cur - prev) < 1e-9:  #!
                break
            prev = cur
        """,
    ),
]

CLEAN = [
    _cell(
        "len-and-fstring",
        """
        n = len(x)
        print(f"{n} samples, dtype {x.dtype}")
        """,
    ),
    _cell(
        "shape-condition",
        """
        if x.shape[0] > 10:
            x = x[:10]
        """,
    ),
    _cell(
        "device-where",
        """
        y = np.where(x > 0, x, 0)
        m = y.mean()
        s = y.std()
        """,
    ),
    _cell(
        "range-len-loop",
        """
        for i in range(len(x)):
            pass
        """,
    ),
    _cell(
        "streams",
        """
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            y = x * 2
        s.synchronize()
        """,
    ),
    _cell(
        "batch-slices",
        """
        batch = 1024
        out = np.empty_like(x)
        for start in range(0, x.shape[0], batch):
            out[start:start + batch] = np.sqrt(x[start:start + batch])
        """,
    ),
    _cell(
        "device-any-kept",
        """
        has_nan = np.any(np.isnan(x))
        x = np.where(np.isnan(x), 0, x)
        """,
    ),
    _cell(
        "python-arithmetic",
        """
        lr = 0.01
        for step in range(100):
            lr = lr * 0.99
            x = x - lr * x
        """,
    ),
    _cell(
        "dict-get",
        """
        config = {"scale": 2.0}
        scale = config.get("scale", 1.0)
        y = x * scale
        """,
    ),
    _cell(
        "reductions-stay",
        """
        total = x.sum()
        norm = np.linalg.norm(x)
        z = x / norm
        """,
    ),
    _cell(
        "integer-indexing",
        """
        order = np.argsort(x)
        top = x[order[-10:]]
        first = x[0]
        """,
    ),
    _cell(
        "metadata-conditions",
        """
        if x.ndim == 2 and x.size > 0:
            x = x.T
        if x.dtype == np.float64:
            x = x.astype(np.float32)
        """,
    ),
    _cell(
        "fstring-host-int",
        """
        k = 5
        msg = f"using {k} neighbours for {x.shape[0]} points"
        print(msg)
        """,
    ),
    _cell(
        "count-nonzero-kept",
        """
        n_pos = np.count_nonzero(x > 0)
        frac = n_pos / x.size
        """,
    ),
    _cell(
        "pure-device-function",
        """
        def soft(a, t):
            return np.sign(a) * np.maximum(np.abs(a) - t, 0)

        y = soft(x, 0.1)
        z = soft(y, 0.05)
        """,
    ),
    _cell(
        "mask-arithmetic",
        """
        mask = x > 0
        y = x * mask
        count = mask.sum()
        """,
    ),
    _cell(
        "is-none",
        """
        w = None
        if w is None:
            w = np.ones_like(x)
        y = x * w
        """,
    ),
    _cell(
        "host-list-loop",
        """
        for name in ["a", "b"]:
            print(name)
        """,
    ),
    _cell(
        "random-scalars",
        """
        noise = np.random.standard_normal(x.shape)
        y = x + 0.1 * noise
        z = np.power(y, 2)
        """,
    ),
    _cell(
        "matmul-chain",
        """
        w = np.random.rand(x.shape[1], 64)
        h = np.maximum(x @ w, 0)
        out = h.sum(axis=1)
        """,
    ),
    _cell(
        "plot-host-data",
        """
        import matplotlib.pyplot as plt
        steps = list(range(10))
        plt.plot(steps, [s * s for s in steps])
        plt.title(f"{x.shape[0]} points")
        """,
    ),
    _cell(
        "reassigned-to-host",
        """
        x = [1, 2, 3]
        print(x)
        if x:
            total = sum(x)
        """,
    ),
    _cell(
        "metadata-prints",
        """
        print(len(x))
        print(x.dtype, x.nbytes)
        assert x.shape == (100,)
        s = str(x.shape)
        m = max(x.shape)
        """,
    ),
    _cell(
        "split-loop",
        """
        parts = []
        for row in np.split(x, 4):
            parts.append(row * 2)
        y = np.concatenate(parts)
        """,
    ),
    _cell(
        "reshape-by-len",
        """
        x = x.astype(np.float32)
        y = x.reshape(len(x), 1)
        if x.size:
            y = y * 2
        """,
    ),
]

CELLS = SYNCING + CLEAN
