"""Real Jupyter kernels through nbclient: the installed kernel spec, errors, outputs."""

from __future__ import annotations

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

pytestmark = pytest.mark.kernel


def _run(cells: list[str], kernel: str = "python3", tags: dict[int, list[str]] | None = None):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    for i, t in (tags or {}).items():
        nb.cells[i].metadata["tags"] = t
    NotebookClient(nb, timeout=120, kernel_name=kernel).execute()
    return nb


def _text(cell) -> str:
    parts = []
    for out in cell.outputs:
        parts.append(out.get("text", ""))
        parts.append(out.get("data", {}).get("text/plain", ""))
        parts.append(out.get("data", {}).get("text/html", ""))
        parts.append(out.get("evalue", ""))
    return "\n".join(parts)


def test_installed_kernel_spec_runs_gpu_cells_without_load_ext():
    try:
        spec = KernelSpecManager().get_kernel_spec("cupy_magic")
    except NoSuchKernel:
        pytest.fail("the package should install the 'cupy_magic' kernel spec "
                    "(share/jupyter/kernels/cupy_magic); is it installed with pip?")
    assert spec.display_name == "Python 3 (cupy_magic)"
    nb = _run(["x = np.arange(6.0)", "%%gpu --to-host\ny = x * 2",
               "print(type(y).__name__, y[-1])"], kernel="cupy_magic")
    html = nb.cells[1].outputs[0]["data"]["text/html"]
    assert "cupy-magic-report" in html and "in x" in html
    assert "ndarray 10.0" in _text(nb.cells[2])


def test_notebook_with_load_ext_reports_and_fails_like_python():
    nb = _run(
        ["%load_ext cupy_magic", "import numpy as np\nx = np.ones(4)",
         "%%gpu\nkeep = 1\nboom = 1 / 0", "print('keep' in dir())"],
        tags={2: ["raises-exception"]},
    )
    assert "cupy_magic:" in _text(nb.cells[0])
    err = nb.cells[2].outputs[-1]
    assert err["output_type"] == "error" and err["ename"] == "ZeroDivisionError"
    assert "False" in _text(nb.cells[3])


def test_a_failing_gpu_cell_stops_the_notebook():
    with pytest.raises(CellExecutionError, match="ZeroDivisionError"):
        _run(["%load_ext cupy_magic", "%%gpu\n1 / 0", "print('not reached')"])


def test_a_cell_of_gpu_alone_does_not_stop_run_all():
    """IPython refuses an empty cell magic body before the magic runs; the extension gives a
    cell of ``%%gpu`` alone a blank body, so Run All goes on as after an empty plain cell."""
    nb = _run(["%load_ext cupy_magic", "%%gpu", "%%gpu --quiet", "print('reached')"])
    for cell in nb.cells[1:3]:
        assert _text(cell).strip() == "cupy_magic: the %%gpu cell is empty; nothing ran"
    assert "reached" in _text(nb.cells[3])
