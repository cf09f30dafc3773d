"""The values of the magics' options, read as the session's functions take them."""

from __future__ import annotations

import argparse
import math
from typing import Any

from IPython.core.error import UsageError

from .. import session
from ..monitor.sampler import DEFAULT_INTERVAL, MAX_INTERVAL, MIN_INTERVAL
from ..units import Estimate, estimate

__all__ = ["device_number", "estimate_words", "interval", "modes", "on_off",
           "panel_action"]


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


def panel_action(action: str, line: str, args: argparse.Namespace) -> None:
    """Refuse what ``%vram_panel --pause`` (``--resume``, ``--stop``) would ignore: they act
    on every panel, so a device, ``--interval`` or ``--text`` beside them would do nothing."""
    ignored = [what for what, given in (("device", args.device is not None),
                                        ("--interval", args.interval is not None),
                                        ("--text", args.text)) if given]
    if ignored:
        raise UsageError(f"%vram_panel --{action} acts on every panel and takes no "
                         f"{' or '.join(ignored)}, got %vram_panel {line.strip()}; write "
                         f"%vram_panel --{action}, and set the rest in a %vram_panel line "
                         "of its own")


def estimate_words(words: list[str], user_ns: dict[str, Any]) -> Estimate:
    """``%vram_budget --estimate``'s words: ``SHAPE [DTYPE]``, or a variable's name and
    optionally a dtype (its shape in that dtype)."""
    if len(words) > 2:
        raise UsageError(f"--estimate takes SHAPE [DTYPE] or NAME [DTYPE], got "
                         f"{' '.join(words)!r}; e.g. --estimate 20000x20000 float32")
    dtype = words[1] if len(words) == 2 else None
    if words[0].isidentifier() and (dtype is None or words[0] in user_ns):
        return session.estimate_name(words[0], user_ns, dtype)
    return estimate(words[0], dtype or "float64")
