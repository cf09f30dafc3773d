"""nvml.py: lazy init, errors as N/A logged once, device mapping, figures; real and fake NVML."""

from __future__ import annotations

import logging
import sys
import threading
import time
import types
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from cupy_magic.monitor import nvml
from cupy_magic.monitor.nvml import NA


@pytest.fixture(autouse=True)
def fresh_nvml() -> Iterator[None]:
    nvml.shutdown()
    nvml._logged.clear()
    yield
    nvml.shutdown()
    nvml._logged.clear()


def _real_nvml_works() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # any failure means "absent" for choosing which test applies
        return False
    pynvml.nvmlShutdown()
    return True


class _NVMLError(Exception):
    pass


class _NotSupported(_NVMLError):
    def __str__(self) -> str:
        return "Not Supported"


def fake_pynvml(*, init_error: type[Exception] | None = None, gpus: int = 2) -> types.ModuleType:
    """A pynvml stand-in: ``gpus`` devices at bus ids 0000:0N:00.0; PCIe throughput unsupported
    on device 1."""
    mod = types.ModuleType("pynvml")
    mod.NVMLError = _NVMLError
    mod.NVML_PCIE_UTIL_TX_BYTES, mod.NVML_PCIE_UTIL_RX_BYTES = 0, 1
    mod.NVML_TEMPERATURE_GPU, mod.NVML_CLOCK_SM, mod.NVML_CLOCK_MEM = 0, 1, 2
    mod.calls = []

    def init() -> None:
        mod.calls.append("init")
        if init_error is not None:
            raise init_error("NVML Shared Library Not Found")

    def pcie(handle: int, counter: int) -> int:
        if handle == 1:
            raise _NotSupported()
        return 2_000_000 if counter == 1 else 1_000_000  # KB/s

    def by_bus(bus: str) -> int:
        for i in range(gpus):
            if bus.lower() in (f"0000:0{i + 1}:00.0", f"00000000:0{i + 1}:00.0"):
                return i
        raise _NVMLError("Not Found")

    mod.nvmlInit = init
    mod.nvmlShutdown = lambda: mod.calls.append("shutdown")
    mod.nvmlDeviceGetCount = lambda: gpus
    mod.nvmlDeviceGetHandleByIndex = lambda i: i
    mod.nvmlDeviceGetHandleByUUID = lambda u: {"GPU-aaa": 0, "GPU-bbb": 1}[u]
    mod.nvmlDeviceGetHandleByPciBusId = by_bus
    mod.nvmlDeviceGetName = lambda h: f"Fake GPU {h}"
    mod.nvmlDeviceGetMemoryInfo = lambda h: SimpleNamespace(total=80 << 30, used=10 << 30,
                                                            free=70 << 30)
    mod.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=87, memory=40)
    mod.nvmlDeviceGetComputeRunningProcesses = lambda h: [
        SimpleNamespace(pid=4242, usedGpuMemory=3 << 30),
        SimpleNamespace(pid=7, usedGpuMemory=5 << 30),
        SimpleNamespace(pid=8, usedGpuMemory=None),  # hidden by the driver: not counted
    ]
    mod.nvmlDeviceGetPcieThroughput = pcie
    mod.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: 5
    mod.nvmlDeviceGetCurrPcieLinkWidth = lambda h: 16
    mod.nvmlDeviceGetTemperature = lambda h, s: 54
    mod.nvmlDeviceGetPowerUsage = lambda h: 312_500
    mod.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700_000
    mod.nvmlDeviceGetClockInfo = lambda h, c: {1: 1980, 2: 2619}[c]
    return mod


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    mod = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return mod


def test_na_formats_as_na_whatever_the_spec() -> None:
    assert f"{NA}" == "N/A" and f"{NA:.1f}" == "N/A" and f"{NA:>8,}" == "N/A"
    assert not NA and repr(NA) == "NA" and nvml.NotAvailable() is NA


@pytest.mark.skipif(_real_nvml_works(), reason="NVML works here; the absent case is faked below")
def test_real_nvml_absent_gives_na_and_a_reason() -> None:
    assert nvml.available() is False
    assert "NVML" in nvml.reason() and "Not Found" in nvml.reason()
    assert nvml.query("nvmlDeviceGetCount") is NA
    assert nvml.query("nvmlDeviceGetCount", default=0) == 0
    assert nvml.visible_handles() == []
    assert nvml.read_device(NA) == nvml.DeviceReading()


def test_init_failure_is_remembered_and_logged_once(monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    mod = fake_pynvml(init_error=_NVMLError)
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    with caplog.at_level(logging.INFO, logger="cupy_magic.monitor.nvml"):
        assert nvml.query("nvmlDeviceGetCount") is NA
        assert nvml.query("nvmlDeviceGetCount") is NA
        assert not nvml.available()
    assert mod.calls == ["init"]  # lazy, and not retried on every sample
    assert nvml.reason() == "NVML unavailable: NVML Shared Library Not Found"
    assert len([r for r in caplog.records if "unavailable" in r.getMessage()]) == 1


def test_missing_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes "import pynvml" fail
    assert not nvml.available()
    assert "pip install nvidia-ml-py" in nvml.reason()


def test_init_is_lazy(fake: types.ModuleType) -> None:
    assert fake.calls == []
    assert nvml.query("nvmlDeviceGetCount") == 2
    assert nvml.query("nvmlDeviceGetCount") == 2
    assert fake.calls == ["init"]
    nvml.shutdown()
    assert fake.calls == ["init", "shutdown"]


def test_query_errors_become_default_logged_once(fake: types.ModuleType,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="cupy_magic.monitor.nvml"):
        for _ in range(3):
            assert nvml.query("nvmlDeviceGetPcieThroughput", 1, 0) is NA
        assert nvml.query("nvmlDeviceGetPcieThroughput", 1, 0, default=-1) == -1
        assert nvml.query("nvmlNoSuchFunction") is NA
        assert nvml.query("nvmlDeviceGetName", NA) is NA  # NA argument short-circuits
    messages = [r.getMessage() for r in caplog.records]
    assert sum("nvmlDeviceGetPcieThroughput" in m for m in messages) == 1
    assert sum("nvmlNoSuchFunction" in m for m in messages) == 1


def test_non_nvml_errors_are_not_swallowed(fake: types.ModuleType) -> None:
    fake.nvmlDeviceGetName = lambda h: 1 / 0
    with pytest.raises(ZeroDivisionError):
        nvml.query("nvmlDeviceGetName", 0)


def test_handle_by_pci_bus_id_as_cupy_spells_it(fake: types.ModuleType) -> None:
    # CuPy's Device(i).pci_bus_id is "0000:02:00.0"; with CUDA_VISIBLE_DEVICES=1 that is
    # CuPy device 0 but NVML index 1.
    assert nvml.handle_for("0000:02:00.0") == 1
    assert nvml.handle_for("0000:09:00.0") is NA


@pytest.mark.parametrize(("spec", "expected"), [
    (None, [0, 1]), ("1", [1]), ("1,0", [1, 0]), ("GPU-bbb", [1]), ("0,7,1", [0]), ("", []),
])
def test_visible_handles_follow_cuda_visible_devices(fake: types.ModuleType,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     spec: str | None,
                                                     expected: list[int]) -> None:
    if spec is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", spec)
    assert nvml.visible_handles() == expected


def test_pcie_link_ceiling() -> None:
    assert nvml.pcie_link_bytes_per_s(5, 16) == pytest.approx(63.0e9, rel=0.01)
    assert nvml.pcie_link_bytes_per_s(4, 8) == pytest.approx(15.75e9, rel=0.01)
    assert nvml.pcie_link_bytes_per_s(3, 16) == pytest.approx(15.75e9, rel=0.01)
    assert nvml.pcie_link_bytes_per_s(NA, 16) is NA
    assert nvml.pcie_link_bytes_per_s(9, 16) is NA


def test_read_device_figures_and_per_process_memory(fake: types.ModuleType) -> None:
    r = nvml.read_device(0, pid=4242)
    assert r.name == "Fake GPU 0" and r.total == 80 << 30 and r.free == 70 << 30
    assert r.this_process == 3 << 30 and r.other_processes == 5 << 30
    assert (r.util_gpu, r.util_memory) == (87, 40)
    assert r.pcie_rx == 2_000_000 * 1024 and r.pcie_tx == 1_000_000 * 1024
    assert r.pcie_link == "Gen5 x16" and r.pcie_max == pytest.approx(63e9, rel=0.01)
    assert r.temperature == 54 and r.power == pytest.approx(312.5)
    assert r.power_limit == pytest.approx(700.0)
    assert (r.clock_sm, r.clock_memory) == (1980, 2619)


def test_read_device_unsupported_figures_and_unseen_pid(fake: types.ModuleType) -> None:
    r = nvml.read_device(1, pid=99)
    assert r.pcie_rx is NA and r.pcie_tx is NA  # unsupported: N/A, the rest still read
    assert r.util_gpu == 87
    # A container hides our pid: "this kernel" is unknown, not 0.
    assert r.this_process is NA and r.other_processes == 8 << 30


def test_shutdown_waits_for_a_query_in_flight(fake: types.ModuleType) -> None:
    entered, release = threading.Event(), threading.Event()

    def slow_count() -> int:
        fake.calls.append("count")
        entered.set()
        assert release.wait(10), "the test never released the query"
        fake.calls.append("count returns")
        return 2

    fake.nvmlDeviceGetCount = slow_count
    results: list[object] = []
    query = threading.Thread(target=lambda: results.append(nvml.query("nvmlDeviceGetCount")))
    query.start()
    assert entered.wait(10)
    closer = threading.Thread(target=nvml.shutdown)
    closer.start()
    closer.join(0.3)
    assert closer.is_alive(), "shutdown returned while a query was in flight"
    assert fake.calls == ["init", "count"]  # nvmlShutdown not called under the query
    release.set()
    query.join(10)
    closer.join(10)
    assert not closer.is_alive() and results == [2]
    assert fake.calls == ["init", "count", "count returns", "shutdown"]


def test_shutdown_gives_up_waiting_after_its_timeout(fake: types.ModuleType) -> None:
    entered, release = threading.Event(), threading.Event()

    def stuck_count() -> int:
        entered.set()
        release.wait(10)
        return 2

    fake.nvmlDeviceGetCount = stuck_count
    query = threading.Thread(target=nvml.query, args=("nvmlDeviceGetCount",))
    query.start()
    try:
        assert entered.wait(10)
        t0 = time.monotonic()
        nvml.shutdown(timeout=0.2)  # a hung driver call must not hang %unload_ext
        assert 0.15 < time.monotonic() - t0 < 5
        assert fake.calls == ["init", "shutdown"]
    finally:
        release.set()
        query.join(10)
