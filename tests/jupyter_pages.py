"""What the browser tests share: a real Jupyter server (JupyterLab 4 or Notebook 7) over one
notebook, headless Debian Chromium, the page actions both apps answer to, and the ``%%gpu``
cells both must show as a user sees them.

Needs Debian's ``chromium`` at /usr/bin/chromium (``.ci/run`` installs it) and the
``playwright`` Python package; never ``playwright install``. Screenshots go to
``$CUPY_MAGIC_ARTIFACTS`` (default: the test's temporary folder).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# The two apps: how to start each, and where its page for a notebook is.
APPS = {
    "lab": (["-m", "jupyterlab", "--LabApp.news_url=None", "--LabApp.expose_app_in_browser=True"],
            "lab/tree"),
    "notebook": (["-m", "notebook", "--JupyterNotebookApp.expose_app_in_browser=True"],
                 "notebooks"),
}

# %%gpu cells as a user writes them (issue 17): the last expression shown (point 1) and a
# batched cell with the live panel, slow enough on the CPU fallback to watch its batches.
GPU_CELLS = [
    "%load_ext cupy_magic\nimport time\nimport numpy as np\nx = np.ones((40, 1000))",
    "%%gpu --to-host\nA = np.arange(10)\nnp.add.reduce(A)",
    "%%gpu --panel --batch --batch-rows 2 --reduce total=sum\ntime.sleep(0.4)\n"
    "y = np.sqrt(x) * 2\ntotal = y.sum()",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def needs_a_browser() -> None:
    """Skip the calling test where the browser or its driver is missing."""
    pytest.importorskip("playwright.sync_api", reason="needs the playwright Python package")
    if not CHROMIUM.exists():
        pytest.skip("needs Debian chromium at /usr/bin/chromium (apt-get install chromium)")


@contextmanager
def jupyter_server(app: str, tmp_path: Path, cells: list[str]) -> Iterator[str]:
    """Serve a notebook of ``cells`` with ``app`` ("lab" or "notebook"); yield its page URL.

    The notebook's kernel (python3) is started before the page opens, so the page finds a
    running session and asks nothing. Everything the server writes stays under ``tmp_path``.
    """
    args, page_path = APPS[app]
    home, root = tmp_path / "home", tmp_path / "root"
    root.mkdir()
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}",
                     "metadata": {}, "outputs": [], "source": src}
                    for i, src in enumerate(cells)],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                      "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    (root / "test.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    # No "official Jupyter news?" toast over the screenshots (both apps read these settings).
    settings = home / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    env = dict(os.environ, HOME=str(home), JUPYTERLAB_SETTINGS_DIR=str(home / "lab-settings"),
               IPYTHONDIR=str(home / ".ipython"), JUPYTER_CONFIG_DIR=str(home / ".jupyter"),
               JUPYTER_RUNTIME_DIR=str(home / ".jupyter-rt"), CUPY_CACHE_DIR=str(home / ".cupy"))
    port, token = _free_port(), secrets.token_hex(16)
    cmd = [sys.executable, *args, "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--allow-root"]
    log_path = tmp_path / f"{app}.log"
    log = log_path.open("w")
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{app} did not start:\n{log_path.read_text()}") from None
                time.sleep(0.3)
        request = urllib.request.Request(
            f"{url}/api/sessions?token={token}", method="POST",
            data=json.dumps({"path": "test.ipynb", "type": "notebook", "name": "",
                             "kernel": {"name": "python3"}}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as reply:
            assert reply.status == 201
        yield f"{url}/{page_path}/test.ipynb?token={token}"
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def artifacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("CUPY_MAGIC_ARTIFACTS") or tmp_path / "artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextmanager
def notebook_page(url: str, tmp_path: Path, final_shot: Path) -> Iterator[Any]:
    """Open ``url`` in headless Chromium, wait for the notebook's idle kernel; yield the page.

    However the test ends, the page is saved to ``final_shot`` first: the first thing to
    look at on a failure.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM), headless=True,
            args=FLAGS, viewport={"width": 1280, "height": 1000})
        try:
            page = ctx.pages[0] if ctx.pages else ctx.new_page()
            page.goto(url)
            page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
            # With several kernel specs installed the app may still ask; keep python3.
            dialog = page.locator(".jp-Dialog")
            try:
                dialog.wait_for(state="visible", timeout=3_000)
            except PlaywrightTimeout:
                pass  # no question asked
            else:
                dialog.locator("select").select_option(label="Python 3 (ipykernel)")
                dialog.locator(".jp-mod-accept").click()
                dialog.wait_for(state="hidden", timeout=10_000)
            # The kernel as the app sees it (both apps expose it the same way).
            page.wait_for_function(
                "() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                " const k = w && w.sessionContext && w.sessionContext.session"
                " && w.sessionContext.session.kernel; return k && k.status === 'idle'; }",
                timeout=60_000)
            yield page
        finally:
            ctx.pages[0].screenshot(path=str(final_shot))
            ctx.close()


def app_name(page: Any) -> str:
    """The app serving the page: "JupyterLab" or "Jupyter Notebook"."""
    return str(page.evaluate("() => window.jupyterapp.name"))


def run_next(page: Any) -> None:
    """Run the active cell and select the next, as Shift+Enter does; return at once.

    Fire and forget: awaiting the command's promise would wait for the cell to end.
    """
    page.evaluate("() => { window.jupyterapp.commands.execute("
                  "'notebook:run-cell-and-select-next'); }")


def cell(page: Any, index: int) -> Any:
    return page.locator(".jp-Notebook .jp-Cell").nth(index)


def prompt(page: Any, index: int) -> str:
    return str(cell(page, index).locator(".jp-InputPrompt").inner_text())


def wait_done(page: Any, index: int, timeout: float = 60_000) -> None:
    """Wait until cell ``index`` has run: its prompt holds a number, not ``*``."""
    page.wait_for_function(
        "i => /\\[\\d+\\]/.test(document.querySelectorAll('.jp-Notebook .jp-Cell')[i]"
        ".querySelector('.jp-InputPrompt').innerText)", arg=index, timeout=timeout)


def wait_ran_clean(page: Any, index: int) -> None:
    """Wait until cell ``index`` has run, and fail with its text if it raised."""
    wait_done(page, index)
    shown = cell(page, index)
    errors = shown.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    assert "Traceback" not in shown.inner_text() and not errors.count(), shown.inner_text()


def batch(text: str) -> int:
    found = re.search(r"batch (\d+)/\d+", text)
    return int(found.group(1)) if found else -1


def wait_batch(page: Any, index: int, at_least: int) -> None:
    """Wait until the panel in cell ``index``'s output shows a cell at batch ``at_least``."""
    page.wait_for_function(
        "([i, n]) => { const c = document.querySelectorAll('.jp-Notebook .jp-Cell')[i];"
        " const p = c && c.querySelector('.cupy-magic-panel');"
        " const m = p && /batch (\\d+)\\//.exec(p.innerText); return m && +m[1] >= n; }",
        arg=[index, at_least], timeout=60_000)


def run_gpu_cells(page: Any, first: int, out: Path, name: str) -> None:
    """Run :data:`GPU_CELLS` (the notebook's cells from ``first`` on) and check what shows.

    The value of the last expression with the cell's own number and the report under it;
    the batched cell's panel rendered above its output and moving through the batches while
    the cell is busy, then its report. Screenshots ``{name}-value.png``,
    ``{name}-batched-panel.png`` (while it runs) and ``{name}-batched.png`` (after).
    """
    load, value, batched = first, first + 1, first + 2
    run_next(page)
    wait_ran_clean(page, load)
    run_next(page)
    wait_ran_clean(page, value)
    shown = cell(page, value)
    result = shown.locator(".jp-OutputArea-executeResult")
    result.wait_for(state="visible", timeout=30_000)
    number = re.search(r"\[(\d+)\]", prompt(page, value))
    assert number, prompt(page, value)
    # "Out[n]" in a plain cell: the value, under the number the cell ran as (point 3).
    assert result.locator(".jp-OutputPrompt").inner_text().strip() == f"[{number[1]}]:"
    assert result.locator(".jp-OutputArea-output").inner_text().strip() == "np.int64(45)"
    report = shown.locator(".cupy-magic-report")
    assert report.count() == 1, shown.inner_text()  # the report is kept with the value
    assert re.search(r"out A\s+numpy\.ndarray int64 \(10,\) on host", report.inner_text())
    shown.screenshot(path=str(out / f"{name}-value.png"))

    run_next(page)
    wait_batch(page, batched, 2)
    panel = cell(page, batched).locator(".cupy-magic-panel")
    early = panel.inner_text()
    wait_batch(page, batched, batch(early) + 2)
    later = panel.inner_text()
    busy = prompt(page, batched)
    panel.screenshot(path=str(out / f"{name}-batched-panel.png"))
    wait_ran_clean(page, batched)
    after = cell(page, batched)
    report = after.locator(".cupy-magic-report")
    report.wait_for(state="visible", timeout=30_000)
    after.screenshot(path=str(out / f"{name}-batched.png"))
    assert "*" in busy, "the batched cell ended before the panel was read"
    assert "VRAM panel" in early and "Release cached blocks" in early
    assert re.search(r"running\s+In \[\d+\], batch \d+/20,", early), early
    assert batch(later) > batch(early) >= 2, (early, later)
    # The panel stays above the cell's output, the report under it.
    assert panel.bounding_box()["y"] < report.bounding_box()["y"]
    text = report.inner_text()
    assert re.search(r"out y\s+numpy\.ndarray float64 \(40, 1000\) on host", text), text
    assert "20 batches" in text and "total (sum)" in text, text
    number = re.search(r"\[(\d+)\]", prompt(page, batched))
    assert number and f"In [{number[1]}], batch" in early, (prompt(page, batched), early)
