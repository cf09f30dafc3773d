"""The promise batching relies on (each row's results depend only on that row), read from the
cell's code before anything moves: a cell batched on its own stops where its rows mix or the
check cannot see; one batched on request stops where they certainly mix."""

from __future__ import annotations

import numpy as np
import pytest
from IPython.core.error import UsageError

import cupy_magic
from cupy_magic.run.rowwise import row_mixing

B = {"x": 2, "S": 1}


@pytest.mark.parametrize("cell", [
    "y = np.sqrt(np.abs(np.sin(x) * np.cos(x))) * 2.0 + np.exp(-x * x)",
    "s = np.sqrt(x * x + 1).sum(axis=1)\nn = np.linalg.norm(x, axis=-1)",
    "mu = x.mean(axis=1, keepdims=True)\nz = (x - mu) / (x.std(axis=1, keepdims=True) + 1e-6)",
    "total = x.sum(dtype=np.float64)\ntop = x.max()",  # no row axis: a --reduce rule joins them
    "k = x.shape[1]\ny = x[:, 0] * k + x[..., 1]",
    "out = np.zeros(x.shape)\nout[:, 0] = x[:, 0]\ny = x[x > 0.5]",
    "y = np.where(x > 0, x, 0).astype(np.float32).clip(0, 1)",
    "y = np.concatenate([x, x], axis=1)\ns = np.sort(x)\nc = np.cumsum(x, axis=1)",
    "def f(a):\n    return np.exp(a) * 2\ny = f(S) + S",
    "from numpy import sqrt as root\ny = root(S)",
    "g = x.T @ x\nh = x @ np.ones((2, 3))",  # a Gram matrix sums over rows: a rule joins it
    "for k in range(3):\n    S = S * 0.5 + k",
])
def test_row_wise_cells_pass(cell):
    assert row_mixing(cell, B) == []


@pytest.mark.parametrize("cell, line, words", [
    ("z = (x - x.mean(axis=0)) / x.std(axis=0)", 1, "combines a value over the rows"),
    ("s = np.sort(x, axis=0)", 1, "sort over the leading axis"),
    ("s = np.sort(S)", 1, "sort over the leading axis"),  # its default axis is the rows of 1-d
    ("y = x - x.mean()", 1, "combines a value over the rows"),
    ("n = len(x)\ny = x / n", 2, "combines a value over the rows"),
    ("y = x - x[0]", 1, "combines a value over the rows"),
    ("y = x[::-1]", 1, "slices the rows"),
    ("i = x.argmax()", 1, "argmax over all elements"),
    ("i = np.where(S > 0)", 1, "positions within a batch"),
    ("y = np.concatenate([x, x])", 1, "concatenate over the leading axis"),
    ("t = S.sum()\ny = S / t", 2, "combines a value over the rows"),  # a total used with rows
    ("def f(a):\n    return a - a.mean()\ny = f(S)", 3, "combines a value over the rows"),
    ("y = x.copy()\ny[:, 0] = x.max()", 2, "writes a value over all rows"),
])
def test_cells_that_mix_rows_are_named_with_their_line(cell, line, words):
    found = row_mixing(cell, B)
    assert found and found[0].certain and found[0].line == line and words in found[0].why
    assert found[0].code == cell.splitlines()[line - 1].strip()


@pytest.mark.parametrize("cell, words", [
    ("y = myfunc(x)", "myfunc, which the check cannot see into"),
    ("y = x.reshape(-1)", ".reshape() of a batched input"),
    ("for row in x:\n    print(row)", "loops over the rows"),
    ("if S.max() > 1:\n    y = S * 2", "decides by a value over the batch's rows"),
    ("y = S.sum(axis=k)", "an axis the check cannot read"),
])
def test_what_the_check_cannot_see_is_not_certain(cell, words):
    found = row_mixing(cell, B)
    assert found and not any(m.certain for m in found) and words in found[0].why


def test_a_ufunc_from_the_namespace_keeps_rows():
    assert row_mixing("y = erf(S)", B, ufunc=lambda n: n == "erf") == []
    assert not row_mixing("y = erf(S)", B)[0].certain


# --- through a real shell -----------------------------------------------------------------

def _gpu(ip, cell: str, line: str = "--quiet --to-host"):
    ip.run_cell_magic("gpu", line, cell)


def _host(value):
    return value.get() if hasattr(value, "get") and not isinstance(value, np.ndarray) \
        else np.asarray(value)


@pytest.fixture
def small(ip):
    """A 12 MiB input under a 10 MB budget: batched on its own."""
    x = np.random.default_rng(0).random((200_000, 8))
    ip.user_ns["x"] = x
    ip.run_line_magic("vram_budget", "10MB")
    yield x
    ip.run_line_magic("vram_budget", "off")


@pytest.mark.parametrize("cell", [
    "z = (x - x.mean(axis=0)) / x.std(axis=0)",
    "z = np.sort(x, axis=0)",
    "z = x - x.mean()",
])
@pytest.mark.parametrize("line", ["--quiet --to-host", "--to-host"])
def test_a_cell_batched_on_its_own_that_mixes_rows_is_refused_and_commits_nothing(
        ip, small, cell, line):
    """The fresh-user review's case: these ran batched and committed wrong values."""
    with pytest.raises(UsageError) as info:
        _gpu(ip, cell, line)
    msg = str(info.value)
    assert "\n" not in msg and "batches would give other results than NumPy" in msg
    assert f"line 1 `{cell}`" in msg and "the inputs need" in msg and "--reduce" in msg
    assert "z" not in ip.user_ns


def test_asked_batching_stops_at_a_certain_mix_but_not_where_it_cannot_see(ip, small):
    with pytest.raises(UsageError, match=r"asked for with --batch.*line 1 `z = x - x.mean\(\)`"):
        _gpu(ip, "z = x - x.mean()", "--quiet --to-host --batch")
    ip.user_ns["scale"] = lambda a: a * 3  # a function from elsewhere: row-wise, unseen
    with pytest.raises(UsageError) as info:  # batched on its own: refused, naming --batch
        _gpu(ip, "z = scale(x)")
    msg = str(info.value)
    assert "line 1 `z = scale(x)`" in msg and "%%gpu --batch" in msg and "z" not in ip.user_ns
    _gpu(ip, "z = scale(x)", "--quiet --to-host --batch")  # on the user's promise
    np.testing.assert_array_equal(_host(ip.user_ns["z"]), small * 3)


def test_row_wise_and_reduced_cells_still_batch_on_their_own_and_equal_numpy(ip, small):
    _gpu(ip, "z = (x - x.mean(axis=1, keepdims=True)) * 2")
    assert cupy_magic.last_report().batch is not None
    np.testing.assert_allclose(_host(ip.user_ns["z"]),
                               (small - small.mean(axis=1, keepdims=True)) * 2)
    _gpu(ip, "t = x.sum(dtype=np.float64)", "--quiet --reduce t=sum")
    assert cupy_magic.last_report().batch is not None
    np.testing.assert_allclose(float(_host(ip.user_ns["t"])), small.sum())


def test_from_python_the_refusal_is_a_cell_error(ip, small):
    ns = {"np": np, "x": small}
    with pytest.raises(cupy_magic.CellError, match=r"line 1 `z = x - x.mean\(\)`"):
        cupy_magic.run_cell("z = x - x.mean()", ns, syncs="off")
    assert "z" not in ns


# --- --dtype float16 of values beyond its range (the same review) --------------------------

@pytest.mark.parametrize("line", ["--quiet --to-host --dtype float16",
                                  "--quiet --to-host --dtype float16 --batch-rows 2"])
def test_a_half_cast_that_would_make_values_inf_is_refused_before_anything_moves(ip, line):
    ip.user_ns["x"] = np.array([1e5, 1.0, np.nan, 70000.0, -3.0])
    with pytest.raises(UsageError) as info:
        _gpu(ip, "y = x + 0", line)
    msg = str(info.value)
    assert "\n" not in msg and "'x' holds 100000" in msg and "65,504" in msg
    assert "--dtype float32" in msg and "y" not in ip.user_ns
    ip.user_ns["x"] = np.array([1.5, np.inf, np.nan, -65504.0])  # in range (inf stays inf)
    _gpu(ip, "y = x + 0", line)
    np.testing.assert_array_equal(_host(ip.user_ns["y"]), ip.user_ns["x"].astype(np.float16))


def test_a_function_an_earlier_cell_defined_is_followed_through_its_source(ip, small):
    """IPython keeps each cell's text, so the check reads the function as the cell's own."""
    assert ip.run_cell("def doubled_root(a):\n    return np.sqrt(a) * 2\n").success
    assert ip.run_cell("def centred(a):\n    return a - a.mean()\n").success
    _gpu(ip, "z = doubled_root(x)")  # batched on its own, row-wise: runs
    assert cupy_magic.last_report().batch is not None
    np.testing.assert_allclose(_host(ip.user_ns.pop("z")), np.sqrt(small) * 2)
    with pytest.raises(UsageError, match=r"line 1 `z = centred\(x\)` combines a value over"):
        _gpu(ip, "z = centred(x)")
    assert "z" not in ip.user_ns


# a review's cells (helper-39, 2026-12-04): each mixed rows and passed the first version of
# the check, batched on its own and committed values NumPy would not give
SLIPPED = [
    "y = np.subtract(x, x.mean(axis=0))", "y = np.clip(x, 0, x.mean())",
    "y = np.where(x > 0.5, x, x.mean())", "y = np.maximum(S, S.mean())",
    "y = (x - 1.0) / x.std(axis=0).clip(1e-8)", "y = x - x.mean(axis=0).reshape(1, -1)",
    "m = x.mean(axis=0).astype(np.float32)\ny = x - m", "y = x / x.mean(axis=0).sum()",
    "p = x @ x.mean(axis=0)", "y = x @ (x.T @ x)", "y = np.dot(x, x.mean(0))",
    "m = x.mean(0)\ny = x.dot(m)",
    "if alpha > 1:\n    m = x.mean(axis=0)\nelse:\n    m = 0.0\ny = x - m",
    "y = x.copy()\ny[0] = 0", "y = x.copy()\ny[-1, :] = np.nan",
    "def f(a):\n    return a - a.mean()\ny = f(a=x)", "y = x - (m := x.mean())",
    "mu, z = x.mean(axis=0), x * 2\nw = x - mu", "d = {}\nd['m'] = x.mean()\ny = x - d['m']",
    "y = np.flip(x)", "u = np.unique(S)", "y = np.diff(x, 1, 0)",
]
# and row-wise cells the first version refused for certain, even under --batch
KEPT = [
    "y = x / x.shape[-1]", "y = x[:, 0] * np.ones(len(x))", "y = x / len(x[0])",
    "z = np.cumsum(x.sum(1, keepdims=True), axis=-1)",
    "out = np.zeros((x.shape[0], 3))\nout[:, 0] = x[:, 0]", "e = np.empty(len(x))\ne[:] = x[:, 0]",
    "y = x * np.arange(x.shape[1])", "y = np.arange(3) * x[:, :3]",  # columns, not rows
]


# row numbers made from a batch's row count: each batch numbers its rows from 0 again
NUMBERED = [
    ("y = x * np.arange(len(x))[:, None]", 1), ("y = np.arange(len(x))", 1),
    ("i = np.arange(x.shape[0])\ny = x + i[:, None]", 1),
    ("n = len(S)\ny = S * np.linspace(0, 1, n)", 2), ("y = x[np.arange(len(x)) % 2 == 0]", 1),
    ("from numpy import arange\ny = S - arange(len(S))", 2),
    # a batch's rows picked by its own positions are its rows, but the check does not
    # follow where the numbers go; the numbering itself is refused
    ("i = np.arange(len(x))\ny = x[i]", 1),
]


@pytest.mark.parametrize(("cell", "line"), NUMBERED)
def test_row_numbers_from_a_batch_s_row_count_are_certain(cell, line):
    """np.arange(len(x)) was a call the check could not see into (not certain): a cell
    batched with --batch ran and committed each batch's own 0, 1, 2, ..."""
    found = row_mixing(cell, B)
    assert found and found[0].certain and found[0].line == line
    assert "each batch counts its own rows from the start again" in found[0].why


@pytest.mark.parametrize("cell", [NUMBERED[0][0], NUMBERED[-1][0].replace("\n", "; ")])
def test_row_numbers_are_refused_under_batch_too(ip, cell):
    """100 MB under a 10 MB budget, batching asked for: refused before anything moves."""
    x = np.ones((12_500_000, 1))
    ip.user_ns["x"] = x
    ip.run_line_magic("vram_budget", "10MB")
    try:
        with pytest.raises(UsageError, match=r"asked for with --batch.*np\.arange over a batch"):
            _gpu(ip, cell, "--quiet --to-host --batch")
    finally:
        ip.run_line_magic("vram_budget", "off")
    assert "y" not in ip.user_ns


@pytest.mark.parametrize("cell", SLIPPED)
def test_a_total_reaching_the_rows_by_any_road_is_certain(cell):
    assert any(m.certain for m in row_mixing(cell, B))


@pytest.mark.parametrize("cell", KEPT)
def test_row_counts_shapes_and_keepdims_do_not_refuse_a_row_wise_cell(cell):
    assert row_mixing(cell, B) == []


def test_a_doubt_is_not_made_certain_by_what_follows_it():
    found = row_mixing("y = x / x.sum(axis=1).reshape(-1, 1)", B)  # reshape: unseen, not wrong
    assert found and not any(m.certain for m in found)


@pytest.mark.parametrize("cell", [*SLIPPED[:3], "y = x.copy()\ny[0] = 0"])
def test_the_reviewed_cells_are_refused_in_a_real_shell(ip, small, cell):
    ip.user_ns["alpha"] = 2.0
    with pytest.raises(UsageError, match="batches would give other results than NumPy"):
        _gpu(ip, cell.replace("S", "x"))
    assert "y" not in ip.user_ns
