"""Whether a cell's inputs can move to the device at all: their device size (a broadcast
view moves as every element it shows) and a ``--dtype float16`` cast's range. Checked before
anything moves (:func:`~cupy_magic.run.cell.run_cell`)."""

from __future__ import annotations

import numpy as np

from ..backend import Backend
from ..units import format_bytes
from .errors import CellError
from .plan import cast_target

__all__ = ["check_sizes"]


def _span(arr: np.ndarray) -> int:
    """Bytes of memory ``arr`` reads (a broadcast view reads only its base's few)."""
    if arr.size == 0:
        return 0
    return arr.itemsize + sum((n - 1) * abs(s) for n, s in zip(arr.shape, arr.strides, strict=True))


def _check_half_range(name: str, arr: np.ndarray) -> None:
    """Refuse ``--dtype float16`` of an input with finite values beyond float16's range: the
    cast would turn them into inf (float32's range, 3.4e38, is not read: two passes over a
    large input for values that rare)."""
    top = float(np.finfo(np.float16).max)  # 65,504; from 65,520 on the cast gives inf
    hi, lo = float(np.fmax.reduce(arr, axis=None)), float(np.fmin.reduce(arr, axis=None))
    worst = max((v for v in (hi, lo) if np.isfinite(v)), key=abs, default=0.0)
    if abs(worst) >= 65520.0:  # rounds to inf (below it, to at most 65,504)
        raise CellError(f"--dtype float16: input {name!r} holds {worst:.6g}, beyond float16's "
                        f"largest {top:,.0f}, and the cast would make it inf; use --dtype "
                        f"float32 (dtype='float32' from Python) or scale {name} first")


def check_sizes(inputs: dict[str, np.ndarray], dtype: str | None, be: Backend, *,
                batched: bool) -> None:
    """Refuse, naming it, an input whose device copy cannot fit.

    A broadcast view holds a few bytes on the host but moves as every element it shows; one
    over the budget (or the device) is refused even in a batched run. Any other input larger
    than the whole device is refused when the cell would run whole.
    """
    if not inputs:
        return
    total = be.info().total_bytes
    free = be.budget_left()
    room = max(free, 0) if free is not None else total

    def what() -> str:  # formatted on refusal only
        return (f"the {format_bytes(room)} the VRAM budget leaves" if free is not None
                else f"the device's {format_bytes(total)}")
    for name, arr in inputs.items():
        target = cast_target(arr, dtype)
        if target == np.float16 and arr.dtype != np.float16 and arr.size:
            _check_half_range(name, arr)
        need = arr.size * target.itemsize
        span = _span(arr)
        if span < arr.nbytes and room and need > room:
            kind = "a broadcast view" if 0 in arr.strides else "a view over overlapping memory"
            raise CellError(
                f"input {name!r} ({kind} of {format_bytes(span)}) would take "
                f"{format_bytes(need)} on the device, more than {what()}: moving a view copies "
                f"every element it shows; make it inside the %%gpu cell instead (np.broadcast_to "
                f"there is a view on the device too), from the small array it views")
        if not batched and total and need > total:
            raise CellError(
                f"input {name!r} ({format_bytes(arr.nbytes)}) would take {format_bytes(need)} "
                f"on the device, more than its {format_bytes(total)}; run the cell batch by "
                "batch: %%gpu --batch (or set %vram_budget, and such cells are batched)")
