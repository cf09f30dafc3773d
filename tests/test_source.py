"""A cell's line as messages quote it: stripped, its comment left out, and as written where
the line cannot be read alone (cupy_magic.source)."""

from __future__ import annotations

import linecache

import pytest

from cupy_magic.source import line_code

CELL = ("x = np.ones(10)  # 80 bytes here\n"
        "s = 'a # not a comment'\n"
        "y = f(x,  # inside a call\n"
        "      2)\n"
        "# a comment alone\n")


@pytest.fixture
def cell() -> str:
    name = "<test-source-cell>"
    linecache.cache[name] = (len(CELL), None, CELL.splitlines(keepends=True), name)
    yield name
    linecache.cache.pop(name, None)


@pytest.mark.parametrize(("line", "code"), [
    (1, "x = np.ones(10)"),
    (2, "s = 'a # not a comment'"),
    (3, "y = f(x,"),  # read alone the bracket is open: as far as the comment still
    (4, "2)"),
    (5, ""),
    (9, ""),  # no such line
    (None, ""),
])
def test_a_line_is_quoted_without_its_comment(cell, line, code):
    assert line_code(cell, line) == code


def test_an_over_budget_message_quotes_the_line_without_its_comment(ip):
    ip.run_line_magic("vram_budget", "1MB")
    try:
        result = ip.run_cell("%%gpu --quiet\nbig = np.ones(2**20)  # 8 MiB, over the budget\n")
    finally:
        ip.run_line_magic("vram_budget", "off")
    text = str(result.error_in_exec)
    assert "line 1 `big = np.ones(2**20)`" in text and "over the budget`" not in text
    assert "big" not in ip.user_ns
