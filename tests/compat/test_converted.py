"""What a call CuPy refused for a Python value is tried with next (``Calls.failed``): the
lists inside a sequence of arrays, numbers next to arrays as the 0-d arrays NumPy's asarray
makes of them, a list of strings under ``--fallback``, and the probe's size of a call whose
keyword is a type. CuPy's refusing function is stood in for by one raising CuPy's message (no
GPU here), as in ``test_probe.py``; the same calls run for real on the GPU in
``test_numpy_cells.py``."""

from __future__ import annotations

import numpy as np
import pytest

from cupy_magic.compat.advice import CupyLimit
from cupy_magic.compat.calls import Calls
from cupy_magic.compat.record import CompatRecord
from cupy_magic.compat.spec import call_spec


def _calls(fallback: bool = False) -> Calls:
    return Calls(np, CompatRecord("<cell>", "", fallback=fallback), np)


def _arrays_only(func):
    """``func`` as CuPy takes it: arrays, never a Python list or number, as its positional
    arguments or their items (options such as ``axis=0`` stay Python values)."""
    def cupy_like(*args, **kwargs):
        for value in args:
            items = value if isinstance(value, tuple) else (value,)
            for item in items:
                if isinstance(item, (list, int, float)) and not isinstance(item, bool):
                    raise TypeError(f"Unsupported type {type(item)}")
        return func(*args, **kwargs)
    return cupy_like


def test_lists_inside_a_sequence_of_arrays_become_arrays():
    calls = _calls()
    x, y = [-2.1, -1, 4.3], [3, 1.1, 0.12]
    spec = call_spec("", "stack", True)
    assert spec.sequence_positions == (0,)
    got = calls.failed(spec, _arrays_only(np.stack), np.stack, ((x, y),), {"axis": 0},
                       TypeError("Unsupported type <class 'list'>"))
    np.testing.assert_array_equal(got, np.stack((x, y), axis=0))
    assert [r.counts for r in calls.record.conversions] == [{"list": 2}]  # counted, and
    # axis=0 is left a Python int


def test_numbers_in_a_tuple_of_indices_become_0d_arrays():
    calls = _calls()
    spec = call_spec("", "ravel_multi_index", True)

    def cupy_like(multi_index, dims):  # dims stay Python ints, the indices must be arrays
        if not all(isinstance(d, int) for d in dims):
            raise TypeError("dims must be ints")
        if not all(isinstance(i, np.ndarray) for i in multi_index):
            raise TypeError("Unsupported type <class 'int'>")
        return np.ravel_multi_index(multi_index, dims)

    got = calls.failed(spec, cupy_like, np.ravel_multi_index, ((3, 1, 4, 1), (6, 7, 8, 9)), {},
                       TypeError("Unsupported type <class 'int'>"))
    assert int(got) == np.ravel_multi_index((3, 1, 4, 1), (6, 7, 8, 9))


@pytest.mark.parametrize(("array", "number"), [(np.eye(2), 7), (np.eye(2, dtype=np.float32), 2),
                                               (np.arange(3), 2.5)])
def test_a_number_next_to_an_array_gives_numpys_dtype(array, number):
    calls = _calls()
    spec = call_spec("", "inner", True)
    got = calls.failed(spec, _arrays_only(np.inner), np.inner, (array, number), {},
                       TypeError("Unsupported type <class 'int'>"))
    want = np.inner(array, number)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_a_list_of_strings_is_named_or_run_by_numpy_under_fallback():
    spec = call_spec("", "lexsort", True)
    keys = (("b", "a", "c"), ("x", "x", "y"))
    exc = TypeError("Unsupported type <class 'tuple'>")
    with pytest.raises(CupyLimit, match="CuPy has no dtype <U1"):
        _calls().failed(spec, _arrays_only(np.lexsort), np.lexsort, (keys,), {}, exc)
    calls = _calls(fallback=True)
    got = calls.failed(spec, _arrays_only(np.lexsort), np.lexsort, (keys,), {}, exc)
    np.testing.assert_array_equal(got, np.lexsort(keys))
    assert [r.function for r in calls.record.fallbacks] == ["np.lexsort"]


def test_a_type_among_the_arguments_does_not_break_the_probe():
    # np.float32 has an `nbytes` too (a descriptor): the probe sized the call with it
    def cupy_require(a, dtype=None, requirements=None):
        raise ValueError('Incorrect flag "A" in requirements')

    spec = call_spec("", "require", True)
    with pytest.raises(CupyLimit, match="Incorrect flag"):
        _calls().failed(spec, cupy_require, np.require, (np.arange(3),),
                        {"dtype": np.float32, "requirements": ["A", "W"]},
                        ValueError('Incorrect flag "A" in requirements'))
