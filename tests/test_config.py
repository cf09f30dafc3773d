"""config.py: the CupyMagic settings through a real shell's configuration, and the workshop
kernel's ipython_config.py through a real kernel."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from conftest import HAS_GPU
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient
from traitlets.config import Config, PyFileConfigLoader

import cupy_magic
from cupy_magic import config, session
from cupy_magic.syncs.record import HostSyncError

SPEC = Path(__file__).resolve().parents[1] / "jupyter-config" / "kernels" / "cupy_magic"
SETTINGS = sorted(config.CupyMagic.class_traits(config=True))
SYNC_CELL = "y = x * 2\nprint(float(y.sum()))"  # line 2 makes the host wait


@pytest.fixture
def configure(shell: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Set ``shell.config.CupyMagic`` values, then ``%load_ext``; undo both afterwards."""
    monkeypatch.delenv(config.ENV_BACKEND, raising=False)
    keep = set(shell.user_ns)

    def load(**values: Any) -> Any:
        for name, value in values.items():
            setattr(shell.config.CupyMagic, name, value)
        shell.run_line_magic("load_ext", "cupy_magic")
        shell.user_ns["np"] = np
        return shell

    yield load
    if "cupy_magic" in shell.extension_manager.loaded:
        shell.run_line_magic("unload_ext", "cupy_magic")
    shell.config.pop("CupyMagic", None)  # the shell is shared by the whole test session
    config.use_config()
    for name in set(shell.user_ns) - keep:
        del shell.user_ns[name]


def test_configured_settings_are_in_force_from_load(configure: Any,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    ip = configure(budget="1GB", syncs="off", streams=5, backend="host")
    line = capsys.readouterr().out
    assert "host backend chosen" in line and "budget 1GB" in line
    assert cupy_magic.device_info().backend == "host"
    assert cupy_magic.budget_status().budget_bytes == 10**9
    assert cupy_magic.set_sync_mode() == "off"

    ip.user_ns["x"] = np.arange(1000.0)
    ip.run_cell_magic("gpu", "--batch --quiet", "y = x * 2")
    report = cupy_magic.last_report()
    assert report.batch is not None and report.batch.streams == 5
    np.testing.assert_array_equal(ip.user_ns["y"], np.arange(1000.0) * 2)
    ip.run_cell_magic("gpu", "--batch --streams 2 --quiet", "y = x * 3")
    assert cupy_magic.last_report().batch.streams == 2  # the cell's option wins

    ip.run_cell_magic("gpu", "--quiet", SYNC_CELL)  # syncs off: no check, no rows
    assert cupy_magic.last_report().syncs == []


def test_config_magic_changes_the_next_cells_default(configure: Any) -> None:
    ip = configure(syncs="off", backend="host")
    ip.user_ns["x"] = np.arange(10.0)
    ip.run_line_magic("config", 'CupyMagic.syncs = "error"')
    assert cupy_magic.set_sync_mode() == "error"
    with pytest.raises(HostSyncError, match="line 2"):
        ip.run_cell_magic("gpu", "--quiet", SYNC_CELL)
    ip.run_line_magic("config", 'CupyMagic.syncs = "warn"')
    ip.run_cell_magic("gpu", "--quiet", SYNC_CELL)
    assert [row.line for row in cupy_magic.last_report().syncs] == [2]


def test_config_magic_refuses_a_bad_value_and_keeps_the_setting(configure: Any) -> None:
    ip = configure(streams=5, backend="host")
    ip.run_line_magic("config", "CupyMagic.streams = 0")  # %config shows the error
    assert session.settings().streams == 5


def test_config_magic_lists_the_settings(configure: Any,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    ip = configure(panel_interval=2.0, backend="host")
    capsys.readouterr()
    ip.run_line_magic("config", "CupyMagic")
    listing = capsys.readouterr().out
    assert all(f"CupyMagic.{name}=" in listing for name in SETTINGS)
    assert "Current: 2.0" in listing


def test_unload_puts_the_defaults_back(configure: Any, shell: Any) -> None:
    configure(syncs="off", backend="host")
    live = session.settings()
    assert live in shell.configurables
    shell.run_line_magic("unload_ext", "cupy_magic")
    assert live not in shell.configurables
    assert cupy_magic.set_sync_mode() == "warn"  # plain Python after unload: the default


def test_environment_variable_wins_over_the_configured_backend(
        configure: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(config.ENV_BACKEND, "host")
    configure(backend="cupy")  # would fail here without a GPU, if it were used
    assert cupy_magic.device_info().backend == "host"


def test_environment_variable_cupy_wins_over_configured_host(
        configure: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(config.ENV_BACKEND, "cupy")
    ip = configure(backend="host")
    if HAS_GPU:
        assert cupy_magic.device_info().backend == "cupy"
        return
    # without a GPU: one line says so, and the extension loads on the host backend
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "CUPY_MAGIC_BACKEND=cupy" in lines[0]
    assert "CuPy backend cannot run" in lines[0] and "loaded on the host backend" in lines[0]
    assert cupy_magic.device_info().backend == "host"
    assert "gpu" in ip.magics_manager.magics["cell"]


@pytest.mark.parametrize(("name", "value", "named", "default"), [
    ("streams", 0, "got 0", "3"),
    ("streams", 65, "1 to 64, got 65", "3"),  # every batched cell would refuse it
    ("panel_interval", 0, "got 0", "0.5"),
    ("panel_interval", 1e308, "got 1e+308", "0.5"),
    ("syncs", "loud", "'loud'", "'warn'"),
    ("backend", "gpu", "'gpu'", "'auto'"),
    ("budget", "lots", "'lots'", "off"),
])
def test_a_bad_setting_is_named_in_one_line_and_the_extension_loads_without_it(
        configure: Any, shell: Any, capsys: pytest.CaptureFixture[str], name: str, value: Any,
        named: str, default: str) -> None:
    ip = configure(**{name: value})
    problem, device = capsys.readouterr().out.splitlines()
    assert problem.startswith("cupy_magic: ") and f"CupyMagic.{name}" in problem
    assert named in problem and problem.endswith(f"{name} stays at its default, {default}")
    assert device.startswith("cupy_magic: ")
    assert "cupy_magic" in shell.extension_manager.loaded
    assert getattr(session.settings(), name) == config.CupyMagic().traits()[name].default_value
    ip.user_ns["x"] = np.arange(4.0)
    ip.run_cell_magic("gpu", "--quiet --to-host", "y = x * 2")  # the magics are there
    np.testing.assert_array_equal(ip.user_ns["y"], np.arange(4.0) * 2)


def test_a_bad_setting_leaves_the_good_ones_in_force(configure: Any,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    configure(budget="1GB", streams=0, syncs="off", backend="host")
    problem, _ = capsys.readouterr().out.splitlines()
    assert "CupyMagic.streams" in problem
    assert cupy_magic.budget_status().budget_bytes == 10**9
    assert cupy_magic.set_sync_mode() == "off" and session.settings().streams == 3


def test_a_budget_larger_than_the_device_leaves_the_budget_off(
        configure: Any, capsys: pytest.CaptureFixture[str]) -> None:
    configure(budget="1000TB", backend="host")
    problem, device = capsys.readouterr().out.splitlines()
    assert "c.CupyMagic.budget = '1000TB' is not used" in problem and "larger than" in problem
    assert device.endswith("budget off")
    assert cupy_magic.budget_status().budget is None


def test_a_bad_environment_variable_names_itself(configure: Any, shell: Any,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(config.ENV_BACKEND, "gpu")
    configure(backend="host")
    problem, _ = capsys.readouterr().out.splitlines()
    assert "CUPY_MAGIC_BACKEND='gpu' is not a backend" in problem
    assert problem.endswith("loading with backend host")
    assert cupy_magic.device_info().backend == "host"
    assert "gpu" in shell.magics_manager.magics["cell"]


@pytest.mark.skipif(HAS_GPU, reason="the configured CuPy backend must fail to start")
def test_a_bad_environment_variable_is_not_blamed_for_the_configured_backend(
        configure: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The variable is refused, so the backend tried is the configured one: the line that says
    it cannot run names c.CupyMagic.backend, not the variable (it named the variable before,
    which was read a second time to say where the backend was asked for)."""
    monkeypatch.setenv(config.ENV_BACKEND, "gpu")
    configure(backend="cupy")
    refused, failed, _ = capsys.readouterr().out.splitlines()
    assert "CUPY_MAGIC_BACKEND='gpu' is not a backend" in refused
    assert "backend cupy asked for (c.CupyMagic.backend)" in failed
    assert cupy_magic.device_info().backend == "host"


def test_config_magic_puts_a_budget_in_force_at_once(configure: Any) -> None:
    ip = configure(backend="host")
    assert cupy_magic.budget_status().budget is None
    ip.run_line_magic("config", 'CupyMagic.budget = "1KB"')
    assert cupy_magic.budget_status().budget_bytes == 1000
    ip.user_ns["x"] = np.arange(1000.0)  # 8 kB: more than the budget
    with pytest.raises(Exception, match="budget"):
        ip.run_cell_magic("gpu", "--quiet", "y = x[:, None] * x")
    ip.run_line_magic("config", 'CupyMagic.budget = "off"')
    assert cupy_magic.budget_status().budget is None


def test_config_magic_refuses_a_bad_budget_and_keeps_the_one_in_force(
        configure: Any, caplog: pytest.LogCaptureFixture,
        capsys: pytest.CaptureFixture[str]) -> None:
    ip = configure(budget="1GB", backend="host")
    for bad in ("lots", "1000TB", "0"):
        ip.run_line_magic("config", f"CupyMagic.budget = {bad!r}")  # %config logs the error
        assert f"CupyMagic.budget = {bad!r} is not a budget" in caplog.text
        assert session.settings().budget == "1GB"
        assert cupy_magic.budget_status().budget_bytes == 10**9
    # IPython's %config keeps the refused value in the shell's configuration, so the next
    # load says so in one line, and loads
    capsys.readouterr()
    ip.run_line_magic("unload_ext", "cupy_magic")
    ip.run_line_magic("load_ext", "cupy_magic")
    problem, _ = capsys.readouterr().out.splitlines()
    assert "CupyMagic.budget = '0' is not a budget" in problem
    assert "gpu" in ip.magics_manager.magics["cell"]


# --- the workshop kernel's ipython_config.py -----------------------------------------------

def _load_config_file(path: Path) -> Config:
    return PyFileConfigLoader(path.name, path=str(path.parent)).load_config()


def test_shipped_config_file_is_valid_and_changes_nothing() -> None:
    loaded = _load_config_file(SPEC / "ipython_config.py")
    assert "CupyMagic" not in loaded or not loaded.CupyMagic


def test_shipped_config_file_names_every_setting_with_its_default(tmp_path: Path) -> None:
    text = (SPEC / "ipython_config.py").read_text()
    for name in SETTINGS:
        assert len(re.findall(rf"^# c\.CupyMagic\.{name} = ", text, re.M)) == 1, name
    enabled = tmp_path / "ipython_config.py"
    enabled.write_text(re.sub(r"^# (c\.CupyMagic\.)", r"\1", text, flags=re.M))
    every = _load_config_file(enabled)
    assert set(every.CupyMagic) == set(SETTINGS)
    from_file = config.CupyMagic(config=every)
    defaults = config.CupyMagic()
    assert {n: getattr(from_file, n) for n in SETTINGS} == \
        {n: getattr(defaults, n) for n in SETTINGS}


def test_kernel_json_passes_the_config_file() -> None:
    spec = KernelSpecManager().kernel_spec_class.from_resource_dir(str(SPEC))
    assert "--config={resource_dir}/ipython_config.py" in spec.argv


@pytest.mark.kernel
def test_workshop_kernel_reads_its_ipython_config(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "jupyter-data"
    installed = data / "kernels" / "cupy_magic"
    shutil.copytree(SPEC, installed)
    conf = installed / "ipython_config.py"
    text = conf.read_text()
    for name, value in (("syncs", '"off"'), ("budget", '"1GB"'), ("streams", "5")):
        text, n = re.subn(rf"^# (c\.CupyMagic\.{name} = ).*$", rf"\g<1>{value}", text,
                          flags=re.M)
        assert n == 1, name
    conf.write_text(text)
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(data))
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "0")  # in a venv its own spec would win
    monkeypatch.setenv(config.ENV_BACKEND, "host")
    assert Path(KernelSpecManager().get_kernel_spec("cupy_magic").resource_dir) == installed

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import cupy_magic\nfrom cupy_magic import session\n"
        "print(cupy_magic.set_sync_mode(), cupy_magic.budget_status().budget_bytes,\n"
        "      session.settings().streams)")]
    NotebookClient(nb, timeout=120, kernel_name="cupy_magic").execute()
    out = "".join(o.get("text", "") for o in nb.cells[0].outputs)
    assert out.split() == ["off", str(10**9), "5"]


def test_configured_streams_add_no_note_to_a_cell_that_ran_whole(configure: Any) -> None:
    ip = configure(streams=5, backend="host")
    ip.user_ns["x"] = np.arange(10.0)
    ip.run_cell_magic("gpu", "--quiet", "y = x * 2")
    assert cupy_magic.last_report().batch is None
    assert cupy_magic.last_report().notes == []
