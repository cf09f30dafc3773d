"""Top-level ``await`` (``async for``, ``async with``) in a ``%%gpu`` cell: a plain cell
runs it as a coroutine; a ``%%gpu`` cell runs synchronously, so it refuses it in one line that
names the line and the fix (it used to call it a syntax error). Through a real IPython shell,
on both backends."""

from __future__ import annotations

import pytest

AWAITS = [("import asyncio\nawait asyncio.sleep(0)\nv = 5\nv", 2),
          ("async def g():\n    yield 1\nres = [i async for i in g()]", 3),
          ("import contextlib\nasync with contextlib.nullcontext():\n    w = 1", 2)]


@pytest.mark.parametrize(("body", "line"), AWAITS)
def test_top_level_await_is_refused_in_one_line_naming_the_line_and_the_fix(ip, body, line):
    """A plain cell can await at its top (IPython runs it as a coroutine); a %%gpu cell runs
    synchronously, so it says so, with the line, instead of calling it a syntax error."""
    assert ip.run_cell(body).success  # as a plain cell
    result = ip.run_cell("%%gpu --quiet\n" + body)
    message = str(result.error_in_exec)
    assert "\n" not in message and "syntax error" not in message
    assert message.startswith("top-level await in the %%gpu cell, line ")
    assert f"line {line} (" in message and "await in a plain cell before it" in message


def test_await_inside_a_function_the_cell_defines_is_not_refused(ip):
    result = ip.run_cell("%%gpu --quiet\nimport asyncio\nasync def f():\n"
                         "    await asyncio.sleep(0)\n    return 2\nr = asyncio.run(f())")
    assert result.success and ip.user_ns["r"] == 2


def test_a_real_syntax_error_with_an_await_is_still_a_syntax_error(ip):
    message = str(ip.run_cell("%%gpu --quiet\nawait f(\n").error_in_exec)
    assert message.startswith("syntax error in the %%gpu cell")
