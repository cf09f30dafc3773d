"""A CuPy error :func:`~cupy_magic.compat.advice.classify` does not know
(``np.percentile(x, 40, method='hazen')`` on the H200: "'hazen' method is not yet
supported. Please use any other method.") is CuPy's
limit when NumPy runs the same call on host copies: told in one line, or run with NumPy
under ``--fallback``; when NumPy fails too, the error is the cell's own and is left as it is.

CuPy's failing function is stood in for by a function that raises the message CuPy gave
(no GPU here); NumPy's side runs for real. The same call on the GPU is in
``test_unknown_cupy_error_is_named_and_falls_back_on_the_gpu``."""

from __future__ import annotations

import linecache

import numpy as np
import pytest

from cupy_magic.compat.advice import CupyLimit, explain_failure
from cupy_magic.compat.calls import Calls
from cupy_magic.compat.record import CompatRecord
from cupy_magic.compat.spec import call_spec


def _calls(fallback: bool = False) -> Calls:
    return Calls(np, CompatRecord("<cell>", "", fallback=fallback), None)


_HAZEN = "'hazen' method is not yet supported. Please use any other method."


def _cupy_refuses(*args, **kwargs):  # CuPy's percentile, or any CuPy function, refusing
    raise ValueError(_HAZEN)


def test_an_unknown_cupy_error_numpy_does_not_raise_is_a_one_line_limit():
    calls = _calls()
    x = np.arange(5.0)
    with pytest.raises(CupyLimit) as info:
        calls.failed(call_spec("", "percentile", False), _cupy_refuses, np.percentile, (x, 40),
                     {"method": "hazen"}, ValueError(_HAZEN))
    text = str(info.value)
    assert text.startswith("np.percentile")
    assert "CuPy has not implemented this use ('hazen' method is not yet supported" in text
    assert "--fallback" in text and "\n" not in text
    assert info.value.kind == "not-implemented"


def test_under_fallback_numpy_runs_it():
    calls = _calls(fallback=True)
    x = np.arange(5.0)
    got = calls.failed(call_spec("", "percentile", False), _cupy_refuses, np.percentile, (x, 40),
                       {"method": "hazen"}, ValueError(_HAZEN))
    assert got == np.percentile(x, 40, method="hazen")
    assert [r.function for r in calls.record.fallbacks] == ["np.percentile"]


def test_an_error_numpy_raises_too_is_the_cells_own():
    calls = _calls()
    exc = ValueError("cannot reshape array of size 5 into shape (2,)")
    with pytest.raises(ValueError) as info:
        calls.failed(call_spec("", "reshape", False), _cupy_refuses, np.reshape,
                     (np.arange(5.0), (2,)), {}, exc)
    assert info.value is exc


def test_calls_with_effects_are_not_tried_on_numpy(tmp_path):
    calls = _calls()
    target = tmp_path / "a.npy"
    exc = ValueError("something CuPy says")
    with pytest.raises(ValueError) as info:
        calls.failed(call_spec("", "save", False), _cupy_refuses, np.save,
                     (str(target), np.arange(3.0)), {}, exc)
    assert info.value is exc and not target.exists()  # np.save was not run to find out


@pytest.mark.parametrize(("error", "what"), [
    (IndexError("unsupported iterator index"), "x.flat[...] with an array index"),
    (NotImplementedError("Sorting non-contiguous array is not supported."),
     "sorting a non-contiguous view in place"),
    (TypeError("'Flags' object does not support item assignment"), "setting x.flags"),
    (TypeError("operand type(s) all returned NotImplemented from __array_ufunc__(<ufunc "
               "'equal'>, '__call__', array([1., 2.]), [1.0, 2.0])"), "an operator between"),
    (TypeError("Unsupported type <class 'numpy.ndarray'>"), "a NumPy array or Python list mixed"),
    (TypeError("Unsupported type <class 'list'>"), "a NumPy array or Python list mixed"),
])
def test_what_device_arrays_do_not_do_is_named_at_the_cells_line(error, what):
    source = "y = 1\nraise error\n"
    linecache.cache["<cell 7>"] = (len(source), None, source.splitlines(True), "<cell 7>")
    cell = compile(source, "<cell 7>", "exec")
    try:
        exec(cell, {"error": error})
    except type(error) as exc:
        limit = explain_failure(exc, "<cell 7>")
    assert limit is not None
    text = str(limit)
    assert text.startswith(f"line 2 `raise error`: CuPy does not support {what}"), text
    assert "instead: " in text and "\n" not in text and limit.line == 2


def test_other_errors_are_left_as_they_are():
    assert explain_failure(IndexError("index 5 is out of bounds"), "<cell 7>") is None
    assert explain_failure(TypeError("unsupported operand type(s) for +"), "<cell 7>") is None
    assert explain_failure(TypeError("Unsupported type <class 'dict'>"), "<cell 7>") is None
