"""How the panel writes one figure: a value that is not a number (a failed source's
:data:`~cupy_magic.monitor.nvml.NA`) reads "N/A", never a zero, and nothing here raises."""

from __future__ import annotations

from typing import Any

from ..units import format_bytes

__all__ = ["known", "nbytes", "num", "pct", "rate"]


def known(value: Any) -> bool:
    """Whether ``value`` is a number that was read (not NA, not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def nbytes(value: Any) -> str:
    return format_bytes(value) if known(value) else "N/A"


def rate(value: Any) -> str:
    return f"{value / 1e9:.1f} GB/s" if known(value) else "N/A"


def num(value: Any, unit: str, fmt: str = ".0f") -> str:
    return f"{value:{fmt}}{unit}" if known(value) else "N/A"


def pct(part: Any, whole: Any) -> str:
    """``part`` as a share of ``whole``; a share above zero that rounds to 0% reads ``<1%``."""
    if not (known(part) and known(whole) and whole > 0):
        return "N/A"
    share = part / whole
    return "<1%" if 0 < share < 0.005 else f"{share:.0%}"
