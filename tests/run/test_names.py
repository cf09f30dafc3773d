"""The names a cell reads, binds, deletes and changes in place (cupy_magic.run.names)."""

from __future__ import annotations

import ast

import pytest

from cupy_magic.run.names import analyse


def names(src: str):
    return analyse(ast.parse(src))


def test_cell_names():
    n = names(
        "import math as m\n"
        "y = f(x)\n"
        "z += 1\n"
        "w[0] = y\n"
        "q.attr = 2\n"
        "del gone\n"
        "def fn(a):\n    inner = a\n    return inner\n"
        "sq = [i * i for i in range(3)]\n"
        "if (k := 3):\n    pass\n"
        "for t in range(2):\n    pass\n"
    )
    assert n.assigned == {"m", "y", "z", "fn", "sq", "k", "t"}
    assert {"f", "x", "z", "range"} <= n.loaded
    assert n.mutated == {"w", "q"}
    assert n.deleted == {"gone"}
    assert "inner" not in n.assigned and "i" not in n.assigned


def test_names_written_before_they_are_read():
    n = names("y = f(x)\nz = z + 1\nfor i in range(2):\n    w = y\nw = 1\ny[0] = 2\n")
    assert n.written_first == {"y"}


def test_global_in_a_cell_function_counts_as_assigned():
    assert "counter" in names("def bump():\n    global counter\n    counter = 1\n").assigned


def test_names_local_to_functions_and_comprehensions_are_not_reads_of_globals():
    n = names("def f(x):\n    y = x + 1\n    return y + w\nzz = [x * 2 for x in range(3)]\n"
              "lam = lambda x: x + v\nclass C:\n    a = u\n    def m(self, x):\n        return x\n")
    assert "x" not in n.loaded
    assert {"w", "v", "u", "range"} <= n.loaded
    assert "x" in names("zz = [x * 2 for x in x]\n").loaded  # the iterable is the global x


def test_in_place_methods_and_out_arguments_count_as_mutations():
    n = names("x.sort()\nnp.add(a, 1, out=b)\nnp.copyto(c, a)\ny.fill(0)\n"
              "def f(d):\n    d.sort()\n    e[0] = 1\n")
    assert n.mutated == {"x", "b", "c", "y", "e"}  # d is the function's own parameter


@pytest.mark.parametrize(("source", "first"), [
    ("X += 1\nX = 0", {"X"}),
    ("X = X * 2\nX += 1", set()),
    ("Y = X\nY += 1", {"X"}),  # through a name bound to X's array
    ("Y = X\nX = 0\nY[0] = 5", {"X"}),  # Y still holds the input after X is rebound
    ("Y = Z = X\nZ.sort()", {"X"}),
    ("Y = X\nW = Y\nW -= 2", {"X"}),
    ("X = X * 2\nY = X\nY += 1", set()),  # Y holds the cell's new array, not the input
    ("Y = X\nY = Y * 2\nY += 1", set()),  # Y let go of it first
    # Y bound to something else by a statement other than an assignment
    ("Y = X\nfor Y in [W]:\n    pass\nY += 1", set()),
    ("Y = X\n(Y := W)\nY += 1", set()),
    ("Y = X\nif c:\n    Y = W\nY += 1", set()),
    ("Y = X\nwith f() as Y:\n    pass\nY += 1", set()),
    ("Y = X\nimport numpy as Y\nY += 1", set()),
    ("Y = X\ndef Y():\n    pass\nY += 1", set()),
    ("Y = X\ntry:\n    pass\nexcept E as Y:\n    pass\nY += 1", set()),
    ("Y = X\nfor Y in [W]:\n    Y += 1", set()),  # rebound and changed in one statement
    ("Y = X\nif c:\n    Y += 1", {"X"}),  # may change it: held, written if it did
    # a name bound back to the input holds it again, and names bound in one tuple
    ("Y = X\nX = Y\nX += 1", {"X"}),
    ("Y = X\nX = 0\nX = Y\nX[0] = 1", {"X"}),
    ("Y, Z = X, X\nY += 1", {"X"}),
    ("[Y, Z] = W, X\nZ.sort()", {"X"}),
    ("X, Y = Y, X\nY += 1", {"X"}),  # swapped: Y holds the input X
    ("Y, *Z = X, W\nY += 1", set()),  # starred: not followed
])
def test_a_change_in_place_is_found_through_the_names_bound_to_the_input(source, first):
    assert names(source).in_place_first == first


@pytest.mark.parametrize(("source", "sure"), [
    ("X += 1", {"X"}), ("X[0] = 1", {"X"}), ("X[0] += 1", {"X"}), ("X.sort()", {"X"}),
    ("np.copyto(X, a)", {"X"}), ("np.add(a, 1, out=X)", {"X"}), ("X.attr = 1", {"X"}),
    ("Y = X\nY *= 2", {"X"}),
    # may not run, or run elsewhere: watched, written back only if the copy changed
    ("if c:\n    X += 1", set()), ("for i in r:\n    X[i] = 0", set()),
    ("while c:\n    X -= 1", set()), ("with f():\n    X.sort()", set()),
    ("try:\n    X += 1\nexcept E:\n    pass", set()), ("c and X.sort()", set()),
    ("X.sort() if c else None", set()), ("[X.fill(0) for _ in r]", set()),
    ("X[f(lambda: 1)] = 0", set()), ("Y = X\nif c:\n    Y += 1", set()),
])
def test_a_change_in_place_is_sure_only_where_every_run_to_the_end_makes_it(source, sure):
    n = names(source)
    assert n.in_place_sure == sure and n.in_place_sure <= n.in_place_first == {"X"}


@pytest.mark.parametrize(("source", "fresh"), [
    ("X = X * 2", {"X"}), ("X = -X", {"X"}), ("X = X > 0", {"X"}), ("X: object = X + 1", {"X"}),
    ("X, Y = X + 1, Y", {"X"}), ("X = [X]", {"X"}), ("def X():\n    pass", {"X"}),
    ("import numpy as X", {"X"}), ("Y = X\nX = X * 2", {"X"}), ("X = np.log(X)", {"X"}),
    ("X = X.astype(np.float32)", {"X"}), ("X = X.view()", {"X"}), ("X = f(X)", {"X"}),
    # may be the name's old value, or may not run: not fresh (watched)
    ("X = X", set()), ("X = Y", set()), ("X = np.asarray(X)", set()),
    ("X = np.atleast_1d(X)", set()), ("X = X.squeeze()", set()), ("X = X.conj()", set()),
    ("X = X.astype(float, copy=False)", set()), ("X = max(X, Y, key=len)", set()),
    ("X = d.get('k')", set()), ("X = f(**kw)", set()), ("X = fs[0](X)", set()),
    ("@dec\ndef X():\n    pass", set()), ("X = X * 2\nglobals()['X'] = Y", set()),
    ("X = X * 2\nexec('X = Y')", set()),
    ("X = a if c else X", set()), ("X = c and X", set()), ("X = L[0]", set()),
    ("X = (Y := X) * 2", set()), ("X, *Y = X, 1", set()), ("if c:\n    X = X * 2", set()),
    ("for i in r:\n    X = X * 2", set()), ("X = X * 2\nX = Y", set()),
    ("X = X * 2\nfor X in r:\n    pass", set()), ("X = X * 2\ndel X", set()),
    ("X = X * 2\ndef f():\n    global X\n    X = Y", {"f"}),
])
def test_a_name_is_bound_fresh_only_where_every_run_to_the_end_binds_it_to_a_new_object(
        source, fresh):
    """``X = X * 2`` at the top level makes ``X`` a new array whenever the cell runs to its
    end, so the run need not watch whether ``X`` still holds its copy at the end; the last
    binding decides, and a function declaring ``X`` global may rebind it anywhere."""
    assert names(source).bound_fresh == fresh
