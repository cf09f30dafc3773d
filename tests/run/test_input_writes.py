"""Inputs a cell changes in place through another name: an alias, a view, a function.

A plain cell leaves ``x`` changed after ``y = x; y += 1`` or ``center(x)``; so must a
``%%gpu`` cell (before, only changes through ``x``'s own name came back, the rest were
silently dropped). A read-only input is refused as NumPy refuses the write.
"""

from __future__ import annotations

import numpy as np
import pytest
from IPython.core.error import UsageError

from cupy_magic import backend
from cupy_magic.backend.writes import fingerprint_reference, host_checksum
from cupy_magic.run.errors import CellError

HELPER = "def center(a):\n    a -= a.mean()\n"

CELLS = [
    "y = x\ny += 1",
    "r = x[1:]\nr *= 10",
    "m = x.reshape(2, 3)\nm[0, 0] = -1",
    "t = x.T\nt[-1] = 99",
    "np.ravel(x)[2] = 5",
    "center(x)\ns = x.sum()",
    "def scale(a, k):\n    a *= k\nscale(x, 3)",
    "xs = [x]\nxs[0][:] = 0",
    "y = x[::2]\ny.fill(-0.0)",
    "y = x\ny.shape = (2, 3)",
    "def flat(a):\n    a.shape = (3, 2)\nflat(x)",
    "xs = [x]\nxs[0].shape = (6, 1)",
]


def _host(value):
    return backend.current().to_host(value) if backend.current().is_device_array(value) \
        else np.asarray(value)


def _plain(cell: str, x: np.ndarray) -> np.ndarray:
    ns = {"np": np, "x": x}
    exec(HELPER, ns)
    exec(cell, ns)
    return ns["x"]


@pytest.mark.parametrize("cell", CELLS)
def test_a_change_through_another_name_comes_back_as_in_a_plain_cell(ip, cell):
    x = np.arange(6.0)
    ip.run_cell(HELPER)
    ip.user_ns["x"] = x
    ip.run_cell_magic("gpu", "--quiet", cell)
    want = _plain(cell, np.arange(6.0))
    got = _host(ip.user_ns["x"])
    assert got.tobytes() == want.tobytes(), (got, want)  # -0.0 is not 0.0
    assert got.shape == want.shape
    assert list(x) == list(np.arange(6.0))  # the user's NumPy array itself is left as it was


@pytest.mark.parametrize("cell", ["s = x.sum()", "y = x.copy()\ny += 1", "y = x\nz = y * 2",
                                  "v = x[1:]\nw = v + 1"])
def test_an_input_only_read_stays_the_users_numpy_array(ip, cell):
    x = np.array([0.0, np.nan, -0.0, 1.0, 2.0, 3.0])
    ip.user_ns["x"] = x
    ip.run_cell_magic("gpu", "--quiet", cell)
    assert ip.user_ns["x"] is x


def test_an_input_cast_by_dtype_and_only_read_stays_the_users_array(ip):
    x = np.arange(6.0)
    ip.user_ns["x"] = x
    ip.run_cell_magic("gpu", "--quiet --dtype float32", "s = x.sum()")
    assert ip.user_ns["x"] is x
    ip.run_cell_magic("gpu", "--quiet --dtype float32", "y = x\ny += 1")
    assert _host(ip.user_ns["x"]).tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert _host(ip.user_ns["x"]).dtype == np.float32


def test_a_failing_cell_leaves_the_input_as_it_was_whatever_changed_it(ip):
    x = np.arange(6.0)
    ip.run_cell(HELPER)
    ip.user_ns["x"] = x
    with pytest.raises(ZeroDivisionError):
        ip.run_cell_magic("gpu", "--quiet", "center(x)\ny = x\ny += 1\n1 / 0")
    assert ip.user_ns["x"] is x and list(x) == list(np.arange(6.0))
    assert "y" not in ip.user_ns


@pytest.mark.parametrize(("cell", "numpy_says"), [
    ("x[0] = 7", "assignment destination is read-only"),
    ("y = x\ny += 1", "output array is read-only"),
    ("center(x)", "output array is read-only"),
])
def test_a_read_only_input_is_refused_as_numpy_refuses_the_write(ip, cell, numpy_says):
    x = np.arange(6.0)
    x.flags.writeable = False
    ip.run_cell(HELPER)
    ip.user_ns["x"] = x
    with pytest.raises(ValueError, match=numpy_says):
        _plain(cell, x)
    with pytest.raises((ValueError, UsageError)) as info:
        ip.run_cell_magic("gpu", "--quiet", cell)
    if backend.current().is_gpu:  # CuPy has no read-only arrays: seen after the cell
        assert isinstance(info.value, (CellError, UsageError))
        assert str(info.value) == (
            "the cell changed 'x', which is read-only (x.flags.writeable is False), where "
            "NumPy raises 'ValueError: assignment destination is read-only'; make it "
            "writeable in a plain cell first (x.flags.writeable = True), or change a copy "
            "(x = x.copy())")
    else:  # the CPU fallback's copy is read-only too: NumPy's own error, at the line
        assert numpy_says in str(info.value)
    assert ip.user_ns["x"] is x and list(x) == list(np.arange(6.0))
    assert "y" not in ip.user_ns


def test_a_change_to_the_users_array_through_a_container_is_not_undone(ip):
    """The cell reaches the user's own ``x`` through ``d`` (not a copy: only arrays the cell
    names are copied) and changes it; its copy of ``x`` is unchanged, so ``x`` stays the
    user's array, changed (before the copies were checksummed, comparing the copy with the
    user's array took this for a change of the copy and wrote the stale copy back). The sum
    is read before the change: after it, the cell would read the copy from before, and is
    refused (test_holder_writes)."""
    x = np.zeros(3)
    ip.user_ns.update(x=x, d={"a": x})
    ip.run_cell_magic("gpu", "--quiet", "s = x.sum()\nd['a'][0] = 5")
    assert ip.user_ns["x"] is x and x.tolist() == [5.0, 0.0, 0.0] and float(ip.user_ns["s"]) == 0
    assert ip.user_ns["d"]["a"] is x


def test_the_host_checksum_sees_bytes_order_and_layout() -> None:
    a = np.array([0.0, np.nan, 1.5, 2.0])
    assert host_checksum(a) == host_checksum(a.copy())
    b = a.copy()
    b[0] = -0.0  # == 0.0, other bytes
    assert host_checksum(b) != host_checksum(a)
    assert host_checksum(a[::-1].copy()) != host_checksum(a)
    f = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    g = f.copy(order="F")
    g[2, 3] += 1
    assert host_checksum(f) != host_checksum(g)
    assert host_checksum(np.arange(12.0).reshape(3, 4)[:, ::2]) == \
        host_checksum(np.arange(12.0).reshape(3, 4)[:, ::2].copy())


def test_the_fingerprint_sees_each_word_its_place_and_the_last_bytes() -> None:
    x = np.arange(1000, dtype=np.float64)
    base = fingerprint_reference(x)
    assert fingerprint_reference(x.copy()) == base
    swapped = x.copy()
    swapped[[10, 11]] = swapped[[11, 10]]
    assert fingerprint_reference(swapped) != base  # the same words in other places
    raw = bytearray(x.tobytes() + b"abc")  # 3 bytes after the last whole word
    tail = fingerprint_reference(bytes(raw))
    raw[-1] ^= 1
    assert fingerprint_reference(bytes(raw)) != tail
    assert len({fingerprint_reference(bytes([v])) for v in range(256)}) == 256


@pytest.mark.gpu
@pytest.mark.parametrize("nbytes", [0, 1, 7, 8, 9, 4096, 4099, 3 * 2**20 + 5])
def test_the_device_fingerprint_is_the_reference_sum(nbytes) -> None:
    import cupy as cp

    from cupy_magic.backend.writes import DeviceFingerprints

    host = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    dev = cp.asarray(host)
    prints = DeviceFingerprints(cp, [dev])
    assert int(prints.prints.get()[0]) == (fingerprint_reference(host) if nbytes else 0)
    assert prints.changed() == [False]
    if nbytes:
        dev[nbytes // 2] ^= 1
        assert prints.changed() == [True]


@pytest.mark.gpu
def test_queued_fingerprints_come_back_on_their_stream_without_a_wait() -> None:
    """A batch's watch: fingerprints queued on a stream of its own, the answer copied back
    on that stream (into page-locked words), read after the stream's later work; a change
    queued on the stream between the two is seen, none reads unchanged, and the words go
    back to the spares for the next watch."""
    import cupy as cp

    from cupy_magic.backend import writes

    writes._SPARE.get(cp.cuda.Device().id, []).clear()  # (earlier tests' spares)
    stream = cp.cuda.Stream(non_blocking=True)
    x = cp.arange(3 * 2**20, dtype=cp.float64)
    with stream:  # the first watch is held by the function its queue_changed gives only
        unchanged = writes.DeviceFingerprints(cp, [x], [True], wait=False).queue_changed()
        hit = writes.DeviceFingerprints(cp, [x], [True], wait=False)  # (takes spare words)
        x[2**20 + 7] += 1  # queued on the same stream, after the first fingerprints
        changed = hit.queue_changed()
    words = hit._words
    del hit
    assert changed() == [True] and unchanged() == [False]
    assert int(words[1][0]) == fingerprint_reference(
        (cp.asnumpy(x) - (np.arange(x.size) == 2**20 + 7)).tobytes())
    del changed
    assert any(w is words for w in writes._SPARE[cp.cuda.Device().id])


def test_a_weakly_watched_copy_goes_with_its_last_name_and_then_reads_changed(ip, xp):
    """A watch holds the copies ``weak`` marks weakly (``if c: X = X * 2`` that ran lets
    ``X``'s copy go); one gone by the end reads as changed, one alive as its bytes say."""
    import gc
    import weakref

    be = backend.current()
    kept, dropped, strong = xp.arange(4.0), xp.arange(5.0), xp.arange(6.0)
    gone = weakref.ref(dropped)
    token = be.watch([kept, dropped, strong], [True, True, False])
    del dropped
    gc.collect()
    assert gone() is None, "the watch kept a weakly watched copy alive"
    assert be.changed(token) == [False, True, False]  # read once per watch, as a run does
    token = be.watch([kept], [True])
    kept[0] = 9
    assert be.changed(token) == [True]


@pytest.mark.gpu
def test_a_change_on_a_stream_of_the_cells_own_is_seen(ip, xp):
    if xp is np:
        pytest.skip("the CPU fallback has no streams (cp.cuda is refused there, with the fix)")
    x = np.arange(6.0)
    ip.user_ns["x"] = x
    ip.run_cell_magic("gpu", "--quiet", "s = cp.cuda.Stream(non_blocking=True)\n"
                                        "with s:\n    y = x\n    y += 1\n")
    assert _host(ip.user_ns["x"]).tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


@pytest.mark.parametrize(("cell", "name"), [
    ("y = x\ny += 1", "x"),
    ("def scale(a):\n    a *= 2\nscale(x)\ns = x.sum(axis=1)", "x"),
    ("z = x * 2\nv = w\nv += 1", "w"),  # w: shared by every batch
])
def test_a_batched_run_refuses_a_change_through_another_name(ip, cell, name):
    x, w = np.arange(16.0).reshape(8, 2), np.ones(2)
    ip.run_cell(HELPER)
    ip.user_ns.update(x=x, w=w)
    with pytest.raises(UsageError) as info:
        ip.run_cell_magic("gpu", "--quiet --batch-rows 2", cell)
    assert str(info.value).startswith(
        f"the cell changes {name!r} through another name than its own (an alias, a view or a "
        f"function it is passed to), which a batched run cannot write back; change it through "
        f"its name ({name}[...] = ..., {name} += ...), or run the cell whole (a larger budget, "
        "no --batch) (batch 1 (rows 0:")
    assert ip.user_ns["x"] is x and ip.user_ns["w"] is w
    assert x.tolist() == np.arange(16.0).reshape(8, 2).tolist() and w.tolist() == [1.0, 1.0]
    assert not {"y", "s", "z", "v"} & set(ip.user_ns)


def test_a_batched_run_still_writes_back_a_change_through_the_inputs_own_name(ip):
    x = np.arange(16.0).reshape(8, 2)
    ip.user_ns["x"] = x
    ip.run_cell_magic("gpu", "--quiet --batch-rows 2", "x += 1\ny = x * 2")
    assert _host(ip.user_ns["x"]).tolist() == (np.arange(16.0).reshape(8, 2) + 1).tolist()
    assert _host(ip.user_ns["y"]).tolist() == ((np.arange(16.0).reshape(8, 2) + 1) * 2).tolist()


def test_a_batched_read_only_input_raises_numpy_s_error_or_is_refused(ip):
    x = np.arange(16.0).reshape(8, 2)
    x.flags.writeable = False
    ip.user_ns["x"] = x
    with pytest.raises((ValueError, UsageError)) as info:
        ip.run_cell_magic("gpu", "--quiet --batch-rows 2", "y = x\ny += 1")
    assert ("output array is read-only" in str(info.value) if not backend.current().is_gpu
            else "which is read-only (x.flags.writeable is False)" in str(info.value))
    assert ip.user_ns["x"] is x and "y" not in ip.user_ns


def test_a_read_only_input_the_cell_makes_writeable_may_be_written_as_in_numpy(ip):
    x = np.arange(4.0)
    x.flags.writeable = False
    ip.user_ns["x"] = x
    if backend.current().is_gpu:
        pytest.skip("CuPy arrays have no writeable flag to set (AttributeError, as CuPy)")
    ip.run_cell_magic("gpu", "--quiet", "x.flags.writeable = True\nx[0] = 9")
    assert _host(ip.user_ns["x"]).tolist() == [9.0, 1.0, 2.0, 3.0]
    assert list(x) == [0.0, 1.0, 2.0, 3.0]


def test_an_input_of_strings_is_watched_by_a_copy(ip):
    if backend.current().is_gpu:
        pytest.skip("CuPy holds no strings: such an input is refused before the run")
    x = np.array(["a", "bb", "ccc"], dtype=np.dtypes.StringDType())
    ip.user_ns["x"] = x
    ip.run_cell_magic("gpu", "--quiet", "t = [x]")  # checksums cannot read references
    assert ip.user_ns["x"] is x
    ip.run_cell_magic("gpu", "--quiet", "y = x\ny[0] = 'z'")
    assert list(ip.user_ns["x"]) == ["z", "bb", "ccc"] and list(x) == ["a", "bb", "ccc"]


def test_a_read_only_input_cast_by_dtype_stays_read_only(ip):
    x = np.arange(4.0)
    x.flags.writeable = False
    ip.user_ns["x"] = x
    with pytest.raises((ValueError, UsageError), match="read-only"):
        ip.run_cell_magic("gpu", "--quiet --dtype float32", "y = x\ny += 1")
    assert ip.user_ns["x"] is x and "y" not in ip.user_ns


def test_a_failing_cell_lets_its_copies_go(ip):
    import gc

    ip.user_ns["x"] = np.arange(6.0)
    seen: list = []
    ip.user_ns["seen"] = seen
    with pytest.raises(ZeroDivisionError):
        ip.run_cell_magic("gpu", "--quiet", "t = [x]\nseen.append(__import__('weakref').ref(x))"
                                            "\n1 / 0")
    ip.events.trigger("post_execute")  # the shell shows the traceback, then frees the frames
    gc.collect()
    assert seen and seen[0]() is None  # the watch no longer holds the copy


def test_a_batched_failing_cell_gives_no_unawaited_coroutine_warning(ip):
    import warnings

    ip.user_ns["x"] = np.arange(16.0).reshape(8, 2)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(ZeroDivisionError):
            ip.run_cell_magic("gpu", "--quiet --batch-rows 2",
                              "async def co():\n    return 1\nc = co()\ny = x * 2\n1 / 0")
    assert [str(w.message) for w in seen if "never awaited" in str(w.message)] == []


@pytest.mark.parametrize("cell, want", [("r = z0 + 1", 5.0), ("z0 += 1", 6.0),
                                        ("y = z0\ny += 2", 7.0), ("q = z0", 5.0)])
def test_a_0d_input_is_copied_read_and_changed_as_in_a_plain_cell(ip, cell, want):
    """A 0-d array (``np.array(5.0)``: no rows) is an input like any other."""
    z0 = np.array(5.0)
    ip.user_ns["z0"] = z0
    ip.run_cell_magic("gpu", "--quiet", cell)
    assert float(_host(ip.user_ns["z0"])) == want
    assert float(z0) == 5.0  # the user's array is left as it was
    for name, plain in (("r", 6.0), ("q", 5.0)):
        if name in ip.user_ns:
            assert float(_host(ip.user_ns[name])) == plain
            ip.user_ns.pop(name)
