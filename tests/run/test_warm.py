"""Warming the kernel cache for notebooks (issue 20): the cells read, the slices, the report,
and ``scripts/warm-cache`` run for real (a fresh process with its own IPython shell)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cupy_magic import backend
from cupy_magic.run.warm import CellWarm, WarmReport, read_cells, slice_inputs

ROOT = Path(__file__).resolve().parents[2]

CELLS = [
    "%load_ext cupy_magic\nimport numpy as np",
    "# markdown: not run",
    "x = np.random.default_rng(0).random((1_000_000, 4), dtype=np.float32)\n"
    "w = np.ones((4, 4), np.float32)",
    "%%gpu --to-host\ny = np.sqrt(x @ w) * 2\ntotal = y.sum()",
    "shapes = (y.shape, x.shape)",
    "%%gpu\nz = y.mean(axis=1)",
    "%%gpu\nq = undefined_name * 2",
]


def notebook(path: Path, cells: list[str], fails: tuple[int, ...] = ()) -> Path:
    """Write ``cells`` as a notebook; those at the indices ``fails`` tagged raises-exception."""
    def cell(k: int, src: str) -> dict:
        if src.startswith("# markdown"):
            return {"cell_type": "markdown", "metadata": {}, "source": src}
        meta = {"tags": ["raises-exception"]} if k in fails else {}
        return {"cell_type": "code", "metadata": meta, "execution_count": None, "outputs": [],
                "source": src.splitlines(keepends=True)}

    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                                "cells": [cell(k, c) for k, c in enumerate(cells)]}))
    return path


def test_read_cells_finds_the_gpu_cells_and_their_bodies(tmp_path):
    cells = read_cells(notebook(tmp_path / "a.ipynb", CELLS))
    assert [c.number for c in cells] == [1, 3, 4, 5, 6, 7]  # the markdown cell is skipped
    gpu = [c for c in cells if c.gpu]
    assert [c.number for c in gpu] == [4, 6, 7]
    assert gpu[0].first_line == "%%gpu --to-host"
    assert gpu[0].body == "y = np.sqrt(x @ w) * 2\ntotal = y.sum()"
    assert not cells[0].gpu and cells[0].body == cells[0].source


def test_read_cells_reads_the_raises_exception_tag(tmp_path):
    cells = read_cells(notebook(tmp_path / "a.ipynb", CELLS, fails=(6,)))
    assert [c.number for c in cells if c.fails] == [7]


def test_a_cell_meant_to_fail_is_labelled_and_not_a_failure():
    cells = [CellWarm("a.ipynb", 4, "%%gpu", 1024, 0.5, compiled=3),
             CellWarm("a.ipynb", 7, "%%gpu", 0, 0.1, error="BudgetExceeded: big",
                      meant_to_fail=True)]
    gpu = WarmReport("cupy", "NVIDIA H200", "in /tmp/c (CUPY_CACHE_DIR)", cells, ["a.ipynb"])
    text = str(gpu)
    assert "1 of 2 %%gpu cells of 1 notebook ran once on small slices (1 meant to fail, " \
           "tagged raises-exception)" in text
    assert "a.ipynb cell 7 `%%gpu`: failed as the notebook means it to (raises-exception), " \
           "BudgetExceeded: big" in text
    assert gpu.ok and not gpu.failed and WarmReport.from_json(gpu.to_json()) == gpu


def test_slices_cut_the_longest_inputs_only():
    be = backend.current()
    ns = {"np": np, "x": np.zeros((100_000, 4)), "w": np.ones((4, 4)), "k": 3}
    small, rows = slice_inputs("y = x @ w + k\n", ns, be)
    assert rows == 1024 and list(small) == ["x"] and small["x"].shape == (1024, 4)
    assert np.shares_memory(small["x"], ns["x"])  # a view: nothing copied
    assert slice_inputs("y = w * 2\n", ns, be) == ({}, 4)  # no more rows than the slice


def test_report_words_and_json_round_trip():
    cells = [CellWarm("a.ipynb", 4, "%%gpu", 1024, 0.5, compiled=3, loaded=1,
                      compile_seconds=1.25),
             CellWarm("a.ipynb", 7, "%%gpu", 0, 0.1, error="NameError: q")]
    gpu = WarmReport("cupy", "NVIDIA H200", "in /tmp/c (CUPY_CACHE_DIR)", cells, ["a.ipynb"])
    text = str(gpu)
    assert "1 of 2 %%gpu cells of 1 notebook ran once on small slices" in text
    assert "a.ipynb cell 4 `%%gpu`: first 1,024 rows, 0.500 s; 3 kernels compiled" in text
    assert "a.ipynb cell 7 `%%gpu`: failed, NameError: q" in text
    assert "compiled 3 kernels in 1.25 s and found 1 in the cache already" in text
    assert "CuPy's kernel cache is in /tmp/c (CUPY_CACHE_DIR)" in text
    assert not gpu.ok and WarmReport.from_json(gpu.to_json()) == gpu
    host = WarmReport("host", "CPU (NumPy)", "", cells, ["a.ipynb"])
    assert host.ok and "nothing to compile on the CPU fallback" in str(host)
    assert "kernels compiled" not in str(host)


def run_script(*args: str, backend_name: str = "host", cache: Path | None = None):
    env = {**os.environ, "CUPY_MAGIC_BACKEND": backend_name}
    if cache is not None:
        env["CUPY_CACHE_DIR"] = str(cache)
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "warm-cache"), *args],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)


def test_the_script_on_the_cpu_fallback_says_there_is_nothing_to_compile(tmp_path):
    done = run_script(str(notebook(tmp_path / "a.ipynb", CELLS)))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "[host]: 2 of 3 %%gpu cells of 1 notebook ran once on small slices" in out
    assert "a.ipynb cell 4 `%%gpu --to-host`: first 1,024 rows" in out
    assert "a.ipynb cell 7 `%%gpu`: failed, NameError: name 'undefined_name' is not defined" \
        in out
    assert "nothing to compile on the CPU fallback" in out
    assert "(not %%gpu): failed" not in out  # cell 5 read the slice's y and the full x


def test_the_script_labels_the_cells_a_notebook_means_to_fail(tmp_path):
    plain_fails = "undefined_too + 1"
    done = run_script(str(notebook(tmp_path / "a.ipynb", [*CELLS, plain_fails], fails=(6, 7))))
    assert done.returncode == 0, done.stderr
    assert "[host]: 2 of 3 %%gpu cells of 1 notebook ran once on small slices (1 meant to " \
           "fail, tagged raises-exception)" in done.stdout
    assert "cell 7 `%%gpu`: failed as the notebook means it to (raises-exception), NameError" \
        in done.stdout
    assert "(not %%gpu): failed" not in done.stdout  # the tagged plain cell too


def test_the_script_on_the_shipped_tour_reports_no_failure():
    done = run_script(str(ROOT / "notebooks" / "00_tour.ipynb"))
    assert done.returncode == 0, done.stderr
    assert "(1 meant to fail, tagged raises-exception)" in done.stdout
    assert ": failed," not in done.stdout and "(not %%gpu): failed" not in done.stdout


def test_from_a_running_shell_a_process_past_its_timeout_is_stopped_and_says_where(
        shell, tmp_path):
    from cupy_magic.session.warm import warm_cache

    slow = notebook(tmp_path / "a.ipynb", [*CELLS[:1], "import time\ntime.sleep(600)"])
    with pytest.raises(RuntimeError, match=r"(?s)past its timeout of 8 s.*"
                       r"<ipython-input-\d+-\w+>\", line 2 in <module>"):
        warm_cache([slow], timeout=8)


def test_the_script_reads_no_input_from_a_pipe_its_caller_keeps_open(tmp_path):
    """Run unattended, a cell that asks for input gets end-of-file and the script goes on,
    though the caller's stdin is a pipe it never closes (a job runner, a device tool)."""
    path = notebook(tmp_path / "a.ipynb", [*CELLS[:4], "answer = input()", "done = 1"])
    read_end, write_end = os.pipe()  # kept open here (communicate would close a PIPE)
    try:
        child = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "warm-cache"),
                                  str(path)], stdin=read_end, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                 env={**os.environ, "CUPY_MAGIC_BACKEND": "host"})
        try:
            out, err = child.communicate(timeout=60)
        finally:
            child.kill()
    finally:
        os.close(read_end)
        os.close(write_end)
    assert child.returncode == 0, err
    assert "a.ipynb cell 5 (not %%gpu): failed, EOFError" in out


@pytest.mark.parametrize("value", ["0", "-5", "nan"])
def test_the_script_refuses_a_timeout_that_is_not_above_zero(tmp_path, value):
    done = run_script("--timeout", value, str(notebook(tmp_path / "a.ipynb", CELLS[:1])))
    assert done.returncode == 2
    assert f"--timeout {value}: give seconds above 0, e.g. --timeout 600" in done.stderr


@pytest.mark.parametrize("value", [0, -1.0, float("nan")])
def test_warm_cache_refuses_a_timeout_that_is_not_above_zero(tmp_path, value):
    from cupy_magic.session.warm import warm_cache

    with pytest.raises(ValueError, match=r"timeout=.*: give seconds above 0, e.g. timeout=600"):
        warm_cache([notebook(tmp_path / "a.ipynb", CELLS[:1])], timeout=value)


def test_the_script_refuses_a_missing_notebook(tmp_path):
    done = run_script(str(tmp_path / "none.ipynb"))
    assert done.returncode == 2 and "no notebook at" in done.stderr


def test_from_a_running_shell_the_notebooks_run_in_another_process(shell, tmp_path):
    from cupy_magic.session.warm import warm_cache

    shell.user_ns.pop("x", None)
    report = warm_cache([notebook(tmp_path / "a.ipynb", CELLS[:4])], timeout=120)
    assert [(c.cell, c.rows, c.error) for c in report.cells] == [(4, 1024, "")]
    assert "x" not in shell.user_ns  # the notebook's names stayed in its own process
    assert report.ok


@pytest.mark.gpu
def test_gpu_the_script_builds_the_cache_and_a_second_run_loads_it(tmp_path):
    cache = tmp_path / "kernels"
    path = str(notebook(tmp_path / "a.ipynb", CELLS[:6]))
    first = run_script(path, "--json", backend_name="cupy", cache=cache)
    assert first.returncode == 0, first.stderr
    cold = WarmReport.from_json(first.stdout.strip().splitlines()[-1])
    assert cold.backend == "cupy" and str(cache) in cold.cache
    assert sum(c.compiled for c in cold.cells) > 0 and any(cache.iterdir())
    second = run_script(path, "--json", backend_name="cupy", cache=cache)
    warm = WarmReport.from_json(second.stdout.strip().splitlines()[-1])
    # a process's first build also asks NVRTC its version, which the record may count
    assert sum(c.compiled for c in warm.cells) < sum(c.compiled for c in cold.cells)
    assert sum(c.loaded for c in warm.cells) > 0


@pytest.mark.parametrize("script", ["warm-cache", "run-notebooks"])
def test_a_script_run_by_a_python_without_the_package_says_which_to_use(script, tmp_path):
    """``scripts/warm-cache`` with the shebang's python3 outside the venv: one line naming
    the Python to run it with (here: a Python without site-packages)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-S", str(ROOT / "scripts" / script),
                           str(notebook(tmp_path / "a.ipynb", CELLS[:1]))], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=60, check=False)
    assert done.returncode != 0
    assert f".venv/bin/python scripts/{script} notebooks/" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_setup_cell_with_matplotlib_inline_runs(tmp_path):
    """The shipped notebooks' setup cells start with ``%matplotlib inline``, which a plain
    IPython shell cannot switch to (no GUI loop): it must not fail, nor every cell after."""
    cells = ["%matplotlib inline\n%load_ext cupy_magic\nimport numpy as np", *CELLS[2:4]]
    done = run_script(str(notebook(tmp_path / "a.ipynb", cells)))
    assert done.returncode == 0, done.stderr
    assert "failed" not in done.stdout and "1 of 1 %%gpu cells" in done.stdout


def test_a_cell_made_for_its_inputs_shape_runs_as_written_after_failing_on_a_slice(tmp_path):
    """A reshape to a fixed shape cannot run on the first rows: the cell runs whole then."""
    cells = [*CELLS[:3], "%%gpu --to-host\ngrid = x.reshape(1000, 1000, 4)[:, :, 0] * 2",
             "assert grid.shape == (1000, 1000)"]
    done = run_script(str(notebook(tmp_path / "a.ipynb", cells)))
    assert done.returncode == 0, done.stderr
    assert "cell 4 `%%gpu --to-host`: as written (no input cut)" in done.stdout
    assert "failed" not in done.stdout


@pytest.mark.skipif(importlib.util.find_spec("distributed") is None, reason="needs distributed")
def test_a_second_notebook_can_start_a_local_cluster(tmp_path):
    """Between notebooks the shell's namespace is reset; in a plain shell that namespace is
    the process's __main__, and without its __spec__ no worker process could be spawned."""
    first = notebook(tmp_path / "a.ipynb", CELLS[:4])
    second = notebook(tmp_path / "b.ipynb", [
        CELLS[0], "%gpu_cluster local --workers 1", CELLS[2],
        "%%gpu --to-host --cluster\ny = x * 2", "%gpu_cluster off"])
    done = run_script(str(first), str(second))
    assert done.returncode == 0, done.stderr
    assert "failed" not in done.stdout and "2 of 2 %%gpu cells of 2 notebooks" in done.stdout
