"""Joining the per-batch partial results of a ``--reduce`` rule (on the host where each batch's
was copied to a host row, else on the device: :meth:`~.batchjoin.BatchJoin.joined`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .errors import CellError

__all__ = ["RULES", "agree", "check_names", "combine", "compared", "like_partials",
           "name_a_rule", "over_rows", "python_kind", "rows_by_chance"]

RULES = ("sum", "min", "max", "mean", "any", "all", "concat")


def name_a_rule(name: str, value: Any = 0) -> str:
    """The fix for result ``name`` that the batches (or blocks) cannot join, in both forms;
    for a ``value`` no rule joins (a list, a dict, an object: the rules join numbers and
    arrays), the cell of its own."""
    if not (isinstance(value, (int, float, complex, np.generic)) or hasattr(value, "shape")):
        return (f"compute it in a cell of its own, or run this one whole (a --reduce rule "
                f"joins numbers and arrays, and {name!r} is a {type(value).__name__})")
    return (f"name a rule, e.g. --reduce {name}=sum (BatchOptions(reduce={{{name!r}: 'sum'}}) "
            f"from Python; rules: {', '.join(RULES)}), or compute it in a cell of its own")


def agree(value: Any, first: Any) -> bool:
    """Whether a batch's (or block's) value of a result is the first one's (NaN agrees with
    NaN; host arrays agree in shape, dtype and every element); values with no single truth
    value (lists of arrays) never agree."""
    if isinstance(value, np.ndarray) or isinstance(first, np.ndarray):  # a row-free array
        return (isinstance(value, np.ndarray) and isinstance(first, np.ndarray)
                and value.shape == first.shape and value.dtype == first.dtype
                and (value.tobytes() == first.tobytes() or bool(np.array_equal(
                    value, first, equal_nan=value.dtype.kind in "fc"))))
    try:
        return bool(value == first) or (value != value and first != first)
    except (ValueError, TypeError):
        return False


def compared(value: Any, to_host: Any) -> Any:
    """What a batch's row-free device array is compared as with :func:`agree`: a 0-d one
    as its Python scalar, any other as a host array (``to_host``: the backend's)."""
    return value.item() if value.ndim == 0 else to_host(value)


def over_rows(name: str, what: str, rows: int, unit: str, value: Any = 0) -> str:
    """Why result ``name`` (``what``: its type and value; ``value`` itself), a value the
    row check saw made over a ``unit``'s ``rows`` rows (``len(x)``, a total, a test of one),
    cannot be kept: each batch (or block) has its own, even where all of them agree."""
    return (f"the cell's result {name!r} ({what}) is a value over the {unit}'s {rows} rows "
            "(a count, a total, a test of one), not all rows, so it cannot be kept; "
            f"{name_a_rule(name, value)}, or del {name} at the end")


def rows_by_chance(name: str, what: str, rows: int, unit: str) -> str:
    """Why result ``name`` (``what``: its type and shape), an array the row check read as
    a value over a ``unit``'s rows (a total, ``np.histogram``'s counts, ``x.T``), cannot be
    joined as rows though its leading axis has the ``unit``'s ``rows`` entries: that length
    is a coincidence, not one entry per input row."""
    return (f"the cell's result {name!r} ({what}) has {rows} entries on its leading axis, as "
            f"the {unit} has rows, but the row check reads it as a value over the {unit}'s "
            f"rows (a total, counts, rows turned to columns), not one row per input row, so "
            f"it cannot be joined as rows; {name_a_rule(name)}")


def check_names(rules: Any, stored: Any) -> None:
    """Refuse ``--reduce`` rules for names the cell never assigns (it assigns ``stored``)."""
    unknown = [n for n in rules if n not in stored]
    if unknown:
        raise CellError(f"--reduce names {', '.join(unknown)}, which the cell never assigns "
                        f"(it assigns: {', '.join(sorted(stored)) or 'nothing'}); give only "
                        "names it assigns: drop them from --reduce (from "
                        "BatchOptions(reduce=...) in Python)")


def like_partials(value: Any, rule: str, dtype: Any) -> Any:
    """A joined ``value`` in the partials' own ``dtype``, as the unbatched cell's result (a
    sum of ``uint8`` or ``int32`` partials wraps as NumPy's sum in that dtype does, a mean of
    ``float32`` ones is ``float32``); Python partials keep their type in :func:`combine`."""
    if rule in ("sum", "mean") and np.dtype(dtype).kind in ("fc" if rule == "mean" else "uifc"):
        return value.astype(dtype, copy=False)
    return value


def python_kind(values: list[Any], rule: str) -> type | None:
    """The Python type the join of ``rule`` gives where every partial has one type (``int``,
    ``float``, ``complex``; ``bool`` but for a sum): that type, ``float`` for a mean of ints;
    else None."""
    kinds = {type(v) for v in values}
    if len(kinds) == 1 and (kinds <= {int, float, complex} or (kinds == {bool}
                                                               and rule != "sum")):
        kind = kinds.pop()
        return float if rule == "mean" and kind in (int, bool) else kind
    return None


def combine(rule: str, parts: list[tuple[Any, int]], xp: Any) -> Any:
    """Join per-batch partial results with ``rule``; ``parts`` holds ``(value, rows)`` pairs.

    The result has the partials' type (:func:`like_partials`). Device partials stay on the
    device (``xp`` is the backend's array module).
    """
    values = [v for v, _ in parts]
    kind = python_kind(values, rule)
    if kind is int and rule == "sum":
        return sum(values)  # exact, as Python's own ints
    if kind is not None:
        return kind(combine(rule, [(np.asarray(v), r) for v, r in parts], np))
    on_device = all(hasattr(v, "shape") for v in values)
    mod = xp if on_device else np
    if rule == "concat":
        return mod.concatenate([mod.atleast_1d(v) for v in values], axis=0)
    stack = mod.stack([mod.asarray(v) for v in values])
    if rule == "mean":
        rows = mod.asarray([r for _, r in parts], dtype=np.float64)
        shape = (len(parts),) + (1,) * (stack.ndim - 1)
        result = (stack * rows.reshape(shape)).sum(axis=0) / math.fsum(r for _, r in parts)
    else:
        fn = {"sum": mod.sum, "min": mod.min, "max": mod.max, "any": mod.any,
              "all": mod.all}[rule]
        result = fn(stack, axis=0)
    result = like_partials(result, rule, stack.dtype)
    return result if on_device else result[()]
