"""The values of the magics' options, read as the session's functions take them."""

from __future__ import annotations

import math

from IPython.core.error import UsageError

from ..monitor.sampler import DEFAULT_INTERVAL, MAX_INTERVAL, MIN_INTERVAL

__all__ = ["device_number", "interval", "modes", "on_off"]


def interval(text: str | None) -> float | None:
    """``--interval`` in seconds, refused outside the sampler's bounds (as it does)."""
    if text is None:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not MIN_INTERVAL <= seconds <= MAX_INTERVAL:
        raise UsageError(f"--interval {text or repr(text)} is not {MIN_INTERVAL:g} to "
                         f"{MAX_INTERVAL:g} seconds (faster only spins a core, slower is no "
                         f"longer live); e.g. %vram_panel --interval {DEFAULT_INTERVAL}")
    return seconds


def modes(values: tuple[str, ...]) -> str:
    return f"{', '.join(values[:-1])} or {values[-1]}"


def on_off(value: bool) -> str:
    return "on" if value else "off"


def device_number(text: str | None) -> int | None:
    """``%vram_budget --device N`` as a device number (``None`` when not given)."""
    if text is None:
        return None
    if not text.strip().isdigit():
        raise UsageError(f"--device takes a device number, got {text!r}; e.g. "
                         "%vram_budget 8GB --device 1")
    return int(text)
