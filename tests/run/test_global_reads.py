"""A %%gpu cell that calls a function from an earlier cell after binding, or changing in
place, a name that function reads as a global: ``X = X * 2`` then ``t = gx()`` with ``def
gx(): return float(X.sum())``. The function's globals are the user's namespace, which the
cell writes only when it succeeds, so ``gx()`` read the ``X`` from before the cell: ``t`` was
6.0 where a plain cell's is 12.0, silently (session 35). Refused before the run, naming the
call, the global and the fix; calls before the binding, the cell's own functions, arguments
and imports run as in a plain cell."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import cell_error

import cupy_magic

SETUP = ("import numpy as np\nX = np.arange(4.0)\nc = True\n"
         "def gx():\n    return float(X.sum())\n"
         "def gz():\n    return Z\n"
         "def outer():\n    return gx() + 1\n"
         "def each():\n    return [float(v) for v in X]\n"
         "def gp(a):\n    return float(a.sum())\n"
         "L = [X]\nM = [np.ones(2)]\n"
         "def h():\n    return float(L[0].sum())\n"
         "def m():\n    return float(M[0].sum())\n"
         "class Acc:\n    def __init__(self):\n        self.total = float(X.sum())\n"
         "    def read(self):\n        return float(X.sum())\n"
         "    def held(self):\n        return float(self.data.sum())\n"
         "acc = Acc()\nacc.data = X\n")
MODES = ["--quiet", "--quiet --to-host"]


@pytest.fixture
def funcs(ip):
    ip.run_cell(SETUP)
    ip.user_ns.pop("Z", None)
    return ip


def refused(funcs, cell: str, mode: str, start: str, end: str) -> None:
    """The cell stops with one line that starts and ends so; the user's names as they were."""
    x = funcs.user_ns["X"]
    message = cell_error(funcs, cell, mode)
    assert message.startswith(start) and message.endswith(end), message
    assert "\n" not in message and "t" not in funcs.user_ns and "Z" not in funcs.user_ns
    assert funcs.user_ns["X"] is x and funcs.user_ns["L"][0] is x
    np.testing.assert_array_equal(x, np.arange(4.0))


def plain(cell: str) -> dict:
    ns: dict = {}
    exec(SETUP + cell, ns)
    return ns


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("cell", "call", "name", "how", "line", "at"), [
    ("Z = 5\nt = gz()\n", "gz", "Z", "binds", 2, 1),
    ("X = X * 2\nt = gx()\n", "gx", "X", "binds", 2, 1),
    ("X += 1\nt = gx()\n", "gx", "X", "changes the input", 2, 1),
    ("X[0] = 5\nt = gx()\n", "gx", "X", "changes the input", 2, 1),
    ("X.sort()\ny = 1\nt = each()\n", "each", "X", "changes the input", 3, 1),  # comprehension
    ("X = X * 2\nt = outer()\n", "outer", "X", "binds", 2, 1),  # through gx, which it calls
    ("for i in range(2):\n    X = X + 1\n    t = gx()\n", "gx", "X", "binds", 3, 2),
    ("del X\nt = gx()\n", "gx", "X", "binds", 2, 1),
    # a method of a class from an earlier cell, and the class's __init__ (session 36: t was
    # the old sum, silently)
    ("X = X * 2\nt = acc.read()\n", "acc.read", "X", "binds", 2, 1),
    ("X += 1\nt = Acc.read(acc)\n", "Acc.read", "X", "changes the input", 2, 1),
    ("X = X * 2\nt = Acc().total\n", "Acc", "X", "binds", 2, 1)])
def test_a_call_that_would_read_the_global_from_before_the_cell_is_refused(
        funcs, mode, cell, call, name, how, line, at):
    define = {"acc.read": "acc's class", "Acc.read": "Acc"}.get(call, call)
    refused(funcs, cell, mode,
            f"line {line} calls {call}(), a function from an earlier cell that reads {name} as "
            f"its global, after the cell {how} {name} (line {at}): %%gpu runs the cell in a "
            "namespace of its own until it succeeds",
            f"pass {name} to it as an argument, or define {define} in this cell")


REACHES = ("import functools\nfns = {'g': gx}\ngp = functools.partial(gp, X)\n"
           "def deco(f):\n    return lambda: f()\nw = deco(gx)\n"
           "class K:\n    scale = 2\n    @property\n    def p(self):\n        return gx()\n"
           "    def __repr__(self):\n        return str(gx())\n"
           "    def __eq__(self, o):\n        return gx() > 0\n    __hash__ = object.__hash__\n"
           "k = K()\n"
           "class Fwd:\n    def fwd(self):\n        return gx()\n"
           "    def __call__(self):\n        return self.fwd()\nm = Fwd()\n"
           "class N:\n    def __len__(self):\n        return int(gx())\nn = N()\n"
           "class A:\n    def __add__(self, o):\n        return gx() + o\na = A()\n"
           "class C:\n    def m(self):\n        return gx()\n")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("cell", "start", "define"), [
    ("t = fns['g']()", "uses fns, which may run gx(), a function", "gx"),  # a dict holds it
    ("t = w()", "uses w, which may run gx(), a function", "gx"),  # a closure (a decorator's)
    ("t = k.p", "reads k.p, a property", "k's class"),
    ("t = len(n)", "uses n, which runs n.__len__(), a function", "n's class"),  # a builtin's
    ("t = a + 1", "uses a, which runs a.__add__(), a function", "a's class"),  # an operator
    ("t = m()", "uses m, which runs m.__call__(), a function", "m's class"),  # via self.fwd()
    ("c = C()\nt = c.m()", "calls c.m(), a function", "c's class")])  # an object it makes
def test_a_use_that_may_run_a_function_reading_the_global_from_before_is_refused(
        funcs, mode, cell, start, define):
    """What runs a function from an earlier cell that reads a global the cell rebound,
    other than a call of it by name: each gave the old X's sum, silently (session 40)."""
    funcs.run_cell(REACHES)
    want = plain(REACHES + "X = X * 2\n" + cell)["t"]
    assert want == 2 * float(np.arange(4.0).sum()) + (1 if "+ 1" in cell else 0)  # plain
    line = 3 if cell.startswith("c = C()") else 2
    refused(funcs, f"X = X * 2\n{cell}\n", mode,
            f"line {line} {start} from an earlier cell that reads X as its global, after the "
            "cell binds X (line 1)", f"pass X to it as an argument, or define {define} in this "
            "cell")


@pytest.mark.parametrize("cell", [
    "t = K.scale", "t = k.scale", "t = isinstance(k, K)", "t = helper(2.0).v",
    "t = cfg.d.k", "t = Col.R.value", "t = [k][0].scale"])
def test_a_use_that_runs_no_function_reading_the_global_runs(funcs, cell):
    """Naming an object whose class has a method, a property or an operator that reads X
    runs none of them: the cell runs (a class's methods, an object's properties and
    operators, counted whenever the object was named, refused these; an AttrDict's
    __getattr__ raising KeyError crashed the check)."""
    funcs.run_cell(REACHES + "class Vec:\n    def __init__(self, v):\n        self.v = v\n"
                   "    def compare(self):\n        return gx()\n"
                   "def helper(v):\n    return Vec(v)\n"
                   "class AttrDict(dict):\n    __getattr__ = dict.__getitem__\n"
                   "class Cfg:\n    d = AttrDict(k=2.0)\ncfg = Cfg()\n"
                   "import enum\nclass Col(enum.Enum):\n    R = 1\n"
                   "    def __str__(self):\n        return str(gx())\n")
    funcs.run_cell_magic("gpu", "--quiet --to-host", f"X = X * 2\n{cell}\n")
    assert "t" in funcs.user_ns


@pytest.mark.parametrize(("setup", "cell", "uses"), [
    ("import types\nns = types.SimpleNamespace(g=gx)", "t = ns.g()", "ns.g()"),  # its own
    ("import collections\nod = collections.OrderedDict(g=gx)", "t = od['g']()",
     "od, which may run"),
    ("vf = np.vectorize(lambda v: gx() + v)", "t = float(vf(0))", "vf, which may run")])
def test_an_object_that_holds_a_function_reading_the_global_from_before_is_refused(
        funcs, setup, cell, uses):
    funcs.run_cell(setup)
    refused(funcs, f"X = X * 2\n{cell}\n", "--quiet",
            f"line 2 {'calls' if uses.endswith('()') else 'uses'} {uses}", "in this cell")


def test_a_function_that_reads_its_globals_through_globals_is_refused(funcs):
    """globals()["X"] (or eval, vars) reads any global: each the cell bound before counts."""
    funcs.run_cell("def gg():\n    return float(globals()['X'].sum())\n")
    assert plain("def gg():\n    return float(globals()['X'].sum())\n"
                 "X = X * 2\nt = gg()\n")["t"] == 12.0
    refused(funcs, "X = X * 2\nt = gg()\n", "--quiet",
            "line 2 calls gg(), a function from an earlier cell that reads X as its global",
            "define gg in this cell")


def test_a_partial_of_a_function_reading_the_global_from_before_is_refused(funcs):
    funcs.run_cell(REACHES)
    funcs.run_cell("gq = functools.partial(gx)")
    refused(funcs, "X = X * 2\nt = gq()\n", "--quiet",
            "line 2 uses gq, which may run gx(), a function from an earlier cell that reads X",
            "pass X to it as an argument, or define gx in this cell")


def test_an_object_whose_named_methods_read_the_global_runs_where_none_is_called(funcs):
    """An object of the notebook's class whose methods read X: only those the cell calls
    (acc.read()), its properties and operators count; acc.held() reads acc.data, the user's
    X in a plain cell too."""
    x = funcs.user_ns["X"]
    funcs.run_cell_magic("gpu", "--quiet --to-host", "X = X * 2\nt = acc.held()\n")
    assert funcs.user_ns["t"] == float(x.sum())


@pytest.mark.parametrize("mode", MODES)
def test_a_method_of_an_object_holding_a_changed_input_is_refused(funcs, mode):
    """acc.data is the user's X: after X += 1 in the cell, acc.held() read the old X."""
    refused(funcs, "X += 1\nt = acc.held()\n", mode,
            "line 2 calls acc.held(), a method from an earlier cell, after the cell changes "
            "the input X in its device copy (line 1): acc holds your X",
            "pass X to it as an argument")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("cell", "call", "line", "at"), [
    ("X += 1\nt = h()\n", "h", 2, 1),  # a function from an earlier cell
    ("def k():\n    return float(L[0].sum())\nX[0] = 7\nt = k()\n", "k", 4, 3),  # the cell's
    ("X.sort()\nt = [h() for _ in range(2)][0]\n", "h", 2, 1)])
def test_a_function_reading_a_holder_of_a_changed_input_is_refused(funcs, mode, cell, call,
                                                                   line, at):
    refused(funcs, cell, mode,
            f"line {line} calls {call}(), which reads L as its global, after the cell changes "
            f"the input X in its device copy (line {at}): L holds your X, which that change "
            "does not reach until the cell succeeds", "pass X to it as an argument")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cell", [
    "t = h()\nX += 1\n",  # read before the change
    "X += 1\nt = m()\n",  # M holds another array
    "X = X * 2\nt = h()\n",  # X rebound, not changed: L[0] is the old X in a plain cell too
    "def k():\n    return float(X.sum())\nX += 1\nt = k()\n",  # the cell's X, changed
    "t = gx()\nX = X * 2\n",  # called before the binding: the old X, in a plain cell too
    "import numpy as np\nt = gx()\n",  # an import binds the same module
    "def gx():\n    return float(X.sum())\nX = X * 2\nt = gx()\n",  # the cell's own function
    "X = X * 2\nt = gp(X)\n",  # handed as an argument
    "X = X * 2\nt = float(np.sum(X))\n",  # NumPy's function, not the notebook's
    "W = 3\nt = gp(X) + W\n",  # binds nothing gp reads
    "X = X * 2\nt = acc.held()\n",  # acc.data is the old X in a plain cell too
    "t = acc.read()\nX = X * 2\n",  # called before the binding
    "X = X * 2\nt = float(X.sum()) + len(acc.__dict__)\n"])  # NumPy's method; a dict's
def test_calls_that_read_no_global_the_cell_changed_run_as_a_plain_cell(funcs, mode, cell):
    result = funcs.run_cell(f"%%gpu {mode}\n{cell}")
    assert result.success, result.error_in_exec
    assert float(funcs.user_ns["t"]) == plain(cell)["t"]


def test_a_batched_cell_is_refused_the_same(funcs):
    funcs.run_cell("X = np.arange(40.0).reshape(20, 2)\nL = [X]")
    message = cell_error(funcs, "X = X * 2\nt = gx()\n", "--batch --batch-rows 4")
    assert message.startswith("line 2 calls gx(), a function from an earlier cell")
    assert "t" not in funcs.user_ns


def test_run_cell_refuses_it_for_a_namespace_of_its_own():
    ns: dict = {}
    exec("import numpy as np\nX = np.arange(3.0)\ndef gx():\n    return float(X.sum())\n", ns)
    with pytest.raises(cupy_magic.CellError, match=r"^line 2 calls gx\(\), a function from an "
                       "earlier cell that reads X as its global, after the cell binds X"):
        cupy_magic.run_cell("X = X * 2\nt = gx()", ns)
    assert "t" not in ns and ns["X"].tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize(("setup", "cell"), [
    # a cell run again: its class and function are its own, not the ones it made last time
    ("", "class Acc:\n    def twice(self):\n        return X * 2\na = Acc()\nt = a.twice()"),
    # a def's body runs when called: what it binds or calls is not the cell's yet
    ("", "def h(a):\n    X = a * 2\n    return X\nt = gx()"),
    ("", "def report():\n    return gx()\nX = X * 2\nt = 1"),
    # calling a class runs its __init__, not its instances' __call__
    ("class Layer:\n    def __init__(self, w):\n        self.w = w\n"
     "    def __call__(self, v):\n        return v * gx()\n", "X = X * 2\nt = Layer(3.0).w"),
    # a name the cell binds is not an object of every class the cell names
    ("class Vec:\n    def __add__(self, o):\n        return gx()\n",
     "X = X * 2\nok = isinstance(X, Vec)\na = X * 2\nt = a + 1"),
    # vars(self) reads the object, not the globals
    ("class Cfg:\n    def __init__(self):\n        self.lr = 0.1\n"
     "    def to_dict(self):\n        return dict(vars(self))\ncfg = Cfg()\n",
     "X = X * 2\nt = cfg.to_dict()"),
    # self.est.fit() is the estimator's fit, not the pipeline's own
    ("class Est:\n    def fit(self, a):\n        return a.sum()\n"
     "class Pipe:\n    def __init__(self):\n        self.est = Est()\n"
     "    def fit(self):\n        return gx()\n"
     "    def run(self, a):\n        return self.est.fit(a)\npipe = Pipe()\n",
     "X = X * 2\nt = pipe.run(X)")])
def test_what_runs_no_function_of_an_earlier_cell_reading_the_global_runs(funcs, setup, cell):
    """False refusals the review of session 40 found in the first version of the check."""
    funcs.run_cell(setup)
    for _ in range(2):  # twice: a cell run again
        funcs.user_ns["X"] = np.arange(4.0)
        funcs.user_ns.pop("t", None)
        funcs.run_cell_magic("gpu", "--quiet --to-host", cell + "\n")
        assert "t" in funcs.user_ns


@pytest.mark.parametrize(("setup", "cell", "start"), [
    ("class Net:\n    def __init__(self):\n        self.w = self.build()\n"
     "    def build(self):\n        return gx()\n", "t = Net().w", "uses Net, which may run"),
    ("class K:\n    def __str__(self):\n        return str(gx())\nk = K()\n", "t = f'{k}'",
     "uses k, which runs k.__str__()"),
    ("class K:\n    def __eq__(self, o):\n        return gx() > 0\n    __hash__ = None\nk = K()\n",
     "t = k in [1]", "uses k, which runs k.__eq__()"),
    ("def h():\n    return gx()\n", "t = h()", "calls h()")])
def test_more_uses_that_read_the_global_from_before_are_refused(funcs, setup, cell, start):
    """An __init__ that calls a method of the object, f-strings, `in`, and a function of an
    earlier cell that calls another: each ran with the old X, silently."""
    funcs.run_cell(setup)
    refused(funcs, f"X = X * 2\n{cell}\n", "--quiet", f"line 2 {start}", "in this cell")
