"""NumPy code from NumPy's own documentation that CuPy refused or computed differently (found
by ``benchmarks/numpy_examples.py`` on the H200), run unchanged in a ``%%gpu --to-host`` cell
on both backends through a real shell and compared with NumPy: the same dtype, shape and
values, with and without ``--fallback``."""

from __future__ import annotations

import numpy as np
import pytest

import cupy_magic
from cupy_magic.compat.advice import CupyLimit

MATRIX = "the matrix subclass is not the recommended way"  # NumPy's PendingDeprecationWarning

# (the cell, the names to compare); each is NumPy code as a user writes it
CELLS = [
    # percentile/quantile of data holding a NaN: NaN, as NumPy's (CuPy interpolated past it)
    ("a = np.array([[10., 7., 4.], [3., 2., 1.]])\na[0][1] = np.nan\n"
     "p = np.percentile(a, 50)\nq = np.quantile(a, [0.25, 0.5], axis=1)\n"
     "r = np.percentile(a, 50, axis=0, keepdims=True)\ns = np.quantile([1.0, np.nan], 0.5)\n"
     "t = np.percentile([a.min(), a.max(), a[0, 1]], 50)\n", "p q r s t"),
    # std/var computing in a wider dtype= than the data
    ("a = np.zeros((2, 512 * 512), dtype=np.float32)\na[0, :] = 1.0\na[1, :] = 0.1\n"
     "s = np.std(a, dtype=np.float64)\nv = np.var(a, axis=1, dtype=np.float64)\n", "s v"),
    # an index out of bounds is NumPy's error, never wrapped: see the test below
    ("i = np.ravel_multi_index((3, 1, 4, 1), (6, 7, 8, 9))\n"
     "j = np.ravel_multi_index(np.array([[3, 6, 6], [4, 5, 1]]), (7, 6))\n", "i j"),
    ("x = np.arange(6).reshape(2, 3)\n"
     "y = np.require(x, dtype=np.float32, requirements=['A', 'O', 'W', 'F'])\n"
     "f = y.flags['F_CONTIGUOUS']\nz = np.require(x, requirements='CW')\n", "y f z"),
    ("x = np.array([5, 3])\nb = np.binary_repr(x[0], width=8)\nc = np.base_repr(x[1], 3)\n",
     "b c"),
    ("a = np.arange(6).reshape(2, 3) + 10\nm = a.flat[np.argmax(a)]\nn = a.flat[np.argmin(a)]\n"
     "a.flat[np.argmin(a)] = 0\n", "m n a"),
    ("x = [-2.1, -1, 4.3]\ny = [3, 1.1, 0.12]\nX = np.stack((x, y), axis=0)\nc = np.cov(X)\n",
     "X c"),
    ("e = np.inner(np.eye(2), 7)\nf = np.inner(np.eye(2, dtype=np.float32), 2)\n", "e f"),
    ("element = 2 * np.arange(4).reshape((2, 2))\na = np.isin(element, {0, 2, 4})\n"
     "b = np.isin(element, frozenset({0}), invert=True)\nc = np.isin(element, [0, 2])\n", "a b c"),
    ("a = np.mintypecode(['d', 'f', 'S'])\nx = np.array([1.1, 2-3.j])\nb = np.mintypecode(x)\n"
     "c = np.mintypecode('abceh', default='G')\nd = np.mintypecode(np.ones((2, 2), 'f'))\n",
     "a b c d"),
]


def _numpy(cell: str, names: str) -> dict:
    scope: dict = {"np": np}
    exec(cell, scope)
    return {n: scope[n] for n in names.split()}


def _same(got, want) -> None:
    if isinstance(want, (str, bool)):
        assert got == want
        return
    assert np.asarray(got).dtype == np.asarray(want).dtype
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12)


@pytest.mark.parametrize("flags", ["", "--fallback"])
@pytest.mark.parametrize(("cell", "names"), CELLS)
def test_numpys_cell_gives_numpys_values(ip, xp, cupy_names, cell, names, flags):
    result = ip.run_cell(f"%%gpu --quiet --to-host {flags}\n{cell}")
    assert result.error_in_exec is None, result.error_in_exec
    for name, want in _numpy(cell, names).items():
        _same(ip.user_ns[name], want)


def test_an_index_out_of_bounds_is_numpys_error(ip, xp, cupy_names):
    result = ip.run_cell("%%gpu --quiet\ni = np.ravel_multi_index((7, 1), (6, 7))\n")
    assert isinstance(result.error_in_exec, ValueError)
    assert "invalid entry in coordinates array" in str(result.error_in_exec)


@pytest.mark.parametrize(("cell", "error", "message"), [
    # NumPy iterates the typechars it is given: a 0-d array cannot be
    ("t = np.mintypecode(np.array(1.0))\n", TypeError, "iteration over a 0-d array"),
    # kind= is an option CuPy lacks, with a set too (NumPy's result is all False for a set)
    ("m = np.isin(np.arange(4), {0, 2}, kind='table')\n", CupyLimit,
     "CuPy's isin has no kind= option"),
])
def test_numpys_errors_stay_numpys(ip, xp, cupy_names, cell, error, message):
    result = ip.run_cell(f"%%gpu --quiet\n{cell}")
    assert isinstance(result.error_in_exec, error)
    assert message in str(result.error_in_exec)


def test_randint_with_array_bounds_is_numpys(ip, xp, cupy_names):
    # CuPy's own takes device array bounds unchecked; the cell checks them as NumPy does
    ip.run_cell_magic("gpu", "--quiet --to-host",
                      "r = np.random.randint(np.array([0, 10]), np.array([5, 20]), "
                      "size=(1000, 2))\n")
    r = ip.user_ns["r"]
    assert r.dtype == np.random.randint(np.array([0]), np.array([5])).dtype and r.shape == (1000, 2)
    assert r[:, 0].min() >= 0 and r[:, 0].max() < 5 and r[:, 1].min() >= 10 and r[:, 1].max() < 20
    assert len(np.unique(r[:, 0])) == 5  # 1,000 draws of 5 values: all seen
    result = ip.run_cell("%%gpu --quiet\nbad = np.random.randint(np.array([5, 1]), 3)\n")
    assert isinstance(result.error_in_exec, ValueError)
    assert str(result.error_in_exec) == "low >= high"


def test_bmat_of_a_string_reads_the_cells_names(ip, xp, cupy_names):
    with pytest.warns(PendingDeprecationWarning, match=MATRIX):  # NumPy's, as in a plain cell
        ip.run_cell_magic("gpu", "--quiet --fallback",
                          "A = np.asmatrix('1 1; 1 1')\nB = np.asmatrix('2 2; 2 2')\n"
                          "M = np.bmat('A, B; B, A')\nC = np.ones((2, 2))\nD = 2 * C\n"
                          "N = np.bmat('C, D; D, C')\n")  # C, D: device arrays on a GPU
    assert isinstance(ip.user_ns["N"], np.matrix)
    np.testing.assert_array_equal(ip.user_ns["N"], np.block([[np.ones((2, 2)), 2 * np.ones(
        (2, 2))], [2 * np.ones((2, 2)), np.ones((2, 2))]]))
    want = np.block([[np.ones((2, 2)), 2 * np.ones((2, 2))], [2 * np.ones((2, 2)),
                                                               np.ones((2, 2))]])
    assert isinstance(ip.user_ns["M"], np.matrix)
    np.testing.assert_array_equal(ip.user_ns["M"], want)
    assert "np.bmat" in [r.function for r in cupy_magic.last_report().fallbacks]


def test_strings_kept_on_the_host_index_with_host_results(ip, xp, cupy_names):
    ip.run_cell_magic("gpu", "--quiet --fallback --to-host",
                      "a = np.array(['a', 'b', 'b', 'c', 'a'])\n"
                      "u, indices = np.unique(a, return_index=True)\nfirst = a[indices]\n"
                      "order = np.lexsort((('b', 'a', 'c'), ('x', 'x', 'y')))\n")
    np.testing.assert_array_equal(ip.user_ns["first"], np.array(["a", "b", "c"]))
    np.testing.assert_array_equal(ip.user_ns["order"], np.array([1, 0, 2]))


def test_np_matrix_of_a_device_array_under_fallback_is_numpys(ip, xp, cupy_names):
    ip.user_ns["a"] = np.array([[1.0, 2.0], [3.0, 4.0]])
    with pytest.warns(PendingDeprecationWarning, match=MATRIX):  # NumPy's, as in a plain cell
        ip.run_cell_magic("gpu", "--quiet --fallback --to-host",
                          "m = np.matrix(a)\nis_m = isinstance(m, np.matrix)\n"
                          "sub = issubclass(type(m), np.matrix)\n"
                          "ainv = np.linalg.inv(np.matrix(a))\n"
                          "w, v = np.linalg.eigh(np.matrix([[2.0, 1.0], [1.0, 2.0]]))\n")
    ns = ip.user_ns
    assert type(ns["m"]) is np.matrix and ns["is_m"] and ns["sub"]
    np.testing.assert_allclose(ns["ainv"], np.linalg.inv(ns["a"]))
    assert type(ns["ainv"]) is np.matrix and type(ns["v"]) is np.matrix
    np.testing.assert_allclose(ns["w"], [1.0, 3.0])
    assert "np.matrix" in [r.function for r in cupy_magic.last_report().fallbacks]


@pytest.mark.gpu
def test_flat_takes_a_device_index_while_the_extension_is_loaded(shell, monkeypatch):
    import cupy
    from conftest import loaded
    from cupy._indexing.iterate import flatiter

    cupys = flatiter.__getitem__, flatiter.__setitem__
    session = loaded(shell, monkeypatch, "cupy")
    next(session)
    x = cupy.arange(6).reshape(2, 3)
    assert int(x.flat[cupy.argmax(x)]) == 5
    x.flat[cupy.asarray(1)] = 9
    assert x.get().tolist() == [[0, 9, 2], [3, 4, 5]]
    with pytest.raises(StopIteration):
        next(session)  # unload
    assert (flatiter.__getitem__, flatiter.__setitem__) == cupys
    with pytest.raises(IndexError, match="unsupported iterator index"):
        x.flat[cupy.asarray(1)]


def test_text_readers_read_their_stream_once(ip, xp, cupy_names):
    ip.run_cell_magic("gpu", "--quiet --to-host",
                      "from io import StringIO\nd = np.genfromtxt(StringIO('1,2\\n3,4'), "
                      "delimiter=',')\nl = np.loadtxt(StringIO('1 2\\n3 4'))\n")
    np.testing.assert_array_equal(ip.user_ns["d"], [[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(ip.user_ns["l"], [[1.0, 2.0], [3.0, 4.0]])
    cell = ("from io import StringIO\ns = StringIO('11.3abcde')\n"
            "t = np.genfromtxt(s, dtype=None, names=['i', 'f', 's'], delimiter=[1, 3, 5])\n")
    result = ip.run_cell(f"%%gpu --quiet\n{cell}")
    assert "CuPy has no dtype" in str(result.error_in_exec)
    ip.run_cell_magic("gpu", "--quiet --fallback --to-host", cell)
    want = np.genfromtxt(__import__("io").StringIO("11.3abcde"), dtype=None,
                         names=["i", "f", "s"], delimiter=[1, 3, 5])
    assert ip.user_ns["t"] == want  # read once: NumPy's record, not an empty read


def test_an_option_cupy_lacks_is_run_by_a_completion(ip, xp, cupy_names):
    # CuPy's trim_zeros has no axis=; the completion (compat.complete) has it, on both backends
    ip.user_ns["b"] = np.array([[0, 0, 2, 3, 0, 0], [0, 1, 0, 3, 0, 0], [0, 0, 0, 0, 0, 0]])
    ip.run_cell_magic("gpu", "--quiet --to-host", "t = np.trim_zeros(b, axis=-1)\n")
    np.testing.assert_array_equal(ip.user_ns["t"], np.trim_zeros(ip.user_ns["b"], axis=-1))
    assert not cupy_magic.last_report().fallbacks


@pytest.mark.parametrize("flags", ["", "--fallback"])
def test_trim_zeros_of_a_list_is_a_list_as_numpys(ip, xp, cupy_names, flags):
    # NumPy slices the sequence itself; made a device array first, it became an array
    ip.run_cell_magic("gpu", f"--quiet --to-host {flags}",
                      "t = np.trim_zeros([0, 1, 2, 0])\nu = np.trim_zeros((0, 0, 3.5, 0), 'b')\n"
                      "v = np.trim_zeros(np.array([0, 4, 0]))\nw = np.trim_zeros(range(0, 3))\n")
    assert type(ip.user_ns["t"]) is list and ip.user_ns["t"] == [1, 2]
    assert type(ip.user_ns["u"]) is tuple and ip.user_ns["u"] == (0, 0, 3.5)
    assert isinstance(ip.user_ns["v"], np.ndarray) and ip.user_ns["v"].tolist() == [4]
    assert ip.user_ns["w"] == range(1, 3)
    assert not cupy_magic.last_report().fallbacks


def _refused_then_numpys(ip, cell: str, message: str, name: str):
    """Run ``cell``: refused in one line saying ``message``; under --fallback, NumPy's
    ``name``."""
    result = ip.run_cell(f"%%gpu --quiet\n{cell}")
    assert message in str(result.error_in_exec)
    ip.run_cell_magic("gpu", "--quiet --fallback", cell)
    return ip.user_ns[name]


def test_a_structured_text_file_unpacked_by_field_is_refused_or_numpys(ip, xp, cupy_names):
    got = _refused_then_numpys(
        ip, "from io import StringIO\nx = np.loadtxt(StringIO('M 21 72\\nF 35 58'), dtype="
        "{'names': ('g', 'a', 'w'), 'formats': ('S1', 'i4', 'f4')}, unpack=True)\n",
        "CuPy has no dtype structured (unpacked by field)", "x")
    assert isinstance(got, list)
    assert [g.tolist() for g in got] == [[b"M", b"F"], [21, 35], [72.0, 58.0]]


def test_a_masked_text_file_is_refused_or_numpys(ip, xp, cupy_names):
    got = _refused_then_numpys(
        ip, "from io import StringIO\n"
        "m = np.genfromtxt(StringIO('1,2\\n3,'), delimiter=',', usemask=True)\n",
        "usemask=True (a masked array)", "m")
    assert isinstance(got, np.ma.MaskedArray)
    assert got.mask.tolist() == [[False, False], [False, True]]
