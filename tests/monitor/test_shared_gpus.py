"""Shared GPUs (issue 14, point 6) with a scripted fake NVML: no MIG slice and no container
with host PIDs is lent to these tests, so NVML's answers for them are scripted here, in the
shapes NVML gives (a MIG handle by its UUID, NotSupported utilisation, host PIDs)."""

from __future__ import annotations

import logging
import sys
import types
from types import SimpleNamespace

import pytest
from monitor.test_nvml import _NotSupported, fake_pynvml

from cupy_magic.monitor import nvml, sources
from cupy_magic.monitor.nvml import NA
from cupy_magic.monitor.sampler import Sample
from cupy_magic.monitor.sources import POOL_UNAVAILABLE, kernel_figures
from cupy_magic.view.figures import summary_lines

MIG = "MIG-5b9b0c1e-0c7f-5c4e-9a4e-1f2d3c4b5a69"


@pytest.fixture(autouse=True)
def fresh_nvml():
    nvml.shutdown()
    nvml._logged.clear()
    sources._said.clear()
    yield
    nvml.shutdown()


@pytest.fixture
def mig(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """GPU 0 whole, and a MIG slice (handle 10) of 18 GiB: utilisation not supported."""
    mod = fake_pynvml()
    whole_uuid = mod.nvmlDeviceGetHandleByUUID

    def by_uuid(uuid: str) -> int:
        return 10 if uuid == MIG else whole_uuid(uuid)

    def util(handle: int):
        if handle == 10:
            raise _NotSupported()
        return SimpleNamespace(gpu=87, memory=40)

    def memory(handle: int):
        if handle == 10:
            return SimpleNamespace(total=18 << 30, used=2 << 30, free=16 << 30)
        return SimpleNamespace(total=80 << 30, used=10 << 30, free=70 << 30)

    mod.nvmlDeviceGetHandleByUUID = by_uuid
    mod.nvmlDeviceGetUtilizationRates = util
    mod.nvmlDeviceGetMemoryInfo = memory
    mod.nvmlDeviceIsMigDeviceHandle = lambda h: 1 if h == 10 else 0
    mod.nvmlDeviceGetName = lambda h: "Fake GPU MIG 1g.18gb" if h == 10 else f"Fake GPU {h}"
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", MIG)
    return mod


def sample(reading: nvml.DeviceReading) -> Sample:
    return Sample(time=0.0, wall_time=0.0, device=0, backend="cupy", reading=reading,
                  pool=POOL_UNAVAILABLE, budget="off", host_used=NA, host_total=NA, cell=None)


def test_a_mig_entry_in_cuda_visible_devices_finds_the_slice(mig):
    assert nvml.mig_uuid(0) == MIG and nvml.mig_uuid(1) == ""
    assert nvml.visible_handles() == [10]  # it used to stop the lookup
    # on the GPU the slice has its parent's PCI bus id: the UUID wins
    assert nvml.handle_for("0000:01:00.0", 0) == 10
    assert nvml.handle_for("0000:01:00.0") == 0


def test_mig_memory_is_the_slices_and_utilisation_is_labelled(mig):
    reading = nvml.read_device(10, pid=4242)
    assert reading.mig and reading.total == 18 << 30 and reading.used == 2 << 30
    assert reading.util_gpu is NA
    lines = summary_lines(sample(reading))
    assert lines["device"].startswith("Fake GPU MIG 1g.18gb (device 0) (a MIG slice")
    assert "of 18.00 GiB" in lines["device"]
    assert lines["activity"].startswith("utilisation not reported on MIG;")
    whole = summary_lines(sample(nvml.read_device(0, pid=4242)))
    assert whole["activity"].startswith("SM 87%, memory 40%")


def test_this_kernel_comes_from_the_pool_and_cudamemgetinfo(mig):
    # NVML lists this process (pid 4242, 3 GiB) and another (5 GiB): this kernel is the
    # device's used bytes less the other processes, context included
    reading = kernel_figures(nvml.read_device(0, pid=4242), device_used=9 << 30,
                             pool_held=2 << 30)
    assert reading.pids_match is True
    assert reading.this_process == 4 << 30 and reading.other_processes == 5 << 30


def test_container_pids_say_so_once_and_still_show_this_kernel(mig, caplog):
    with caplog.at_level(logging.INFO, logger="cupy_magic.monitor.sources"):
        for _ in range(3):
            reading = kernel_figures(nvml.read_device(0, pid=99), device_used=9 << 30,
                                     pool_held=2 << 30)
    assert reading.pids_match is False
    assert reading.this_process == 2 << 30 and reading.other_processes is NA
    said = [r for r in caplog.records if "PID namespace" in r.getMessage()]
    assert len(said) == 1
    line = summary_lines(sample(reading))["device"]
    assert "this kernel 2.00 GiB" in line and "as in a container" in line
