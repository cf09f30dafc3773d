"""The compact rows of the panel: one per visible device, one per cluster worker.

Plain data, drawn by :mod:`cupy_magic.view.rows`; any figure may be :data:`~.nvml.NA`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .nvml import NA, DeviceReading

__all__ = ["HOST_NO_POOL", "NOT_USED", "DeviceRow", "WorkerRow", "device_row"]

NOT_USED = "not used by this kernel"  # the pool note of a device without a context here
HOST_NO_POOL = "no device pool on the host backend"


@dataclass(frozen=True)
class DeviceRow:
    """One visible device at one instant: bytes, percent, bytes/s.

    ``pool_note`` says why the pool figures are :data:`~.nvml.NA`: :data:`NOT_USED` for a
    device this kernel never touched (it is not made current to be read).
    """

    device: int
    name: Any = NA
    used: Any = NA
    total: Any = NA
    util_gpu: Any = NA
    pcie_rx: Any = NA
    pcie_tx: Any = NA
    pool_used: Any = NA
    pool_held: Any = NA
    budget: Any = NA
    pool_note: str = ""


def device_row(device: int, reading: DeviceReading, pool_used: Any, pool_held: Any,
               budget: Any, pool_note: str = "") -> DeviceRow:
    """The row of ``device`` from its NVML reading and its pool's figures."""
    return DeviceRow(device=device, name=reading.name, used=reading.used, total=reading.total,
                     util_gpu=reading.util_gpu, pcie_rx=reading.pcie_rx,
                     pcie_tx=reading.pcie_tx, pool_used=pool_used, pool_held=pool_held,
                     budget=budget, pool_note=pool_note)


@dataclass(frozen=True)
class WorkerRow:
    """One worker of the cluster in use, as the worker itself last reported.

    On a GPU worker ``used``/``total`` are its device's memory (NVML) and ``util`` the SM
    utilisation; on the CPU fallback they are the worker process's memory against its
    memory limit, and ``util`` its CPU use (``memory`` says which). ``note`` says why the
    figures are :data:`~.nvml.NA` (no answer in time, an error).
    """

    address: str
    name: str = ""
    backend: Any = NA
    device: Any = NA
    used: Any = NA
    total: Any = NA
    util: Any = NA
    pool_used: Any = NA
    budget: Any = NA
    memory: str = ""  # "VRAM", or "host" on the CPU fallback
    note: str = ""
