"""The functions users call from Python; the magics are thin parsers in front of them.

By what they are about: ``cells.py`` (``%%gpu``), ``memory.py`` (``%vram_budget``,
``%vram_who``), ``panels.py`` (``%vram_panel``), ``device.py`` (backend, settings, load).


``%%gpu`` is :func:`run_cell`, ``%vram_budget 8GB`` is :func:`set_budget`, ``%gpu_backend
host`` is :func:`use_backend`, ``%gpu_syncs error`` is :func:`set_sync_mode`,
``%vram_panel`` is :func:`show_panel`. The settings they default to live in
:mod:`cupy_magic.config`; the budget in force is the live backend's.
"""

from __future__ import annotations

from ..config import settings
from ..units import estimate
from .cells import last_report, run_cell, run_cell_outcome
from .cluster import ClusterStatus, cluster_status, use_cluster
from .device import (
    apply_settings,
    describe_device,
    device_info,
    reset,
    set_fallback,
    set_sync_mode,
    unchecked_note,
    use_backend,
)
from .memory import (
    BudgetStatus,
    budget_status,
    estimate_name,
    free_cached,
    memory_pool,
    set_budget,
    vram_free,
    vram_holders,
)
from .panels import (
    act_on_panels,
    panel_summary,
    pause_panels,
    resume_panels,
    show_panel,
    stop_panels,
)

__all__ = [
    "BudgetStatus",
    "ClusterStatus",
    "act_on_panels",
    "apply_settings",
    "budget_status",
    "cluster_status",
    "describe_device",
    "device_info",
    "estimate",
    "estimate_name",
    "free_cached",
    "last_report",
    "memory_pool",
    "panel_summary",
    "pause_panels",
    "reset",
    "resume_panels",
    "run_cell",
    "run_cell_outcome",
    "set_budget",
    "set_fallback",
    "set_sync_mode",
    "settings",
    "show_panel",
    "stop_panels",
    "unchecked_note",
    "use_backend",
    "use_cluster",
    "vram_free",
    "vram_holders",
]
