"""A cell that may rebind an input and need not: where it did not, the user's ``X`` is left
as it is, as a plain cell leaves it (``CellPlan.may_keep``, run/inputwrites.py).

``if c: X = X * 2`` with ``c`` false, then ``L[0][:] = -1`` (the user's array changed through
the host): a plain cell leaves ``X`` the same object as ``L[0]``, all -1. The run bound ``X``
to its device copy, or under ``--to-host`` wrote the copy over the user's array, so the old
values came back (session 26's note, "found broken").
"""

from __future__ import annotations

import numpy as np
import pytest
from IPython.core.error import UsageError

import cupy_magic

MAY_REBIND = [
    "if c:\n    X = X * 2\nL[0][:] = -1",
    "for i in range(n):\n    X = X + i\nL[0][:] = -1",
    "X = X\nL[0][:] = -1",
    "Y = X\nX = Y\nL[0][:] = -1",
    "X = np.asarray(X)\nL[0][:] = -1",
    "X = X * 2 if c else X\nL[0][:] = -1",
    "def f():\n    global X\n    X = X * 2\nif c:\n    f()\nL[0][:] = -1",
    "try:\n    if c:\n        X = X[[2, 1, 0]]\nexcept IndexError:\n    pass\nL[0][:] = -1",
    "if c:\n    X += 1\nL[0][:] = -1",  # in place: under --to-host fixed before, not on device
]


def _plain_and_gpu(ip, body: str, setup, mode: str) -> tuple[dict, dict, dict]:
    """``body`` run by ``exec`` over ``setup()`` and as a ``%%gpu`` cell (``mode``) over
    another ``setup()``: the plain namespace, the cell's before it ran, and the shell's."""
    plain = setup()
    exec(body, plain)
    ns = setup()
    ip.user_ns.update(ns)
    ip.run_cell_magic("gpu", mode, body)
    return plain, ns, ip.user_ns


def _host(value):
    """``value`` on the host (a device array copied back)."""
    return value.get() if hasattr(value, "get") and not isinstance(value, np.ndarray) \
        else np.asarray(value)


@pytest.mark.parametrize("mode", ["--quiet", "--quiet --to-host"])
@pytest.mark.parametrize(("body", "made"), [
    (body, made) for body in MAY_REBIND for made in (False, True)
    # made, `X += 1` with the host's change is a change on both sides in one cell: the
    # copy's is written last (README; tests/run/test_homes.py)
    if not (made and "+=" in body)])
def test_an_input_the_cell_may_rebind_is_left_as_the_users_where_it_was_not(
        ip, body, mode, made):
    if body.startswith("Y = X\n") and "--to-host" not in mode:
        pytest.skip("a device run would commit Y as the copy from before the change: "
                    "refused (tests/run/test_holder_writes.py)")
    """The user's ``X`` and ``L[0]`` after the cell are those of a plain cell (``exec``):
    the same object and values where the rebinding did not run (``c`` false, a loop of no
    turns, ``X = X``, ``X = np.asarray(X)``), a new array where it did."""
    def setup():
        X = np.arange(12.0).reshape(3, 4)
        return {"np": np, "X": X, "L": [X], "c": made, "n": 2 if made else 0}

    plain, ns, got = _plain_and_gpu(ip, body, setup, mode)
    assert got["L"][0] is ns["X"]
    np.testing.assert_array_equal(got["L"][0], plain["L"][0])  # the host's change kept
    np.testing.assert_array_equal(_host(got["X"]), plain["X"])
    if plain["X"] is plain["L"][0]:
        assert got["X"] is ns["X"], "X is no longer the user's array"
    else:  # rebound: a new array, on the device unless --to-host
        assert got["X"] is not ns["X"]
        assert isinstance(got["X"], np.ndarray) == ("--to-host" in mode or not ip_on_gpu())


def ip_on_gpu() -> bool:
    from cupy_magic import backend

    return backend.current().is_gpu


def test_a_rebinding_that_ran_lets_the_copy_go(ip):
    """The copy of an input the cell may rebind is watched, not held: after ``X = X * 2``
    ran under an ``if``, the copy goes as it did unwatched, so the peak is two arrays' worth
    (the copy and ``X * 2``, then ``X * 2`` and ``Y``), not three."""
    X = np.ones((1024, 1024))  # 8 MiB
    ip.user_ns.update(X=X, c=True)
    ip.run_cell_magic("gpu", "--quiet", "if c:\n    X = X * 2\nY = X * 3\ndel Y")
    peak = cupy_magic.last_report().peak_pool_bytes
    assert 2 * X.nbytes <= peak < 2.5 * X.nbytes, peak / X.nbytes


@pytest.mark.parametrize("mode", ["--quiet", "--quiet --to-host"])
@pytest.mark.parametrize("made", [False, True])
def test_the_shown_value_of_an_input_left_as_the_users_is_the_users(ip, mode, made):
    """``if c: X = X * 2`` then ``L[0][:] = -1`` and ``X`` last: a plain cell shows the
    user's array, all -1 (or the new array where ``c``); it showed the stale copy."""
    body = "if c:\n    X = X * 2\nL[0][:] = -1\nX"
    X = np.arange(4.0)
    ip.user_ns.update(X=X, L=[X], c=made)
    shown = ip.run_cell_magic("gpu", mode, body)
    if made:
        np.testing.assert_array_equal(_host(shown), np.arange(4.0) * 2)
    else:
        assert shown is X and X.tolist() == [-1.0] * 4


@pytest.mark.parametrize("mode", ["--quiet", "--quiet --to-host"])
def test_a_group_whose_changed_name_was_rebound_leaves_the_others_as_the_users(ip, mode):
    """``Xtr = X[:2]`` from an earlier cell; the cell rebinds ``X`` (``X = X * 2``), then
    changes the user's array through the host: ``Xtr`` is the user's view, all -1, as in a
    plain cell. The group was committed whole because ``X`` was stored, so ``Xtr`` came
    back as a view of the stale device copy (and under ``--to-host`` the copy was written
    over the user's array)."""
    X = np.arange(4.0)
    Xtr = X[:2]
    ip.user_ns.update(X=X, Xtr=Xtr, L=[X], c=True)
    ip.run_cell_magic("gpu", mode, "if c:\n    X = X * 2\nL[0][:] = -1\nn = Xtr.shape[0]")
    got = ip.user_ns
    assert got["Xtr"] is Xtr and Xtr.tolist() == [-1.0, -1.0] and X.tolist() == [-1.0] * 4
    np.testing.assert_array_equal(_host(got["X"]), np.arange(4.0) * 2)


@pytest.mark.parametrize("mode", ["--quiet", "--quiet --to-host"])
def test_a_change_through_the_class_s_method_is_a_change(ip, mode):
    """``np.ndarray.sort(X)`` sorts ``X`` in place (``np.sort(X)`` copies): the run took it
    for a read, so with ``if c: X = X * 2`` not run the sorted copy was dropped."""
    X = np.array([3.0, 1.0, 2.0, 0.0])
    ip.user_ns.update(X=X, c=False)
    ip.run_cell_magic("gpu", mode, "np.ndarray.sort(X)\nif c:\n    X = X * 2")
    assert _host(ip.user_ns["X"]).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_flag_set_under_an_if_that_ran_is_kept(ip):
    """``if c: X.flags.writeable = False`` that ran: the copy's bytes are unchanged, its
    flags not, so the run does not take it for left as it was (the CPU fallback; CuPy's
    arrays have no writeable flag to set)."""
    if ip_on_gpu():
        pytest.skip("CuPy's arrays have no writeable flag to set")
    X = np.arange(4.0)
    ip.user_ns.update(X=X, c=True)
    ip.run_cell_magic("gpu", "--quiet", "if c:\n    X.flags.writeable = False")
    assert ip.user_ns["X"].flags.writeable is False


@pytest.mark.parametrize("mode", ["--quiet", "--quiet --to-host"])
@pytest.mark.parametrize("name", ["Xtr", "X"])
def test_an_input_rebound_to_an_array_of_references_runs(ip, mode, name):
    """``Xtr = Xtr.astype(object)`` (``Xtr = X[:2]`` from an earlier cell) holds no device
    memory; asking where it lay raised on the CPU fallback (an array of references has no
    bytes to view): in device mode since 75de877, under ``--to-host`` before (the commit
    looked for its home among the inputs')."""
    if ip_on_gpu():
        pytest.skip("CuPy has no arrays of references (dtype=object)")
    X = np.arange(6.0)
    ip.user_ns.update(X=X, Xtr=X[:2])
    ip.run_cell_magic("gpu", mode, f"{name} = {name}.astype(object)\nZ = X.sum()")
    assert ip.user_ns[name].dtype == object
    assert ip.user_ns[name].tolist() == (X[:2] if name == "Xtr" else X).tolist()


def test_a_group_member_kept_in_a_list_brings_the_group_along(ip):
    """``Xtr = [X, Xtr]``: the list may hold views of the group's device array, so the group
    is committed whole, as before: ``Xtr[0] is X`` as in a plain cell."""
    X = np.arange(6.0)
    ip.user_ns.update(X=X, Xtr=X[:2])
    ip.run_cell_magic("gpu", "--quiet", "Xtr = [X, Xtr]")
    got = ip.user_ns
    assert got["Xtr"][0] is got["X"]
    assert _host(got["X"]).tolist() == list(range(6))


@pytest.mark.parametrize("mode", ["--quiet", "--quiet --to-host"])
def test_a_committed_name_is_shown_before_an_input_left_as_the_users(ip, mode):
    """``Z = X; X = X; Z``: ``Z`` is committed (the copy) and ``X`` left as the user's; the
    last line shows what ``Z`` holds, so ``_`` and ``Z`` agree."""
    X = np.arange(4.0)
    ip.user_ns.update(X=X)
    shown = ip.run_cell_magic("gpu", mode, "Z = X\nX = X\nZ")
    assert shown is ip.user_ns["Z"]
    assert ip.user_ns["X"] is X


CHANGED_UNSEEN_THEN_REBOUND = [
    "def f(a):\n    a -= 1\n    return a\nX = f(X)\nX = X * 2",
    "def f(a):\n    a -= 1\nf(X)\nX = X * 2",
    "X = X[::-1]\nX[0] = 5\nX = X + 1",
    "R = [X, W]\nR[0] += 1\nX = X + 1",
    "Y = X[0:2]\nX = X * 2\nY[0] = 7",  # a view bound before the rebinding writes after it
    "Y = X\nX = X * 2\nY += 1",
    "def f(a):\n    return a + 1\nX = f(X)\nX = X * 2",  # not changed: nothing written
    "def f(a):\n    return a + 1\nX = f(X)\nL[0][:] = -1",  # nor over the host's change
]


@pytest.mark.parametrize("body", CHANGED_UNSEEN_THEN_REBOUND)
def test_under_to_host_a_change_through_another_name_before_a_rebinding_is_kept(ip, body):
    """``f(X)`` with ``def f(a): a -= 1``, then ``X = X * 2``: a plain cell leaves the
    user's array changed (``L[0]``), and ``X`` a new array. The copy went at the rebinding,
    unwatched, so the change was lost; it is now held to the commit and written back where
    it changed (found by a differential fuzz of 14,000 cells, the same at 1678c0b)."""
    def setup():
        X = np.arange(12.0).reshape(3, 4)
        return {"np": np, "X": X, "W": np.ones(4), "L": [X]}

    plain, ns, got = _plain_and_gpu(ip, body, setup, "--quiet --to-host")
    assert got["L"][0] is ns["X"]
    np.testing.assert_array_equal(got["L"][0], plain["L"][0])
    np.testing.assert_array_equal(got["X"], plain["X"])
    assert (got["X"] is ns["X"]) == (plain["X"] is plain["L"][0])


@pytest.mark.parametrize("body", ["R = [X, W]", "R = (X, W)", "R = [X, W]\nR[0] += 1",
                                  "R = [X, X * 2]", "R = [[X], W]"])
def test_under_to_host_an_input_kept_in_a_list_is_the_users_array(ip, body):
    """``R = [X, W]``: a plain cell's ``R[1] is W``; under ``--to-host`` the list held host
    copies of the device copies, sharing no memory with the user's arrays (found by the
    differential fuzz; the same at 1678c0b). An item that is an input's copy is now the
    user's array, written back first where the cell changed it (``R[0] += 1``)."""
    def setup():
        X = np.arange(6.0)
        return {"np": np, "X": X, "W": np.ones(3), "L": [X]}

    def flat(items):
        return [x for v in items for x in (flat(v) if isinstance(v, list) else [v])]

    plain, ns, shell = _plain_and_gpu(ip, body, setup, "--quiet --to-host")
    got = flat(shell["R"])
    want = flat(plain["R"])
    assert [g is ns["X"] or g is ns["W"] for g in got] == \
        [w is plain["X"] or w is plain["W"] for w in want]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(ns["X"], plain["X"])


@pytest.mark.parametrize("body", ["Y = X.view()", "Y = X[...]", "X = X.reshape(X.shape)",
                                  "Y = X[0]\nZ = Y", "Y = X[::-1]\nR = [Y]",
                                  "X = X[::-1]\nY = X"])
def test_under_to_host_views_and_their_names_keep_numpy_s_identities(ip, body):
    """A view of an input's copy laid out as the input (``Y = X.view()``) came back as the
    user's array itself (``Y is X``; NumPy's view is another object), and two names, or a
    name and a list's item, bound to one view came back as two views (``Y is Z`` false):
    found by the differential fuzz, the same at 1678c0b. Compared with ``exec`` on each
    pair of names: identity and shared memory."""
    def setup():
        X = np.arange(12.0).reshape(3, 4)
        return {"np": np, "X": X, "L": [X]}

    plain, _, got = _plain_and_gpu(ip, body, setup, "--quiet --to-host")

    def arrays(space):
        found = {k: space[k] for k in ("X", "Y", "Z") if k in space}
        found["L0"] = space["L"][0]
        if "R" in space:
            found["R0"] = space["R"][0]
        return found

    want, have = arrays(plain), arrays(got)
    assert want.keys() == have.keys()
    for a in want:
        np.testing.assert_array_equal(have[a], want[a])
        for b in want:
            assert (have[a] is have[b]) == (want[a] is want[b]), (a, b)
            assert np.shares_memory(have[a], have[b]) == np.shares_memory(want[a], want[b])


@pytest.mark.parametrize(("body", "name"), [("X", "X"), ("Xtr", "Xtr"), ("X = X\nXtr", "Xtr"),
                                            ("if c:\n    X = X * 2\nXtr", "Xtr")])
def test_under_to_host_an_input_shown_last_is_the_users_array(ip, body, name):
    """A plain cell ending in ``X`` shows ``X`` itself (``_ is X``); under ``--to-host`` the
    run showed a host copy of the device copy (a read input is not committed), and since
    75de877 also ``Xtr`` after a rebinding of ``X`` (no longer committed as a group)."""
    X = np.arange(12.0).reshape(3, 4)
    ip.user_ns.update(X=X, Xtr=X[:2], c=True)
    shown = ip.run_cell_magic("gpu", "--quiet --to-host", body)
    assert shown is ip.user_ns[name]


@pytest.mark.parametrize("body", ["A = B = [X * 2]", "A = (X * 2, 1)\nB = A",
                                  "Xtr = [X, Xtr]\nX = Xtr"])
def test_under_to_host_two_names_of_one_list_stay_one_list(ip, body):
    """``Xtr = [X, Xtr]; X = Xtr``: a plain cell's ``X is Xtr``; under ``--to-host`` since
    b3ee4d6 (a list's items that are inputs' copies become the user's arrays) each name's
    list was rebuilt on its own, as two lists (found by re-running the fuzz)."""
    X = np.arange(12.0).reshape(3, 4)
    ip.user_ns.update(X=X, Xtr=X[:2])
    ip.run_cell_magic("gpu", "--quiet --to-host", body)
    first, second = ("X", "Xtr") if "Xtr" in body else ("A", "B")
    assert ip.user_ns[first] is ip.user_ns[second]


@pytest.mark.parametrize("body", [
    "Xtr = Xtr * 2\nX = np.ascontiguousarray(X)\nX = X.T\nL[0][:] = -1",
    "Xtr = Xtr * 2\nX = X.T\nL[0][:] = -1",
    "Xtr = Xtr + 0\nX = X.T\nL[0][:] = -1",
    "Y = Xtr\nX = X.T\nL[0][:] = -1",
    "Xtr = Xtr * 2\nX = X.T\nX[:] = -1",  # the copy changed: written back, as before
    # the copy of Xtr, gone (rebound), read as changed by the input watch (the fuzz)
    "Xtr = Xtr * 2\nX = X.T\nL[0][:] = -1\nXtr += 1",
    "X = X + 0\nXtr = Xtr.T\nL[0][:] = -1\nQ = [X]",
    "Xtr = Xtr * 2\nXtr += 1\nX = X[::-1]\nif c:\n    L[0][:] = -1",
    "if c:\n    X = X.T\nXtr = Xtr * 2\nXtr = L[0][:2]\nY = Xtr.T\nY[0] = 4",
])
def test_under_to_host_a_group_only_read_then_rebound_is_not_written_over_the_host(ip, body):
    """``Xtr = X[:2]`` from an earlier cell: a cell that only reads the copies of ``X`` and
    ``Xtr`` before rebinding them, and changes the user's array through the host
    (``L[0]``), leaves that change, and ``X = X.T`` a view of it, as a plain cell does. The
    run wrote the unchanged copy over the user's array, or brought ``X.T`` back as a copy of
    the stale one: any stored input of the group counted as changed, and ``X.T`` holds the
    copy's base, not the copy (session 27's note, "found broken", first item)."""
    def setup():
        X = np.arange(12.0).reshape(4, 3)
        return {"np": np, "X": X, "Xtr": X[:2], "L": [X], "c": True}

    plain, ns, got = _plain_and_gpu(ip, body, setup, "--quiet --to-host")
    assert got["L"][0] is ns["X"]
    for name in ("X", "Xtr", "Y"):
        if name in plain:
            np.testing.assert_array_equal(got[name], plain[name])
            assert np.shares_memory(got[name], got["L"][0]) == \
                np.shares_memory(plain[name], plain["L"][0]), name
    np.testing.assert_array_equal(got["L"][0], plain["L"][0])


@pytest.mark.parametrize("mode", ["--quiet --batch-rows 4", "--quiet --batch-rows 4 --to-host"])
@pytest.mark.parametrize(("body", "made"), [
    ("if c:\n    X = X * 2", False), ("if c:\n    X = X * 2", True),
    ("X = X\nY = X * 2", False), ("if c:\n    X = X * 2\nY = X + 1", False),
    ("if c:\n    X = X * 2\nY = X + 1", True),
    ("if c:\n    W = W * 2\nY = X + W[0]", False),  # made: W has no rows (refused)
    # the source may change these through another name (plan.unseen): watched in the first
    # batch (the fuzz of 7d5a87f found them gathered as new arrays)
    ("X = np.asarray(X)\nY = X + 1", False), ("X = np.asarray(X)\nY = X + 1", True),
    ("X = X * 2 if c else X", False), ("X = X * 2 if c else X", True),
])
def test_a_batched_cell_leaves_an_input_it_did_not_rebind_as_the_users(ip, body, mode, made):
    """A batched run gathered ``X`` into a new array wherever the cell may rebind it, also
    where no batch did (``c`` false, ``X = X``): a change of the user's array made later
    through another reference then read stale through ``X``. Now ``X`` stays the user's
    array where no batch rebound it, and is gathered as before where every batch did (a
    change through ``L[0]`` in the batched cell itself is refused: test_batched_effects)."""
    def setup():
        X = np.arange(40.0).reshape(20, 2)
        return {"np": np, "X": X, "W": np.ones(2), "L": [X], "c": made}

    plain, ns, got = _plain_and_gpu(ip, body, setup, mode)
    for name in ("X", "W", "Y"):
        if name in plain:
            np.testing.assert_array_equal(_host(got[name]), plain[name])
    for name in ("X", "W"):  # rebound only by a `name = name * 2` that ran
        assert (got[name] is ns[name]) == (not made or f"{name} = {name} *" not in body), name


@pytest.mark.parametrize("mode", ["--quiet --batch-rows 4", "--quiet --batch-rows 4 --to-host"])
@pytest.mark.parametrize("made", [False, True])
@pytest.mark.parametrize("body", [
    "if c:\n    X += 1\nY = X * 2", "if c:\n    X.sort(axis=1)\nY = X + 0",
    "if c:\n    X[:, 0] = -1\nif c:\n    X = X * 2\nY = X + 1",
    "while c and X[0, 0] < 1e9:\n    X *= 2\n    c = False\nY = X + 0"])
def test_a_batched_cell_leaves_an_input_it_did_not_change_in_place_as_the_users(
        ip, body, mode, made):
    """``if c: X += 1`` with ``c`` false: a plain cell leaves ``X`` the user's array, the
    same object (``L[0] is X``). A batched run gathered it into a new array, equal but
    another object (96 of 3,306 fuzzed batched cells, session 29); an input the cell may
    change in place and need not is now watched in every batch, and where no batch changed
    or rebound it, ``X`` is the user's array. Where the batches changed it, their rows are
    gathered into the user's array, as a plain cell changes it (``L[0]`` sees the change;
    it was a new array, and ``L[0]`` stale); changed, then rebound, is refused."""
    def setup():
        X = np.arange(40.0).reshape(20, 2)[:, ::-1].copy()
        return {"np": np, "X": X, "L": [X], "c": made}

    if made and "X = X * 2" in body:  # the user's array changed, then X a new one
        with pytest.raises(UsageError, match="may change 'X' in place and then binds"):
            _plain_and_gpu(ip, body, setup, mode)
        return
    plain, ns, got = _plain_and_gpu(ip, body, setup, mode)
    for name in ("X", "Y"):
        np.testing.assert_array_equal(_host(got[name]), plain[name])
    assert got["X"] is ns["X"] and got["L"][0] is ns["X"]
    np.testing.assert_array_equal(got["L"][0], plain["L"][0])


@pytest.mark.parametrize("cond", ["X[0, 0] > 10", "X[0, 0] < 10"])
def test_a_batched_cell_that_rebinds_an_input_for_some_rows_only_is_refused(ip, cond):
    """``if X[0, 0] > 10: X = X * 2`` decides per batch what a plain cell decides once for
    the whole array: the batches that kept ``X`` and those that rebound it cannot be joined
    (they were, into an array of half old and half doubled rows). Refused, naming the batch
    and the fix; the user's ``X`` is left as it was."""
    X = np.arange(40.0).reshape(20, 2)
    ip.user_ns.update(np=np, X=X)
    with pytest.raises(UsageError, match=r"the first batch .* and batch 3 .*: which one "
                       r"depends on the rows.*run the cell whole"):
        ip.run_cell_magic("gpu", "--quiet --batch-rows 4", f"if {cond}:\n    X = X * 2")
    assert ip.user_ns["X"] is X
    np.testing.assert_array_equal(X, np.arange(40.0).reshape(20, 2))


@pytest.mark.parametrize("body", ["X = X.T\nZ = X.T", "Z = X.reshape(X.shape)", "Z = X[...]",
                                  "X += 1\nZ = X"])
def test_under_to_host_a_view_of_a_strided_input_is_not_the_users_array(ip, body):
    """``X = big[::2]`` (a strided view whose copy is contiguous): a view the cell makes of
    the copy laid out as it (``X.T.T``, ``X[...]``) came back as the user's ``X`` itself,
    where NumPy's is another object (found by the fuzz); ``Z = X`` is ``X``."""
    def setup():
        big = np.arange(48.0).reshape(16, 3)
        X = big[::4]
        return {"np": np, "big": big, "X": X, "L": [X]}

    plain, _ns, got = _plain_and_gpu(ip, body, setup, "--quiet --to-host")
    np.testing.assert_array_equal(got["Z"], plain["Z"])
    assert (got["Z"] is got["L"][0]) == (plain["Z"] is plain["L"][0])
    np.testing.assert_array_equal(got["big"], plain["big"])


def test_a_batched_rebinding_that_ran_lets_the_batch_s_copy_go(ip):
    """Each batch's copy of an input it may leave as it was is held weakly to see whether
    the batch left it: ``if c: X = X * 2`` that ran frees the copy as ``X = X * 2`` does, so
    the two cells' peaks are the same (a strong hold added a batch's rows to it)."""
    X = np.ones((64 * 1024, 16))  # 8 MiB, batches of 2 MiB
    peaks = []
    for body in ("X = X * 2\nY = X * 3\ndel Y", "if c:\n    X = X * 2\nY = X * 3\ndel Y"):
        ip.user_ns.update(X=X, c=True)
        ip.run_cell_magic("gpu", "--quiet --batch-rows 16384", body)
        np.testing.assert_array_equal(_host(ip.user_ns["X"]), X * 2)
        peaks.append(cupy_magic.last_report().peak_pool_bytes)
    assert peaks[1] < peaks[0] + 16384 * 16 * 8 // 2, [p / 2**20 for p in peaks]


@pytest.mark.parametrize("mode", ["--quiet --batch-rows 4", "--quiet --batch-rows 4 --to-host"])
@pytest.mark.parametrize("body", ["Y = X\nY += 1\nif c:\n    X = X * 2",
                                  "def f(a):\n    a -= 1\nf(X)\nX = np.asarray(X)",
                                  "Y = X\nX = X\nY += 1"])
@pytest.mark.parametrize("made", [False, True])
def test_a_batched_input_changed_through_another_name_is_gathered_with_the_change(
        ip, body, mode, made):
    """An input a batch leaves as it got it but changed through another name (an alias, a
    function it was passed to) is not the user's unchanged array: the first batch's copy is
    watched, and the change gathered into the user's array, as a batched run gathers a change
    in place (``L[0]`` sees it); changed, then rebound, is refused."""
    def setup():
        X = np.arange(40.0).reshape(20, 2)
        return {"np": np, "X": X, "L": [X], "c": made}

    if made and "X = X * 2" in body:
        with pytest.raises(UsageError, match="may change 'X' in place and then binds"):
            _plain_and_gpu(ip, body, setup, mode)
        return
    plain, _ns, got = _plain_and_gpu(ip, body, setup, mode)
    np.testing.assert_array_equal(_host(got["X"]), plain["X"])
    np.testing.assert_array_equal(got["L"][0], plain["L"][0])
