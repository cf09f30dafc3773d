"""The backend, the session's settings, load and unload: ``%gpu_backend``, ``%gpu_syncs``,
``%gpu_fallback`` as functions."""

from __future__ import annotations

from .. import backend as _backend
from ..backend import DeviceInfo
from ..cluster import connect
from ..compat.spec import reference_module
from ..config import BACKENDS, CONFIGURED_BACKEND, budget_or_none, settings
from ..run.options import check_sync_mode
from ..units import format_bytes
from .cells import forget_last
from .memory import set_budget

__all__ = ["apply_settings", "describe_device", "device_info", "reset", "set_fallback",
           "set_sync_mode", "unchecked_note", "use_backend"]


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
    unchecked = unchecked_note()
    if unchecked and why == "host backend chosen":
        return (f"cupy_magic: host backend chosen: cells run on NumPy (CPU); CuPy is not "
                f"installed, so {unchecked}; budget {budget}")
    if unchecked:  # the reason would only say that CuPy is not installed, and how to install it
        return (f"cupy_magic: CuPy is not installed: cells run on NumPy (CPU fallback) and "
                f"{unchecked}; budget {budget}")
    if why == "host backend chosen":
        return f"cupy_magic: host backend chosen: cells run on NumPy (CPU), budget {budget}"
    return (f"cupy_magic: no NVIDIA GPU visible ({why}): cells run on NumPy (CPU fallback), "
            f"budget {budget}")


def unchecked_note() -> str:
    """Where CuPy is not installed, a note that its limits are not checked and how to check
    them; ``""`` where they are.

    Without CuPy the CPU fallback cannot compare a cell's calls, options and dtypes with
    CuPy's, so what a GPU would refuse (``np.nditer``) runs, and ``--fallback`` finds nothing
    to fall back from. CuPy's wheel installs on a machine without a GPU, and the check works
    there.
    """
    if reference_module() is not None:
        return ""
    return ("CuPy's limits are not checked (a name, option or dtype CuPy lacks runs here, "
            "where a GPU would refuse it); pip install cupy-cuda13x (cupy-cuda12x for CUDA 12 "
            "drivers) checks them, without a GPU too")


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


def apply_settings() -> list[str]:
    """Put the configured backend and budget in force (at load).

    A setting that cannot be put in force is left out rather than failing the load: the
    backend becomes CuPy when a GPU works (the host one when ``cupy`` cannot run), the
    budget stays off. From then on ``%config CupyMagic.budget = ...`` acts at once.

    Returns
    -------
    list of str
        One line per setting left out: which, why, and what is in force instead.
    """
    conf = settings()
    problems = []
    try:
        prefer, where = conf.preferred_backend()
    except ValueError as exc:
        prefer, where = None if conf.backend == "auto" else conf.backend, CONFIGURED_BACKEND
        problems.append(f"cupy_magic: {exc}; loading with backend {conf.backend}")
    try:
        use_backend(prefer)
    except RuntimeError as exc:
        use_backend("host")
        problems.append(f"cupy_magic: backend {prefer} asked for ({where}), but {exc}; "
                        "loaded on the host backend (NumPy on the CPU)")
    if budget_or_none(conf.budget) is not None:
        try:
            set_budget(conf.budget)
        except ValueError as exc:  # SizeError: larger than this device, ...
            problems.append(f"cupy_magic: c.CupyMagic.budget = {conf.budget!r} is not used, "
                            f"the budget stays off: {exc}")
    conf.budget_hook = set_budget
    return problems


def reset() -> None:
    """Forget the last report and close the backend (an unload step)."""
    forget_last()
    _backend.reset()
