"""What a GPU is, as :class:`~.base.DeviceInfo` says it: its name, memory, driver, CUDA
versions and UUID, from CuPy's device properties (read by :class:`~.cupy.CupyBackend`)."""

from __future__ import annotations

import functools
import re
from types import ModuleType
from typing import Any

from .base import DeviceInfo

__all__ = ["describe", "device_name"]


def device_name(props: dict[str, Any]) -> str:
    """The GPU's name in CuPy's device properties ``props`` (bytes in some CuPy versions)."""
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def describe(cp: ModuleType, backend: str, props: dict[str, Any], device: int) -> DeviceInfo:
    """The :class:`~.base.DeviceInfo` of ``device``, whose properties are ``props``, under
    CuPy module ``cp`` and the backend named ``backend``."""
    rt = cp.cuda.runtime

    def ver(v: int) -> str:
        return f"{v // 1000}.{(v % 1000) // 10}"

    return DeviceInfo(
        backend=backend,
        name=device_name(props),
        total_bytes=int(props["totalGlobalMem"]),
        driver=_nvidia_driver_version() or f"CUDA {ver(rt.driverGetVersion())}",
        runtime=ver(rt.runtimeGetVersion()),
        cupy_version=cp.__version__,
        uuid=_uuid(props, device),
    )


def _uuid(props: dict[str, Any], device: int) -> str:
    """The GPU's UUID as ``nvidia-smi -L`` prints it (``GPU-xxxxxxxx-...``); its PCI
    address where CuPy's properties lack one (unique on a host all the same)."""
    raw = props.get("uuid")
    if isinstance(raw, (bytes, bytearray)) and len(raw) == 16:
        h = raw.hex()
        return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    return (f"pci-{props.get('pciDomainID', 0):04x}:{props.get('pciBusID', device):02x}:"
            f"{props.get('pciDeviceID', 0):02x}")


@functools.cache
def _nvidia_driver_version() -> str:
    """Return the NVIDIA driver version (e.g. '580.159.04') from the kernel module."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as fh:
            first = fh.readline()
    except OSError:
        return ""
    found = re.search(r"\s(\d{3,}\.\d+(?:\.\d+)?)\s", first)
    return found.group(1) if found else ""
