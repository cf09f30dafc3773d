"""The extension's settings, through IPython's configuration system.

``c.CupyMagic.budget = "8GB"`` (and ``syncs``, ``backend``, ``streams``,
``panel_interval``) in ``ipython_config.py``, a kernel spec's ``--CupyMagic.budget=8GB``
argument, or ``%config CupyMagic.syncs = "error"`` at run time. The environment variable
``CUPY_MAGIC_BACKEND`` still chooses the backend, and wins over the configuration (it is how
a launcher forces the CPU fallback). Defaults are read from the constants the code uses.
``c.CupyMagic.fallback = True`` makes ``%%gpu --fallback`` the default.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from traitlets import Bool, Enum, Float, Int, TraitError, Unicode, validate
from traitlets.config import Configurable
from traitlets.config.loader import DeferredConfig

from .backend import parse_budget
from .monitor.sampler import DEFAULT_INTERVAL, MAX_INTERVAL, MIN_INTERVAL
from .run.batching import DEFAULT_STREAMS, MAX_STREAMS
from .run.cell import SYNC_MODES

__all__ = ["BACKENDS", "CupyMagic", "budget_or_none", "settings", "use_config",
           "use_config_leniently"]

BACKENDS = ("cupy", "host")
ENV_BACKEND = "CUPY_MAGIC_BACKEND"
CONFIGURED_BACKEND = "c.CupyMagic.backend"  # where the backend is asked for without it
FALLBACK_DEFAULT = False  # %%gpu --fallback off unless asked
_ANY_DEVICE = 1 << 62  # a device size no budget exceeds: checks how a budget reads, not its size


def budget_or_none(text: str) -> str | None:
    """A ``CupyMagic.budget`` setting as a budget: ``None`` for none (empty, ``off``)."""
    text = text.strip()
    return None if text.lower() in ("", "off") else text


class CupyMagic(Configurable):
    """Settings of ``cupy_magic``, read from IPython's configuration at load."""

    budget = Unicode("", help="VRAM budget: 8GB, 1.5GiB, 80%, 0.5, or empty (or off) for none; "
                              "applied at load, and at once by %config while the extension "
                              "runs (%vram_budget changes it too)").tag(config=True)
    syncs = Enum(SYNC_MODES, default_value=SYNC_MODES[0],
                 help="default --syncs mode of %%gpu cells (%gpu_syncs changes it)"
                 ).tag(config=True)
    backend = Enum(("auto", *BACKENDS), default_value="auto",
                   help="cupy (GPU), host (NumPy on the CPU) or auto (CuPy when a GPU works); "
                        f"the environment variable {ENV_BACKEND} wins over it").tag(config=True)
    streams = Int(DEFAULT_STREAMS, help="default --streams of batched %%gpu cells"
                  ).tag(config=True)
    panel_interval = Float(DEFAULT_INTERVAL, help="seconds between the panel's samples"
                           ).tag(config=True)
    fallback = Bool(FALLBACK_DEFAULT, help="run with NumPy the calls CuPy cannot run, as "
                    "%%gpu --fallback does (%gpu_fallback changes it)").tag(config=True)

    # While the extension runs, how a new budget is put in force (cupy_magic.set_budget, set
    # by the session at load): %config CupyMagic.budget = "8GB" then acts at once.
    budget_hook: Callable[[str | None], Any] | None = None

    @validate("budget")
    def _check_budget(self, proposal: Any) -> str:
        value = proposal["value"].strip()
        budget = budget_or_none(value)
        try:
            if self.budget_hook is not None:
                self.budget_hook(budget)  # checked against the devices, and in force
            elif budget is not None:
                parse_budget(budget, _ANY_DEVICE)  # at load: read only
        except ValueError as exc:  # SizeError is one
            raise TraitError(f"CupyMagic.budget = {value!r} is not a budget: {exc}; e.g. "
                             'c.CupyMagic.budget = "8GB" (or "" for none)') from None
        return value

    @validate("streams")
    def _check_streams(self, proposal: Any) -> int:
        if not 1 <= proposal["value"] <= MAX_STREAMS:
            raise TraitError(f"CupyMagic.streams must be 1 to {MAX_STREAMS}, got "
                             f"{proposal['value']}; e.g. c.CupyMagic.streams = {DEFAULT_STREAMS}")
        return proposal["value"]

    @validate("panel_interval")
    def _check_interval(self, proposal: Any) -> float:
        value = proposal["value"]
        if not MIN_INTERVAL <= value <= MAX_INTERVAL:
            raise TraitError(f"CupyMagic.panel_interval must be {MIN_INTERVAL:g} to "
                             f"{MAX_INTERVAL:g} seconds, got "
                             f"{value}; e.g. c.CupyMagic.panel_interval = {DEFAULT_INTERVAL}")
        return value

    def preferred_backend(self) -> tuple[str | None, str]:
        """The backend to load: the environment variable's, else the configured one.

        Returns
        -------
        backend : str or None
            ``"cupy"`` or ``"host"``; None for ``auto`` (CuPy when a GPU works).
        where : str
            Where it was asked for: ``CUPY_MAGIC_BACKEND=cupy`` or ``c.CupyMagic.backend``.

        Raises
        ------
        ValueError
            The environment variable names no backend.
        """
        raw = os.environ.get(ENV_BACKEND, "").strip()
        if raw:
            env = raw.lower()
            if env not in BACKENDS:
                raise ValueError(f"{ENV_BACKEND}={env!r} is not a backend; use "
                                 f"{ENV_BACKEND}=cupy or {ENV_BACKEND}=host, or unset it")
            return env, f"{ENV_BACKEND}={raw}"
        return None if self.backend == "auto" else self.backend, CONFIGURED_BACKEND


_settings: CupyMagic | None = None


def use_config(config: Any = None) -> CupyMagic:
    """Make the live settings from ``config`` (an IPython ``Config``); used at load."""
    global _settings
    _settings = CupyMagic(config=config) if config is not None else CupyMagic()
    return _settings


def use_config_leniently(config: Any) -> tuple[CupyMagic, list[str]]:
    """Like :func:`use_config`, but a setting whose value is refused stays at its default.

    Returns
    -------
    tuple
        The live settings, and one line per refused setting naming it, why and the fix.
    """
    global _settings
    try:
        return use_config(config), []
    except TraitError:
        pass
    _settings = CupyMagic()
    problems = []
    section = config.get("CupyMagic", {}) if config is not None else {}
    traits = CupyMagic.class_traits(config=True)
    for name in sorted(set(section) & set(traits)):
        value = section[name]
        try:
            if isinstance(value, DeferredConfig):  # from the command line: text until now
                value = value.get_value(traits[name])
            setattr(_settings, name, value)
        except TraitError as exc:
            why = str(exc).strip().rstrip(".")
            if f"CupyMagic.{name}" not in why:  # traitlets' own words for a wrong kind
                why = f"c.CupyMagic.{name} = {value!r}: {why}"
            default = traits[name].default_value
            shown = repr(default) if default != "" else "off"
            problems.append(f"cupy_magic: {why}; {name} stays at its default, {shown}")
    return _settings, problems


def settings() -> CupyMagic:
    """The live settings (the defaults until the extension loads with a configuration)."""
    return _settings if _settings is not None else use_config()
