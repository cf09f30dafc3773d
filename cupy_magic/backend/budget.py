"""The VRAM budget as the user wrote it, resolved against a device size.

The backend owns the budget in force (:meth:`Backend.set_budget`); this module only reads
what the user wrote. Pure functions: the caller passes the device's total bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..units import SizeError, format_bytes, parse_size

__all__ = ["MIN_BARE_BYTES", "BudgetSpec", "parse_budget", "small_budget", "suggest_size"]

# A budget given as a bare number of bytes below this (set_budget(8)) is refused as a slip
# for a size with a unit ('8GB'), as %vram_budget 8 is; '8B' (a unit) is taken as written.
MIN_BARE_BYTES = 2**20
_REMOVE = "'off' (set_budget(None) from Python) removes the budget"


@dataclass(frozen=True)
class BudgetSpec:
    """A budget as the user wrote it, resolved against a device size."""

    text: str
    nbytes: int
    fraction: float | None = None

    def describe(self) -> str:
        if self.fraction is not None:
            return f"{format_bytes(self.nbytes)} ({self.fraction:.0%} of the device)"
        exact = format_bytes(self.nbytes)
        return exact if exact.replace(" ", "") == self.text.replace(" ", "") else \
            f"{self.text} = {exact}"


# A bare number, in any notation (0.5, 5e-1, 1e9, 1000000000): always a fraction of the
# device, so that the notation never changes what a number means; a size needs a unit.
_NUMBER = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def suggest_size(raw: str, device_total: int) -> str:
    """The size a bare number ``raw`` (above 1) most likely meant: ``raw`` with the largest
    of GB, MB, KB that fits the device (``2000`` on a 24 GB device: ``2000MB``); bytes for
    a number of a million or more."""
    value = float(raw)
    if value >= MIN_BARE_BYTES:
        return f"{raw}B" if value < 1e30 else "8GB"
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if device_total <= 0 or value * scale <= device_total:
            return f"{raw}{unit}"
    return f"{raw}B"


def small_budget(nbytes: int, device_total: int) -> str:
    """The message refusing ``set_budget(nbytes)``, a bare number of bytes under
    :data:`MIN_BARE_BYTES` (0 included): most likely a size without its unit."""
    if nbytes == 0:
        return ("set_budget(0): a budget of 0 bytes would refuse every allocation; "
                "set_budget(None) or set_budget('off') removes the budget; for a size, e.g. "
                "set_budget('8GB')")
    size = suggest_size(str(nbytes), device_total)
    return (f"set_budget({nbytes}) is {nbytes} bytes, under {format_bytes(MIN_BARE_BYTES)}: "
            f"every cell would be refused; did you mean set_budget('{size}')? (give "
            f"'{nbytes}B' for exactly {nbytes} bytes)")


def _fraction(raw: str, device_total: int) -> float:
    """A bare number as a fraction of the device; refused outside (0, 1] with the fix."""
    value = float(raw)
    if value == 0:
        raise SizeError(f"a budget of {raw} would refuse every allocation; write e.g. 8GB or "
                        f"0.5; {_REMOVE}")
    if value > 1:
        size = suggest_size(raw, device_total)
        raise SizeError(f"{raw!r} has no unit: a bare number (in any notation) is a fraction "
                        f"of the device, 0 to 1; for a size add a unit, e.g. {size}")
    return value


def parse_budget(text: str, device_total: int) -> BudgetSpec:
    """Parse a budget: a size (``8GB``), a percentage (``50%``) or a fraction (``0.5``).

    Parameters
    ----------
    text
        What the user wrote.
    device_total
        Bytes of the device the budget applies to; a budget above it is refused.
    """
    raw = (text or "").strip()
    if not raw:
        raise SizeError("no budget given; write e.g. %vram_budget 8GB, 80% or 0.5")
    if raw.startswith("-"):
        raise SizeError(f"a budget cannot be negative ({raw!r}); write e.g. 8GB, or 'off' to "
                        "remove the budget")
    fraction: float | None = None
    if raw.endswith("%"):
        try:
            fraction = float(raw[:-1]) / 100
        except ValueError:
            raise SizeError(f"cannot read the percentage {raw!r}; write e.g. 80%") from None
        if not 0 < fraction <= 1:
            raise SizeError(f"a percentage budget must be above 0% and at most 100%, got {raw!r}; "
                            "e.g. 80%")
    elif _NUMBER.fullmatch(raw):
        fraction = _fraction(raw, device_total)
    if fraction is not None:
        if device_total <= 0:
            raise SizeError(f"the device size is unknown, so {raw!r} cannot be resolved; give a "
                            "size such as 8GB")
        nbytes = int(device_total * fraction)
        if nbytes < 1:
            raise SizeError(f"a budget of {raw} is less than one byte of this device; write "
                            "e.g. 8GB, 50% or 0.5")
    else:
        try:
            nbytes = parse_size(raw)
        except SizeError as exc:  # "none", "0B": name the word that removes the budget
            raise SizeError(f"{exc}; {_REMOVE}") from None
        if device_total > 0 and nbytes > device_total:
            raise SizeError(
                f"a budget of {raw} ({format_bytes(nbytes)}) is larger than the device "
                f"({format_bytes(device_total)}); give at most {format_bytes(device_total)} "
                "or a percentage such as 90%"
            )
    return BudgetSpec(raw, nbytes, fraction)
