"""NumPy's floating-point error settings inside a cell.

CuPy has no ``errstate``, ``seterr``, ``geterr``, ``seterrcall`` or ``geterrcall``: the GPU
never checks floating-point errors, as if every one were set to ``'ignore'``. These names
touch only NumPy's settings on the host and take no arrays, so inside a cell they are NumPy's
own whenever what they ask for changes nothing the device does: reading the settings,
naming a handler (``seterrcall``, used only in ``'call'`` mode), ``'ignore'``, and ``'warn'``
(NumPy's default, which every cell already runs under without a device warning: restoring
``np.seterr(**old)`` is common). A mode that promises an exception or output
(``np.errstate(divide='raise')``, ``'call'``, ``'print'``, ``'log'``) could not be honoured by
the device computations, so it stops the cell in one line, with or without ``--fallback``.
"""

from __future__ import annotations

from typing import Any

from .calls import Calls
from .dress import fronting

__all__ = ["FP_ERRORS", "fp_errors_call"]

FP_ERRORS = frozenset({"errstate", "seterr", "geterr", "seterrcall", "geterrcall"})
_KINDS = ("all", "divide", "over", "under", "invalid")
_QUIET = (None, "ignore", "warn")


def fp_errors_call(calls: Calls, host: Any, name: str) -> Any:
    """NumPy's ``host`` (``np.<name>``, one of :data:`FP_ERRORS`) for a cell: called as
    NumPy's own when every error kind it sets is ``'ignore'`` or ``'warn'``, refused
    otherwise."""

    def checked(*args: Any, **kwargs: Any) -> Any:
        asked = dict(zip(_KINDS, args, strict=False)) if name == "seterr" else {}
        asked.update((k, v) for k, v in kwargs.items() if k in _KINDS)
        modes = {k: v for k, v in asked.items() if v not in _QUIET}
        if modes:
            calls.stop(f"np.{name}", "fp-errors",
                       ", ".join(f"{k}={v!r}" for k, v in modes.items()))
        return host(*args, **kwargs)

    return fronting(checked, host, name)
