"""The backend, the session's settings, load and unload: ``%gpu_backend``, ``%gpu_syncs``,
``%gpu_fallback`` as functions."""

from __future__ import annotations

from .. import backend as _backend
from ..backend import DeviceInfo
from ..cluster import connect
from ..config import BACKENDS, settings
from ..run.options import check_sync_mode
from ..units import format_bytes
from .cells import forget_last
from .memory import set_budget

__all__ = ["apply_settings", "describe_device", "device_info", "reset", "set_fallback",
           "set_sync_mode", "use_backend"]


def use_backend(name: str | None) -> DeviceInfo:
    """Switch the backend: ``"cupy"``, ``"host"``, or ``None`` for CuPy when a GPU works.

    The budget in force moves to the new backend. Raises ``ValueError`` for an unknown name
    and ``RuntimeError`` when ``"cupy"`` cannot run (the message says why).
    """
    if name is not None and name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; use {' or '.join(map(repr, BACKENDS))}")
    _backend.select(name)
    return _backend.current().info()


def device_info() -> DeviceInfo:
    """What the cells run on: backend ("cupy" or "host"), device name, memory, versions."""
    return _backend.current().info()


def describe_device() -> str:
    """The one line printed at load: GPU, VRAM, driver, CUDA runtime, CuPy, budget, and the
    cluster ``%%gpu`` cells over Dask arrays run on, when one is in use."""
    cluster = connect.in_use()
    return _device_line() + (f"; cluster: {cluster}" if cluster else "")


def _device_line() -> str:
    be = _backend.current()
    info = be.info()
    budget = be.budget.describe() if be.budget else "off"
    if info.backend == "cupy":
        return (f"cupy_magic: {info.name}, {format_bytes(info.total_bytes)} VRAM, driver "
                f"{info.driver}, CUDA runtime {info.runtime}, CuPy {info.cupy_version}, "
                f"budget {budget}")
    why = info.reason or "host backend chosen"
    if why == "host backend chosen":
        return f"cupy_magic: host backend chosen: cells run on NumPy (CPU), budget {budget}"
    return (f"cupy_magic: no NVIDIA GPU visible ({why}): cells run on NumPy (CPU fallback), "
            f"budget {budget}")


def set_sync_mode(mode: str | None = None) -> str:
    """Set (or, with ``None``, show) the default ``--syncs`` mode: warn, error or off."""
    if mode is not None:
        settings().syncs = check_sync_mode(mode)
    return settings().syncs


def set_fallback(mode: bool | str | None = None) -> bool:
    """Set (or, with ``None``, show) whether ``%%gpu`` cells run with NumPy the calls CuPy
    cannot run (``%gpu_fallback on|off``; ``run_cell(fallback=...)`` for one cell).

    Parameters
    ----------
    mode
        ``True``/``"on"`` or ``False``/``"off"``; ``None`` shows the setting.
    """
    if mode is not None:
        words = {"on": True, "off": False}
        if isinstance(mode, str) and mode.strip().lower() in words:
            mode = words[mode.strip().lower()]
        if not isinstance(mode, bool):
            raise ValueError(f"fallback mode {mode!r} is neither on nor off; use "
                             "cupy_magic.set_fallback('on') or set_fallback('off')")
        settings().fallback = mode
    return settings().fallback


def apply_settings() -> None:
    """Put the configured backend and budget in force (at load)."""
    conf = settings()
    use_backend(conf.preferred_backend())
    if conf.budget:
        set_budget(conf.budget)


def reset() -> None:
    """Forget the last report and close the backend (an unload step)."""
    forget_last()
    _backend.reset()
