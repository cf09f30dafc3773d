"""A real JupyterLab 4 in headless Chromium: the panel renders and changes while a cell runs.

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
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

CELLS = [
    "from cupy_magic.view.panel import show_panel\npanel = show_panel(interval=0.25)",
    # A busy cell: allocate step by step and report progress, as a batched %%gpu cell does.
    "import time\nfrom cupy_magic import backend\nfrom cupy_magic.run import progress\n"
    "xp = backend.current().xp\n"
    "progress.start('In [2]: streamed sqrt', 20)\nkeep = []\nfor i in range(20):\n"
    "    keep.append(xp.ones(8_000_000) * i)\n    progress.step()\n    time.sleep(0.35)\n"
    "progress.finish()",
    "from cupy_magic.view.panel import cell_panel\nwith cell_panel(0.25):\n"
    "    progress.start('In [3]: %%gpu --panel', 20)\n    for i in range(20):\n"
    "        keep.append(xp.ones(8_000_000) * i)\n        progress.step()\n"
    "        time.sleep(0.35)\n    progress.finish()",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[str]:
    """A JupyterLab server on a free port over a folder holding ``panel.ipynb``; its URL."""
    pytest.importorskip("playwright.sync_api", reason="needs the playwright Python package")
    if not CHROMIUM.exists():
        pytest.skip("needs Debian chromium at /usr/bin/chromium (apt-get install chromium)")
    home = tmp_path / "home"
    root = tmp_path / "root"
    root.mkdir()
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}",
                     "metadata": {}, "outputs": [], "source": src}
                    for i, src in enumerate(CELLS)],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                      "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    (root / "panel.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    # No "official Jupyter news?" toast over the screenshot.
    settings = home / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    env = dict(os.environ, HOME=str(home), JUPYTERLAB_SETTINGS_DIR=str(home / "lab-settings"),
               IPYTHONDIR=str(home / ".ipython"), JUPYTER_CONFIG_DIR=str(home / ".jupyter"),
               JUPYTER_RUNTIME_DIR=str(home / ".jupyter-rt"), CUPY_CACHE_DIR=str(home / ".cupy"))
    port, token = _free_port(), secrets.token_hex(16)
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}",
           "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={root}", "--LabApp.news_url=None",
           "--LabApp.expose_app_in_browser=True", "--allow-root"]
    log = (tmp_path / "lab.log").open("w")
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
                    raise RuntimeError("JupyterLab did not start:\n" +
                                       (tmp_path / "lab.log").read_text()) from None
                time.sleep(0.3)
        # Start the notebook's kernel first, so the page opens on a running session and
        # JupyterLab asks nothing (it offers a kernel choice when several specs exist).
        request = urllib.request.Request(
            f"{url}/api/sessions?token={token}", method="POST",
            data=json.dumps({"path": "panel.ipynb", "type": "notebook", "name": "",
                             "kernel": {"name": "python3"}}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as reply:
            assert reply.status == 201
        yield f"{url}/lab/tree/panel.ipynb?token={token}"
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def _artifacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("CUPY_MAGIC_ARTIFACTS") or tmp_path / "artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _batch(text: str) -> int:
    found = re.search(r"batch (\d+)/\d+", text)
    return int(found.group(1)) if found else -1


def _prompt(page: Any, cell: int) -> str:
    return str(page.locator(".jp-Cell").nth(cell).locator(".jp-InputPrompt").inner_text())


def _wait_batch(page: Any, panel: int, at_least: int) -> None:
    """Wait until panel number ``panel`` shows the running cell at batch ``at_least``."""
    page.wait_for_function(
        "([i, n]) => { const p = document.querySelectorAll('.cupy-magic-panel')[i];"
        " const m = p && /batch (\\d+)\\//.exec(p.innerText); return m && +m[1] >= n; }",
        arg=[panel, at_least], timeout=60_000)


def test_panel_renders_and_moves_while_a_cell_runs(lab: str, tmp_path: Path) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    out = _artifacts(tmp_path)
    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM), headless=True,
            args=FLAGS, viewport={"width": 1280, "height": 1000})
        try:
            page = ctx.pages[0] if ctx.pages else ctx.new_page()
            page.goto(lab)
            page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
            page.wait_for_function("window.jupyterapp && document.querySelector("
                                   "'.jp-NotebookPanel .jp-Notebook')", timeout=60_000)
            # Wait for the kernel before running (the toolbar shows "Idle" when ready).
            page.wait_for_selector(".jp-NotebookPanel [data-status='idle']", timeout=60_000)
            # With several kernel specs installed JupyterLab may still ask; keep python3.
            dialog = page.locator(".jp-Dialog")
            try:
                dialog.wait_for(state="visible", timeout=3_000)
            except PlaywrightTimeout:
                pass  # no question asked
            else:
                dialog.locator("select").select_option(label="Python 3 (ipykernel)")
                dialog.locator(".jp-mod-accept").click()
                dialog.wait_for(state="hidden", timeout=10_000)
            # Fire and forget: awaiting the command's promise would wait for the cell to end.
            run = ("() => { window.jupyterapp.commands.execute("
                   "'notebook:run-cell-and-select-next'); }")
            page.evaluate(run)
            panel = page.locator(".cupy-magic-panel").first
            panel.wait_for(state="visible", timeout=60_000)
            page.evaluate(run)  # the busy cell, while the panel above samples
            _wait_batch(page, 0, 2)
            first, busy = panel.inner_text(), _prompt(page, 1)
            time.sleep(1.5)
            second = panel.inner_text()
            panel.screenshot(path=str(out / "vram-panel.png"))
            page.screenshot(path=str(out / "jupyterlab-busy.png"))
            assert "*" in busy and "*" in _prompt(page, 1), "the cell ended before the check"
            page.wait_for_function("() => !document.querySelectorAll('.jp-Cell')[1]"
                                   ".querySelector('.jp-InputPrompt').innerText.includes('*')",
                                   timeout=60_000)
            # %%gpu --panel: the panel is displayed by the cell that then stays busy.
            page.evaluate(run)
            _wait_batch(page, 1, 2)
            third = page.locator(".cupy-magic-panel").nth(1).inner_text()
            time.sleep(1.5)
            fourth = page.locator(".cupy-magic-panel").nth(1).inner_text()
            assert "*" in _prompt(page, 2), "the same-cell panel's cell ended before the check"
        finally:
            # Always leave the page as it ended up: the first thing to look at on a failure.
            ctx.pages[0].screenshot(path=str(out / "jupyterlab-final.png"))
            ctx.close()
    assert "VRAM panel" in first and "Release cached blocks" in first
    assert _batch(second) > _batch(first) >= 2, (first, second)
    assert _batch(fourth) > _batch(third) >= 2, (third, fourth)
    assert (out / "vram-panel.png").stat().st_size > 5_000
