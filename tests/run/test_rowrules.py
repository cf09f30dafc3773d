"""What the batched-parity corpus (test_batched_parity) found the row check let through,
each of which a batched run committed silently other than NumPy: a --reduce rule that does
not join its result, random draws per batch, prints of a batch's values, functions that read
across rows, and numbers over a batch's rows that every (equal) batch agreed on."""

from __future__ import annotations

import numpy as np
import pytest
from IPython.core.error import UsageError

from cupy_magic.run.rowwise import check_cell

B = {"x": 2, "v": 1}


@pytest.mark.parametrize(("cell", "rules", "right"), [
    ("mu = x.mean(axis=0)", "mu=sum", "mu=mean"),
    ("t = x.sum()", "t=mean", "t=sum"),
    ("mx = x.max(axis=0)", "mx=min", "mx=max"),
    ("m = -x.max()", "m=max", "m=min"),
    ("g = x.T @ x", "g=mean", "g=sum"),
    ("m = x.sum(axis=0) / len(x)", "m=sum", "m=mean"),
    ("n = len(x)", "n=max", "n=sum"),
    # counts in fixed bins: --reduce sum joins them (any rule was refused as joining none)
    ("h = np.histogram(v, bins=3000, range=(0, 1))[0]", "h=max", "h=sum"),
    ("c = np.bincount((v * 10).astype(int), minlength=10)", "c=mean", "c=sum"),
])
def test_a_rule_that_does_not_join_its_result_is_refused_naming_the_one_that_does(
        cell, rules, right):
    name, rule = rules.split("=")
    found = check_cell(cell, B, {name: rule}).found
    assert found and found[0].certain and f"--reduce {right} does" in found[0].why
    assert check_cell(cell, B, dict([right.split("=")])).found == []


@pytest.mark.parametrize(("cell", "rules"), [
    ("sd = x.std(axis=0)", {"sd": "mean"}), ("q = np.percentile(v, [5, 95])", {"q": "mean"}),
    ("med = np.median(x, axis=0)", {"med": "mean"}), ("p = np.prod(1 + v)", {"p": "sum"}),
    ("xc = x - 1\ng = xc.T @ xc / (len(x) - 1)", {"g": "sum"}),
    ("r = x.sum() / v.sum()", {"r": "mean"}),
    ("c = np.bincount((v * 10).astype(int))", {"c": "sum"}),  # its length: a batch's choice
])
def test_a_result_no_rule_joins_is_refused_with_any_rule(cell, rules):
    found = check_cell(cell, B, rules).found
    assert found and found[-1].certain and "no --reduce rule joins" in found[-1].why


@pytest.mark.parametrize(("cell", "rules"), [
    ("big = (x > 0.99).any()", {"big": "any"}), ("cnt = (v > 0.5).sum()", {"cnt": "sum"}),
    ("s = 0.0\nfor j in range(4):\n    s += x[:, j].sum()", {"s": "sum"}),
    ("s2 = (x ** 2).sum(axis=0) * 0.5", {"s2": "sum"}), ("m = x.mean() + 1", {"m": "mean"}),
    ("m = x.sum(0) / x.shape[0]", {"m": "mean"}), ("y = x[x[:, 0] > 0.5]", {"y": "concat"}),
])
def test_a_rule_that_joins_its_result_passes(cell, rules):
    assert check_cell(cell, B, rules).found == []


def test_a_rule_for_a_row_result_is_refused_and_one_it_cannot_read_is_a_doubt():
    found = check_cell("y = x * 2", B, {"y": "sum"}).found
    assert found[0].certain and "keeps a row per input row" in found[0].why
    found = check_cell("h, e = np.histogram(v, 10, (0, 1))", B, {"h": "sum"}).found
    assert found and not found[0].certain


@pytest.mark.parametrize("cell", [
    "rng = np.random.default_rng(0)\ny = x + rng.normal(size=x.shape)",
    "np.random.seed(1)\ny = x + np.random.rand(*x.shape)",
    "y = x * np.random.default_rng(2).random(4)",
    "from numpy.random import permutation\ni = permutation(len(x))",
    "import numpy.random as npr\ny = v + npr.standard_normal(len(v))",
    "y = x + gen.normal(size=x.shape)",  # a generator from an earlier cell
])
def test_random_draws_in_a_batched_cell_are_certain(cell):
    found = check_cell(cell, B, {}, generator=lambda n: n == "gen").found
    assert found and found[-1].certain and "draws random numbers in every batch" in found[-1].why


@pytest.mark.parametrize(("cell", "words"), [
    ("print(f'{x.sum():.2f}')", "prints a batch's values"), ("print(len(x))", "prints"),
    ("cv = np.convolve(v, [0.25, 0.5, 0.25], mode='same')", "convolves along the rows"),
    ("o = np.lexsort((x[:, 1], x[:, 0]))", "sorts the rows"),
    ("c = np.cov(x.T)", "covariance"), ("c = np.corrcoef(x, rowvar=False)", "correlations"),
    ("h, e = np.histogram(v, bins=10)", "by its own minimum and maximum"),
])
def test_prints_and_functions_across_rows_are_certain(cell, words):
    found = check_cell(cell, B, {}).found
    assert found and found[0].certain and words in found[0].why


@pytest.mark.parametrize(("cell", "over"), [
    ("n = len(x)", {"n"}), ("k = x.shape[0] * 2", {"k"}), ("rows, cols = x.shape", {"rows"}),
    ("size = x.size", {"size"}), ("flag = bool(x.sum() > 4)", {"flag"}),
    ("y = v * 2\nfor i in range(len(v)):\n    y[i] = v[i]", {"i"}), ("k = x.shape[1]", set()),
])
def test_numbers_over_a_batch_s_rows_are_named(cell, over):
    assert check_cell(cell, B, {}).over_rows == over


@pytest.mark.parametrize(("cell", "free"), [
    ("eps = np.float32(1e-3)\ny = x * eps", {"eps"}),
    ("c = np.sqrt(2 / np.pi)\ny = np.tanh(c * x)", {"c"}),
    ("z = np.float64(2.5)\nk = np.int32(3)\ny = x * z + k", {"z", "k"}),
    ("a = np.float32(ALPHA)\nb2 = a * 2", {"a", "b2"}),
    ("t = x.sum()", set()), ("t = (x > -1).sum()", set()), ("m = x.max()", set()),
    ("f = np.float64(len(x))", set()), ("k = np.int64(x.shape[0])", set()),
    ("s = np.float32(v[0])", set()), ("y = x\ns = np.float32(y.sum())", set()),
    ("n = len(x)\nf = np.float64(n)", set()), ("e = np.float32(1)\ne += x.sum()", set()),
    ("e = np.float32(1)\nif x.sum() > 4:\n    e = x.sum()", set()),
    ("c = np.float32(2)\ndef f():\n    global c\n    c = x.sum()\nf()", set()),
    ("import mylib as np\nc = np.pi", set()), ("c = np.random.rand()", set()),
    ("c = np.float32(count(x))", set()), ("c = np.float32(count())", set()),
    ("c = np.float32(OBJ)", set()), ("globals()['c'] = x.sum()\nc = np.float32(1)", set()),
])
def test_names_bound_to_values_of_no_batched_row_are_named(cell, free):
    """Kept where every batch agrees (a NumPy scalar too); a batch's total never is."""
    plain = {"ALPHA"}.__contains__  # an earlier cell's number; count: a function, OBJ: object
    assert check_cell(cell, B, {}, plain=plain).row_free == free


@pytest.mark.parametrize("cell", ["n = len(x)", "rows, cols = x.shape",
                                  "flag = bool(x.sum() > 40000)"])
def test_a_number_every_equal_batch_agrees_on_is_not_kept(ip, cell):
    """Seven batches of 3,000 rows: each said n = 3000, and the run kept it for 21,000."""
    ip.user_ns["x"] = np.random.default_rng(0).random((21_000, 4))
    with pytest.raises(UsageError) as info:
        ip.run_cell_magic("gpu", "--quiet --to-host --batch --batch-rows 3000", cell)
    msg = str(info.value)
    assert "\n" not in msg and "is a value over the batch's 3000 rows" in msg
    assert "--reduce" in msg and not {"n", "rows", "flag"} & set(ip.user_ns)
    rules = "n=sum" if cell.startswith("n") else ""
    if rules:  # joined by its rule, it is the whole input's
        ip.run_cell_magic("gpu", f"--quiet --to-host --batch --batch-rows 3000 --reduce {rules}",
                          cell)
        assert ip.user_ns["n"] == 21_000
