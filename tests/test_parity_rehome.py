"""What a ``%%gpu`` cell defines reads the user namespace after the cell, as a plain cell's
does: a function under a decorator, a cached or partial function, a class's properties. A
plain cell's functions look their global names up in the user namespace when they run; a
``%%gpu`` cell runs in a copy of it, which they must not keep reading (stale values, ``np``
as CuPy, the device copies of the inputs). Through a real IPython shell, on both backends."""

from __future__ import annotations

import numpy as np
import pytest

DECO = ("import functools\n"
        "def deco(f):\n"
        "    @functools.wraps(f)\n"
        "    def wrapper(*a):\n"
        "        return f(*a)\n"
        "    return wrapper\n")  # a decorator of its own, used twice below

DEFINITIONS = {
    "a decorator's closure (functools.wraps)": (
        DECO +
        "@deco\n"
        "def read():\n"
        "    return kk, np is numpy_module\n", "read(), read.__wrapped__()"),
    "functools.lru_cache": (
        "import functools\n"
        "@functools.lru_cache\n"
        "def read():\n"
        "    return kk, np is numpy_module\n", "read()"),
    "functools.cache, recursive": (
        "import functools\n"
        "@functools.cache\n"
        "def read(n=2):\n"
        "    return (kk, np is numpy_module) if n == 0 else read(n - 1)\n", "read()"),
    "contextlib.contextmanager": (
        "import contextlib\n"
        "@contextlib.contextmanager\n"
        "def reading():\n"
        "    yield kk, np is numpy_module\n"
        "def read():\n"
        "    with reading() as got:\n"
        "        return got\n", "read(), reading.__wrapped__().__next__()"),
    "functools.partial": (
        "import functools\n"
        "def add(a, b):\n"
        "    return a + b + kk, np is numpy_module\n"
        "read = functools.partial(add, 1, b=2)\n", "read()"),
    "a property, a cached_property, a decorated method, a nested class": (
        DECO +
        "class Reader:\n"
        "    @property\n"
        "    def now(self):\n"
        "        return kk, np is numpy_module\n"
        "    @functools.cached_property\n"
        "    def once(self):\n"
        "        return kk\n"
        "    @deco\n"
        "    def method(self):\n"
        "        return kk\n"
        "    class Inner:\n"
        "        def read(self):\n"
        "            return kk\n",
        "Reader().now, Reader().once, Reader().method(), Reader.Inner().read()"),
}

# functions the cell keeps in plain containers, or in a list the user had before it
HELD = {
    "a dict's value": ("d = {'f': lambda: (kk, np is numpy_module)}", "d['f']()"),
    "a list's item": ("fs = [lambda: kk]", "fs[0]()"),
    "a tuple's and a named tuple's item": (
        "import collections\nP = collections.namedtuple('P', 'f')\nt = (lambda: kk,)\n"
        "p = P(lambda: kk)", "t[0](), p.f()"),
    "a set's and a frozenset's item": (
        "def f():\n    return kk\ns = {f}\nfz = frozenset([f])",
        "next(iter(s))(), next(iter(fz))()"),
    "a partial of the cell's function, and a partial's argument": (
        "import functools\ndef add(a):\n    return a + kk\n"
        "ps = [functools.partial(add, 1), functools.partial(lambda g: g(), lambda: kk)]",
        "ps[0](), ps[1]()"),
    "a bound method of an instance of the cell's class": (
        "class C:\n    def m(self):\n        return kk\nms = [C().m]", "ms[0]()"),
    "a list the user had, appended to": ("log.append(lambda: kk)", "log[0]()"),
    "nested containers in a cycle": (
        "a = [{'f': [lambda: kk]}]\na.append(a)", "a[0]['f'][0](), a[1] is a"),
}


def _after(ip, define: str, use: str, prefix: str) -> object:
    """What ``use`` gives in a plain cell once ``define`` ran (under ``prefix``) and a later
    cell changed ``kk``."""
    ip.user_ns.update(kk=1, numpy_module=np, log=[])
    result = ip.run_cell(prefix + define, store_history=True)
    assert result.success, result.error_in_exec
    ip.user_ns["kk"] = 100
    return ip.ev(use)


@pytest.mark.parametrize("what", DEFINITIONS)
def test_what_the_cell_defines_reads_later_values_and_numpy_as_a_plain_cells_does(ip, what):
    define, use = DEFINITIONS[what]
    plain = _after(ip, define, use, "")
    assert _after(ip, define, use, "%%gpu --quiet\n") == plain


@pytest.mark.parametrize("what", HELD)
def test_functions_the_cell_keeps_in_containers_read_later_values_as_a_plain_cells_do(ip, what):
    define, use = HELD[what]
    plain = _after(ip, define, use, "")
    assert _after(ip, define, use, "%%gpu --quiet\n") == plain


def test_containers_keep_their_identity_and_a_function_reached_twice_stays_one(ip):
    log = ip.user_ns["log"] = []
    ip.run_cell("%%gpu --quiet\ndef f():\n    return 1\ng = f\nitems = (f, [f], {'f': f})\n"
                "log.append(f)\nsame = items[1]\nd = {}\nd['self'] = d")
    ns = ip.user_ns
    f = ns["f"]
    assert f.__globals__ is ns and ns["g"] is f and ns["log"] is log and log == [f]
    assert ns["items"][0] is f and ns["items"][1] == [f] and ns["items"][2] == {"f": f}
    assert ns["same"] is ns["items"][1] and ns["d"]["self"] is ns["d"]


def test_a_function_bound_to_two_names_stays_one_function(ip):
    ip.run_cell("%%gpu --quiet\ndef f():\n    return 1\ng = f\nitems = (f, f)")
    assert ip.user_ns["g"] is ip.user_ns["f"]


def test_a_generator_the_cell_made_reads_numpy_and_the_users_arrays_after_it(ip):
    """A generator's frame keeps the namespace it was made in (nothing can re-home it): it
    then holds the user namespace as the cell left it, not the cell's copy with ``np`` as
    CuPy and the device copies of the inputs."""
    x = ip.user_ns["x"] = np.arange(3.0)
    ip.run_cell("%%gpu --quiet\ngen = ((np, x, y) for _ in range(1))\ny = x + 1\n"
                "hold = [lambda: (np, x)]")
    module, seen_x, y = next(ip.user_ns["gen"])
    assert module is np and seen_x is x and y is ip.user_ns["y"]
    module, seen_x = ip.user_ns["hold"][0]()
    assert module is np and seen_x is x


def test_the_report_names_a_generator_the_cell_made_which_misses_later_changes(ip):
    """A generator's frame keeps the globals it was made with, so one the cell made still
    reads the names as the cell left them (a plain cell's would read the later ``x``): the
    report says so, naming it and the fix; the re-homed function makes one that reads on."""
    import cupy_magic

    ip.user_ns["x"] = np.arange(4.0)
    ip.run_cell("%%gpu --quiet\ndef gen():\n    yield x.sum()\ng = gen()\n"
                "gs = [(x.sum() for _ in range(1))]\nfinished = gen()\nnext(finished)\n"
                "rest = list(finished)")
    notes = cupy_magic.last_report().notes
    assert [n.split(" made in")[0] for n in notes] == ["g is a generator", "gs holds a generator"]
    assert "call gen(...) again in a later cell" in notes[0] and "plain cell" in notes[1]
    ip.run_cell("x = np.arange(10.0)")
    assert next(ip.user_ns["g"]) == next(ip.user_ns["gs"][0]) == 6.0
    assert next(ip.user_ns["gen"]()) == 45.0


@pytest.mark.kernel
def test_in_a_kernel_what_the_cell_defines_pushes_and_raises_is_as_a_plain_cells(monkeypatch):
    """Through a real kernel (nbclient): a cached function the cell defined reads a later
    value, a name the cell pushed is kept, and its chained error shows what it handled."""
    import re

    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("CUPY_MAGIC_BACKEND", "host")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in [
        "%load_ext cupy_magic\nimport numpy as np\nkk = 1",
        "%%gpu --quiet\nimport functools\n@functools.lru_cache\ndef read():\n    return kk\n"
        "get_ipython().push({'pushed': 7})",
        "kk = 2\nprint(read(), pushed)",
        "%%gpu --quiet\ntry:\n    {}['k']\nexcept KeyError as exc:\n"
        "    raise ValueError('v') from exc",
    ]]
    nb.cells[3].metadata["tags"] = ["raises-exception"]
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    assert nb.cells[2].outputs[0]["text"].strip() == "2 7"
    error = next(o for o in nb.cells[3].outputs if o["output_type"] == "error")
    shown = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error["traceback"]))
    assert "The above exception was the direct cause of the following exception" in shown
    assert "KeyError" in shown and error["ename"] == "ValueError"


def test_a_cell_making_a_function_does_not_walk_a_large_user_list_item_by_item(ip, monkeypatch):
    """The walk into the user's containers has a bound: a cell that makes a ``lambda`` and
    names a list of 100,000 tuples took seconds per million items before (each tuple re-homed
    in Python at every such cell); a container past the bound is left, its functions read the
    cell's copy as the namespace the cell left (``leave_copy``)."""
    from cupy_magic.run import rehome

    calls = []
    real = rehome.Rehomer.__call__

    def counted(self, value):
        calls.append(1)
        return real(self, value)

    monkeypatch.setattr(rehome.Rehomer, "__call__", counted)
    ip.user_ns["rows"] = [(i, float(i)) for i in range(100_000)]
    result = ip.run_cell("%%gpu --quiet\nfirst = sorted(rows[:3], key=lambda r: -r[1])")
    assert result.success, result.error_in_exec
    assert len(calls) < 20_000 and ip.user_ns["first"][0] == (2, 2.0)
