"""The cell's code with the extension's builtins in front of CuPy's views where NumPy gives
copies (cupy_magic.run.rewrite, cupy_magic.compat.views): which places get them, that lines
stay, and that cells with them give NumPy's results on every backend."""

from __future__ import annotations

import ast

import numpy as np
import pytest

from cupy_magic.compat.views import ITEM_NAME, RAVEL_NAME
from cupy_magic.run.rewrite import device_semantics


def _rewritten(source: str) -> str:
    return ast.unparse(device_semantics(ast.parse(source), source))


@pytest.mark.parametrize("source", [
    "tmp = a[i]", "a[i], a[j] = a[j], a[i]", "trace.append(x[0])", "d = {k: x[0]}",
    "out = [x[i] for i in r]", "m = max(x[0], x[1])", "v = np.asarray(x[0])",
    "y = x[0].reshape(1)", "x[0].fill(5)", "lst[0] = y[1]", "f(x[0])", "return_ = (x[0],)",
    "y = x[()]", "r = x[idx]", "a = x[0] or 1", "v = x[0] if c else x[1]",
])
def test_an_item_the_cell_may_keep_gets_the_item_builtin(source):
    assert ITEM_NAME in _rewritten(source)


@pytest.mark.parametrize("source", [
    "y = x[0] * 2 + x[1]", "y = -x[0]", "if x[0] > 0:\n    pass", "while x[0] < 1:\n    x += 1",
    "s += x[i]", "print(float(x[0]), int(x[1]), abs(x[2]))", "v = np.sqrt(x[0])",
    "v = math.exp(x[0])", "y = x[0].item()", "y = z[x[0]] + 1", "y = z[x[0]:x[1]]",
    "f'{x[0]}'", "y = np.full(3, fill_value=x[0])", "x[0] += 1", "x[0] = 5", "del x[0]",
    "r = x[:, 0]", "r = x[..., 0]", "r = x[0, None]", "r = x[np.newaxis, 0]",
    "assert x[0] == 1", "y = 1 if x[0] else 2", "v = x[0, ...]",
])
def test_an_item_used_where_it_stands_or_a_view_as_numpys_is_left_alone(source):
    assert ITEM_NAME not in _rewritten(source)


def test_annotations_stay_as_written():
    source = ("from __future__ import annotations\ndef f(a: list[int]) -> dict[str, x[0]]:\n"
              "    return a\nb: tuple[int] = (y[0],)\n")
    out = _rewritten(source)
    assert "def f(a: list[int]) -> dict[str, x[0]]:" in out
    assert f"b: tuple[int] = ({ITEM_NAME}(y[0]),)" in out


def test_ravel_calls_go_through_the_ravel_builtin_and_nothing_else_changes():
    assert _rewritten("r = X.T.ravel('F')") == f"r = {RAVEL_NAME}(X.T)('F')"
    assert _rewritten("y = x * 2\nz = f(y)") == "y = x * 2\nz = f(y)"


def test_the_rewritten_code_keeps_the_cells_lines():
    source = "a = 1\nb = [2]\nc = b[0]\nd = b[5]\n"
    code = compile(device_semantics(ast.parse(source), source), "<cell>", "exec")
    ns = {"__builtins__": {**__builtins__, ITEM_NAME: lambda v: v}} \
        if isinstance(__builtins__, dict) else {ITEM_NAME: lambda v: v}
    with pytest.raises(IndexError) as info:
        exec(code, ns)
    assert info.traceback[-1].lineno + 1 == 4 and ns["c"] == 2


ITEMS = [
    # the swap idiom: CuPy's items are views, so a[j] kept its value
    ("a[1], a[3] = a[3], a[1]", ("a",)),
    ("t = a[0]\na[0] = a[4]\na[4] = t", ("a", "t")),
    # kept while the array changes
    ("trace = []\nfor _ in range(3):\n    trace.append(a[0])\n    a[0] += 1", ("a", "trace")),
    ("old = a[2]\na[2] = 10\nd = a[2] - old", ("a", "old", "d")),
    # changed in place: NumPy's scalar is a copy
    ("s = X[0, 0]\ns += 100", ("X", "s")),
    ("firsts = [X[i, 0] for i in range(3)]\nX[:, 0] = -1", ("X", "firsts")),
    ("for i in range(1, 5):\n    a[i] = a[i - 1] * 2 + 1", ("a",)),
]


@pytest.mark.parametrize("line", ["--quiet", "--quiet --to-host"])
@pytest.mark.parametrize(("body", "names"), ITEMS)
def test_items_of_an_array_are_copies_as_numpys(ip, body, names, line):
    """A plain cell's ``a[i]`` is a scalar, a copy; on the GPU CuPy's is a 0-d view, and a
    swap, a value kept before a change, or a change to it came out different."""
    def fresh() -> dict:
        return {"np": np, "a": np.arange(6.0), "X": np.arange(12.0).reshape(3, 4)}

    plain = fresh()
    exec(body, plain)
    ip.user_ns.update(fresh())
    ip.run_cell_magic("gpu", line, body)
    for name in names:
        got = ip.user_ns[name]
        got = [np.asarray(v.get() if hasattr(v, "get") else v) for v in got] \
            if isinstance(got, list) else np.asarray(got.get() if hasattr(got, "get") else got)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(plain[name]), err_msg=name)


@pytest.mark.parametrize(("source", "made"), [
    ("y = np.float32(v[0])", "y = __cupy_magic_scalar__(np.float32, v[0])"),
    ("y = cp.int64(v, )", "y = __cupy_magic_scalar__(cp.int64, v)"),
    ("y = np.bool_(v > 1)", "y = __cupy_magic_scalar__(np.bool_, v > 1)"),
    ("y = np.zeros(3, np.float32)", "y = np.zeros(3, np.float32)"),
    ("t = np.float32", "t = np.float32"), ("d = np.dtype('f4')", "d = np.dtype('f4')"),
    ("y = np.float32()", "y = np.float32()"), ("y = other.float32(v)", "y = other.float32(v)"),
])
def test_a_numpy_scalar_type_called_goes_through_the_scalar_builtin(source, made):
    assert _rewritten(source) == made


SCALARS = ("y = np.float32(v[0])\nz = np.int64(v[1] * 3)\nb = np.bool_(v[2] > 1)\n"
           "w = np.float32(v)\nh = np.float64(np.float32(1.5))\nf = np.float32(v32)\n"
           "f += 1\n")


@pytest.mark.parametrize("line", ["--quiet", "--quiet --to-host"])
def test_a_numpy_scalar_of_a_device_value_is_numpys(ip, line):
    """``np.float32(v[0])``: NumPy reads the item; CuPy refused the implicit conversion of
    its 0-d array (a one-line refusal where a plain cell runs). The scalar is NumPy's, of
    NumPy's type; of a whole array, the array cast."""
    plain = {"np": np, "v": np.array([1.25, 2.5, 3.75]), "v32": np.ones(2, np.float32)}
    exec(SCALARS, plain)
    ip.user_ns.update(v=np.array([1.25, 2.5, 3.75]), v32=np.ones(2, np.float32))
    ip.run_cell_magic("gpu", line, SCALARS)
    for name in "yzbh":
        assert type(ip.user_ns[name]) is type(plain[name]), name
        assert ip.user_ns[name] == plain[name], name
    w = ip.user_ns["w"]
    w = w.get() if hasattr(w, "get") else w
    assert w.dtype == np.float32 and np.array_equal(w, plain["w"])
    v32 = ip.user_ns["v32"]  # np.float32 of a float32 array is the array: f += 1 changed it
    np.testing.assert_array_equal(v32.get() if hasattr(v32, "get") else v32, plain["v32"])


def test_a_function_the_cell_defines_runs_in_later_cells(ip):
    """A function defined in a ``%%gpu`` cell is compiled with the extension's builtins
    (``a[1]`` kept, ``v.ravel()``); it is committed into the user namespace, whose builtins
    are Python's, and a later plain cell calling it raised NameError."""
    ip.run_cell_magic("gpu", "--quiet", "def second(a):\n    return a[1]\n\n"
                      "def flat(a):\n    return a.ravel()\n")
    result = ip.run_cell("r = second(np.arange(3.0))\nq = flat(np.ones((2, 2)))\n")
    assert result.error_in_exec is None, result.error_in_exec
    assert ip.user_ns["r"] == 1.0 and ip.user_ns["q"].shape == (4,)


ITERS = ("seen = []\nfor e in v:\n    seen.append(e)\nv[:] = 0\n"
         "firsts = [e for e in w]\nw += 1\n"
         "top = max(u)\nlisted = list(u)\nfirst, *rest = u\npairs = list(zip(u, u))\n"
         "back = [float(e) for e in reversed(u)]\nkept = list(reversed(u))\n"
         "rit = reversed(u)\nlast = next(rit)\nu[:] = -1\nrest_r = list(rit)\n")


@pytest.mark.parametrize("line", ["--quiet", "--quiet --to-host"])
def test_the_items_a_loop_over_an_array_keeps_are_copies(ip, line):
    """CuPy's iteration over a 1-D array yields 0-d views: kept in a list (by a loop, a
    comprehension, ``list``, ``max``, ``zip`` or an unpacking), they showed the array's later
    values (all zeros here)."""
    def fresh() -> dict:
        return {"np": np, "v": np.arange(4.0), "w": np.arange(3.0), "u": np.arange(5.0)}

    plain = fresh()
    exec(ITERS, plain)
    ip.user_ns.update(fresh())
    ip.run_cell_magic("gpu", line, ITERS)
    for name in ("seen", "firsts", "listed", "rest", "back", "kept", "rest_r"):
        got = [float(e) for e in ip.user_ns[name]]
        assert got == [float(e) for e in plain[name]], name
    assert float(ip.user_ns["top"]) == plain["top"] and float(ip.user_ns["first"]) == 0.0
    assert float(ip.user_ns["last"]) == plain["last"] == 4.0
    assert [tuple(map(float, p)) for p in ip.user_ns["pairs"]] == \
        [tuple(map(float, p)) for p in plain["pairs"]]


@pytest.mark.parametrize(("source", "wrapped"), [
    ("m = max(x)", True), ("a, b = x", True), ("first, *rest = x", True),
    ("p = list(zip(x, y))", True), ("q = list(map(f, x))", True), ("a, b = b, a", False),
    ("n = len(x)", False), ("y = f(x)", False), ("r = reversed(x)", False),
])
def test_what_iterates_an_array_goes_through_the_iteration_builtin(source, wrapped):
    from cupy_magic.compat.views import ITER_NAME

    assert (ITER_NAME in _rewritten(source)) is wrapped


@pytest.mark.parametrize(("source", "wrapped"), [
    ("r = reversed(x)", True), ("r = list(reversed(x))", True), ("r = reversed(*xs)", False),
    ("r = x.reversed()", False),
])
def test_reversed_goes_through_its_builtin_with_the_function_the_cell_names(source, wrapped):
    from cupy_magic.compat.views import REVERSED_NAME

    text = _rewritten(source)
    assert (f"{REVERSED_NAME}(reversed, x" in text) is wrapped, text


def test_reversed_of_anything_but_a_device_vector_is_the_named_function():
    from cupy_magic.compat.views import reversed_copies

    assert list(reversed_copies(reversed, [1, 2, 3])) == [3, 2, 1]
    a = np.arange(3.0)
    assert [float(e) for e in reversed_copies(reversed, a)] == [2.0, 1.0, 0.0]
    assert reversed_copies(lambda v: ("mine", v), a)[0] == "mine"  # a reversed of the user's


def test_a_function_body_looks_its_builtins_up_when_it_runs_and_the_cell_names_them():
    text = _rewritten("for v in x:\n    pass\n"
                      "def f(x):\n    return list(x)\ng = lambda x: max(x)\n")
    cell, body = text.split("def f", 1)
    assert "__cupy_magic_iter__(x)" in cell and "__import__" not in cell
    assert body.count("getattr(__import__('builtins'), '__cupy_magic_iter__', None)") == 2


PICKLED = ("import pickle, sys\nimport numpy as np\n"
           "f = pickle.loads(sys.stdin.buffer.read())\n"
           "print(f(np.arange(4.0)))\n")


def test_a_function_a_cell_defined_runs_where_no_cell_ran(ip, tmp_path):
    """Pickled by value (cloudpickle, as ``client.submit(f, ...)`` does) into a process where
    cupy_magic never ran a cell, a function a ``%%gpu`` cell defined raised NameError: its
    body called the extension's builtins, which that process lacks."""
    import subprocess
    import sys

    cloudpickle = pytest.importorskip("cloudpickle")
    ip.run_cell_magic("gpu", "--quiet", "def f(x):\n    t = x[0]\n"
                      "    return [float(v) for v in reversed(x)] + [float(t), len(list(x))]\n")
    f = ip.user_ns["f"]
    assert f(np.arange(4.0)) == [3.0, 2.0, 1.0, 0.0, 0.0, 4]  # here, with the builtins
    done = subprocess.run([sys.executable, "-c", PICKLED], input=cloudpickle.dumps(f),
                          capture_output=True, cwd=tmp_path, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode()[-600:]
    assert done.stdout.decode().strip() == "[3.0, 2.0, 1.0, 0.0, 0.0, 4]"
