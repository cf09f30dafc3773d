"""A cell's code compiled once per text and flags, renamed for each run (issue 20)."""

from __future__ import annotations
import __future__

import codeop
import traceback
import uuid
import warnings

import pytest

from cupy_magic.run.compiled import compile_cell

ANNOTATIONS = __future__.annotations.compiler_flag


def _fresh(text: str) -> str:
    return f"# {uuid.uuid4()}\n{text}"  # a text no other test compiled


def _filenames(code) -> set[str]:
    names = {code.co_filename}
    for const in code.co_consts:
        if hasattr(const, "co_filename"):
            names |= _filenames(const)
    return names


def test_a_text_run_again_gets_its_own_file_name_down_to_nested_functions():
    src = _fresh("def f(v):\n    g = lambda w: w + 1\n    return g(v)\nf(2)\n")
    first = compile_cell(src, "<gpu-cell-a>", codeop.Compile(), split=True)
    again = compile_cell(src, "<gpu-cell-b>", codeop.Compile(), split=True)
    assert _filenames(first.code) == {"<gpu-cell-a>"}
    for code in (again.code, again.body, again.last):
        assert _filenames(code) == {"<gpu-cell-b>"}
    ns: dict = {}
    exec(again.body, ns)
    assert eval(again.last, ns) == 3
    assert ns["f"].__code__.co_filename == "<gpu-cell-b>"
    assert again.code.co_code == first.code.co_code


class Counting(codeop.Compile):
    """A real compiler that counts what it compiles."""

    calls = 0

    def __call__(self, *args, **kwargs):
        Counting.calls += 1
        return super().__call__(*args, **kwargs)


def test_the_same_text_under_the_same_flags_is_compiled_once():
    src = _fresh("y = 2\ny * 3\n")
    compile_cell(src, "<n>", Counting(), split=True)
    assert Counting.calls == 3  # the cell, its body, its last expression
    for name in ("<o>", "<p>"):
        compile_cell(src, name, Counting(), split=True)
    assert Counting.calls == 3
    compile_cell(src + "\n", "<q>", Counting(), split=True)  # another text
    assert Counting.calls == 6


def test_a_traceback_of_a_kept_cell_names_this_run_and_its_line():
    src = _fresh("x = 1\nraise ValueError('here')\n")
    compile_cell(src, "<gpu-cell-c>", codeop.Compile(), split=False)
    code = compile_cell(src, "<gpu-cell-d>", codeop.Compile(), split=False).code
    with pytest.raises(ValueError) as info:
        exec(code, {})
    frame = traceback.extract_tb(info.tb)[-1]
    assert (frame.filename, frame.lineno) == ("<gpu-cell-d>", 3)


def test_split_only_when_asked_and_only_for_a_last_expression():
    src = _fresh("y = 2\ny * 3\n")
    assert compile_cell(src, "<e>", codeop.Compile(), split=False).body is None
    shown = compile_cell(src, "<f>", codeop.Compile(), split=True)
    assert shown.body is not None and shown.last is not None
    ns: dict = {}
    exec(shown.body, ns)
    assert eval(shown.last, ns) == 6
    statement = compile_cell(_fresh("y = 2\n"), "<g>", codeop.Compile(), split=True)
    assert statement.body is None and statement.last is None


def test_flags_are_part_of_the_key_and_a_kept_future_import_still_reaches_the_compiler():
    src = _fresh("def f(a: undefined_name) -> int:\n    return 1\nr = f.__annotations__\n")
    plain, future = codeop.Compile(), codeop.Compile()
    future.flags |= ANNOTATIONS
    with pytest.raises(NameError):  # annotations evaluated: the name does not exist
        exec(compile_cell(src, "<h>", plain, split=False).code, {})
    ns: dict = {}
    exec(compile_cell(src, "<i>", future, split=False).code, ns)
    assert ns["r"] == {"a": "undefined_name", "return": "int"}  # strings under the flag
    # a cell with its own future import leaves the flag in its compiler, kept or not
    own = _fresh("from __future__ import annotations\nz = 1\n")
    for name in ("<j>", "<k>"):
        compiler = codeop.Compile()
        compile_cell(own, name, compiler, split=False)
        assert compiler.flags & ANNOTATIONS


def test_a_syntax_error_is_raised_each_time_and_nothing_is_kept():
    src = _fresh("y = (1,\n")
    for name in ("<l>", "<m>"):
        with pytest.raises(SyntaxError) as info:
            compile_cell(src, name, codeop.Compile(), split=True)
        assert info.value.filename == name


def test_a_text_whose_compiling_warns_warns_on_every_run():
    src = _fresh("x = 1\ny = x is 1\n")  # SyntaxWarning: "is" with a literal
    for name in ("<r>", "<s>"):
        with pytest.warns(SyntaxWarning, match="is"):
            code = compile_cell(src, name, codeop.Compile(), split=False).code
        assert code.co_filename == name
    with warnings.catch_warnings():  # a user's "error" filter: the plain compile's error
        warnings.simplefilter("error")
        with pytest.raises(SyntaxError):
            compile_cell(src, "<t>", codeop.Compile(), split=False)
