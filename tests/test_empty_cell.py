"""A cell of ``%%gpu`` alone runs as an empty plain cell does (IPython refuses an empty cell
body before the magic is called): it says so in one line and stops nothing; other magics,
cells with a body, ``%%gpu?`` and the terminal's wait for the body are as they were."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from cupy_magic.magics.emptycell import with_a_body

NOTE = "cupy_magic: the %%gpu cell is empty; nothing ran\n"


@pytest.mark.parametrize("cell", ["%%gpu", "%%gpu --quiet", "%%gpu\n", "\n%%gpu --batch\n"])
def test_a_cell_of_the_gpu_line_alone_runs_and_says_it_is_empty(ip, cell, capsys):
    capsys.readouterr()
    result = ip.run_cell(cell, store_history=True)
    assert result.error_before_exec is None and result.error_in_exec is None
    assert capsys.readouterr().out == NOTE


def test_other_cells_are_transformed_as_before(ip):
    transform = ip.input_transformer_manager.transform_cell
    assert "run_cell_magic('capture', '', '')" in transform("%%capture")
    assert "run_cell_magic('gpux', '', '')" in transform("%%gpux")
    assert "run_cell_magic('gpu', '', 'y = 1\\n')" in transform("%%gpu\ny = 1\n")
    assert "run_cell_magic('gpu', '', '\\n')" in transform("%%gpu")
    result = ip.run_cell("%%capture", store_history=True)  # IPython's own refusal
    assert isinstance(result.error_in_exec, UsageError)
    assert "cell body is empty" in str(result.error_in_exec)
    assert with_a_body(["%%gpux\n"]) == ["%%gpux\n"]
    assert with_a_body(["%%gpu?\n"]) == ["%%gpu?\n"]
    assert with_a_body(["%%gpu\n", "y = 1\n"]) == ["%%gpu\n", "y = 1\n"]


def test_a_terminal_still_waits_for_the_body(ip):
    assert ip.input_transformer_manager.check_complete("%%gpu")[0] == "incomplete"
    assert ip.input_transformer_manager.check_complete("%%gpu\ny = 1\n\n")[0] == "complete"


def test_unload_removes_the_transformer(ip):
    assert ip.input_transformers_cleanup.count(with_a_body) == 1
    ip.run_line_magic("load_ext", "cupy_magic")  # loaded again: still once
    assert ip.input_transformers_cleanup.count(with_a_body) == 1
    ip.run_line_magic("unload_ext", "cupy_magic")
    assert with_a_body not in ip.input_transformers_cleanup
    result = ip.run_cell("%%gpu", store_history=True)
    assert result.error_in_exec is not None  # the magic is gone with it
    ip.run_line_magic("load_ext", "cupy_magic")  # as the fixture's teardown expects
