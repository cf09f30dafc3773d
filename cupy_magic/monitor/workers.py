"""What a cluster worker says about itself, for the panel's per-worker rows.

:func:`worker_reading` runs ON a worker (``Client.run`` sends it by reference, so workers
import this module): its device's memory and utilisation from the worker's own NVML, its
CuPy pool and budget from its backend; on the CPU fallback the worker process's memory
against its memory limit, and its CPU use. It answers plain numbers and ``None`` (never
:data:`~.nvml.NA`, which does not survive pickling as itself); :func:`worker_row` turns the
answer into a :class:`~.rows.WorkerRow` in the kernel.
"""

from __future__ import annotations

import os
from typing import Any

from .. import backend as _backend
from ..backend import HostBackend
from . import nvml
from .nvml import NA
from .rows import WorkerRow

__all__ = ["worker_reading", "worker_row"]


def _plain(value: Any) -> Any:
    """``value`` as a number or string that pickles as itself; ``None`` for NA."""
    return None if value is NA else value


def _gpu(be: Any) -> dict[str, Any]:
    """The worker's device, from its NVML (dask-cuda makes the worker's GPU device 0)."""
    device = int(be.cp.cuda.runtime.getDevice())
    handle = nvml.handle_for(be.cp.cuda.Device(device).pci_bus_id, device)
    reading = nvml.read_brief(handle)
    index = nvml.query("nvmlDeviceGetIndex", handle)
    name = reading.name if reading.name is not NA else "GPU"
    return {"device": f"GPU {index}: {name}" if isinstance(index, int) else str(name),
            "used": _plain(reading.used), "total": _plain(reading.total),
            "util": _plain(reading.util_gpu), "memory": "VRAM"}


def _process_memory() -> int | None:
    """Resident bytes of this process (``/proc``; psutil where there is no ``/proc``)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.Process().memory_info().rss)


def _host(dask_worker: Any) -> dict[str, Any]:
    """The worker process's memory against its memory limit, and its CPU use (percent)."""
    manager = getattr(dask_worker, "memory_manager", None)  # distributed >= 2022.6
    limit = getattr(manager, "memory_limit", None) or getattr(dask_worker, "memory_limit", None)
    monitor = getattr(dask_worker, "monitor", None)
    cpu = monitor.recent().get("cpu") if monitor is not None else None
    return {"device": "CPU (NumPy)", "used": _process_memory(),
            "total": limit or HostBackend().device_memory()[1],
            "util": cpu if isinstance(cpu, (int, float)) else None, "memory": "host"}


def worker_reading(dask_worker: Any = None) -> dict[str, Any]:
    """This worker's row, read here (``Client.run`` passes ``dask_worker``)."""
    be = _backend.current()
    out = {"name": str(getattr(dask_worker, "name", "") or ""), "backend": be.name,
           "pool_used": be.pool_used(),
           "budget": be.budget.describe() if be.budget is not None else "off"}
    out.update(_gpu(be) if be.is_gpu else _host(dask_worker))
    return out


def _figure(answer: dict[str, Any], key: str) -> Any:
    value = answer.get(key)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else NA


def worker_row(address: str, answer: Any, name: str = "") -> WorkerRow:
    """The row of the worker at ``address`` from what :func:`worker_reading` answered there;
    an answer that is not one (an error the worker or the scheduler gave) reads N/A."""
    if not isinstance(answer, dict):
        why = (f"{type(answer).__name__}: {answer}" if isinstance(answer, BaseException)
               else f"answered {type(answer).__name__}")
        return WorkerRow(address, name, note=why.split("\n")[0][:120])
    return WorkerRow(
        address, str(answer.get("name") or name), backend=answer.get("backend", NA),
        device=answer.get("device", NA), used=_figure(answer, "used"),
        total=_figure(answer, "total"), util=_figure(answer, "util"),
        pool_used=_figure(answer, "pool_used"), budget=answer.get("budget", NA),
        memory=str(answer.get("memory", "")))
