"""session.py from plain Python, no magic: run_cell and last_report, backend switches that
carry the budget."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from conftest import BACKENDS

import cupy_magic
from cupy_magic import session


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """The package used from Python on one backend; forgotten (as at unload) afterwards."""
    cupy_magic.use_backend(request.param)
    yield request.param
    session.reset()


@pytest.fixture
def host() -> Iterator[None]:
    cupy_magic.use_backend("host")
    yield
    session.reset()


def test_run_cell_from_python_commits_and_records_the_report(backend: str) -> None:
    ns = {"np": np, "x": np.arange(6.0)}
    report = cupy_magic.run_cell("y = np.sqrt(x) * 2\ntotal = y.sum()", ns, to_host=["y"])
    assert cupy_magic.last_report() is report
    assert report.backend == backend
    assert [m.name for m in report.inputs] == ["x"]
    assert set(report.outputs_by_name) == {"y", "total"}
    assert isinstance(ns["y"], np.ndarray)
    np.testing.assert_allclose(ns["y"], np.sqrt(np.arange(6.0)) * 2)
    assert float(ns["total"]) == pytest.approx(float(ns["y"].sum()))


def test_a_failing_run_leaves_the_last_report_and_the_namespace(backend: str) -> None:
    ns = {"np": np, "x": np.arange(4.0)}
    good = cupy_magic.run_cell("y = x + 1", ns)
    before = dict(ns)
    with pytest.raises(ZeroDivisionError):
        cupy_magic.run_cell("z = x * 2\nboom = 1 / 0", ns)
    assert cupy_magic.last_report() is good
    assert ns.keys() == before.keys() and all(ns[k] is before[k] for k in ns)


def test_a_run_the_budget_refuses_leaves_the_last_report(host: None) -> None:
    ns = {"np": np}
    good = cupy_magic.run_cell("small = np.ones(10)", ns)
    cupy_magic.set_budget("1MB")
    with pytest.raises(MemoryError):
        cupy_magic.run_cell("big = np.ones(10_000_000)", ns)
    assert cupy_magic.last_report() is good and "big" not in ns


def test_run_cell_takes_the_sessions_sync_mode(host: None) -> None:
    ns = {"np": np, "x": np.arange(4.0)}
    cell = "y = x * 2\nif y.max() > 0:\n    z = 1"
    assert cupy_magic.set_sync_mode() == "warn"
    assert [r.line for r in cupy_magic.run_cell(cell, ns).syncs] == [2]
    assert cupy_magic.run_cell(cell, ns, syncs="off").syncs == []


def test_a_budget_survives_a_backend_switch(backend: str) -> None:
    cupy_magic.set_budget("1GB")
    assert cupy_magic.budget_status().budget_bytes == 10**9
    info = cupy_magic.use_backend("host")
    assert info.backend == "host"
    status = cupy_magic.budget_status()
    assert status.backend == "host" and status.budget_bytes == 10**9
    ns = {"np": np}
    assert cupy_magic.run_cell("a = np.ones(10)", ns).budget_bytes == 10**9


def test_a_share_stays_a_share_of_the_new_device(host: None) -> None:
    cupy_magic.set_budget("50%")
    cupy_magic.use_backend("host")
    status = cupy_magic.budget_status()
    assert status.budget is not None and status.budget.text == "50%"
    assert status.budget_bytes == int(status.device_total * 0.5)


@pytest.mark.gpu
def test_a_share_of_the_gpu_becomes_a_share_of_host_memory() -> None:
    try:
        cupy_magic.use_backend("cupy")
        cupy_magic.set_budget("50%")
        gpu = cupy_magic.budget_status()
        assert gpu.budget_bytes == int(gpu.device_total * 0.5)
        cupy_magic.use_backend("host")
        host = cupy_magic.budget_status()
        assert host.device_total != gpu.device_total
        assert host.budget_bytes == int(host.device_total * 0.5)
    finally:
        session.reset()


def test_budget_off_survives_a_switch(host: None) -> None:
    cupy_magic.set_budget("1GB")
    cupy_magic.set_budget("off")
    cupy_magic.use_backend("host")
    assert cupy_magic.budget_status().budget_bytes is None


# ids, not the values: a test whose id is "gpu" would be taken for a `gpu`-marked one
@pytest.mark.parametrize("name", ["gpu", "CUPY", "numpy", ""],
                         ids=["word-gpu", "upper-case", "numpy", "empty"])
def test_an_unknown_backend_is_refused_by_name(host: None, name: str) -> None:
    cupy_magic.set_budget("1GB")
    with pytest.raises(ValueError, match=repr(name)):
        cupy_magic.use_backend(name)
    assert cupy_magic.device_info().backend == "host"  # nothing switched
    assert cupy_magic.budget_status().budget_bytes == 10**9


def test_the_budget_status_of_an_unused_gpu_makes_no_context_there() -> None:
    """%vram_budget on a host of several GPUs lists every device; a GPU this kernel never
    used is described from its properties and budget only: reading its used memory would
    make a CUDA context there (found in review). Scripted: this machine may have no GPU."""
    from types import SimpleNamespace

    from cupy_magic.backend import BudgetSpec
    from cupy_magic.session import memory

    read: list[int] = []

    budgets = {1: BudgetSpec("4GB", 4 * 10**9)}

    class TwoGpus(SimpleNamespace):
        name, is_gpu, home = "cupy", True, 0

        @property
        def budgets(self) -> dict:
            return budgets

        def made_pool(self, device: int) -> object | None:
            return object() if device == 0 else None

        def limit_of(self, device: int) -> int | None:
            return self.budgets[device].nbytes if device in self.budgets else None

        def device_total(self, device: int) -> int:
            return 80 << 30

        def stats(self, device: int) -> SimpleNamespace:
            read.append(device)
            return SimpleNamespace(used=1, held=2, limit=None, device_used=3, device_total=4)

    other = memory._other(TwoGpus(), 1)
    assert read == [] and other.limit == 4 * 10**9 and other.device_total == 80 << 30
    memory._other(TwoGpus(), 0)
    assert read == [0]  # a device with a pool already has its context: read as before
