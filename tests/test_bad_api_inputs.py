"""Bad input to the Python API the magics stand in front of (``cupy_magic.__all__``): each
answer is an exception of a fitting type whose message is one line naming the value and the
fix, raised before anything changes (the namespace, the budget, the panel's sampler)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cupy_magic as cm
from cupy_magic.monitor import sampler as monitor
from cupy_magic.run.errors import CellError
from cupy_magic.units import SizeError

# After the last "; " or ": " a message says what to do: an example or an instruction.
FIX = re.compile(r"[;:] .*(e\.g\.|\buse\b|\btry\b|\bgive\b|%|choose)")
CELL = "y = x + 1\n"


def run(**options):
    return lambda ns: cm.run_cell(CELL, ns, **options)


def case(call, value: str, errors, fragment: str = ""):
    return pytest.param(call, value, errors, fragment, id=value[:50])


BAD_CALLS = [
    # run_cell: the source, the namespace and each option, checked before the cell runs; a
    # bad option value is a CellError whatever its kind, TypeError is for what is no option
    case(lambda ns: cm.run_cell(123, ns), "123", TypeError, "string"),
    case(lambda ns: cm.run_cell(b"y = x", ns), "b'y = x'", TypeError, "string"),
    case(lambda ns: cm.run_cell("y = 1", None), "None", TypeError, "dict"),
    case(lambda ns: cm.run_cell("y = 1", [ns]), "[{", TypeError, "dict"),
    case(run(toHost="y"), "'toHost'", TypeError, "did you mean to_host?"),
    case(run(to_host="yy"), "yy", CellError, "never assigns"),
    case(run(to_host="y,1bad"), "'y,1bad'", CellError, "--to-host y,total"),
    case(run(to_host=3), "to_host=3", CellError, "to_host=['y']"),
    case(run(to_host=None), "to_host=None", CellError),
    case(run(to_host=[1]), "to_host=[1]", CellError),
    case(run(dtype=""), "''", CellError, "--dtype float32"),
    case(run(warmup="no"), "warmup='no'", CellError, "warmup=True"),
    case(run(panel="no"), "panel='no'", CellError),
    case(run(fallback="off"), "fallback='off'", CellError, "fallback=True"),
    case(run(fallback=0), "fallback=0", CellError),
    case(run(syncs=""), "''", CellError, "warn, error or off"),
    case(run(batch=True), "batch=True", CellError, "BatchOptions"),
    case(run(batch="x"), "batch='x'", CellError, "BatchOptions"),
    case(run(filename=3), "filename=3", CellError),
    case(run(label=3), "label=3", CellError),
    case(run(compiler="x"), "compiler='x'", CellError, "codeop.Compile"),
    case(run(lines="yes"), "lines='yes'", CellError),
    case(run(cluster="yes"), "cluster='yes'", CellError),
    case(run(shows="every"), "shows='every'", CellError, "shows='last_expr'"),
    # a value whose repr spans lines (an array) is named in one short line, never crashes
    case(run(batch=np.zeros((50, 50))), "batch=array([[0., 0.", CellError, "BatchOptions"),
    case(run(syncs=np.zeros((50, 50))), "--syncs array(", CellError, "warn, error or off"),
    case(run(label=np.zeros((50, 50))), "label=array(", CellError),
    case(lambda ns: cm.set_sync_mode("loud"), "'loud'", ValueError, "%gpu_syncs warn"),
    case(lambda ns: cm.set_sync_mode(np.zeros(3)), "array(", ValueError, "warn, error"),
    case(lambda ns: cm.vram_free(np.zeros((50, 50))), "array(", TypeError, "vram_free('y"),
    # BatchOptions: what --batch, --batch-rows, --batch-bytes, --streams, --reduce refuse
    case(lambda ns: cm.BatchOptions(nbytes=-5), "-5", CellError, "at least 1"),
    case(lambda ns: cm.BatchOptions(nbytes=0), "0", CellError, "--batch-bytes 512MB"),
    case(lambda ns: cm.BatchOptions(nbytes="lots"), "'lots'", CellError, "nbytes='512MB'"),
    case(lambda ns: cm.BatchOptions(rows=1.5), "1.5", CellError, "whole number"),
    case(lambda ns: cm.BatchOptions(rows="10"), "'10'", CellError, "whole number"),
    case(lambda ns: cm.BatchOptions(rows=True), "True", CellError, "whole number"),
    case(lambda ns: cm.BatchOptions(streams=True), "True", CellError, "whole number"),
    case(lambda ns: cm.BatchOptions(streams=2.0), "2.0", CellError, "whole number"),
    case(lambda ns: cm.BatchOptions(names=(1,)), "(1,)", CellError, "--batch x,y"),
    case(lambda ns: cm.BatchOptions(names=()), "()", CellError, "--batch x,y"),
    case(lambda ns: cm.BatchOptions(names=5), "5", CellError, "--batch x,y"),
    case(lambda ns: cm.BatchOptions(reduce=["t"]), "['t']", CellError, "reduce={"),
    case(lambda ns: cm.BatchOptions(reduce={"1t": "sum"}), "'1t'", CellError, "total=sum"),
    case(lambda ns: cm.BatchOptions(forced="no"), "forced='no'", CellError),
    case(lambda ns: cm.BatchOptions(timeline="no"), "timeline='no'", CellError),
    # estimate: a tuple shape is checked as a text shape is
    case(lambda ns: cm.estimate((-1, 3)), "(-1, 3)", SizeError, "negative"),
    case(lambda ns: cm.estimate((1.5, 3)), "(1.5, 3)", SizeError, "whole numbers"),
    case(lambda ns: cm.estimate(("a",)), "('a',)", SizeError, "whole numbers"),
    case(lambda ns: cm.estimate((float("nan"),)), "(nan,)", SizeError, "whole numbers"),
    case(lambda ns: cm.estimate(None), "None", SizeError, "whole numbers"),
    case(lambda ns: cm.estimate((True, 3)), "(True, 3)", SizeError, "whole numbers"),
    case(lambda ns: cm.estimate((10**30, 10**30)), "(10000000", SizeError, "more elements"),
    # the panel: its interval, device and flag, refused before the shared sampler changes
    case(lambda ns: cm.show_panel(interval=0, text=True), "got 0", ValueError, "0.05 and 3600"),
    case(lambda ns: cm.show_panel(interval=True, text=True), "True", ValueError),
    case(lambda ns: cm.show_panel(device="a", text=True), "'a'", ValueError, "choose one of"),
    case(lambda ns: cm.show_panel(text="no"), "text='no'", ValueError),
    case(lambda ns: cm.panel_summary(99), "99", ValueError, "choose one of"),
    case(lambda ns: cm.panel_summary(-1), "-1", ValueError, "choose one of"),
    # the budget's device, the holders' namespace and names
    case(lambda ns: cm.set_budget("8GB", device="0"), "'0'", ValueError, "device=0"),
    case(lambda ns: cm.budget_status(device=1.0), "1.0", ValueError, "device=0"),
    case(lambda ns: cm.vram_free(3, ns), "3", TypeError, "vram_free('y, Out')"),
    case(lambda ns: cm.vram_free(None, ns), "None", TypeError),
    case(lambda ns: cm.vram_free("x", 5), "5", TypeError, "globals()"),
    case(lambda ns: cm.vram_holders([]), "[]", TypeError, "globals()"),
]


@pytest.mark.parametrize(("call", "value", "errors", "fragment"), BAD_CALLS)
def test_bad_call_is_a_one_line_error_naming_the_value_and_the_fix(
        ip, call, value, errors, fragment):
    ns = {"np": np, "x": np.arange(50.0)}
    budget = cm.budget_status().budget
    before = monitor.shared_sampler() and monitor.shared_sampler().interval
    with pytest.raises(errors) as info:
        call(ns)
    msg = str(info.value)
    assert msg and "\n" not in msg
    assert value in msg
    assert fragment in msg
    assert FIX.search(msg), f"no fix in {msg!r}"
    assert set(ns) == {"np", "x"}
    assert cm.budget_status().budget == budget
    assert (monitor.shared_sampler() and monitor.shared_sampler().interval) == before


@pytest.mark.parametrize("target, options, value, error", [
    (42, {}, "42", TypeError),
    ("lcoal", {}, "'lcoal'", ValueError),
    ("local", {"n_workers": 0}, "0", ValueError),
    ("local", {"n_workers": -1}, "-1", ValueError),
    ("local", {"n_workers": 1.5}, "1.5", ValueError),
    ("local", {"n_workers": "2"}, "'2'", TypeError),
    ("local", {"n_workers": True}, "True", TypeError),
    ("tcp://127.0.0.1:1", {"timeout": -1}, "-1", ValueError),
    ("tcp://127.0.0.1:1", {"timeout": float("nan")}, "nan", ValueError),
    ("tcp://127.0.0.1:1", {"timeout": "a"}, "'a'", TypeError),
    # an address brings its workers
    ("tcp://127.0.0.1:1", {"n_workers": 2}, "n_workers=2", ValueError),
    ("off", {"n_workers": 2}, "n_workers=2", ValueError),
    ("show", {"n_workers": 2}, "n_workers=2", ValueError),  # %gpu_cluster show --workers 2
    ("local", {"timeout": 5}, "timeout=5", ValueError),  # a timeout is for joining an address
    (np.zeros((50, 50)), {}, "use_cluster(array(", TypeError),
    # an address without its scheme: named as one, with the form it needs, timeout or not
    ("127.0.0.1:1", {}, "tcp://127.0.0.1:1", ValueError),
    ("127.0.0.1:1", {"timeout": 2}, "tcp://127.0.0.1:1", ValueError),
    ("[::1]:8786", {"timeout": 2}, "tcp://[::1]:8786", ValueError),
])
def test_bad_cluster_call_is_refused_before_anything_starts_or_closes(
        ip, target, options, value, error):
    """A bad value is a ValueError and a bad type a TypeError, as the package's other
    functions raise them; both are ClusterErrors, which the magic turns into a UsageError."""
    from cupy_magic.cluster.connect import ClusterError, client

    kept = client()
    with pytest.raises(error) as info:
        cm.use_cluster(target, **options)
    msg = str(info.value)
    assert isinstance(info.value, ClusterError)
    assert "\n" not in msg and value in msg and FIX.search(msg)
    assert "is for joining a scheduler at an address" not in msg or "timeout=5" in msg
    assert client() is kept


GOOD_CALLS = [
    lambda ns: cm.run_cell(CELL, ns, to_host="y"),
    lambda ns: cm.run_cell(CELL, ns, to_host="*"),
    lambda ns: cm.run_cell(CELL, ns, to_host=("y",)),
    lambda ns: cm.run_cell(CELL, ns, batch=cm.BatchOptions(names="x", rows=np.int64(7))),
    lambda ns: cm.run_cell(CELL, ns, batch=cm.BatchOptions(names=["x"], forced=True)),
    lambda ns: cm.run_cell(CELL, ns, syncs=None, fallback=None),
    lambda ns: cm.run_cell(CELL, ns, batch=cm.BatchOptions(nbytes="512MB", forced=True)),
    lambda ns: cm.run_cell(CELL, ns, dtype=np.float32),
]


@pytest.mark.parametrize("call", GOOD_CALLS)
def test_good_calls_still_run(ip, call):
    ns = {"np": np, "x": np.arange(50.0)}
    call(ns)
    y = ns["y"]  # a CuPy array where the call kept it on the device
    np.testing.assert_array_equal(getattr(y, "get", lambda: y)(), np.arange(50.0) + 1)


def test_estimate_takes_a_list_or_one_length():
    assert cm.estimate([10, 10], "float32").nbytes == 400
    assert cm.estimate(np.int64(10)).shape == (10,)
    assert cm.estimate(5).nbytes == 40
    assert cm.estimate(np.array([100, 100])).shape == (100, 100)  # an array's shape, as before
    assert cm.estimate(range(1, 3)).shape == (1, 2)


def test_numpy_integers_are_whole_numbers_everywhere(ip, capsys):
    """What NumPy gives (``a.shape[0] // 2``, ``np.int64``) is accepted wherever an int is."""
    from cupy_magic.cluster.connect import _check

    assert "pool:" in cm.panel_summary(np.int64(0))  # refused as "not visible" before
    cm.show_panel(device=np.int64(0), text=True)
    assert cm.set_budget("1GB", device=np.int64(0)).budget_bytes == 10**9
    _check(np.int64(2), np.int64(5))  # no error: a whole count, a number of seconds
    _check(None, np.float32(5))
    ns = {"np": np, "b": 1}
    cm.run_cell("a = np.zeros(3)", ns)  # a device array (host RAM on the CPU fallback)
    cm.vram_free({"a": 0}.keys(), namespace=ns)  # any iterable of names
    assert "a" not in ns and ns["b"] == 1


def test_show_panel_interval_is_kept_when_valid(ip, capsys):
    cm.show_panel(interval=2, text=True)
    assert monitor.shared_sampler().interval == 2.0


def test_batch_names_without_forced_on_a_cell_that_ran_whole_are_named_in_a_note(ip):
    ns = {"np": np, "x": np.arange(50.0)}
    cm.run_cell(CELL, ns, batch=cm.BatchOptions(names=("x",)))
    notes = cm.last_report().notes
    assert any("BatchOptions(names=('x',)) without forced=True: for batched runs only" in n
               for n in notes), notes
