"""A ``%%gpu`` cell run again: its options line and its transformed text are read once
(argparse and the shell's transforms took 150-230 us of each run of a small cell on the
CPU), and the second run behaves as the first, as a plain cell run again does: a change of
the shell's transformers, of autocall or of a post-transformer between runs takes effect,
and a wrong line is refused each time. Through a real shell, on each backend."""

from __future__ import annotations

import numpy as np
import pytest
from IPython.core.error import UsageError

from cupy_magic.magics import parse_argstring
from cupy_magic.magics.cellshell import transformed


def test_an_options_line_read_again_gives_a_fresh_namespace(ip):
    gpu = ip.magics_manager.registry["GpuMagics"].gpu
    first = parse_argstring(gpu, "--reduce a=sum --reduce b=max --to-host y")
    first.reduce.append("c=min")  # the caller's own change stays its own
    again = parse_argstring(gpu, "--reduce a=sum --reduce b=max --to-host y")
    assert again.reduce == ["a=sum", "b=max"] and again is not first
    assert vars(again) == {**vars(first), "reduce": ["a=sum", "b=max"]}
    for _ in range(2):  # refused each time, not remembered as read
        with pytest.raises(UsageError, match="--streams"):
            parse_argstring(gpu, "--streams 2 --streams 3")


def test_a_cell_with_shell_syntax_run_twice_runs_as_the_first_time(ip):
    ip.user_ns["x"] = np.arange(4.0)
    cell = "y = x * 2\nout = !echo hi\n%time z = 1\nn = len(out)\n"
    for _ in range(2):
        ip.user_ns.pop("y", None)
        result = ip.run_cell("%%gpu --quiet --to-host y\n" + cell)
        assert result.success, result.error_in_exec
        assert list(ip.user_ns["out"]) == ["hi"] and ip.user_ns["n"] == 1
        np.testing.assert_array_equal(ip.user_ns["y"], np.arange(4.0) * 2)


def test_a_transformer_added_between_runs_applies_to_the_next(ip):
    ip.user_ns["x"] = np.arange(4.0)
    cell = "y = x + 1\nw = 'NAME'\n"
    assert ip.run_cell("%%gpu --quiet\n" + cell).success
    assert ip.user_ns["w"] == "NAME"

    def rename(lines: list[str]) -> list[str]:
        return [line.replace("NAME", "renamed") for line in lines]

    assert transformed(ip, cell) == cell
    ip.input_transformers_cleanup.append(rename)
    try:
        assert ip.run_cell("%%gpu --quiet\n" + cell).success
        assert ip.user_ns["w"] == "renamed"  # as a plain cell's
        assert ip.run_cell(cell).success and ip.user_ns["w"] == "renamed"
        # the shell hands %%gpu its body transformed already; the body's own transform, kept
        # from the first run, is the shell's again with the new transformer in place
        assert transformed(ip, cell) == cell.replace("NAME", "renamed")
    finally:
        ip.input_transformers_cleanup.remove(rename)
    assert ip.run_cell("%%gpu --quiet\n" + cell).success
    assert ip.user_ns["w"] == "NAME" and transformed(ip, cell) == cell


def test_a_post_transformer_runs_on_every_run(ip):
    calls: list[int] = []

    def counted(lines: list[str]) -> list[str]:
        calls.append(len(lines))
        return lines

    ip.input_transformers_post.append(counted)
    try:
        for _ in range(2):
            assert ip.run_cell("%%gpu --quiet\na = 1\nb = a + 1\n").success
    finally:
        ip.input_transformers_post.remove(counted)
    assert calls.count(2) == 2 and ip.user_ns["b"] == 2


def test_a_one_line_cell_follows_autocall_as_it_changes(ip):
    ip.user_ns["double"] = lambda v: v * 2
    ip.run_line_magic("autocall", "0")
    try:
        assert ip.run_cell("%%gpu --quiet\nr = double(4)").success
        plain_off = ip.run_cell("r2 = double 4")
        off = ip.run_cell("%%gpu --quiet\ndouble 4")
        assert not plain_off.success and not off.success  # a syntax error both ways
        ip.run_line_magic("autocall", "1")
        plain_on = ip.run_cell("double 4")
        on = ip.run_cell("%%gpu --quiet\ndouble 4")
        assert plain_on.success and plain_on.result == 8
        assert on.success, on.error_in_exec
    finally:
        ip.run_line_magic("autocall", "0")
