"""A whole %%gpu cell that changes an input through an object from outside that holds it
(``L[0][:] = -1`` with ``L = [x]`` from an earlier cell), or through a function from outside
that changes it as a global, and then uses the input: the cell's ``x`` is the device copy
made before it ran, which that change does not reach. A plain cell's ``x`` is ``L[0]``
itself, so ``y = x + 0`` after it read the old values, silently (648 of 20,000 fuzzed cells
under ``--to-host``, 2,465 in device mode, session 29). Refused before anything moves,
naming the holder, the input and the fix; reads before the change run."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import cell_error

SETUP = ("X = np.arange(6.0).reshape(3, 2)\nZ = np.ones(2)\nL = [X]\narrs = [X, Z]\nc = False\n"
         "D = {'x': X}\ndef reset():\n    X[:] = 0\n"
         "class Box:\n    def __init__(self, x):\n        self.x = x\n"
         "    def reset(self):\n        self.x[:] = -1\n    def again(self):\n"
         "        self.reset()\n    def total(self):\n        return self.x.sum()\n"
         "b = Box(X)\ndef dec(a):\n    a -= 1\n")
MODES = ["--quiet", "--quiet --to-host"]


@pytest.fixture
def held(ip):
    ip.run_cell("import numpy as np\n" + SETUP)
    return ip


def plain(cell: str) -> dict:
    ns = {"np": np}
    exec(SETUP + cell, ns)
    return ns


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("cell", "via"), [
    ("L[0][:] = -1\nY = X + 0\n", "L, which holds it"),
    ("D['x'][:] = 0\nY = X * 1\n", "D, which holds it"),
    ("reset()\nY = X + 1\n", "the function reset(), which changes it as its global X"),
    ("for a in arrs:\n    a *= 2\nY = X + 1\n", "arrs, which holds it"),
    ("X[0] = 5\nL[0][:] = -1\n", "L, which holds it"),  # both sides: the copy's written last
    ("for i in range(2):\n    Y = X + i\n    L[0][:] = i\n", "L, which holds it"),
    # through a name bound to the holder's item (772 fuzzed cells under --to-host)
    ("W = L[0]\nW += 1\nY = X + 0\n", "L, which holds it"),
    ("W = D['x']\nW[0] = 9\nX[0] = 5\n", "D, which holds it"),
    # through a method of the notebook's own class, itself or one it calls
    ("b.reset()\nY = X + 0\n", "the method reset(), which changes it as self.x"),
    ("b.again()\nY = X + 0\n", "the method reset(), which changes it as self.x"),
    # through a view of it, bound before the change or after (the fuzz, session 32)
    ("V = X[1:]\nL[0][:] = -1\nY = V + 0\n", "L, which holds it"),
    ("L[0][:] = -1\nV = X.T\nY = V.sum()\n", "L, which holds it"),
    # its item handed to a function that changes its argument (the fuzz, session 32)
    ("dec(L[0])\nY = X + 0\n", "L, which holds it (handed to dec(), which changes its "
                                 "argument a)"),
    ("def g(v):\n    v[0] = 9\nW = L[0]\ng(W)\nY = X * 1\n",
     "L, which holds it (handed to g(), which changes its argument v)"),
    # a name bound to the item more than once, then handed (the fuzz, session 33)
    ("W = Z\nW = L[0]\ndec(W)\nY = X * 1\n",
     "L, which holds it (handed to dec(), which changes its argument a)"),
    # a change that may not happen before one that will: the read is after the first
    ("if c:\n    L[0][:] = -1\nY = X + 0\nL[0][:] = -2\n", "L, which holds it"),
    # through a name bound to a name bound to the item, or a function's out= (session 33)
    ("W = L[0]\nV = W\nV[0] = 9\nY = X * 1\n", "L, which holds it"),
    ("W = L[0]\nnp.add(W, 1, out=W)\nY = X + 0\n", "L, which holds it"),
    ("np.copyto(L[0], 0)\nY = X + 0\n", "L, which holds it")])
def test_a_cell_that_reads_an_input_after_changing_it_through_a_holder_is_refused(
        held, mode, cell, via):
    before = held.user_ns["X"].copy()
    x = held.user_ns["X"]
    message = cell_error(held, cell, mode)
    assert message.startswith(f"the cell changes the input 'X' (or a view of it) in place "
                              f"through {via}, and then reads X or changes it: %%gpu copies X "
                              "to the device before the cell runs")
    assert message.endswith("change X through its name in the cell (X[...] = ..., or a "
                            "function's argument: f(X))")
    assert held.user_ns["X"] is x and "Y" not in held.user_ns
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cell", [
    "Y = X + 0\nL[0][:] = -1\n",  # read before the change: the copy is right
    "L[0][:] = -1\nX = 3\n",  # rebound after, never read
    "L[0][:] = -1\nY = Z + 1\n",  # another input
    "L[0] = 5\nY = X + 1\n",  # an item replaced, not changed
    "Y = X + 0\nW = L[0]\nW += 1\n",  # through the holder's item, after the read
    # the holder's item only read (on the host: L is not an input, so W is the user's
    # array, which CuPy does not add to X's device copy: float() of its sum)
    "W = L[0]\nY = float(W.sum()) + X\n",
    "def f(a):\n    a[0] = 7\nf(X)\nY = X + 1\n",  # its argument: the copy itself
    "L[0][:] = -1\nn = X.shape[0] + X.ndim\n",  # its shape: the copy's is the user's
    "s = b.total()\nY = X + s\n",  # a method that only reads it
    # a function that only reads it (a float: CuPy adds no host array to X's copy; the
    # GPU run of session 33 found a + 1 there refused by CuPy)
    "def g(a):\n    return float(a.sum())\nY = g(L[0]) + X\n",
    "Y = X + 0\nb.reset()\n",  # a method's change after the read
    "if c:\n    X += 1\nL[0][:] = -1\n"])  # may change, did not: the run's watch decides
def test_a_cell_that_changes_a_holder_but_reads_no_stale_copy_runs_as_a_plain_cell(
        held, mode, cell):
    want = plain(cell)
    assert held.run_cell(f"%%gpu {mode}\n{cell}").success
    for name in ("X", "Y"):
        if name in want and isinstance(want[name], np.ndarray):
            got = held.user_ns[name]
            np.testing.assert_array_equal(got.get() if hasattr(got, "get") and
                                          not isinstance(got, np.ndarray) else got, want[name])
    if "--to-host" in mode:  # a device run leaves the user's array as it was (README)
        np.testing.assert_array_equal(held.user_ns["L"][0], want["L"][0])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cell", ["L[0][:] = -1\nX = X * 2\n", "reset()\nX = X + 1\n",
                                  "D['x'][:] = 3\nX = np.sqrt(X)\n"])
def test_a_cell_that_rebinds_an_input_from_its_stale_copy_is_refused(held, mode, cell):
    """``L[0][:] = -1; X = X * 2``: a plain cell doubles the -1s; the cell's ``X`` is the
    copy from before the change, so ``X`` came back as the old values doubled, in both
    modes (session 30's fuzz). Refused before anything runs, as a read of the stale copy
    into another name is."""
    x, before = held.user_ns["X"], held.user_ns["X"].copy()
    message = cell_error(held, cell, mode)
    assert "and then reads X or changes it: %%gpu copies X to the device" in message
    assert held.user_ns["X"] is x
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cell", ["X = X * 2\nL[0][:] = -1\nY = X + 0\n",
                                  "L[0][:] = -1\nX = 3\nX = X * 2\n"])
def test_a_name_rebound_to_new_memory_before_the_change_reads_no_stale_copy(held, mode, cell):
    """``X = X * 2`` before the change: by then ``X`` holds new memory, made from the
    values before the change, as in a plain cell; nothing stale is read."""
    want = plain(cell)
    assert held.run_cell(f"%%gpu {mode}\n{cell}").success
    got = held.user_ns["X"]
    np.testing.assert_array_equal(got.get() if hasattr(got, "get") and
                                  not isinstance(got, np.ndarray) else got, want["X"])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("made", [False, True])
@pytest.mark.parametrize("cell", [
    "if c:\n    L[0][:] = -1\nX = X * 2\n",
    "for a in arrs[:1 if c else 0]:\n    a[:] = 4\nX = X + 1\n",
    # a rebinding that may not run after the change (the whole-cell fuzz, session 32)
    "if c:\n    L[0][:] = -1\nif c:\n    X = X * 2\n",
    "L[0][:] = -1\nif c:\n    X = X * 2\n",
    "L[0][:] = -1\nfor i in range(2 if c else 0):\n    X = X + 1\n"])
def test_a_stale_read_after_a_change_that_may_not_happen_is_refused_where_it_happened(
        held, mode, made, cell):
    """``if c: L[0][:] = -1`` then ``X = X * 2``: where the branch did not run the cell is
    right and runs; where it ran, the cell read the copy from before (and came back with
    the old values doubled, silently), so it is refused after the run, before anything is
    committed: the change through the holder stays made in the user's array, as a plain
    cell's statements before an error stay done. So with ``L[0][:] = -1`` then
    ``if c: X = X * 2``, which was left to the input watch and came back as the old values
    doubled: where the rebinding did not run, ``X`` is the user's array with the change."""
    held.user_ns["c"] = made
    x = held.user_ns["X"]
    if not made:
        want = plain(cell)  # SETUP's c is False
        assert held.run_cell(f"%%gpu {mode}\n{cell}").success
        got = held.user_ns["X"]
        np.testing.assert_array_equal(got.get() if hasattr(got, "get") and
                                      not isinstance(got, np.ndarray) else got, want["X"])
        return
    message = cell_error(held, cell, mode)
    assert "and then reads X or changes it" in message
    assert "stays made in the user's array; the cell is not committed" in message
    assert held.user_ns["X"] is x
    assert (x == -1).all() or (x == 4).all()


@pytest.mark.parametrize("cell", ["X = X.T\nL[0][1] = 7\n",
                                  # a change that may not happen first (session 33)
                                  "if c:\n    L[0][:] = -1\nX = X.T\nL[0][1] = 7\n"])
@pytest.mark.parametrize(("setup", "mode", "runs"), [
    ("X = np.arange(6.0).reshape(3, 2)", "--quiet --to-host", True),
    ("X = np.arange(6.0).reshape(3, 2)", "--quiet", False),
    ("B = np.arange(24.0).reshape(4, 6)\nX = B[:, ::2]", "--quiet --to-host", False)])
def test_a_view_bound_before_the_change_and_kept_runs_only_where_it_comes_back_as_the_users(
        ip, setup, mode, runs, cell):
    """``X = X.T`` then ``L[0][1] = 7``: a plain cell's ``X`` is a view of the user's array,
    which shows the 7. A device run would commit the view of the copy, and ``--to-host``
    of a strided input a new array of the old values (the fuzz found both silently
    wrong, session 32): refused there before anything moves; under ``--to-host`` of a
    contiguous input it comes back as the user's view and runs. So with ``if c: L[0][:] =
    -1`` before (``c`` false), which the view is made after."""
    ip.run_cell(f"import numpy as np\n{setup}\nL = [X]\nc = False\n")
    x = ip.user_ns["X"]
    if not runs:
        before = x.copy()
        assert "and then reads X or changes it" in cell_error(ip, cell, mode)
        np.testing.assert_array_equal(x, before)
        return
    assert ip.run_cell(f"%%gpu {mode}\n{cell}").success
    got = ip.user_ns["X"]
    assert np.shares_memory(got, x) and got.shape == x.T.shape and (x[1] == 7).all()
    np.testing.assert_array_equal(got, x.T)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cell", ["Y = X\nL[0][:] = -1\n", "Q = [X, 1]\nL[0][:] = -1\n",
                                  "Y = X\nX = Y\nL[0][:] = -1\n"])
def test_a_name_holding_the_copy_from_before_the_change_runs_only_under_to_host(
        held, mode, cell):
    """``Y = X`` (or ``Q = [X]``) then ``L[0][:] = -1``: a plain cell's ``Y`` is the user's
    array, with the -1s. Under ``--to-host`` the copy, unchanged, comes back as the user's
    array; a device run would commit the copy of the old values (the fuzz found it
    silently wrong, session 32): refused there before anything moves."""
    x = held.user_ns["X"]
    if "--to-host" not in mode:
        assert "and then reads X or changes it" in cell_error(held, cell, mode)
        assert "Y" not in held.user_ns and "Q" not in held.user_ns
        np.testing.assert_array_equal(x, np.arange(6.0).reshape(3, 2))
        return
    assert held.run_cell(f"%%gpu {mode}\n{cell}").success
    got = held.user_ns["Y"] if "Y" in held.user_ns else held.user_ns["Q"][0]
    assert got is x and (x == -1).all()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cell", ["W = L[0]\nW += 1\nW = Z\nY = X + 0\n",
                                  "W = Z\nW = L[0]\nW[0] = 9\nY = X * 1\n",
                                  "W = L[0]\nif c:\n    W = Z\nW += 1\nY = X + 0\n",
                                  "for i in range(2):\n    W = L[0]\nW -= 1\nY = X + 0\n"])
def test_a_change_through_a_name_bound_to_the_holders_item_more_than_once_is_seen(
        held, mode, cell):
    """``W = L[0]; W += 1`` with ``W`` bound again elsewhere in the cell: the change goes
    through the holder while ``W`` is its item (read statement by statement at the top
    level; a binding in a block may not run, ``if c: W = Z``), so ``Y = X + 0`` after it
    would read the copy from before (the fuzz found such cells silently wrong, sessions 32
    and 33): refused before anything moves."""
    before = held.user_ns["X"].copy()
    message = cell_error(held, cell, mode)
    assert message.startswith("the cell changes the input 'X' (or a view of it) in place "
                              "through L, which holds it, and then reads X")
    np.testing.assert_array_equal(held.user_ns["X"], before)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("c", "d"), [(False, False), (False, True), (True, False),
                                      (True, True)])
def test_a_change_on_both_sides_that_may_not_happen_is_refused_only_where_both_did(
        held, mode, c, d):
    """``if d: X += 1`` and ``if c: L[0][:] = -1``: only where both ran are there two
    changes in two arrays (refused after the run); either one alone is a plain cell's."""
    cell = "if d:\n    X += 1\nif c:\n    L[0][:] = -1\n"
    held.user_ns.update(c=c, d=d)
    if c and d:
        assert "both through L, which holds it" in cell_error(held, cell, mode)
        return
    want = plain(f"c = {c}\nd = {d}\n" + cell)
    assert held.run_cell(f"%%gpu {mode}\n{cell}").success
    got = held.user_ns["X"]
    np.testing.assert_array_equal(got.get() if hasattr(got, "get") and
                                  not isinstance(got, np.ndarray) else got, want["X"])
    if "--to-host" in mode:
        np.testing.assert_array_equal(held.user_ns["L"][0], want["L"][0])


@pytest.mark.parametrize(("mode", "runs"), [("--quiet --to-host", True), ("--quiet", False)])
def test_a_view_made_after_the_change_runs_only_where_it_comes_back_as_the_users(
        held, mode, runs):
    """``L[0][:] = -1; V = X[1:]``: under ``--to-host`` ``V`` comes back a view of the user's
    array (the copy unchanged), which holds the -1s, as in a plain cell, and ``Y = X``,
    ``Q = [X]`` the user's array itself; in a device run they would be the copy from before
    (or a view of it), so the cell is refused there."""
    cell = "L[0][:] = -1\nV = X[1:]\nW = X.T\nY = X\nQ = [X]\n"
    if not runs:
        assert "then reads X" in cell_error(held, cell, mode)
        return
    assert held.run_cell(f"%%gpu {mode}\n{cell}").success
    want, got = plain(cell), held.user_ns
    for name in ("V", "W"):
        np.testing.assert_array_equal(got[name], want[name])
        assert np.shares_memory(got[name], got["X"]) and got["L"][0] is got["X"]
    assert got["Y"] is got["X"] and got["Q"][0] is got["X"]


@pytest.mark.parametrize(("setup", "opts", "cell", "runs"), [
    # a strided input only read moves as a contiguous copy: its views come back new arrays,
    # the copy itself as the user's view (StridedHome)
    ("B = np.arange(24.0).reshape(4, 6)\nX = B[:, ::2]", "", "V = X[1:]", False),
    ("B = np.arange(24.0).reshape(4, 6)\nX = B[:, ::2]", "", "V = X.T", False),
    ("B = np.arange(240.0).reshape(4, 60)\nX = B[:, 3]", "", "V = X[1:]", False),
    ("B = np.arange(24.0).reshape(4, 6)\nX = B[:, ::2]", "", "V = X", True),
    ("B = np.arange(24.0).reshape(4, 6)\nX = B[:, ::2]", "", "Q = [X]", True),
    # cast by --dtype: the copy and its views come back new arrays, of the old values
    ("X = np.arange(6.0).reshape(3, 2)", "--dtype float32", "V = X", False),
    ("X = np.arange(6.0).reshape(3, 2)", "--dtype float32", "V = X[1:]", False),
    # laid out as the device copy, C or F order: views of the user's array
    ("X = np.asfortranarray(np.arange(6.0).reshape(3, 2))", "", "V = X[1:]", True),
    ("X = np.arange(6.0).reshape(3, 2).T", "", "V = X.T", True),
    ("X = np.arange(6.0).reshape(3, 2)", "", "Q = [X[1:].T, (X, 1)]", True),
    # a view used, not bound as it is: it reads the copy's old values
    ("X = np.arange(6.0).reshape(3, 2)", "", "V = X[1:] + 0", False),
    ("X = np.arange(6.0).reshape(3, 2)", "", "V = np.concatenate([X])", False),
    ("X = np.arange(6.0).reshape(3, 2)", "", "V = np.sum((X.T, X.T))", False)])
def test_a_view_after_the_change_runs_only_for_an_input_whose_views_come_back_as_its_own(
        ip, setup, opts, cell, runs):
    """Under ``--to-host`` ``L[0][:] = -1; V = X[1:]`` is right only where the copy's views
    come back as views of the user's array (:func:`cupy_magic.run.homes.view_kinds`); for a
    strided input or one cast by ``--dtype`` they come back as new arrays of the copy's old
    values, which the fuzz of session 32 found silently wrong: refused there."""
    ip.run_cell(f"import numpy as np\n{setup}\nL = [X]\n")
    cell = f"L[0][:] = -1\n{cell}\n"
    if not runs:  # refused before anything runs: X as it was
        before = ip.user_ns["X"].copy()
        message = cell_error(ip, cell, f"--quiet --to-host {opts}")
        assert message.startswith("the cell changes the input 'X' (or a view of it) in place "
                                  "through L, which holds it, and then reads X")
        np.testing.assert_array_equal(ip.user_ns["X"], before)
        assert "V" not in ip.user_ns and "Q" not in ip.user_ns
        return
    assert ip.run_cell(f"%%gpu --quiet --to-host {opts}\n{cell}").success
    got = ip.user_ns["Q"][0] if "Q" in ip.user_ns else ip.user_ns["V"]
    assert np.shares_memory(got, ip.user_ns["X"]) and (got == -1).all()



@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("cell", "via"), [
    # the copy changed before the change through the holder, or after it, or only when
    # the branch runs (c is True here): each change is in another array, and a commit
    # keeps only one of them (session 30's fuzz: written back over the holder's -1)
    ("if c:\n    X += 1\nL[0][:] = -1\n", "L"),
    ("L[0][:] = -1\nif c:\n    X += 1\n", "L"),
    ("W = X.T\nW += 1\nL[0][:] = -1\n", "L"),
    ("def f(a):\n    a -= 1\nf(X)\nreset()\n", "the function reset()")])
def test_a_cell_that_changes_an_input_both_through_a_holder_and_in_its_copy_is_refused(
        held, mode, cell, via):
    held.user_ns["c"] = True
    x = held.user_ns["X"]
    message = cell_error(held, cell, mode)
    assert message.startswith("the cell changed the input 'X' (or a view of it) both through ")
    assert f"%%gpu can keep only one (the change through {via} stays made in the user's " \
           "array; the cell is not committed)" in message
    assert message.endswith("change X through its name in the cell (X[...] = ..., or a "
                            "function's argument: f(X))")
    # nothing committed; what the holder changed stays made in the user's array (README)
    assert held.user_ns["X"] is x and "W" not in held.user_ns
    assert (x <= 0).all()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("c", [False, True])
def test_a_rebinding_after_the_change_of_an_input_the_cell_may_change_itself_is_refused(
        held, mode, c):
    """``if c: X += 1``, then ``L[0][:] = -1``, then ``X = X * 2``: where ``X += 1`` did not
    run, ``X = X * 2`` read the copy from before the change (the old values doubled, a plain
    cell's -2s), and where it ran it read the copy changed on the other side (+1, not -1):
    refused after the run either way (the fuzz found the first silently wrong, session 33),
    the change through ``L`` made."""
    held.user_ns["c"] = c
    x = held.user_ns["X"]
    message = cell_error(held, "if c:\n    X += 1\nL[0][:] = -1\nX = X * 2\n", mode)
    assert message.startswith("the cell changes the input 'X' (or a view of it) in place "
                              "through L, which holds it, and then reads X or changes it")
    assert "the cell is not committed" in message
    assert held.user_ns["X"] is x and (x == -1).all()


@pytest.mark.parametrize(("setup", "mode", "runs"), [
    ("X = np.arange(6.0).reshape(3, 2)", "--quiet --to-host", True),
    ("X = np.arange(6.0).reshape(3, 2)", "--quiet", False),
    ("B = np.arange(24.0).reshape(4, 6)\nX = B[:, ::2]", "--quiet --to-host", False)])
def test_a_view_kept_from_before_the_change_and_bound_again_only_in_a_block_is_still_kept(
        ip, setup, mode, runs):
    """``V = X[1:]``, ``L[0][1] = 7``, then ``if c: V = X`` with ``c`` false: ``V`` is still
    the view from before the change, which a plain cell's shows the 7 through; a device
    run would commit the view of the copy, and ``--to-host`` of a strided input a new
    array of the old values (the fuzz found the second silently wrong, session 33: the
    binding in the block was read as made)."""
    ip.run_cell(f"import numpy as np\n{setup}\nL = [X]\nc = False\n")
    x, cell = ip.user_ns["X"], "V = X[1:]\nL[0][1] = 7\nif c:\n    V = X\n"
    if not runs:
        assert "and then reads X or changes it" in cell_error(ip, cell, mode)
        assert "V" not in ip.user_ns
        return
    assert ip.run_cell(f"%%gpu {mode}\n{cell}").success
    v = ip.user_ns["V"]
    assert np.shares_memory(v, x) and (v[0] == 7).all()


@pytest.mark.parametrize("mode", MODES)
def test_a_change_of_the_copy_through_a_name_rebound_to_it_is_a_change_on_both_sides(
        held, mode):
    """``X = np.asarray(X)`` leaves ``X`` holding its copy; ``X += 1`` after ``L[0][1] = 7``
    changes that copy, the user's array has the 7: a change on both sides, refused after
    the run. A device run let it through (session 33): the watch's change of an input the
    cell may rebind was not counted, lest a copy let go read as changed; now only a copy
    let go is left out."""
    x = held.user_ns["X"]
    message = cell_error(held, "X = np.asarray(X)\nL[0][1] = 7\nX += 1\n", mode)
    assert "the cell changed the input 'X' (or a view of it) both through L" in message
    assert held.user_ns["X"] is x and (x[1] == 7).all()
    np.testing.assert_array_equal(x[0], [0.0, 1.0])
