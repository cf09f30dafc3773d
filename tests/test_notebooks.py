"""The workshop notebooks: what scripts/make_notebooks.py writes is what is committed, and each
notebook has exercises, collapsed solutions and a "what you learned" (issue 6).

Running them is `scripts/run-notebooks` (CI runs every notebook on the CPU fallback; the GPU
check runs them on the H200); these tests read them only.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _maker():
    spec = importlib.util.spec_from_file_location("make_notebooks",
                                                  ROOT / "scripts" / "make_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_committed_notebook_is_written_by_the_script():
    maker = _maker()
    assert sorted(maker.NOTEBOOKS) == [p.name for p in NOTEBOOKS]
    for path in NOTEBOOKS:
        committed = nbformat.read(path, as_version=4)
        built = maker.NOTEBOOKS[path.name]()
        assert [(c.cell_type, c.source) for c in committed.cells] == \
            [(c.cell_type, c.source) for c in built.cells], \
            f"{path.name} differs from scripts/make_notebooks.py: run it, then the notebooks"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_exercises_have_collapsed_solutions_and_a_summary(path):
    nb = nbformat.read(path, as_version=4)
    tags = [c.metadata.get("tags", []) for c in nb.cells]
    assert sum("exercise" in t for t in tags) >= 2
    solutions = [c for c, t in zip(nb.cells, tags, strict=True) if "solution" in t]
    assert solutions
    for cell in solutions:
        assert cell.metadata["jupyter"] == {"source_hidden": True, "outputs_hidden": True}
    assert nb.cells[-1].cell_type == "markdown"
    assert nb.cells[-1].source.startswith("## What you learned")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_outputs_come_from_a_gpu_and_say_when(path):
    """Committed outputs are a GPU run's (readers see real figures), with its date printed."""
    nb = nbformat.read(path, as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []))
    if not text:
        pytest.skip(f"{path.name} has no outputs yet (written by the script, not run)")
    assert "NVIDIA" in text and "CPU (NumPy)" not in text
    assert re.search(r"\b20\d\d-\d\d-\d\d\b", text)


def test_keep_outputs_rewrites_unchanged_notebooks_byte_for_byte(tmp_path):
    """``make_notebooks.py --keep-outputs`` keeps the committed (GPU) outputs of the cells
    whose source did not change, so editing one cell does not drop a notebook's outputs."""
    for path in NOTEBOOKS:
        (tmp_path / path.name).write_bytes(path.read_bytes())
    assert _maker().main(["--keep-outputs", "--out", str(tmp_path)]) == 0
    for path in NOTEBOOKS:
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), path.name


@pytest.mark.kernel
def test_run_notebooks_names_a_failure_in_plain_text(tmp_path):
    """The FAILED line gives the error's last line without the traceback's colour codes."""
    import subprocess
    import sys

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = [1]\nx[3]")]
    nbformat.write(nb, tmp_path / "bad.ipynb")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "run-notebooks"), "--out",
                           str(tmp_path / "out"), str(tmp_path / "bad.ipynb")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    failed = done.stdout.splitlines()
    assert failed[0].startswith("FAILED") and failed[1].strip() == \
        "IndexError: list index out of range"
    assert "\x1b" not in done.stdout


def test_run_notebooks_stops_at_its_deadline_and_keeps_the_summary(tmp_path):
    """``--deadline S``: a cell running then is cut (a timeout, not a crash), the notebooks
    not started are reported not run, and the summary says so (gpu-check's
    GPU_CHECK_DEADLINE: a device call killed from outside left no summary at all)."""
    import json
    import subprocess
    import sys

    cells = {"quick": "x = 1", "slow": "import time\ntime.sleep(60)", "later": "y = 2"}
    for name, source in cells.items():
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(source)]
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
    summary = tmp_path / "summary.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "run-notebooks"), "--out",
                           str(tmp_path / "out"), "--deadline", "20", "--summary",
                           str(summary), *(str(tmp_path / f"{n}.ipynb") for n in cells)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr[-2000:]
    got = {Path(r["notebook"]).stem: r for r in json.loads(summary.read_text())}
    assert got["quick"]["ok"] and got["quick"]["error"] == ""
    assert not got["slow"]["ok"] and got["slow"]["error"].startswith("timed out after")
    assert got["slow"]["seconds"] < 30
    assert got["later"] == {"notebook": str(tmp_path / "later.ipynb"), "seconds": 0.0,
                            "ok": False, "error": "not run: --deadline 20 s reached",
                            "output": ""}
