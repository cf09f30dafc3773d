"""The kernel tests run the IPython the tests run: CI runs the parity tests once on IPython 9
(the main venv) and once on IPython 8 (a second venv, ``.ci/run``), and the kernel tests of
that run must exercise the same major version, not whichever IPython a stray kernel spec
points at (IPython 9 counts a cell before it runs, 8 after: issue 17, point 3)."""

from __future__ import annotations

import IPython
import nbformat
import pytest
from nbclient import NotebookClient


@pytest.mark.kernel
def test_the_python3_kernel_runs_the_ipython_of_the_tests():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import IPython, sys\n"
                                          "print(IPython.__version__, sys.executable)")]
    NotebookClient(nb, timeout=60, kernel_name="python3",
                   coalesce_streams=True).execute()  # a print may arrive in pieces
    version, _ = nb.cells[0].outputs[0]["text"].split()
    assert version == IPython.__version__
