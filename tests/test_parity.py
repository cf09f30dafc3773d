"""A ``%%gpu`` cell behaves like a plain cell (issue 17, points 1 to 4): its last expression
is shown and stored, IPython syntax works in it, its tracebacks name its own number and
lines, and it compiles under the shell's ``from __future__`` flags. Through a real shell
(both backends) and a real kernel (nbclient)."""

from __future__ import annotations
import __future__

import ast
import codeop
import re
from collections.abc import Iterator
from types import TracebackType

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

import cupy_magic
from cupy_magic.run import progress

ANSI = re.compile(r"\x1b\[[0-9;]*m")
ANNOTATED = "def f(x: int) -> int:\n    return x\nann = f.__annotations__\n"
OBJECTS, STRINGS = {"x": int, "return": int}, {"x": "int", "return": "int"}
ANNOTATIONS = __future__.annotations.compiler_flag


def cell(ip, body: str, line: str = "--quiet"):
    """Run ``%%gpu line`` over ``body`` as a notebook cell would (history stored)."""
    return ip.run_cell(f"%%gpu {line}\n{body}", store_history=True)


def _walk(tb: TracebackType | None) -> Iterator[TracebackType]:
    while tb is not None:
        yield tb
        tb = tb.tb_next


# --- 1. the last expression ---------------------------------------------------------------


def test_last_expression_is_shown_stored_in_out_and_underscore(ip):
    # IPython stops updating _ once a cell binds it (a `for _ in ...` of an earlier test
    # does, as in a plain cell): start from a namespace where it is IPython's
    for unders in ("_", "__", "___"):
        ip.user_ns.pop(unders, None)
    result = cell(ip, "A = np.arange(10)\nnp.add.reduce(A)", "--to-host")
    assert result.success
    assert type(result.result) is np.int64 and result.result == 45  # np.int64(45), as NumPy
    assert ip.user_ns["_"] is result.result
    assert ip.user_ns["Out"][result.execution_count] is result.result
    assert isinstance(ip.user_ns["A"], np.ndarray)
    report = cupy_magic.last_report()
    assert report is not None and [o.name for o in report.outputs] == ["A"]


def test_the_report_is_still_displayed_with_the_value(ip, capsys):
    result = cell(ip, "A = np.arange(3)\nA.sum()", "--to-host")
    shown = capsys.readouterr().out
    assert "%%gpu" in shown and "A:" in shown  # the report, as text in a terminal
    assert result.result == 3


def test_a_device_value_is_shown_as_the_device_holds_it(ip, xp):
    ip.user_ns["x"] = np.arange(4.0)
    result = cell(ip, "x * 2")
    assert isinstance(result.result, xp.ndarray)
    assert result.result.tolist() == [0.0, 2.0, 4.0, 6.0]


def test_to_host_brings_back_arrays_in_tuples_lists_and_named_tuples(ip, xp):
    """`--to-host` gives NumPy for every result a NumPy cell would have: also the arrays of
    np.diag_indices (a tuple), a list of them, and np.unique_all (a named tuple); with no
    --to-host they stay on the device."""
    cell(ip, "di = np.diag_indices(3)\nparts = [np.arange(2), 5]\n"
             "u = np.unique_all(np.array([2, 1, 2]))\n", "--quiet --to-host")
    di, parts, u = (ip.user_ns[n] for n in ("di", "parts", "u"))
    assert type(di) is tuple and all(type(a) is np.ndarray for a in di)
    assert type(parts) is list and type(parts[0]) is np.ndarray and parts[1] == 5
    assert type(u).__name__ == "UniqueAllResult" and type(u.counts) is np.ndarray
    assert u.values.tolist() == [1, 2] and u.counts.tolist() == [1, 2]
    cell(ip, "dd = np.diag_indices(3)\n")
    assert all(isinstance(a, xp.ndarray) for a in ip.user_ns["dd"])


def test_a_value_bound_to_a_committed_name_is_that_name(ip):
    ip.user_ns["x"] = np.arange(4.0)
    result = cell(ip, "y = x + 1\ny", "--to-host")
    assert result.result is ip.user_ns["y"] and isinstance(result.result, np.ndarray)


@pytest.mark.parametrize("body", ["A = np.arange(10)\nA.sum();",
                                  "A = np.arange(10)\nA.sum() ;  # quiet",
                                  "A = np.arange(10)\ntotal = A.sum()"])
def test_an_assignment_or_a_semicolon_shows_nothing(ip, body):
    result = cell(ip, body, "--to-host")
    assert result.success and result.result is None
    assert result.execution_count not in ip.user_ns["Out"]
    assert "A" in ip.user_ns  # the cell still ran


def test_a_batched_cell_says_its_last_expression_is_not_shown(ip):
    ip.user_ns["x"] = np.arange(8.0)
    result = cell(ip, "y = x * 2\ny.sum()", "--quiet --batch --batch-rows 4")
    assert result.success and result.result is None
    assert any("last expression" in n for n in cupy_magic.last_report().notes)


# --- 2. IPython syntax in the body --------------------------------------------------------


def test_line_magics_shell_commands_and_help_run_in_the_body(ip):
    ip.user_ns["x"] = np.arange(4.0)
    body = ("mode = %gpu_syncs\n"
            "said = !echo hi\n"
            "x?\n"
            "%timeit -n1 -r1 np.power(x, 3)\n"
            "y = np.power(x, 3)\n")
    result = cell(ip, body, "--to-host")
    assert result.success, result.error_in_exec
    assert ip.user_ns["mode"] in ("warn", "error", "off")
    assert list(ip.user_ns["said"]) == ["hi"]
    assert ip.user_ns["y"].tolist() == [0.0, 1.0, 8.0, 27.0]


def test_lines_after_ipython_syntax_keep_their_numbers(ip):
    result = cell(ip, "mode = %gpu_syncs\nsaid = !echo hi\nboom = 1 / 0\n")
    assert isinstance(result.error_in_exec, ZeroDivisionError)
    last = list(_walk(result.error_in_exec.__traceback__))[-1]
    assert last.tb_lineno == 3
    assert ip.compile._filename_map[last.tb_frame.f_code.co_filename] == \
        result.execution_count


# --- 3. the cell's own number -------------------------------------------------------------


def test_traceback_and_progress_name_the_cells_own_number(ip, monkeypatch):
    labels: list[str] = []
    start = progress.start
    monkeypatch.setattr(progress, "start", lambda label, *a, **k: (labels.append(label),
                                                                    start(label, *a, **k)))
    ip.run_cell("pass", store_history=True)  # IPython 9 counts up before a cell, 8 after
    result = cell(ip, "a = 1\nb = undefined_name\n")
    number = result.execution_count
    assert labels == [f"In [{number}]"]
    entries = [tb for tb in _walk(result.error_in_exec.__traceback__)
               if tb.tb_frame.f_code.co_filename in ip.compile._filename_map]
    assert {ip.compile._filename_map[tb.tb_frame.f_code.co_filename] for tb in entries} == \
        {number}
    assert entries[-1].tb_lineno == 2


# --- 5. from __future__ flags ------------------------------------------------------------


def _plain(ip, body: str):
    return ip.run_cell(body, store_history=True)


def test_a_gpu_cell_compiles_under_the_future_flags_of_earlier_cells(ip, plain_flags):
    # cupy_magic's own modules import annotations from __future__: none of it reaches a cell
    for future, expected in ((False, OBJECTS), (True, STRINGS)):
        if future:
            assert _plain(ip, "from __future__ import annotations").success
        assert _plain(ip, ANNOTATED).success and ip.user_ns.pop("ann") == expected
        result = cell(ip, ANNOTATED + "f.__annotations__")
        assert result.success, result.error_in_exec
        assert ip.user_ns["ann"] == expected and result.result == expected


def test_a_future_import_in_a_gpu_cell_holds_for_later_cells_as_in_a_plain_one(ip, plain_flags):
    kept = {}
    for kind, run in (("plain", _plain), ("gpu", cell)):
        ip.compile.reset_compiler_flags()
        result = run(ip, "from __future__ import annotations\n" + ANNOTATED + "1 / 0\n")
        assert isinstance(result.error_in_exec, ZeroDivisionError)  # kept though it failed
        kept[kind] = ip.compile.flags
        assert _plain(ip, ANNOTATED).success and ip.user_ns.pop("ann") == STRINGS
        assert cell(ip, ANNOTATED).success and ip.user_ns.pop("ann") == STRINGS
    assert kept["gpu"] == kept["plain"] and kept["gpu"] & ANNOTATIONS


def test_run_cell_from_python_inherits_no_future_flags_unless_given_a_compiler(ip, plain_flags):
    assert _plain(ip, "from __future__ import annotations").success  # the shell's, not ours
    namespace = {"np": np}
    cupy_magic.run_cell(ANNOTATED, namespace)
    assert namespace["ann"] == OBJECTS
    compiler = codeop.Compile()  # keeps a cell's future imports for the next, as a shell does
    cupy_magic.run_cell("from __future__ import annotations\n", namespace, compiler=compiler)
    cupy_magic.run_cell(ANNOTATED, namespace, compiler=compiler)
    assert namespace["ann"] == STRINGS and compiler.flags & ANNOTATIONS


# --- 1 to 4 through a real kernel ----------------------------------------------------------


def _run_notebook(cells: list[str], raises: set[int]) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    for i in raises:
        nb.cells[i].metadata["tags"] = ["raises-exception"]
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   coalesce_streams=True).execute()  # a print may arrive in pieces
    return nb


def _error_text(nb_cell) -> str:
    err = next(o for o in nb_cell.outputs if o["output_type"] == "error")
    return ANSI.sub("", "\n".join(err["traceback"]))


@pytest.mark.kernel
def test_a_kernel_shows_the_value_and_names_its_cells_right(monkeypatch):
    monkeypatch.setenv("CUPY_MAGIC_BACKEND", "host")
    nb = _run_notebook([
        "%load_ext cupy_magic\nimport numpy as np",
        "%%gpu --to-host\nA = np.arange(10)\nnp.add.reduce(A)",
        "print(repr(_), Out[2] is _)",
        "%%gpu --quiet\nmode = %gpu_syncs\nsaid = !echo hi\nboom = 1 / 0",
        "%vram_budget 1MB",
        "%%gpu --quiet\ny = np.ones(10**6)\nz = 2",
    ], raises={3, 5})
    value = nb.cells[1]
    result = next(o for o in value.outputs if o["output_type"] == "execute_result")
    assert result["data"]["text/plain"] == "np.int64(45)"
    assert result["execution_count"] == value.execution_count == 2
    assert any("cupy-magic-report" in o.get("data", {}).get("text/html", "")
               for o in value.outputs)  # the report is still shown
    assert "np.int64(45) True" in nb.cells[2].outputs[0]["text"]

    plain = _error_text(nb.cells[3])
    number = nb.cells[3].execution_count
    assert f"Cell In[{number}], line 3" in plain and "----> 3 boom = 1 / 0" in plain
    assert f"Cell In[{number + 1}]" not in plain

    budget = _error_text(nb.cells[5])
    number = nb.cells[5].execution_count
    tail = budget.split("BudgetExceeded:")[-2]  # the entries above the message line
    assert f"Cell In[{number}], line 1" in tail and "----> 1 y = np.ones(10**6)" in tail
    assert "cupy_magic" not in tail and "with_traceback" not in tail


@pytest.mark.kernel
def test_a_kernel_keeps_future_flags_and_reports_a_syntax_error_before_the_cluster(
        monkeypatch):
    monkeypatch.setenv("CUPY_MAGIC_BACKEND", "host")
    annotated = "%%gpu --quiet\n" + ANNOTATED
    nb = _run_notebook([
        "%load_ext cupy_magic",
        annotated + "before = ann",
        "from __future__ import annotations",
        annotated + "after = ann",
        "print(repr(before), repr(after), sep='|')",
        "%%gpu --quiet --cluster\ny = = 1",  # a fresh kernel: no Dask imported yet
        "%%gpu --quiet --cluster\ny = 1\nreturn y",
        "%%gpu --quiet --cluster\ny = 1",
    ], raises={5, 6, 7})
    assert nb.cells[4].outputs[0]["text"] == f"{OBJECTS!r}|{STRINGS!r}\n"
    said = ["".join(o.get("text", "") for o in c.outputs) for c in nb.cells]  # UsageError
    for index, line in ((5, 1), (6, 2)):
        assert f"UsageError: syntax error in the %%gpu cell, line {line}" in said[index]
        assert "no cluster" not in said[index]
    assert "--cluster asks for a cluster and no cluster is in use" in said[7]


def test_a_line_magic_in_the_cell_runs_in_the_cell_and_keeps_the_transaction(ip, xp):
    # %timeit merges the caller's names into the namespace it runs in; in a %%gpu cell that
    # is the cell's own, so z (a device array) must not leak into the user's namespace when
    # the cell then fails, and the magic times the device module's code
    ip.user_ns["x"] = np.arange(6.0)
    result = cell(ip, "z = x * 2\nt = %timeit -o -q -n1 -r1 z.sum()\nkind = type(z).__module__\n"
                      "1 / 0\n")
    assert isinstance(result.error_in_exec, ZeroDivisionError)
    assert "z" not in ip.user_ns and "t" not in ip.user_ns
    cell(ip, "z = x * 2\nt = %timeit -o -q -n1 -r1 z.sum()\nkind = type(z).__module__\n")
    assert ip.user_ns["kind"].split(".")[0] == xp.__name__.split(".")[0]
    assert ip.user_ns["t"].loops == 1
    assert ip.user_ns["get_ipython"]() is ip


# --- 5. a notebook's namespace of thousands of names ------------------------------------------

def test_a_cell_in_a_long_session_commits_what_it_binds_however_it_binds_it(ip, xp):
    """After a few hundred cells the namespace holds thousands of names (``_i12``, ``_12``);
    the commit scans them in C, and still finds names bound by ``globals()``, by ``global``
    in a function, by ``import *``, and names deleted, as a plain cell would leave them."""
    for i in range(3000):
        ip.user_ns[f"_i{i}"] = f"x = {i}\n"
    ip.user_ns.update(a=np.arange(4.0), gone=1, kept=np.ones(2))
    kept = ip.user_ns["kept"]
    cell(ip, "def f():\n    global g\n    g = 2\nf()\n"
             "globals()['dyn'] = a * 2\n"
             "from math import *\n"
             "del gone\n")
    ns = ip.user_ns
    assert ns["g"] == 2 and ns["pi"] > 3.14 and "gone" not in ns
    np.testing.assert_array_equal(xp.asnumpy(ns["dyn"]) if hasattr(xp, "asnumpy")
                                  else ns["dyn"], [0.0, 2.0, 4.0, 6.0])
    assert ns["kept"] is kept and ns["_i2999"] == "x = 2999\n"  # untouched names stay
    assert {o.name for o in cupy_magic.last_report().outputs} >= {"g", "dyn", "pi", "gone", "f"}


def test_a_warning_is_shown_once_and_its_registry_is_not_a_result_of_the_cell(ip):
    import warnings

    body = "import warnings\nwarnings.warn('careful')\ny = 1\n"
    shown = {}
    for kind, run in (("plain", lambda: ip.run_cell(body, store_history=True)),
                      ("gpu", lambda: cell(ip, body, ""))):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("default")  # once per location: each cell is a new one
            for _ in range(2):
                assert run().success
        shown[kind] = [(str(w.message), w.lineno) for w in seen]
    assert shown["gpu"] == shown["plain"] == [("careful", 2)] * 2
    assert "__warningregistry__" in ip.user_ns  # committed, as a plain cell leaves it
    for name in ("warnings", "y", "__warningregistry__"):
        del ip.user_ns[name]
    with pytest.warns(UserWarning, match="careful"):  # shown again: a new registry
        assert cell(ip, body, "").success and "__warningregistry__" in ip.user_ns
    assert [o.name for o in cupy_magic.last_report().outputs] == ["warnings", "y"]


def test_builtins_in_the_cell_is_a_module_as_in_a_plain_cell(ip):
    """``__builtins__`` in IPython's user namespace is the ``builtins`` module: a cell reaches
    Python's ``sum`` through it after the cell shadowed the name."""
    body = ("sum = None\ntotal = __builtins__.sum([1, 2])\n"
            "named = __builtins__.__name__\nkind = type(__builtins__).__name__\n")
    ip.run_cell(body)
    plain = [ip.user_ns.pop(n) for n in ("total", "named", "kind")]
    result = ip.run_cell("%%gpu --quiet\n" + body)
    assert result.success, result.error_in_exec
    assert [ip.user_ns[n] for n in ("total", "named", "kind")] == plain == [3, "builtins",
                                                                            "module"]


def test_who_in_the_cell_lists_the_names_a_plain_cell_lists(ip):
    """``%who`` in a ``%%gpu`` cell sees the cell's names, less its own stand-ins (its
    ``get_ipython``, and ``cp`` where the user has none), which a plain cell does not have."""
    ip.user_ns.pop("cp", None)
    plain = ip.run_cell("a_name = 1\n%who_ls", store_history=True).result
    gpu = ip.run_cell("%%gpu --quiet\na_name = 1\n%who_ls", store_history=True).result
    assert gpu == plain and "a_name" in plain


@pytest.mark.parametrize("prefix", ["", "%%gpu --quiet\n"])
def test_names_put_into_the_user_namespace_while_the_cell_runs_are_kept(ip, prefix):
    """``get_ipython().push`` and ``get_ipython().user_ns[...] = ...`` write into the user
    namespace itself, as tools do for a cell; they are no names the cell deleted."""
    result = ip.run_cell(prefix + 'get_ipython().push({"pushed": 1})\n'
                         'get_ipython().user_ns["put"] = 2\nbound = 3\n')
    assert result.success, result.error_in_exec
    assert [ip.user_ns.get(n) for n in ("pushed", "put", "bound")] == [1, 2, 3]
    if prefix:
        assert "deleted" not in str(cupy_magic.last_report())


def test_an_annotated_name_leaves_annotations_as_a_plain_cell_and_no_output_row(ip):
    """Python binds ``__annotations__`` for an annotated name at the top level: the cell
    leaves it in the user namespace, as a plain cell does, and it is no result of the cell."""
    ip.user_ns.pop("__annotations__", None)
    ip.run_cell("%%gpu --quiet\nwidth: int = 5\n")
    assert ip.user_ns["__annotations__"] == {"width": int} and ip.user_ns["width"] == 5
    assert [o.name for o in cupy_magic.last_report().outputs] == ["width"]


CHAINS = {
    "raise from": ("try:\n    {}['k']\nexcept KeyError as exc:\n"
                   "    raise ValueError('v') from exc\n",
                   "The above exception was the direct cause of the following exception"),
    "implicit": ("try:\n    {}['k']\nexcept KeyError:\n    raise ValueError('v')\n",
                 "During handling of the above exception, another exception occurred"),
    "from None": ("try:\n    {}['k']\nexcept KeyError:\n    raise ValueError('v') from None\n",
                  None),
}


@pytest.mark.parametrize("line", ["--quiet", "--quiet --batch --batch-rows 2"])
@pytest.mark.parametrize("chain", CHAINS)
def test_a_chained_error_keeps_its_cause_and_context_as_in_a_plain_cell(ip, capsys, chain,
                                                                        line):
    """The cell's own error is raised with the cause and context it raised it with: the
    traceback shows the error it was handling, as a plain cell's does."""
    body, sentence = CHAINS[chain]
    ip.user_ns["x"] = np.arange(4.0)
    seen = []
    for cell in ("y = x + 1\n" + body, f"%%gpu {line}\ny = x + 1\n" + body):
        capsys.readouterr()
        err = ip.run_cell(cell, store_history=True).error_in_exec
        shown = capsys.readouterr().out
        seen.append((type(err.__cause__), type(err.__context__), err.__suppress_context__,
                     sentence is not None and sentence in shown, "KeyError" in shown))
    assert seen[1] == seen[0]
    assert seen[0][3] == (sentence is not None)


class _Negate(ast.NodeTransformer):
    """An AST transformer as IPython's docs show one: every integer literal negated."""

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, int) and not isinstance(node.value, bool):
            return ast.copy_location(ast.Constant(-node.value), node)
        return node


def test_the_shells_ast_transformers_run_on_the_cell_as_on_a_plain_cell(ip, monkeypatch):
    """IPython runs a plain cell's tree through ``InteractiveShell.ast_transformers`` (sympy's
    integer wrapping, extensions' rewrites) before it compiles it; so does ``%%gpu``."""
    monkeypatch.setattr(ip, "ast_transformers", [_Negate()])
    body = "a = 2\nb = a * 3\nb + 1"
    seen = []
    for cell in (body, "%%gpu --quiet\n" + body):
        result = ip.run_cell(cell, store_history=True)
        assert result.success, result.error_in_exec
        seen.append((ip.user_ns["a"], ip.user_ns["b"], result.result))
    assert seen[1] == seen[0] == (-2, 6, 5)


def test_a_star_import_of_numpy_binds_what_the_cell_uses_as_in_a_plain_cell(ip, cupy_names):
    """``from numpy import *`` binds NumPy's names (the array module's in the cell); one the
    array module lacks (np.ndenumerate) is left unbound rather than stopping the cell."""
    body = "from numpy import *\ny = sqrt(arange(4.0))\nz = pi\ns = sum(ones(3))\n"
    seen = []
    for cell in (body, "%%gpu --quiet --to-host\n" + body):
        result = ip.run_cell(cell)
        assert result.success, result.error_in_exec
        seen.append((ip.user_ns["y"].tolist(), ip.user_ns["z"], float(ip.user_ns["s"]),
                     ip.user_ns["sqrt"] is np.sqrt))
    assert seen[1] == seen[0] == ([0.0, 1.0, 2.0 ** 0.5, 3.0 ** 0.5], np.pi, 3.0, True)


@pytest.mark.parametrize("body", [
    "d = {}\nd['missing']",
    "def f(a):\n    return a.sum(axis=5)\nf(x)",
    "b = np.dot(x, np.ones((3, 3)))",
    "b = eval('1 +')",
    "b = np.concatenate([x, np.ones((2, 2))])",
    "raise ExceptionGroup('several', [ValueError('one'), KeyError('two')])",
    "try:\n    raise ExceptionGroup('g', [ValueError('one')])\nexcept* ValueError:\n"
    "    raise KeyError('handled')",
])
@pytest.mark.parametrize("line", ["--quiet", "--quiet --batch --batch-rows 2"])
def test_a_traceback_goes_from_the_magics_call_to_the_cells_frame(ip, capsys, body, line):
    """Below the line that called the magic, the traceback is the cell's own, as a plain
    cell's: no frame of cupy_magic, none counted as hidden; also for an exception group,
    which IPython prints with Python's ``traceback`` module (it shows every frame)."""
    ip.user_ns["x"] = np.arange(4.0)
    capsys.readouterr()
    err = ip.run_cell(f"%%gpu {line}\ny = x + 1\n{body}", store_history=True).error_in_exec
    shown = ANSI.sub("", "".join(capsys.readouterr()))
    assert err is not None and "y" not in ip.user_ns
    assert "cupy_magic" not in shown and "skipping hidden" not in shown, shown
    assert body.splitlines()[-1].strip() in shown


SCALARS = ["m = f.mean()", "s = f.sum(dtype=np.float32)", "v = f[0, 1]", "n = np.dot(f[0], f[1])",
           "d = np.linalg.det(f[:3, :3])", "t = divmod(f.sum(), 2)",
           "r = np.linalg.slogdet(f[:3, :3])"]


@pytest.mark.parametrize("body", SCALARS)
def test_a_number_brought_to_the_host_is_the_numpy_scalar_a_plain_cell_gives(ip, body):
    """Under ``--to-host`` a reduction, an element or a determinant is NumPy's scalar
    (``np.float64``, a ``float`` subclass), where CuPy gives a 0-d device array on a GPU;
    in a tuple too. A 0-d array the user had stays a 0-d array (``a += 1``)."""
    f = np.arange(12.0).reshape(4, 3) + np.eye(4, 3)
    plain = {"np": np, "f": f}
    exec(body, plain)
    name = body.split(" =")[0]
    ip.user_ns.update(f=f, a=np.array(2.0))
    ip.run_cell_magic("gpu", "--quiet --to-host", body + "\na += 1")
    got, want = ip.user_ns[name], plain[name]
    for g, w in zip(*((v if isinstance(v, tuple) else (v,)) for v in (got, want)), strict=True):
        assert type(g) is type(w) and g == pytest.approx(w)
    assert type(ip.user_ns["a"]) is np.ndarray and ip.user_ns["a"].ndim == 0
    assert ip.user_ns["a"] == 3.0
