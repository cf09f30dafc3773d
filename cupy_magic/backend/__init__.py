"""The one place that knows whether CuPy on a GPU or NumPy on the host runs the cells.

Both backends implement :class:`Backend`: move arrays in and out, time the device work,
account for pool memory, and enforce the VRAM budget. Every other module asks the live
backend (:func:`current`) and never imports CuPy itself. The implementations live in
``cupy.py`` and ``host.py`` (their protocol in ``base.py``); this module chooses between
them. The live backend owns the VRAM budget in force; a switch carries it over.
"""

from __future__ import annotations

from collections.abc import Callable

from .base import Backend, BudgetExceeded, DeviceInfo, PoolStats, Transfer, address, byte_span
from .budget import BudgetSpec, parse_budget
from .cupy import CupyBackend, probe_cupy
from .host import HostBackend
from .hostmem import MIN_BYTES as REGISTER_MIN_BYTES

__all__ = [
    "REGISTER_MIN_BYTES",
    "Backend",
    "BudgetExceeded",
    "BudgetSpec",
    "CupyBackend",
    "DeviceInfo",
    "HostBackend",
    "PoolStats",
    "Transfer",
    "address",
    "byte_span",
    "current",
    "parse_budget",
    "probe_cupy",
    "reset",
    "select",
]


_live: Backend | None = None


def select(prefer: str | None = None) -> tuple[Backend, str]:
    """Choose the backend: ``"cupy"``, ``"host"``, or ``None`` for CuPy when a GPU works.

    Returns the backend and, when it is the host one, the reason a GPU is not used.
    Raises ``RuntimeError`` when ``"cupy"`` is asked for and cannot run.
    """
    global _live
    if prefer not in (None, "cupy", "host"):
        raise ValueError(f"unknown backend {prefer!r}; choose 'cupy' or 'host'")
    reason = "host backend chosen"
    if prefer != "host":
        cupy, why = probe_cupy()
        if cupy is not None:
            _switch(lambda: CupyBackend(cupy))
            return _live, ""  # type: ignore[return-value]
        if prefer == "cupy":
            raise RuntimeError(f"the CuPy backend cannot run: {why}")
        reason = why
    _switch(lambda: HostBackend(reason))
    return _live, reason  # type: ignore[return-value]


def _switch(make: Callable[[], Backend]) -> None:
    """Close the live backend, then make the new one (the order matters: closing the CuPy
    backend restores CuPy's default allocator, which the new one may install again). The
    budgets in force move over, each resolved against its new device (a share stays a share);
    the home device's budget goes to the new home device, the others to the devices of the
    same number that the new backend has."""
    global _live
    specs: dict[int, BudgetSpec] = {}
    home = 0
    if _live is not None:
        specs, home = _live.budgets, _live.home
        _live.close()
        _live = None
    _live = make()
    for device, spec in specs.items():
        target = _live.home if device == home else device
        if target >= _live.device_count() or (device != home and target == _live.home):
            continue
        total = _live.device_total(target)
        try:
            spec = parse_budget(spec.text, total)
        except ValueError:  # larger than the new device: keep as much as it has
            spec = BudgetSpec(spec.text, min(spec.nbytes, total) if total > 0 else spec.nbytes)
        _live.set_budget(spec, target)


def current() -> Backend:
    """Return the live backend, choosing one on first use."""
    if _live is None:
        select()
    assert _live is not None
    return _live


def reset() -> None:
    """Close the live backend and forget it (used at unload)."""
    global _live
    if _live is not None:
        _live.close()
    _live = None
