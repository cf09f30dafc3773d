"""NumPy code under %%gpu: lists moved and counted, CuPy's limits told in one line, the
fallback's rows, the session setting and the configuration (issue 18)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import cell_error as _error

import cupy_magic
from cupy_magic.compat.advice import WAYS, classify, limit_message
from cupy_magic.compat.proxy import array_module
from cupy_magic.compat.record import CompatRecord

cupy = pytest.importorskip("cupy")


def test_lists_are_converted_and_counted_per_line(ip):
    ip.user_ns["x"] = np.arange(8.0)
    ip.run_cell_magic("gpu", "--to-host", "a = np.mean([1, 2, 3])\n"
                      "b = np.add([1, 2], (3, 4))\nc = np.maximum(x, [0.0] * 8)\n")
    assert ip.user_ns["a"] == 2.0
    assert ip.user_ns["b"].tolist() == [4, 6]
    rows = {r.line: r for r in cupy_magic.last_report().conversions}
    assert rows[1].counts == {"list": 1} and rows[1].functions == ("np.mean",)
    assert rows[2].counts == {"list": 1, "tuple": 1}
    assert rows[3].counts == {"list": 1}
    assert "2 lists" not in rows[2].describe() and "1 list, 1 tuple moved to the device" in \
        rows[2].describe()
    assert "list 1 list, 1 tuple moved" in str(cupy_magic.last_report())


def test_shapes_and_axes_are_not_converted(ip):
    ip.run_cell_magic("gpu", "--to-host", "z = np.zeros((2, 3)).sum(axis=(0, 1))\n"
                      "w = np.transpose(np.ones((2, 3)), (1, 0))\n")
    assert ip.user_ns["w"].shape == (3, 2)
    assert cupy_magic.last_report().conversions == []


def test_missing_name_is_one_line_with_the_cupy_way(ip):
    ip.user_ns["x"] = np.arange(4.0)
    message = _error(ip, "y = x * 2\nfor v in np.nditer(x):\n    pass\n")
    assert message.startswith("np.nditer at line 2 `for v in np.nditer(x):`: CuPy has no nditer")
    assert WAYS["nditer"] in message and "--fallback" in message and "\n" not in message
    assert "y" not in ip.user_ns  # the cell is a transaction


def test_missing_module_and_type(ip):
    assert "CuPy has no emath" in _error(ip, "y = np.emath.sqrt(-1)")
    assert "np.datetime64 at line 1" in _error(ip, "d = np.datetime64('2005-02-25')")


def test_dtype_cupy_has_not(ip):
    message = _error(ip, "s = np.array(['a', 'bc'])")
    assert message.startswith("np.array at line 1") and "CuPy has no dtype <U2" in message
    assert "CuPy has no dtype <U3" in _error(ip, "s = np.zeros(3, dtype='U3')")


def test_option_cupy_has_not(ip):
    ip.user_ns["x"] = np.arange(6.0)
    message = _error(ip, "s = np.nanmean(x, where=x > 2)")
    assert message.startswith("np.nanmean at line 1")
    assert "CuPy's nanmean has no where= option" in message
    # NumPy's default for an option CuPy lacks changes nothing: it runs
    ip.run_cell_magic("gpu", "--to-host", "s = np.sort(x[::-1], order=None)")
    assert ip.user_ns["s"].tolist() == sorted(ip.user_ns["x"].tolist())


def test_fallback_rows_bytes_calls_and_loop(ip):
    ip.user_ns["x"] = np.arange(8.0)
    ip.run_cell_magic("gpu", "--fallback --to-host",
                      "t = 0.0\nfor i in range(3):\n    for v in np.nditer(x):\n"
                      "        t += float(v)\ns = np.nanmean(x, where=x > 2)\n"
                      "r = np.emath.sqrt(np.array([-1.0, 4.0]))\n")
    assert ip.user_ns["t"] == 3 * 28.0 and ip.user_ns["s"] == (3 + 4 + 5 + 6 + 7) / 5
    assert ip.user_ns["r"].tolist() == [1j, 2 + 0j]
    rows = {r.function: r for r in cupy_magic.last_report().fallbacks}
    nditer = rows["np.nditer"]
    assert (nditer.line, nditer.calls, nditer.to_host_bytes) == (3, 3, 3 * 64)
    assert nditer.looped and "inside a loop" in nditer.describe()
    summed = rows["np.nanmean"]
    assert (summed.calls, summed.to_host_bytes) == (1, 64 + 8)  # x and the boolean mask
    assert summed.to_device_bytes == 0 and "where=" in summed.why  # a NumPy scalar stays
    assert rows["np.emath.sqrt"].to_device_bytes == 32
    assert "fallback np.nditer on line 3" in str(cupy_magic.last_report())


def test_fallback_copies_back_out_and_refuses_hidden_writes(ip):
    ip.user_ns["x"] = np.arange(6.0)
    ip.run_cell_magic("gpu", "--fallback --to-host",
                      "o = np.zeros(6)\nnp.sum(x.reshape(2, 3), axis=0, out=o[:3], where=True)\n")
    assert ip.user_ns["o"].tolist() == [3.0, 5.0, 7.0, 0.0, 0.0, 0.0]


def test_session_setting_and_config(ip):
    ip.user_ns["x"] = np.arange(4.0)
    assert ip.run_line_magic("gpu_fallback", "") == "off"
    assert ip.run_line_magic("gpu_fallback", "on") == "on"
    assert cupy_magic.set_fallback() is True
    ip.run_cell_magic("gpu", "--to-host", "n = [int(v) for v in np.nditer(x)]")
    assert ip.user_ns["n"] == [0, 1, 2, 3]
    assert cupy_magic.set_fallback("off") is False
    assert "CuPy has no nditer" in _error(ip, "n = list(np.nditer(x))")
    ip.run_line_magic("config", "CupyMagic.fallback = True")
    ip.run_cell_magic("gpu", "--to-host", "n = list(np.ndenumerate(x))")
    assert cupy_magic.last_report().fallbacks[0].function == "np.ndenumerate"
    ip.run_line_magic("config", "CupyMagic.fallback = False")
    with pytest.raises(ValueError, match="neither on nor off"):
        cupy_magic.set_fallback("maybe")
    from IPython.core.error import UsageError
    with pytest.raises(UsageError, match="takes on or off, got 'yes'"):
        ip.run_line_magic("gpu_fallback", "yes")


def test_batched_cell_with_fallback(ip):
    ip.user_ns["x"] = np.arange(40.0).reshape(20, 2)
    ip.run_cell_magic("gpu", "--batch --batch-rows 5 --fallback",
                      "y = np.emath.sqrt(x + 1)\n")
    assert np.allclose(ip.user_ns["y"], np.sqrt(ip.user_ns["x"] + 1))
    (row,) = cupy_magic.last_report().fallbacks
    assert row.calls >= 4 and row.to_host_bytes == row.to_device_bytes >= 40 * 8


def test_attributes_pass_through(ip):
    ip.run_cell_magic("gpu", "--to-host", "f = np.float32\np = np.pi\n"
                      "n = np.linalg.norm(np.ones(4))\nk = np.random.default_rng(0) is not None\n"
                      "r = np.add.reduce(np.arange(4))\n")
    assert ip.user_ns["f"] is np.float32 and ip.user_ns["p"] == np.pi
    assert ip.user_ns["n"] == 2.0 and ip.user_ns["r"] == 6


# --- without a device: CuPy's own namespace, and the message builder -----------------------
def test_cupy_namespace_questions_without_the_device():
    record = CompatRecord("<c>", "")
    module = array_module(cupy, record)
    assert module.float32 is np.float32 and module.pi == np.pi
    for name in ("nditer", "ndenumerate", "nested_iters", "emath", "datetime64", "void"):
        with pytest.raises(AttributeError, match=f"CuPy has no {name}"):
            getattr(module, name)
    with pytest.raises(NotImplementedError, match="CuPy's nanmean has no where= option"):
        module.nanmean(None, where=False)
    with pytest.raises(AttributeError, match="has no attribute 'not_a_name'"):
        module.not_a_name  # noqa: B018


@pytest.mark.parametrize(("error", "kind"), [
    (TypeError("Implicit conversion to a NumPy array is not allowed. Please use `.get()`"),
     ("device-array", "")),
    (ValueError("Unsupported dtype <U32"), ("dtype", "<U32")),
    (TypeError("can_cast() does not support Python ints"), ("argument", "Python ints")),
    (TypeError("Unsupported type <class 'list'>"), ("argument", "<class 'list'>")),
    (NotImplementedError("Reduction for logical_and is not implemented"),
     ("not-implemented", "Reduction for logical_and is not implemented")),
    (TypeError("f() got an unexpected keyword argument 'axis'"), ("option", "axis=")),
    (TypeError("only 0-dimensional arrays can be converted to Python scalars"),
     ("not-implemented", "only 0-dimensional arrays can be converted to Python scalars")),
    (ValueError("operands could not be broadcast together"), None),
])
def test_classify_reads_cupys_refusals(error, kind):
    assert classify(error) == kind


def test_limit_message_names_function_line_why_and_fix():
    text, fix = limit_message("np.logical_and.reduce", 4, "m = np.logical_and.reduce(x)",
                              "not-implemented", "no reduce for logical_and")
    assert text == ("np.logical_and.reduce at line 4 `m = np.logical_and.reduce(x)`: CuPy has "
                    "not implemented this use (no reduce for logical_and); instead: "
                    f"{WAYS['logical_and.reduce']}, or run the cell with %%gpu --fallback "
                    "(NumPy on the host for this call)")
    assert fix == WAYS["logical_and.reduce"]
    unknown, _ = limit_message("np.foo", None, "", "missing", fallback=False)
    assert unknown == ("np.foo (called outside the cell's lines): CuPy has no foo; no CuPy "
                       "counterpart is known")


def test_a_device_scalar_where_python_needs_an_int_is_one_line(ip):
    """On the GPU `range(np.argmax(x))` fails inside CuPy's scalar with this TypeError (a
    CuPy 0-d array is no Python int); the cell stops with one line naming the fix. The CPU
    fallback's NumPy scalars are ints, so the error is raised here as CuPy raises it."""
    msg = _error(ip, "n = 3\nraise TypeError(\"'ndarray' object cannot be interpreted as an "
                     "integer\")\n")
    assert msg.startswith("line 2 `raise TypeError(") and "\n" not in msg
    assert msg.endswith("a device array was used where Python needs an int (a size, a range, "
                        "an index): a CuPy scalar is not one; write int(x), which copies it to "
                        "the host (a host sync), or keep sizes as Python ints")
