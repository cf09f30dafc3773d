"""Under ``--to-host`` an input the cell changed in place is changed in the user's array, as
a plain cell changes it (run/homes.py): the same object, its earlier views and the lists that
hold it see the change; the home holds no device memory."""

from __future__ import annotations

import numpy as np
import pytest

import cupy_magic

IN_PLACE = ["X -= X.mean(axis=0)", "X.sort(axis=1)", "np.add(X, 1, out=X)",
            "X[0] = 7\ny = X[::2]", "X = X - 1", "X *= 2\nX = X[:5]", "Y = X\nY += 1",
            "X -= 1\nz = X.sum()", "X -= 1\ns = X[0, 0]", "X -= 1\nr = X[1]",
            "X = X * 0\ny = X + 5"]


def _plain_and_gpu(ip, body: str, start: np.ndarray | None = None,
                   setup=None) -> tuple[dict, dict, dict]:
    """``body`` run by ``exec`` and as a ``%%gpu --to-host`` cell, each over its own copy of
    ``start`` as ``X`` with an earlier view ``Xtr``, a column ``C`` and a list ``L`` holding
    it (or over what ``setup()`` makes): the plain namespace, the cell's before it ran, and
    the shell's after."""
    def copied():
        X = start.copy()
        return {"np": np, "X": X, "Xtr": X[:8], "C": X[:, 1], "L": [X]}

    setup = setup or copied
    plain = setup()
    exec(body, plain)
    ns = setup()
    ip.user_ns.update(ns)
    ip.run_cell_magic("gpu", "--quiet --to-host", body)
    return plain, ns, ip.user_ns


@pytest.mark.parametrize("body", IN_PLACE)
def test_under_to_host_an_input_changed_in_place_changes_the_users_array(ip, body):
    """A plain cell that changes ``X`` in place changes the user's array: ``X`` stays the
    same object, and a view made earlier (``Xtr = X[:8]``) or a list holding ``X`` sees the
    change, though the cell never names them. ``--to-host`` writes the device copy back
    into the user's array and leaves them so; before, ``X`` became a new array and ``Xtr``
    silently kept the old values."""
    plain, ns, got = _plain_and_gpu(ip, body, np.arange(40.0).reshape(10, 4))
    for name in ("X", "Xtr", "C"):
        assert type(got[name]) is np.ndarray, name
        np.testing.assert_array_equal(got[name], plain[name], err_msg=name)
    np.testing.assert_array_equal(got["L"][0], plain["L"][0])
    assert (got["X"] is got["L"][0]) == (plain["X"] is plain["L"][0])
    assert np.shares_memory(got["X"], got["L"][0]) == np.shares_memory(plain["X"],
                                                                       plain["L"][0])
    if got["X"] is ns["X"]:  # the report says so
        assert "changed in place" in cupy_magic.last_report().outputs_by_name["X"].where
    for name in ("y", "Y", "z", "s", "r"):
        if name in plain:
            np.testing.assert_array_equal(got[name], plain[name], err_msg=name)
            assert type(got[name]) is type(plain[name]), name


REBOUND = ["X -= 1\nX = 0", "X -= 1\ndel X", "X[0] = 7\nX = None", "X.sort(axis=1)\ndel X",
           "X += 1\nX = X.copy()", "np.add(X, 1, out=X)\nX = X * 2",
           # changed through another name bound to it, every name then let go
           "Y = X\nY += 1\ndel X, Y", "Y = X\nX = 0\nY[0] = 5\ndel Y",
           "Y = Z = X\nZ.sort(axis=1)\ndel X\nY = Z = None", "Y = X\nW = Y\nW -= 2\nX = W = Y = 1",
           # a name bound back to the input, names bound in one tuple (lost before)
           "Y = X\nX = Y\nX += 1\ndel X, Y", "Y, Z = X, X\nY += 1\ndel X, Y, Z"]


@pytest.mark.parametrize("body", REBOUND)
def test_under_to_host_a_change_in_place_stays_when_the_cell_then_rebinds_the_name(ip, body):
    """``X -= 1; X = 0`` in a plain cell: the user's array keeps the change (its earlier
    views and a list holding it see it), though ``X`` names something else after. Before,
    the change was lost with the device copy the name let go."""
    plain, ns, got = _plain_and_gpu(ip, body, np.arange(40.0)[::-1].reshape(10, 4).copy())
    for name in ("Xtr", "C"):
        np.testing.assert_array_equal(got[name], plain[name], err_msg=name)
        assert np.shares_memory(got[name], ns["X"]), name
    assert got["L"][0] is ns["X"]
    np.testing.assert_array_equal(ns["X"], plain["L"][0])
    assert ("X" in got) == ("X" in plain)
    if "X" in plain:
        np.testing.assert_array_equal(got["X"], plain["X"])
        assert type(got["X"]) is type(plain["X"])
    notes = " ".join(cupy_magic.last_report().notes)
    assert "'X' was changed in place before the cell" in notes


def _lower(a):
    a -= 1


UNSEEN_THEN_LET_GO = ["f(X)\ndel X", "Y = X\nf(Y)\ndel X, Y", "f(X[1:])\ndel X",
                      "R = [X]\nR[0] += 1\ndel X", "f(X)\nX = 0",
                      "L[0][:] = -1\ndel X", "Y = X\ndel X"]


@pytest.mark.parametrize("body", UNSEEN_THEN_LET_GO)
def test_under_to_host_a_change_through_another_name_stays_when_the_cell_deletes_the_name(
        ip, body):
    """``f(X); del X`` with ``def f(a): a -= 1``: a plain cell leaves the change in the
    user's array (``L[0]``, the earlier views). Under ``--to-host`` the copy the change
    was made in went with the name, and the user's array kept its old values (session 30's
    note, "found broken"); a copy only read, or not there to change (``L[0][:] = -1``, a
    change through the host), is not written back."""
    def setup():
        X = np.arange(40.0)[::-1].reshape(10, 4).copy()
        return {"np": np, "X": X, "Xtr": X[:8], "C": X[:, 1], "L": [X], "f": _lower}

    plain, ns, got = _plain_and_gpu(ip, body, setup=setup)
    assert got["L"][0] is ns["X"]
    np.testing.assert_array_equal(got["L"][0], plain["L"][0])
    for name in ("Xtr", "C"):
        np.testing.assert_array_equal(got[name], plain[name], err_msg=name)
    assert ("X" in got) == ("X" in plain)
    if "Y" in plain:
        assert got["Y"] is ns["X"]


@pytest.mark.parametrize("body", REBOUND)
def test_a_device_run_says_a_change_in_place_it_let_go_did_not_reach_the_users_array(
        ip, body):
    """Without ``--to-host`` a change in place reaches only the input's device copy, and the
    user's array is left as it was (README); ``X -= 1; X = 0`` then lets that copy go, so
    the change shows nowhere, where a plain cell's is in the user's array (``L[0]``). The
    report says so, naming the input and ``--to-host``; before, nothing said it."""
    X = np.arange(40.0)[::-1].reshape(10, 4).copy()
    before = X.copy()
    ip.user_ns.update(np=np, X=X, L=[X])
    ip.run_cell_magic("gpu", "--quiet", body)
    np.testing.assert_array_equal(X, before)
    notes = [n for n in cupy_magic.last_report().notes if "changed in place" in n]
    how = "deleted" if "X" not in ip.user_ns else "rebound"
    assert notes == [f"'X' was changed in place before the cell {how} it: without --to-host "
                     "the change reached only its device copy, not the user's array (a plain "
                     "cell changes the user's array, which earlier views and lists holding it "
                     "show); run with --to-host to have it written there"]


@pytest.mark.parametrize("body", ["X -= 1", "X[0] = 7\nY = X", "X = X - 1\nX = 0",
                                  "if c:\n    X += 1\nX = 0"])
def test_a_device_run_says_nothing_where_the_change_stays_in_the_name_or_none_was_made(
        ip, body):
    """``X -= 1`` leaves ``X`` the changed device copy (README); ``X = X - 1`` changes no
    input; ``if c: X += 1`` with ``c`` false made no change: no note."""
    ip.user_ns.update(np=np, X=np.arange(6.0), c=False)
    ip.run_cell_magic("gpu", "--quiet", body)
    assert not any("changed in place" in n for n in cupy_magic.last_report().notes)


@pytest.mark.parametrize("body", ["X = X - 1\nX = 0", "X = X - 1\nX -= 1\nX = 0",
                                  "X = X * 2\nX[0] = 5\ndel X"])
def test_a_rebound_input_the_source_does_not_change_in_place_is_left_as_it_was(ip, body):
    """The change in place after the name was rebound is the new array's, not the input's."""
    X = np.arange(6.0)
    plain = {"X": X.copy()}
    plain["L"] = [plain["X"]]
    exec(body, plain)
    ip.user_ns.update(X=X, L=[X])
    ip.run_cell_magic("gpu", "--quiet --to-host", body)
    assert ("X" in ip.user_ns) == ("X" in plain) and ip.user_ns["L"][0] is X
    np.testing.assert_array_equal(X, plain["L"][0])
    np.testing.assert_array_equal(X, np.arange(6.0))
    assert not any("changed in place" in n for n in cupy_magic.last_report().notes)


@pytest.mark.parametrize("line", ["--quiet --to-host", "--quiet --to-host Y"])
def test_a_copy_is_held_for_a_change_in_place_only_where_it_comes_back(ip, line):
    """``X = X * 2; X += 1; X = X - 3`` changes no input in place: its copy goes when the
    name is rebound (two arrays of ``X`` at a time); under ``--to-host Y`` no name ``X``
    comes to the host, so ``X -= 1``'s copy is not held for it either."""
    X = np.ones(1_000_000)
    for body in ("X = X * 2\nX += 1\nX = X - 3\nY = 1\n",
                 "X -= 1\nX = X * 2\nX = X + 1\nY = 1\n"):
        if body.startswith("X -=") and line.endswith("--to-host"):
            continue  # there the copy is held: the change comes back
        ip.user_ns.update(X=X.copy())
        ip.run_cell_magic("gpu", line, body)
        report = cupy_magic.last_report()
        assert report.peak_pool_bytes - report.start_pool_bytes < 2.1 * X.nbytes, body


def test_the_note_names_only_the_input_changed_in_place(ip):
    """``a`` and ``b`` share memory; the cell changes ``a`` and deletes it, leaves ``b``."""
    base = np.arange(12.0)
    ip.user_ns.update(a=base[:8], b=base[4:])
    ip.run_cell_magic("gpu", "--quiet --to-host", "a += 1\ndel a\nc = 1\n")
    notes = cupy_magic.last_report().notes
    assert [n for n in notes if "changed in place" in n] == [
        "'a' was changed in place before the cell deleted it: the change is in the user's "
        "array, as in a plain cell"]
    np.testing.assert_array_equal(base, np.r_[np.arange(1.0, 9.0), np.arange(8.0, 12.0)])
    np.testing.assert_array_equal(ip.user_ns["b"], base[4:])


@pytest.mark.parametrize("line", ["--quiet", "--quiet --to-host"])
def test_a_cell_that_rebinds_an_input_frees_its_copy_with_or_without_to_host(ip, line):
    """``X = X * 2; X = X + 1; X = X - 3`` holds two arrays of ``X``'s size at a time: the
    input's device copy goes when the name is rebound (the home of ``--to-host`` keeps only
    weak references; holding the copy took the peak to three)."""
    X = np.ones(1_000_000)
    ip.user_ns.update(X=X)
    ip.run_cell_magic("gpu", line, "X = X * 2\nX = X + 1\nX = X - 3\n")
    report = cupy_magic.last_report()
    assert report.peak_pool_bytes - report.start_pool_bytes < 2.1 * X.nbytes
    assert float(ip.user_ns["X"][0]) == 0.0 and X[0] == 1.0


def _strided() -> dict:
    """``X``, a strided view of ``B`` (every other column), with an earlier view ``Xtr`` of
    it, a column ``C`` and a list ``L`` holding it."""
    B = np.arange(80.0)[::-1].reshape(10, 8).copy()
    X = B[:, ::2]
    return {"np": np, "B": B, "X": X, "Xtr": X[:8], "C": X[:, 1], "L": [X]}


@pytest.mark.parametrize("body", IN_PLACE + REBOUND)
def test_a_strided_input_changed_in_place_changes_the_array_it_views(ip, body):
    """``X = B[:, ::2]`` and a cell ``X -= 1``: a plain cell changes ``B`` through ``X``. The
    device copy of a strided view is contiguous; it comes back through a contiguous host
    array into the user's view, so ``B``, ``X``'s earlier views and the list see the change
    (before, ``X`` became a new array and ``B`` silently kept the old values)."""
    plain, ns, got = _plain_and_gpu(ip, body, setup=_strided)
    for name in ("B", "Xtr", "C"):
        np.testing.assert_array_equal(got[name], plain[name], err_msg=name)
    np.testing.assert_array_equal(got["L"][0], plain["L"][0])
    assert got["L"][0] is ns["X"] and np.shares_memory(ns["X"], got["B"])
    assert ("X" in got) == ("X" in plain)
    if "X" in plain:
        np.testing.assert_array_equal(got["X"], plain["X"])
        assert type(got["X"]) is type(plain["X"])
        assert (got["X"] is ns["X"]) == (plain["X"] is plain["L"][0])
    for name in ("y", "Y", "z", "s", "r"):
        if name in plain:
            np.testing.assert_array_equal(got[name], plain[name], err_msg=name)
            assert type(got[name]) is type(plain[name]), name


def test_a_strided_input_the_cell_only_reads_is_left_as_it_was(ip):
    B = np.arange(24.0).reshape(4, 6)
    X = B[:, 1::3]
    ip.user_ns.update(B=B, X=X)
    ip.run_cell_magic("gpu", "--quiet --to-host", "y = X * 2\nZ = X\n")
    np.testing.assert_array_equal(B, np.arange(24.0).reshape(4, 6))
    assert ip.user_ns["X"] is X and ip.user_ns["Z"] is X  # as in a plain cell: Z is X
    np.testing.assert_array_equal(ip.user_ns["y"], X * 2)


@pytest.mark.parametrize("body", [
    "Y = X\nfor Y in [W]:\n    pass\nY += 1\nL[0][:] = -1",
    "Y = X\n(Y := W)\nY += 1\nL[0][:] = -1",
    "Y = X\nif True:\n    Y = W\nY += 1\nL[0][:] = -1",
    "Y = X\nif False:\n    Y += 1\nL[0][:] = -1\ndel Y",
])
def test_a_copy_held_for_a_change_that_did_not_happen_is_not_written_back(ip, body):
    """``Y = X`` then ``Y`` rebound (``for``, a walrus, in an ``if``), or a change that did
    not run: the copy of ``X`` is unchanged and must not be written over the user's array,
    which the cell changed through the host (``L[0][:] = -1``, as the plain cell does)."""
    def setup():
        B = np.arange(8.0)
        X = B[:4]
        return {"np": np, "B": B, "X": X, "W": np.zeros(3), "L": [X]}

    plain, _, got = _plain_and_gpu(ip, body, setup=setup)
    for name in ("B", "W"):
        np.testing.assert_array_equal(got[name], plain[name], err_msg=name)


@pytest.mark.parametrize("body", ["R = X.ravel()\nR += 1", "Y = np.ascontiguousarray(X)\nY[0] = 0",
                                  "R = X.ravel()\nR[:3] = 9\nX = None"])
def test_a_change_through_what_numpy_copies_from_a_strided_input_stays_off_its_base(ip, body):
    """On the device copy of a strided ``X`` (contiguous) ``X.ravel()`` is a view; in NumPy
    it is a copy, so changing it leaves ``B`` as it was: the base is not written."""
    plain, _, got = _plain_and_gpu(ip, body, setup=_strided)
    for name in ("B", "Xtr", "C"):
        np.testing.assert_array_equal(got[name], plain[name], err_msg=name)
    for name in ("R", "Y"):
        if name in plain:
            np.testing.assert_array_equal(got[name], plain[name], err_msg=name)


@pytest.mark.parametrize("line", ["--quiet --to-host", "--quiet", "--quiet --batch-rows 2"])
@pytest.mark.parametrize("body", ["X[0, 1] = 100", "X += 1", "f(X)"])
def test_a_cell_that_may_change_a_view_whose_items_share_memory_is_refused(ip, body, line):
    """``as_strided`` can make a view whose items overlap (``X[0, 1]`` is ``X[1, 0]``); its
    device copy has them apart, so a change to one would not show in the other, and written
    back item by item a stale duplicate would win: refused in one line naming the fix,
    nothing changed. A cell that only reads it runs."""
    B = np.arange(64.0).reshape(8, 8)
    X = np.lib.stride_tricks.as_strided(B, shape=(5, 5), strides=(8, 8))
    ip.user_ns.update(np=np, B=B, X=X, f=lambda a: None)
    result = ip.run_cell(f"%%gpu {line}\n{body}\n")
    err = result.error_in_exec
    assert err is not None and "\n" not in str(err), err
    assert "'X' is a view whose items share memory" in str(err) and "X = X.copy()" in str(err)
    np.testing.assert_array_equal(B, np.arange(64.0).reshape(8, 8))
    assert ip.user_ns["X"] is X
    ip.run_cell_magic("gpu", line, "m = X.sum(axis=1)\n")
    m = ip.user_ns["m"]  # on the device without --to-host
    np.testing.assert_array_equal(m.get() if hasattr(m, "get") else m, X.sum(axis=1))


@pytest.mark.parametrize("order", ["C", "F"])
def test_a_strided_view_of_either_order_changed_in_place_changes_its_base(ip, order):
    def setup():
        B = np.asarray(np.arange(48.0).reshape(6, 8), order=order)
        return {"np": np, "B": B, "X": B[1:, ::3]}

    plain, ns, got = _plain_and_gpu(ip, "X *= -1\nX[0] = 5", setup=setup)
    np.testing.assert_array_equal(got["B"], plain["B"])
    assert got["X"] is ns["X"]


def _strided_wide() -> dict:
    """``X``, every 20th column of ``B``: a view sparser than the stretch a copy may carry
    (:data:`~cupy_magic.run.overlap.STRETCH_LIMIT`), so its device copy is contiguous."""
    B = np.arange(240.0).reshape(4, 60)
    X = B[:, ::20]
    return {"np": np, "B": B, "X": X, "L": [X], "c": False, "n": 0}


MAY_CHANGE = ["if c:\n    X += 1\nL[0][:] = -1", "if c:\n    X += 1\nL[0][:] = -1\nX = 0",
              "for i in range(n):\n    X[i] = 5\nL[0][:] = -1\nV = X[1:]",
              "Y = X\nif c:\n    Y.sort(axis=1)\nL[0][:] = -1\ndel X, Y",
              "c and X.sort(axis=1)\nL[0][:] = -1"]


@pytest.mark.parametrize("made", [False, True])
@pytest.mark.parametrize("layout", ["contiguous", "strided", "strided_wide"])
@pytest.mark.parametrize("body", MAY_CHANGE)
def test_a_change_in_place_the_cell_may_make_is_written_back_only_if_it_made_it(
        ip, body, layout, made):
    """``if c: X += 1`` with ``c`` false, then ``L[0][:] = -1`` (the user's array changed
    through the host): a plain cell leaves -1 everywhere. The copy held for the change that
    did not happen was written over the user's array (its old values came back); it is
    written only where the run changed it (``c`` true, without the host's change: a change
    on both sides in one cell is beyond a copy, as the README says)."""
    if made:
        body = body.replace("L[0][:] = -1\n", "").replace("\nL[0][:] = -1", "")
    def setup():
        if layout == "contiguous":
            B = np.arange(24.0).reshape(4, 6)
            ns = {"np": np, "B": B, "X": B, "L": [B]}
        elif layout == "strided":
            ns = _strided()
        else:
            ns = _strided_wide()
        ns.update(c=made, n=2 if made else 0)
        return ns

    plain, ns, got = _plain_and_gpu(ip, body, setup=setup)
    np.testing.assert_array_equal(got["B"], plain["B"])
    assert ("X" in got) == ("X" in plain)
    if "X" in plain:
        np.testing.assert_array_equal(got["X"], plain["X"])
        assert (got["X"] is ns["X"]) == (plain["X"] is plain["L"][0])
    if "V" in plain and layout != "strided_wide":  # a view of a contiguous copy comes
        np.testing.assert_array_equal(got["V"], plain["V"])  # back as a new array
        assert np.shares_memory(got["V"], got["B"])


VIEWS = ["R = X[1:]\nR[:] = 9", "R = X.reshape(-1)\nR[:3] = 9", "R = X.T\nR[0] = 1",
         "X[2:][::-1][0] = 7", "R = X[:, None]\nR *= 2\ndel R",
         "R = np.ascontiguousarray(X)\nR[0] = 5", "R = X.ravel()\nR[:3] = 9",
         "R = np.ravel(X)\nR += 1", "R = X.flatten()\nR[0] = 3"]


@pytest.mark.parametrize("body", VIEWS)
def test_a_strided_input_changed_through_a_view_of_it_changes_the_array_it_views(ip, body):
    """``X = B[:, ::2]``: ``X[1:]``, ``X.reshape(-1)`` and ``X.T`` are views of ``B`` in
    NumPy, ``X.ravel()`` and ``np.ascontiguousarray(X)`` copies. Its device copy is the
    stretch of ``B`` that holds it, with ``X``'s strides, so each is a view or a copy as in
    NumPy (on the contiguous copy each was a view of the copy: ``B`` kept its old values and
    ``X`` came back changed as a new array, or the ravel's change reached ``X``)."""
    plain, ns, got = _plain_and_gpu(ip, body, setup=_strided)
    for name in ("B", "X", "Xtr", "C", "R"):
        if name in plain:
            np.testing.assert_array_equal(got[name], plain[name], err_msg=name)
    assert np.shares_memory(got["X"], got["B"]) and got["L"][0] is ns["X"]
    if "R" in plain:
        assert np.shares_memory(got["R"], got["B"]) == np.shares_memory(plain["R"], plain["B"])
    row = next(m for m in cupy_magic.last_report().inputs if m.name == "X")
    assert row.own_bytes == ns["X"].nbytes and row.nbytes > row.own_bytes


@pytest.mark.parametrize("body", ["R = X[1:]\nR[:] = 9", "def f(a):\n    a[0] = 1\nf(X)"])
def test_a_sparse_strided_input_changed_through_another_name_is_refused(ip, body):
    """``X = B[:, ::20]`` moves as a contiguous copy (its stretch of ``B`` is 20 times its
    size); whether a change through another name reaches ``B`` the copy cannot tell
    (``X[1:]`` would, ``X.ravel()`` would not), so the cell is refused in one line naming
    the fix, the user's arrays as they were. Through its own name it runs."""
    ns = _strided_wide()
    B, X = ns["B"], ns["X"]
    ip.user_ns.update(ns)
    result = ip.run_cell(f"%%gpu --quiet --to-host\n{body}\n")
    err = result.error_in_exec
    assert err is not None and "\n" not in str(err), err
    assert "'X', a strided view of another array, through another name" in str(err)
    assert "X = X.copy()" in str(err)
    np.testing.assert_array_equal(B, np.arange(240.0).reshape(4, 60))
    assert ip.user_ns["X"] is X and "R" not in ip.user_ns
    ip.run_cell_magic("gpu", "--quiet --to-host", "X[1:] = 9\n")
    assert ip.user_ns["X"] is X and (B[1:, ::20] == 9).all() and B[1, 1] == 61.0


@pytest.mark.parametrize(("setup", "body"), [
    ("B = np.arange(48.0).reshape(4, 12)\nX = B[:, ::2]\nY = B[:, 1::2]", "X *= 10\nY -= 100"),
    ("B = np.arange(48.0).reshape(4, 12)\nX = B[:, ::2]\nY = B[:, 1]", "X += 100\nY -= 1000"),
    ("B = np.arange(48.0).reshape(4, 12)\nX = B[:, ::2]\nY = B[:, 1::2]",
     "X.sort(axis=1)\nY[:] = X"),
])
def test_strided_inputs_interleaved_in_one_array_keep_each_others_changes(ip, setup, body):
    """``X = B[:, ::2]`` and ``Y = B[:, 1::2]`` share no item, but the stretch of ``B`` that
    holds ``X`` holds ``Y``'s items too: written back whole, it undid ``Y``'s change. Such
    an ``X`` moves as a contiguous copy."""
    plain: dict = {"np": np}
    exec(setup, plain)
    exec(body, plain)
    ns: dict = {"np": np}
    exec(setup, ns)
    del ns["__builtins__"]  # exec's: the shell's own stays
    ip.user_ns.update(ns)
    ip.run_cell_magic("gpu", "--quiet --to-host", body)
    np.testing.assert_array_equal(ns["B"], plain["B"])
    np.testing.assert_array_equal(ip.user_ns["Y"], plain["Y"])


@pytest.mark.parametrize("body", ["R = X.ravel()\nR[0] = 99\ns = float(X[0, 0])",
                                  "R = np.ravel(X)\nR[0] = 99\ns = float(X[0, 0])",
                                  "X += 1\nR = X.ravel()\nR[0] = 99"])
@pytest.mark.parametrize("line", ["--quiet", "--quiet --to-host", "--quiet --dtype float32"])
def test_the_ravel_of_a_strided_input_moved_as_a_contiguous_copy_is_a_copy(ip, body, line):
    """``X = B[:, ::20]`` moves as a contiguous copy, whose ravel is a view of it; NumPy's
    ravel of the strided ``X`` is a copy, so ``R[0] = 99`` changed ``X`` (and under
    ``--to-host`` with ``X += 1``, ``B``)."""
    ns = _strided_wide()
    plain = {**ns, "B": ns["B"].copy()}
    plain["X"] = plain["B"][:, ::20]
    exec(body, plain)
    ip.user_ns.update(ns)
    ip.run_cell_magic("gpu", line, body)
    if "s" in plain:
        assert ip.user_ns["s"] == plain["s"]
    if "--to-host" in line:
        np.testing.assert_array_equal(ns["B"], plain["B"])


def test_a_stretch_is_not_used_where_it_would_be_misaligned_on_the_device(tmp_path):
    """A float64 view 4 bytes into a memmap: its copy as the stretch of the owner, 256-byte
    aligned where the owner starts, would put it at a misaligned address on the GPU (CUDA's
    misaligned address error, which poisons the process's context)."""
    from cupy_magic.run.overlap import span_of

    raw = np.zeros(400, np.uint8)
    raw.tofile(tmp_path / "m.bin")
    mm = np.memmap(tmp_path / "m.bin", np.uint8, mode="r+", offset=4)
    X = mm[4:388].view(np.float64).reshape(4, 12)[:, ::2]
    assert span_of({"X": X}, lambda a: False) is None
    Z = np.zeros((4, 12))[:, ::2]
    assert span_of({"Z": Z}, lambda a: False) is not None


READ_ONLY = ["Y = X", "Q = [X]", "V = X[1:]", "T = X.T", "D = {'x': X}", "Y = X\nZ = X + 1",
             "S = X[2]", "if c:\n    X = X + 1"]


@pytest.mark.parametrize("memmap", [False, True])
@pytest.mark.parametrize("body", READ_ONLY)
def test_under_to_host_a_read_only_input_the_cell_leaves_unchanged_comes_back_as_itself(
        ip, tmp_path, body, memmap):
    """A read-only input (``x.flags.writeable`` false, or ``np.load(..., mmap_mode="r")``)
    the cell only reads: a name the cell binds to it is the user's array, a view of it a
    view of the user's array, read-only, as in a plain cell. Before, every one came back
    as a new array (the home of an input was made for writeable ones only)."""
    def setup() -> dict:
        if memmap:
            path = tmp_path / "x.npy"
            np.save(path, np.arange(40.0).reshape(10, 4))
            X = np.load(path, mmap_mode="r")
        else:
            X = np.arange(40.0).reshape(10, 4)
            X.flags.writeable = False
        return {"np": np, "X": X, "c": False}

    plain, ns, got = _plain_and_gpu(ip, body, setup=setup)
    assert got["X"] is ns["X"] and not got["X"].flags.writeable
    for name in ("Y", "Q", "V", "T", "D", "Z", "S"):
        if name not in plain:
            continue
        want, have = plain[name], got[name]
        items = (lambda v: list(v.values()) if isinstance(v, dict) else list(v)) \
            if isinstance(want, (list, dict)) else (lambda v: [v])
        for w, h in zip(items(want), items(have), strict=True):
            np.testing.assert_array_equal(h, w, err_msg=name)
            assert (h is got["X"]) == (w is plain["X"]), name
            assert np.shares_memory(h, got["X"]) == np.shares_memory(w, plain["X"]), name
            assert h.flags.writeable == w.flags.writeable, name


def test_a_read_only_input_the_cell_changes_is_refused_or_raises_and_stays(ip):
    """The home of a read-only input is never written: a cell that changes its copy fails
    (NumPy's error on the CPU fallback, the run's refusal on a GPU) and the user's array and
    namespace are as they were."""
    X = np.arange(40.0).reshape(10, 4)
    X.flags.writeable = False
    ip.user_ns.update({"np": np, "X": X})
    ok = ip.run_cell("%%gpu --quiet --to-host\nY = X\nX += 1\n").success
    assert not ok
    assert ip.user_ns["X"] is X and "Y" not in ip.user_ns
    np.testing.assert_array_equal(X, np.arange(40.0).reshape(10, 4))


def test_under_to_host_a_dict_the_cell_binds_holds_the_users_arrays_and_numpy_ones(ip):
    """``--to-host`` brings back the values of a dict the cell binds as it does a list's
    items: an input's unchanged copy is the user's array (``D["x"] is X``, as in a plain
    cell), a new device array a NumPy array; before, the dict kept the device copies."""
    plain, _ns, got = _plain_and_gpu(
        ip, "D = {'x': X, 'y': X + 1, 'n': 3, 'in': {'z': X[1:]}}\nE = {}\n",
        np.arange(40.0).reshape(10, 4))
    D, want = got["D"], plain["D"]
    assert D["x"] is got["X"] and D["n"] == 3 and got["E"] == {}
    for have, w in ((D["y"], want["y"]), (D["in"]["z"], want["in"]["z"])):
        assert type(have) is np.ndarray
        np.testing.assert_array_equal(have, w)
    assert np.shares_memory(D["in"]["z"], got["X"])
