"""``np.random.choice(..., replace=False, p=...)`` drawn on the device
(``cupy_magic.compat.draws``): NumPy's distribution (the first and second draws' exact
probabilities), NumPy's shapes, dtypes and errors; with ``xp=numpy`` here, with CuPy on a
GPU."""

from __future__ import annotations

import numpy as np
import pytest

from cupy_magic.compat.draws import DRAWS, random_choice, random_randint
from cupy_magic.compat.supplement import NotSupplied

P = np.array([0.1, 0.2, 0.3, 0.4])


def _exact() -> tuple[np.ndarray, np.ndarray]:
    """P(first draw = i) and P(second draw = j) drawing successively without replacement."""
    second = np.array([sum(P[i] * P[j] / (1 - P[i]) for i in range(4) if i != j)
                       for j in range(4)])
    return P, second


def _frequencies(xp, seed_with) -> tuple[np.ndarray, np.ndarray]:
    seed_with(7)
    first, second = np.zeros(4), np.zeros(4)
    n = 20_000
    for _ in range(n):
        drawn = random_choice(xp, 4, 2, replace=False, p=P)
        drawn = drawn.get() if hasattr(drawn, "get") else drawn
        first[drawn[0]] += 1
        second[drawn[1]] += 1
    return first / n, second / n


def test_draws_follow_numpys_distribution():
    first, second = _frequencies(np, np.random.seed)
    want_first, want_second = _exact()
    np.testing.assert_allclose(first, want_first, atol=0.012)
    np.testing.assert_allclose(second, want_second, atol=0.012)


@pytest.mark.parametrize(("a", "size"), [(5, 3), (5, None), ([10, 20, 30, 40, 50], (2, 1)),
                                         (np.arange(5.0), 5)])
def test_shape_dtype_and_no_repeats_as_numpys(a, size):
    p = [0.1, 0, 0.3, 0.6, 0] if size != 5 else [0.2] * 5
    got = random_choice(np, a, size, replace=False, p=p)
    want = np.random.choice(a, size, replace=False, p=p)
    assert np.shape(got) == np.shape(want) and np.asarray(got).dtype == np.asarray(want).dtype
    assert len(set(np.ravel(got).tolist())) == np.size(got)
    assert set(np.ravel(got).tolist()) <= set(np.ravel(np.arange(a) if isinstance(a, int) else a)
                                              .tolist())


@pytest.mark.parametrize(("a", "size", "p"), [
    ([1, 2, 3], None, [0.5, 0.6, 0]), ([1, 2, 3], None, [-0.1, 1.1, 0]),
    ([1, 2, 3], 2, [1, 0, 0]), ([1, 2, 3], None, [0.5, 0.5]), ([1, 2, 3], 4, [0.5, 0.5, 0]),
    ([[1, 2], [3, 4]], None, [0.5, 0.5]), ([1, 2, 3], None, [0.5, np.nan, 0.5]),
])
def test_bad_input_is_numpys_error(a, size, p):
    with pytest.raises(ValueError) as want:
        np.random.choice(a, size, replace=False, p=p)
    with pytest.raises(ValueError) as got:
        random_choice(np, a, size, replace=False, p=p)
    assert str(got.value) == str(want.value)


def test_float32_weights_sum_to_one_as_numpy_allows():
    p = np.array([0.1, 0.2, 0.3, 0.4], np.float32)  # 2.2e-8 off in float64
    got = random_choice(np, 4, 2, replace=False, p=p)
    assert got.shape == np.random.choice(4, 2, replace=False, p=p).shape


def test_other_uses_are_not_supplied():
    with pytest.raises(NotSupplied):
        random_choice(np, 5, 3, replace=True, p=[*P.tolist(), 0])
    with pytest.raises(NotSupplied):
        random_choice(np, 5, 3, replace=False)
    assert set(DRAWS) == {"random.choice", "random.randint"}


@pytest.mark.parametrize(("args", "kwargs"), [
    ((1, [3, 5, 10]), {}), (([1, 5, 7], 10), {"dtype": np.uint8}),
    (([[1], [3]], [4, 10]), {"size": (2, 2)}), (([-5, 0], [0, 2**40]), {"dtype": np.int64})])
def test_randint_with_array_bounds_has_numpys_shape_dtype_and_range(args, kwargs):
    got = random_randint(np, *args, **kwargs)
    want = np.random.randint(*args, **kwargs)
    assert got.shape == want.shape and got.dtype == want.dtype
    low, high = (0, args[0]) if len(args) == 1 else args
    assert np.all(got >= np.broadcast_to(low, got.shape))
    assert np.all(got < np.broadcast_to(high, got.shape))


def _randint_uniform(xp, seed_with) -> None:
    seed_with(3)
    got = random_randint(xp, 0, xp.asarray(np.full(300_000, 3)))
    got = got.get() if hasattr(got, "get") else got
    np.testing.assert_allclose(np.bincount(got, minlength=3) / got.size, [1 / 3] * 3, atol=0.005)


def test_randint_draws_each_value_alike():
    _randint_uniform(np, np.random.seed)


@pytest.mark.parametrize(("args", "kwargs"), [((5, [3, 10]), {}), (([1, 2], [1, 3]), {}),
                                              (([-1], 5), {"dtype": np.uint8}),
                                              (([1], 300), {"dtype": np.uint8})])
def test_randint_bad_bounds_are_numpys_error(args, kwargs):
    with pytest.raises(ValueError) as want:
        np.random.randint(*args, **kwargs)
    with pytest.raises(ValueError) as got:
        random_randint(np, *args, **kwargs)
    assert str(got.value) == str(want.value)


@pytest.mark.gpu
def test_randint_draws_each_value_alike_on_the_gpu():
    cupy = pytest.importorskip("cupy")
    _randint_uniform(cupy, cupy.random.seed)


@pytest.mark.gpu
def test_draws_follow_numpys_distribution_on_the_gpu():
    cupy = pytest.importorskip("cupy")
    first, second = _frequencies(cupy, cupy.random.seed)
    want_first, want_second = _exact()
    np.testing.assert_allclose(first, want_first, atol=0.012)
    np.testing.assert_allclose(second, want_second, atol=0.012)
