"""``get_ipython()`` in a %%gpu cell: the shell's namespace is the cell's, as a plain cell's
``get_ipython().user_ns`` is the namespace it runs in (found by helper-70: the cell's
``user_ns``, ``ex``, ``ev`` and ``run_cell`` worked on the user's names, not the cell's)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest


@pytest.mark.parametrize(("cell", "name", "want"), [
    ("k = 42\nr = get_ipython().user_ns.get('k')", "r", 42),
    ("get_ipython().user_ns['z'] = 1\nr = z + 1", "r", 2),
    ("get_ipython().ex('w = 3')\nr = w", "r", 3),
    ("get_ipython().run_cell('q = 5')\nr = q + 1", "r", 6),
    ("x = x * 10\nr = float(get_ipython().ev('x.sum()'))", "r", 60.0),
    ("def f():\n    return get_ipython().user_ns['k2']\nk2 = 7\nr = f()", "r", 7),
])
def test_the_shells_namespace_in_the_cell_is_the_cells_as_in_a_plain_cell(ip, cell, name, want):
    ip.user_ns["x"] = np.arange(4.0)
    before = set(ip.user_ns)
    plain = ip.run_cell(cell)
    assert plain.success and ip.user_ns[name] == want
    for made in set(ip.user_ns) - before:  # the %%gpu cell starts where the plain one did
        del ip.user_ns[made]
    ip.user_ns["x"] = np.arange(4.0)
    gpu = ip.run_cell("%%gpu --quiet\n" + cell)
    assert gpu.success, gpu.error_in_exec
    assert ip.user_ns[name] == want


def test_what_the_shell_bound_for_a_failing_cell_is_dropped_with_it(ip):
    result = ip.run_cell("%%gpu --quiet\nget_ipython().ex('dropped = 3')\n"
                         "get_ipython().user_ns['also'] = 4\n1 / 0")
    assert isinstance(result.error_in_exec, ZeroDivisionError)
    assert "dropped" not in ip.user_ns and "also" not in ip.user_ns


def test_a_library_handed_the_shell_sees_the_user_namespace(ip):
    ip.run_cell("import types\nlib = types.ModuleType('lib')\n"
                "exec('def names(shell):\\n    return shell.user_ns', lib.__dict__)")
    ip.run_cell("%%gpu --quiet\nlibns = lib.names(get_ipython())\n"
                "mine = get_ipython().user_ns is globals()")
    assert ip.user_ns["libns"] is ip.user_ns and ip.user_ns["mine"] is True


def test_a_coroutine_left_unawaited_by_a_failing_cell_gives_no_warning_of_ours(ip):
    """A plain cell's traceback keeps the coroutine until the next error; the %%gpu cell
    frees its frames at once, which gave "coroutine 'co' was never awaited" from
    cupy_magic/run/errors.py (found by helper-70)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = ip.run_cell("%%gpu --quiet\nasync def co():\n    return 1\nc = co()\n1 / 0\n")
    assert isinstance(result.error_in_exec, ZeroDivisionError)
    assert [str(w.message) for w in seen if "never awaited" in str(w.message)] == []


def test_a_library_handed_the_shell_runs_its_code_in_the_user_namespace(ip):
    """As after a plain cell: ``shell.ex`` from a library's module binds in the user
    namespace, not in the library's globals (found by helper-71)."""
    ip.run_cell("import types\nlib2 = types.ModuleType('lib2')\n"
                "exec('def run(shell):\\n    shell.ex(\"lib_w = 3\")\\n'"
                "     '    return shell.ev(\"1 + 1\")', lib2.__dict__)")
    ip.run_cell("%%gpu --quiet\nr = lib2.run(get_ipython())")
    assert ip.user_ns["r"] == 2 and ip.user_ns["lib_w"] == 3
    assert "lib_w" not in ip.user_ns["lib2"].__dict__
