"""Several devices (issue 16, point 2): a compact row per device in every sample, read cheaply,
and a device this kernel never used is never made current (which would create a CUDA
context on it). No machine of several GPUs is lent to CI: NVML, the driver's context state
and CuPy's devices are scripted here in the shapes they have; the one-GPU and several-GPU
tests at the end run the same code on real devices."""

from __future__ import annotations

import ctypes
import sys
import types
from types import SimpleNamespace
from typing import Any

import pytest
from monitor.test_nvml import fake_pynvml

from cupy_magic.backend import BudgetSpec
from cupy_magic.monitor import contexts, nvml, sources
from cupy_magic.monitor.nvml import NA, DeviceReading
from cupy_magic.monitor.rows import NOT_USED, DeviceRow
from cupy_magic.monitor.sampler import PoolFigures, Sampler
from cupy_magic.monitor.sources import LiveSources, device_pool, pool_figures

GiB = 1 << 30


# --- the sampler: a row per device ---------------------------------------------------------

class ThreeDevices:
    """Scripted sources of three devices; counts what each device was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []
        self.broken_row: int | None = None

    def devices(self) -> list[str]:
        return ["0: Fake H200", "1: Fake H200", "2: Fake H200"]

    def reading(self, device: int) -> DeviceReading:
        self.asked.append(("reading", device))
        return DeviceReading(name="Fake H200", total=80 * GiB, used=(device + 1) * GiB,
                             util_gpu=10 * device, pcie_rx=1e9, pcie_tx=2e9)

    def row(self, device: int) -> DeviceRow:
        self.asked.append(("row", device))
        if device == self.broken_row:
            raise RuntimeError("NVML lost the device")
        return DeviceRow(device, name="Fake H200", used=(device + 1) * GiB, total=80 * GiB,
                         util_gpu=10 * device, pool_note=NOT_USED if device == 2 else "",
                         pool_used=NA if device == 2 else GiB, pool_held=NA if device == 2
                         else 2 * GiB, budget="off")

    def pool(self, device: int) -> PoolFigures:
        return PoolFigures(used=3 * GiB, held=4 * GiB, limit=None)

    def host(self) -> tuple[int, int]:
        return GiB, 16 * GiB

    def budget(self) -> str:
        return "off"

    def cell(self) -> None:
        return None

    def status(self) -> tuple[str, str, str]:
        return "cupy", "", ""


def test_every_device_gets_a_row_and_the_detailed_one_is_read_once() -> None:
    src = ThreeDevices()
    s = Sampler(src, interval=0.5).sample(1)
    assert [r.device for r in s.devices] == [0, 1, 2] and s.errors == ()
    # the detailed device's row comes from its full sample, not from a second reading
    assert src.asked == [("reading", 1), ("row", 0), ("row", 2)]
    own = s.devices[1]
    assert (own.used, own.util_gpu, own.pool_used, own.pool_held) == (2 * GiB, 10, 3 * GiB,
                                                                     4 * GiB)
    assert s.devices[2].pool_note == NOT_USED and s.devices[2].pool_used is NA


def test_one_device_has_no_rows() -> None:
    class One(ThreeDevices):
        def devices(self) -> list[str]:
            return ["0: Fake H200"]

    src = One()
    assert Sampler(src, interval=0.5).sample(0).devices == ()
    assert [kind for kind, _ in src.asked] == ["reading"]


def test_a_row_that_fails_reads_na_and_the_others_stay() -> None:
    src = ThreeDevices()
    src.broken_row = 2
    s = Sampler(src, interval=0.5).sample(0)
    assert s.devices[2] == DeviceRow(2) and s.devices[2].used is NA
    assert s.devices[1].used == 2 * GiB
    assert s.errors == ("device 2: RuntimeError: NVML lost the device",)


# --- NVML: the row's five queries -----------------------------------------------------------

@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    nvml.shutdown()
    nvml._logged.clear()
    mod = fake_pynvml(gpus=3)
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    yield mod
    nvml.shutdown()


def test_read_brief_asks_only_the_rows_figures(fake_nvml: types.ModuleType) -> None:
    asked: list[str] = []
    for name in [n for n in dir(fake_nvml) if n.startswith("nvmlDevice")]:
        func = getattr(fake_nvml, name)
        setattr(fake_nvml, name, lambda *a, _f=func, _n=name: (asked.append(_n), _f(*a))[1])
    r = nvml.read_brief(0)
    assert (r.name, r.total, r.used, r.util_gpu) == ("Fake GPU 0", 80 * GiB, 10 * GiB, 87)
    assert (r.pcie_rx, r.pcie_tx) == (2_000_000 * 1024.0, 1_000_000 * 1024.0)
    assert r.power is NA and r.this_process is NA
    assert len(asked) == 5 and "nvmlDeviceGetComputeRunningProcesses" not in asked


# --- the driver's context state ----------------------------------------------------------------

class FakeDriver:
    """``libcuda``'s two calls: ``active`` says which devices have a primary context."""

    def __init__(self, active: set[int], initialised: bool = True, devices: int = 3) -> None:
        self.active, self.initialised, self.devices = active, initialised, devices

    def cuDeviceGet(self, ref: Any, ordinal: ctypes.c_int) -> int:
        if not self.initialised:
            return contexts.CUDA_ERROR_NOT_INITIALIZED
        if not 0 <= ordinal.value < self.devices:
            return 101  # CUDA_ERROR_INVALID_DEVICE
        ref._obj.value = ordinal.value
        return 0

    def cuDevicePrimaryCtxGetState(self, dev: ctypes.c_int, flags: Any,
                                   active: Any) -> int:
        active._obj.value = int(dev.value in self.active)
        return 0


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> FakeDriver:
    fake = FakeDriver({0, 1})
    monkeypatch.setitem(contexts._state, "lib", fake)
    return fake


def test_context_state_from_the_driver(driver: FakeDriver, monkeypatch) -> None:
    assert [contexts.has_context(i) for i in range(4)] == [True, True, False, None]
    driver.initialised = False  # cuInit never ran: no context anywhere
    assert contexts.has_context(0) is False
    monkeypatch.setitem(contexts._state, "lib", None)  # no driver: cannot tell
    assert contexts.has_context(0) is None


def test_without_libcuda_the_answer_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(contexts._state, "lib", raising=False)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: (_ for _ in ()).throw(OSError(name)))
    assert contexts.has_context(0) is None and contexts._state["lib"] is None


# --- LiveSources over three scripted GPUs -------------------------------------------------------

class FakePool:
    def __init__(self, used: int, held: int) -> None:
        self.used, self.held, self.freed = used, held, 0

    def used_bytes(self) -> int:
        return self.used

    def total_bytes(self) -> int:
        return self.held

    def n_free_blocks(self) -> int:
        return 1

    def get_limit(self) -> int:
        return 0

    def free_all_blocks(self) -> None:
        self.freed += self.held - self.used
        self.held = self.used


class FakeCuPy:
    """``cupy`` as the sources use it; records every device made current."""

    def __init__(self, default: FakePool) -> None:
        self.current: list[int] = []
        outer = self

        class Device:
            def __init__(self, i: int) -> None:
                self.id, self.pci_bus_id = i, f"0000:0{i + 1}:00.0"

            def __enter__(self) -> Device:
                outer.current.append(self.id)
                return self

            def __exit__(self, *exc: object) -> None:
                pass

        self.cuda = SimpleNamespace(Device=Device,
                                    runtime=SimpleNamespace(getDeviceCount=lambda: 3))
        self.get_default_memory_pool = lambda: default
        self.get_default_pinned_memory_pool = lambda: SimpleNamespace(
            n_free_blocks=lambda: 0, free_all_blocks=lambda: None)


class FakeGpuBackend:
    name, is_gpu, home = "cupy", True, 0

    def __init__(self) -> None:
        self.pool = FakePool(GiB, 2 * GiB)
        self.default = FakePool(3 * GiB, 5 * GiB)
        self.cp = FakeCuPy(self.default)
        self.host = SimpleNamespace(stats=lambda: {"locked_bytes": 0, "cached_bytes": 0},
                                    release_cached=lambda: 0)
        self.budgets = {0: BudgetSpec("8GB", 8 * 10**9), 2: BudgetSpec("4GB", 4 * 10**9)}
        self.memory_of: list[int | None] = []

    def made_pool(self, device: int) -> Any:
        return self.pool if device == self.home else None

    def device_memory(self, device: int | None = None) -> tuple[int, int]:
        self.memory_of.append(device)
        return 6 * GiB, 80 * GiB

    def stats(self) -> Any:
        return SimpleNamespace(used=self.pool.used, held=self.pool.held, limit=None,
                               device_used=6 * GiB, device_total=80 * GiB)

    def free_cached(self) -> int:
        before = self.pool.held
        self.pool.free_all_blocks()
        return before - self.pool.held


@pytest.fixture
def gpus(fake_nvml, driver, monkeypatch: pytest.MonkeyPatch) -> FakeGpuBackend:
    """Three GPUs: cells run on 0 (the extension's pool), this process also used 1 (CuPy's
    default pool), never 2."""
    be = FakeGpuBackend()
    monkeypatch.setattr(sources.backend, "current", lambda: be)
    return be


def test_rows_of_used_and_unused_devices(gpus: FakeGpuBackend) -> None:
    live = LiveSources()
    assert live.devices() == ["0: Fake GPU 0", "1: Fake GPU 1", "2: Fake GPU 2"]
    rows = [live.row(i) for i in range(3)]
    assert (rows[0].pool_used, rows[0].pool_held) == (GiB, 2 * GiB)  # the cells' pool
    assert (rows[1].pool_used, rows[1].pool_held) == (3 * GiB, 5 * GiB)  # CuPy's default
    assert rows[2].pool_note == NOT_USED and rows[2].pool_used is NA
    assert rows[2].used == 10 * GiB and rows[2].util_gpu == 87  # NVML still reads it
    assert 2 not in gpus.cp.current  # never made current
    # each device's own budget (from load on, also where no pool was made)
    assert [r.budget for r in rows] == ["8GB = 7.45 GiB", "off", "4GB = 3.73 GiB"]


def test_an_unused_device_is_detailed_without_being_made_current(gpus) -> None:
    s = Sampler(LiveSources(), interval=0.5).sample(2)
    assert s.pool.unused_device and s.pool.used is NA and s.reading.this_process == 0
    assert s.reading.total == 80 * GiB and len(s.devices) == 3 and s.errors == ()
    assert 2 not in gpus.cp.current and 2 not in gpus.memory_of
    assert s.devices[2].pool_note == NOT_USED and s.devices[2].budget == "4GB = 3.73 GiB"
    assert s.budget == "8GB = 7.45 GiB"  # the home device's: the sample's own budget line
    assert sources.release_cached(2) == (0, 0, 0) and 2 not in gpus.cp.current


def test_a_used_device_reads_its_own_pool(gpus: FakeGpuBackend) -> None:
    assert device_pool(gpus, 0) is gpus.pool and device_pool(gpus, 1) is gpus.default
    assert device_pool(gpus, 2) is None
    figures = pool_figures(gpus, 1)
    assert (figures.used, figures.held, figures.limit) == (3 * GiB, 5 * GiB, None)
    assert gpus.memory_of == [1] and figures.budget_text == "off"
    assert "default pool hides its arenas" in figures.fragmentation_note
    released, _, _ = sources.release_cached(1)
    assert released == 2 * GiB and gpus.pool.freed == 0  # that device's pool, not the cells'


def test_the_device_labels_are_asked_once(gpus, fake_nvml) -> None:
    live = LiveSources()
    live.devices()
    fake_nvml.nvmlDeviceGetName = lambda h: "renamed"
    assert live.devices()[0] == "0: Fake GPU 0"


# --- real GPUs ------------------------------------------------------------------------------

@pytest.mark.gpu
def test_real_context_state_follows_cupy() -> None:
    """In a fresh process: no context before CuPy's first allocation, one after."""
    import subprocess

    code = ("import cupy as cp; from cupy_magic.monitor.contexts import has_context\n"
            "before = has_context(0); cp.zeros(1); print(before, has_context(0))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out == ["False", "True"]


@pytest.mark.gpu
def test_real_rows_leave_other_devices_untouched() -> None:
    """Sampling (rows of every device, details of device 0) makes no context on the others;
    with one GPU it checks device 0's row against its pool."""
    import subprocess

    code = (
        "import cupy as cp, cupy_magic.backend as b\n"
        "from cupy_magic.monitor.sampler import Sampler\n"
        "from cupy_magic.monitor.contexts import has_context\n"
        "b.select('cupy'); x = cp.ones(1 << 20)\n"
        "n = cp.cuda.runtime.getDeviceCount()\n"
        "s = Sampler(interval=0.5).sample(0)\n"
        "rows = s.devices or (None,)\n"
        "print(n, s.errors == (), [has_context(i) for i in range(1, n)] == [False] * (n - 1),"
        " rows[0] is None or rows[0].pool_used >= 8 << 20, s.pool.used >= 8 << 20)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=180, check=True).stdout.split()
    assert out[1:] == ["True"] * 4, out
