"""The only module that talks to NVML (through ``pynvml`` from nvidia-ml-py).

Every call goes through :func:`query`: NVML is initialised on first use, and any failure
(no library, no driver, a query the GPU does not support) becomes :data:`NA`, a value that
formats as ``"N/A"``, and is logged once. Display code therefore needs no special cases.

Devices are found by PCI bus id, so the NVML device is the one CuPy calls device ``i``
whatever ``CUDA_VISIBLE_DEVICES`` says; without CuPy, the variable is parsed here.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..lifecycle import on_unload

__all__ = [
    "NA",
    "DeviceReading",
    "NotAvailable",
    "available",
    "handle_for",
    "mig_uuid",
    "pcie_link_bytes_per_s",
    "query",
    "read_brief",
    "read_device",
    "reason",
    "shutdown",
    "visible_handles",
]

log = logging.getLogger(__name__)


class NotAvailable(str):
    """A figure NVML could not give; formats as ``"N/A"`` whatever the format spec."""

    _instance: NotAvailable | None = None

    def __new__(cls) -> NotAvailable:
        if cls._instance is None:
            cls._instance = super().__new__(cls, "N/A")
        return cls._instance

    def __format__(self, spec: str) -> str:
        return "N/A"

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "NA"


NA = NotAvailable()

# Bytes per second per lane, after line encoding: 8b/10b for gen 1-2, 128b/130b from gen 3.
_LANE_BYTES_PER_S = {1: 250e6, 2: 500e6, 3: 984.6e6, 4: 1969.2e6, 5: 3938.5e6, 6: 7563e6}

_lock = threading.Lock()
# Calls in flight: shutdown waits for them, so a sample on the sampler thread never meets a
# library that was shut down under it.
_calls = threading.Condition()
_active = [0]
_state: dict[str, Any] = {"module": None, "initialised": False, "reason": ""}
_logged: set[tuple[str, str]] = set()


def _log_once(func_name: str, exc: BaseException) -> None:
    key = (func_name, type(exc).__name__)
    if key not in _logged:
        _logged.add(key)
        log.info("NVML %s failed: %s: %s (shown as N/A from now on)", func_name,
                 type(exc).__name__, exc)


def _init() -> ModuleType | None:
    """Import pynvml and call ``nvmlInit`` once; return the module, or None with a reason."""
    with _lock:
        if _state["initialised"]:
            return _state["module"]
        if _state["reason"]:
            return None
        try:
            import pynvml
        except ImportError as exc:
            _state["reason"] = f"nvidia-ml-py is not installed ({exc}); pip install nvidia-ml-py"
            return None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            # The typical laptop/CI case: NVMLError_LibraryNotFound. Remember why, once.
            _state["reason"] = f"NVML unavailable: {exc}"
            log.info("%s", _state["reason"])
            return None
        _state["module"] = pynvml
        _state["initialised"] = True
        on_unload(shutdown)
        return pynvml


def available() -> bool:
    """Whether NVML initialised (initialising it on first call)."""
    return _init() is not None


def reason() -> str:
    """Why NVML is not available ("" when it is)."""
    _init()
    return _state["reason"]


def query(func_name: str, *args: Any, default: Any = NA) -> Any:
    """Call ``pynvml.<func_name>(*args)``; on any NVML failure return ``default``.

    Parameters
    ----------
    func_name
        The pynvml function, e.g. ``"nvmlDeviceGetUtilizationRates"``.
    *args
        Its arguments; :data:`NA` among them short-circuits to ``default``.
    default
        What to return when NVML is absent or the call fails.
    """
    if any(a is NA for a in args):
        return default
    with _calls:
        _active[0] += 1
    try:
        nv = _init()
        if nv is None:
            return default
        func = getattr(nv, func_name, None)
        if func is None:
            _log_once(func_name, AttributeError(f"pynvml has no {func_name}"))
            return default
        return func(*args)
    except nv.NVMLError as exc:
        _log_once(func_name, exc)
        return default
    finally:
        with _calls:
            _active[0] -= 1
            _calls.notify_all()


def shutdown(timeout: float = 5.0) -> None:
    """Release NVML (at unload), after the calls in flight return (at most ``timeout``
    seconds); the next query initialises it again."""
    with _calls:
        _calls.wait_for(lambda: _active[0] == 0, timeout)
        _shutdown()


def _shutdown() -> None:
    with _lock:
        nv = _state["module"]
        if _state["initialised"] and nv is not None:
            try:
                nv.nvmlShutdown()
            except nv.NVMLError as exc:
                _log_once("nvmlShutdown", exc)
        _state.update(module=None, initialised=False, reason="")


def mig_uuid(index: int) -> str:
    """The ``MIG-<uuid>`` that ``CUDA_VISIBLE_DEVICES`` names as CUDA device ``index``, or
    ``""`` when that device is a whole GPU."""
    entries = [e.strip() for e in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    entry = entries[index] if 0 <= index < len(entries) else ""
    return entry if entry.startswith("MIG-") else ""


def handle_for(pci_bus_id: str, index: int | None = None) -> Any:
    """The NVML handle of the device at ``pci_bus_id`` (as CuPy's ``Device.pci_bus_id``).

    When ``CUDA_VISIBLE_DEVICES`` makes CUDA device ``index`` a MIG slice, the slice's own
    handle (its memory, not the whole GPU's): a slice has its parent's PCI bus id.
    """
    uuid = mig_uuid(index) if index is not None else ""
    if uuid:
        return query("nvmlDeviceGetHandleByUUID", uuid)
    return query("nvmlDeviceGetHandleByPciBusId", pci_bus_id)


def visible_handles() -> list[Any]:
    """NVML handles of the devices CUDA would show, honouring ``CUDA_VISIBLE_DEVICES``.

    Used when CuPy cannot give PCI bus ids. Entries are indices, ``GPU-`` UUIDs or ``MIG-``
    UUIDs (a MIG slice's own handle); as in CUDA, an invalid entry hides it and every entry
    after it.
    """
    count = query("nvmlDeviceGetCount", default=0)
    spec = os.environ.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return [query("nvmlDeviceGetHandleByIndex", i) for i in range(count)]
    handles = []
    for entry in (e.strip() for e in spec.split(",")):
        if entry.isdigit() and int(entry) < count:
            handle = query("nvmlDeviceGetHandleByIndex", int(entry))
        elif entry.startswith(("GPU-", "MIG-")):
            handle = query("nvmlDeviceGetHandleByUUID", entry)
        else:
            break
        if handle is NA:
            break
        handles.append(handle)
    return handles


def pcie_link_bytes_per_s(generation: Any, width: Any) -> Any:
    """One direction's ceiling of a PCIe link in bytes/s (gen 5 x16: 63 GB/s), or NA."""
    if not isinstance(generation, int) or not isinstance(width, int):
        return NA
    per_lane = _LANE_BYTES_PER_S.get(generation)
    return NA if per_lane is None or width <= 0 else per_lane * width


@dataclass(frozen=True)
class DeviceReading:
    """What NVML says about one device at one instant; any field may be :data:`NA`.

    Bytes for memory, bytes/s for PCIe, percent for utilisation, degrees C, watts, MHz.
    """

    name: Any = NA
    total: Any = NA
    used: Any = NA
    free: Any = NA
    this_process: Any = NA
    other_processes: Any = NA
    util_gpu: Any = NA
    util_memory: Any = NA
    pcie_rx: Any = NA
    pcie_tx: Any = NA
    pcie_max: Any = NA
    pcie_link: str = "N/A"
    temperature: Any = NA
    power: Any = NA
    power_limit: Any = NA
    clock_sm: Any = NA
    clock_memory: Any = NA
    mig: bool = False  # a MIG slice: memory is the slice's, utilisation is not reported
    pids_match: Any = NA  # False: NVML lists processes but not this one (a container)


def _processes(handle: Any, pid: int) -> tuple[Any, Any, Any]:
    procs = query("nvmlDeviceGetComputeRunningProcesses", handle)
    if procs is NA:
        return NA, NA, NA
    mine, others, seen_me = 0, 0, False
    for proc in procs:
        used = getattr(proc, "usedGpuMemory", None)
        if not isinstance(used, int):
            continue  # NVML hides per-process memory under some drivers and in containers
        if proc.pid == pid:
            mine += used
            seen_me = True
        else:
            others += used
    # In a container NVML reports host pids, so "not seen" means unknown, not zero.
    return (mine if seen_me else NA), others, (seen_me if procs else NA)


def read_device(handle: Any, pid: int | None = None) -> DeviceReading:
    """Read every figure the panel shows for one NVML device handle."""
    if handle is NA or not available():
        return DeviceReading()
    nv = _state["module"]
    mem = query("nvmlDeviceGetMemoryInfo", handle)
    util = query("nvmlDeviceGetUtilizationRates", handle)
    mine, others, pids_match = _processes(handle, os.getpid() if pid is None else pid)
    mig = query("nvmlDeviceIsMigDeviceHandle", handle, default=0) in (1, True)
    rx = query("nvmlDeviceGetPcieThroughput", handle, nv.NVML_PCIE_UTIL_RX_BYTES)
    tx = query("nvmlDeviceGetPcieThroughput", handle, nv.NVML_PCIE_UTIL_TX_BYTES)
    gen = query("nvmlDeviceGetCurrPcieLinkGeneration", handle)
    width = query("nvmlDeviceGetCurrPcieLinkWidth", handle)
    power = query("nvmlDeviceGetPowerUsage", handle)
    limit = query("nvmlDeviceGetEnforcedPowerLimit", handle)

    def scaled(value: Any, factor: float) -> Any:
        return value * factor if isinstance(value, (int, float)) else NA

    return DeviceReading(
        name=query("nvmlDeviceGetName", handle),
        total=getattr(mem, "total", NA),
        used=getattr(mem, "used", NA),
        free=getattr(mem, "free", NA),
        this_process=mine,
        other_processes=others,
        util_gpu=getattr(util, "gpu", NA),
        util_memory=getattr(util, "memory", NA),
        pcie_rx=scaled(rx, 1024.0),  # NVML gives KB/s
        pcie_tx=scaled(tx, 1024.0),
        pcie_max=pcie_link_bytes_per_s(gen, width),
        pcie_link=f"Gen{gen} x{width}" if gen is not NA and width is not NA else "N/A",
        temperature=query("nvmlDeviceGetTemperature", handle, nv.NVML_TEMPERATURE_GPU),
        power=scaled(power, 1e-3),  # milliwatts
        power_limit=scaled(limit, 1e-3),
        clock_sm=query("nvmlDeviceGetClockInfo", handle, nv.NVML_CLOCK_SM),
        clock_memory=query("nvmlDeviceGetClockInfo", handle, nv.NVML_CLOCK_MEM),
        mig=mig,
        pids_match=pids_match,
    )


def read_brief(handle: Any) -> DeviceReading:
    """The few figures of a device's row in the panel (name, memory, utilisation, PCIe): five
    NVML queries where :func:`read_device` makes fourteen; the rest are :data:`NA`."""
    if handle is NA or not available():
        return DeviceReading()
    nv = _state["module"]
    mem = query("nvmlDeviceGetMemoryInfo", handle)
    util = query("nvmlDeviceGetUtilizationRates", handle)
    rx = query("nvmlDeviceGetPcieThroughput", handle, nv.NVML_PCIE_UTIL_RX_BYTES)
    tx = query("nvmlDeviceGetPcieThroughput", handle, nv.NVML_PCIE_UTIL_TX_BYTES)
    return DeviceReading(
        name=query("nvmlDeviceGetName", handle),
        total=getattr(mem, "total", NA), used=getattr(mem, "used", NA),
        free=getattr(mem, "free", NA),
        util_gpu=getattr(util, "gpu", NA), util_memory=getattr(util, "memory", NA),
        pcie_rx=rx * 1024.0 if isinstance(rx, (int, float)) else NA,  # NVML gives KB/s
        pcie_tx=tx * 1024.0 if isinstance(tx, (int, float)) else NA,
    )
