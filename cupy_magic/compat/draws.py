"""Random draws CuPy's ``cupy.random`` has not implemented, made on the device.

- **``np.random.choice(a, size, replace=False, p=p)``**: CuPy draws without replacement only
  uniformly. Drawing successively, each time in proportion to the weights left, is the same as
  keeping the ``size`` largest keys ``log(u) / p`` of one uniform ``u`` per item (Efraimidis
  and Spirakis, 2006), so one ``random_sample`` and one sort on the device give NumPy's
  distribution (not its numbers: CuPy's generator is another). NumPy's checks of ``p`` are made
  with one host sync, as NumPy's reading them is.
- **``np.random.randint(low, high)`` with array bounds**: CuPy takes only numbers. Each
  element draws uniform bits masked to the next power of two above its range, and draws again
  where the value falls outside (at most half the time), so each is exactly uniform over its
  own range; one host sync per round, a few rounds.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy

from .supplement import NotSupplied

__all__ = ["DRAWS"]


def random_choice(xp: Any, a: Any, size: Any = None, replace: bool = True,
                  p: Any = None) -> Any:
    """``numpy.random.choice`` without replacement and with weights ``p``."""
    if replace or p is None:
        raise NotSupplied("random.choice: only replace=False with p= is supplied")
    if isinstance(a, (int, numpy.integer)) or (hasattr(a, "ndim") and a.ndim == 0
                                                and a.dtype.kind in "iu"):
        count = operator.index(a.item() if hasattr(a, "item") else a)
        if count <= 0:
            raise ValueError("a must be a positive integer unless no samples are taken")
        pool = xp.arange(count)
    else:
        pool = xp.asarray(a)
        if pool.ndim != 1:
            raise ValueError("a must be 1-dimensional")
    given = getattr(p, "dtype", None)  # NumPy's tolerance of the sum follows p's dtype
    weights = xp.asarray(p, dtype=numpy.float64)
    if weights.ndim != 1:
        raise ValueError("p must be 1-dimensional")
    if weights.shape[0] != pool.shape[0]:
        raise ValueError("'a' and 'p' must have same size")
    shape = () if size is None else tuple(numpy.atleast_1d(numpy.asarray(size)).tolist())
    n = math.prod(shape)
    if n > pool.shape[0]:
        raise ValueError("Cannot take a larger sample than population when 'replace=False'")
    # host sync forced: NumPy's errors for p need its values
    facts = xp.stack([xp.isnan(weights).any(), weights.min(), weights.sum(),
                      xp.count_nonzero(weights)])
    nan, low, total, nonzero = facts.tolist()
    if nan:
        raise ValueError("probabilities contain NaN")
    if low < 0:
        raise ValueError("probabilities are not non-negative")
    atol = math.sqrt(numpy.finfo(numpy.float64).eps)
    if given is not None and numpy.dtype(given).kind == "f":
        atol = max(atol, math.sqrt(numpy.finfo(given).eps))
    if abs(total - 1.0) > atol:
        raise ValueError("probabilities do not sum to 1")
    if nonzero < n:
        raise ValueError("Fewer non-zero entries in p than size")
    with numpy.errstate(divide="ignore"):
        keys = xp.log(xp.random.random_sample(pool.shape[0])) / weights  # p = 0: -inf
    chosen = pool[xp.argsort(-keys)[:n]]
    return chosen[0] if size is None else chosen.reshape(shape)


_TOP = 1 << 62  # the widest range drawn here


def random_randint(xp: Any, low: Any, high: Any = None, size: Any = None,
                   dtype: Any = int) -> Any:
    """``numpy.random.randint`` with array ``low`` or ``high`` (an integer dtype)."""
    dt = numpy.dtype(dtype)
    if (dt.kind not in "iu" or dt == numpy.uint64
            or (numpy.ndim(low) == 0 and numpy.ndim(high) == 0)):
        raise NotSupplied("random.randint: only array bounds of an integer dtype are supplied")
    low, high = (0, low) if high is None else (low, high)
    low, high = xp.asarray(low), xp.asarray(high)
    if low.dtype.kind not in "iub" or high.dtype.kind not in "iub":
        raise NotSupplied("random.randint: bounds that are not integers are not supplied")
    shape = numpy.broadcast_shapes(low.shape, high.shape)
    if size is not None:
        shape = tuple(numpy.atleast_1d(numpy.asarray(size)).tolist())
    low, high = (xp.broadcast_to(b.astype(numpy.int64), shape) for b in (low, high))
    span = high - low
    # host sync forced: NumPy's errors need the bounds
    facts = xp.stack([xp.any(span <= 0), xp.any(low < numpy.iinfo(dt).min),
                      xp.any(high - 1 > numpy.iinfo(dt).max), xp.any(span > _TOP)])
    empty, under, over, wide = facts.tolist()
    if empty:
        raise ValueError("low >= high")
    if under:
        raise ValueError("low is out of bounds for " + dt.name)
    if over:
        raise ValueError("high is out of bounds for " + dt.name)
    if wide:
        raise NotSupplied("random.randint: ranges wider than 2**62 are not supplied")
    mask = span - 1  # the bits of the largest offset, smeared down: the next power of two - 1
    for shift in (1, 2, 4, 8, 16, 32):
        mask = mask | (mask >> shift)
    drawn = xp.random.randint(0, _TOP, size=shape, dtype=numpy.int64) & mask
    while True:
        outside = drawn >= span
        if not bool(outside.any()):  # host sync: another round where any fell outside
            break
        again = xp.random.randint(0, _TOP, size=shape, dtype=numpy.int64) & mask
        drawn = xp.where(outside, again, drawn)
    return (low + drawn).astype(dt)


# NumPy's name below ``numpy`` -> its device version, taking the array module first
DRAWS = {"random.choice": random_choice, "random.randint": random_randint}
