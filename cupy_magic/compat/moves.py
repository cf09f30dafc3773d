"""Moving a call's Python values and arrays between the host and the device.

:class:`Moves` is the part of :class:`~.calls.Calls` that makes device arrays of the lists,
tuples and numbers a cell passes where NumPy takes arrays, each counted for the report, and
copies arrays each way for the fallback."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy

from .spec import UNSUPPORTED_KINDS, CallSpec

__all__ = ["SEQUENCES", "Moves", "host_data"]

SEQUENCES = frozenset({list, tuple})
_SCALARS = (bool, int, float, complex)
_CONVERTED = frozenset({*SEQUENCES, range})  # what convert() moves to the device
_LOOSE = frozenset({*_CONVERTED, *_SCALARS})


class Moves:
    """Conversions of one cell's call arguments (``xp`` is its array module)."""

    xp: ModuleType
    host: bool
    device_type: type

    def limit(self, spec: CallSpec, kind: str, detail: str = "",
              cause: BaseException | None = None) -> Any:
        raise NotImplementedError  # Calls.limit: stop the cell, or signal the fallback

    # --- moves --------------------------------------------------------------------------
    def to_host(self, arr: Any) -> numpy.ndarray:
        return numpy.array(arr, copy=True) if self.host else self.xp.asnumpy(arr)

    def to_device(self, arr: numpy.ndarray) -> Any:
        return numpy.array(arr, copy=True) if self.host else self.xp.asarray(arr)

    def _convert(self, value: Any, kinds: dict[str, int], spec: CallSpec) -> Any:
        """A list or tuple as a device array (counted); anything else unchanged."""
        try:
            host = numpy.asarray(value)
        except (TypeError, ValueError):  # ragged, or holds device arrays
            return self._stack(value, kinds)
        if host.dtype.kind in UNSUPPORTED_KINDS:
            if host.dtype.kind == "O":
                return value
            self.limit(spec, "dtype", str(host.dtype))
        kind = type(value).__name__
        kinds[kind] = kinds.get(kind, 0) + 1
        return self.xp.asarray(host)

    def _stack(self, value: Any, kinds: dict[str, int]) -> Any:
        """A list or tuple of device arrays of one shape and Python numbers
        (``[np.log(-1.0), 1.0]`` in a cell) stacked on the device, as NumPy's asarray would
        make it on the host; anything else (ragged) unchanged, for CuPy to judge."""
        if self.host or not value or not all(
                isinstance(v, self.device_type) or type(v) in _SCALARS for v in value):
            return value
        parts = [self.xp.asarray(v) for v in value]
        if len({p.shape for p in parts}) != 1:
            return value
        kind = type(value).__name__
        kinds[kind] = kinds.get(kind, 0) + 1
        return self.xp.stack(parts)

    def convert(self, spec: CallSpec, args: tuple, kwargs: dict, everywhere: bool = False,
                scalars: bool = False) -> tuple[tuple, dict, dict[str, int]]:
        """Convert the lists at ``spec``'s array-like arguments (or at any, ``everywhere``);
        with ``scalars``, Python numbers too (only when no argument is an array).

        The arguments are copied only when something is converted: this runs on every call
        that takes the slow path (``benchmarks/compat_overhead.py``)."""
        kinds: dict[str, int] = {}
        loose = _LOOSE if scalars else _CONVERTED
        out: list | None = None
        for i, arg in enumerate(args):
            if type(arg) in loose and (everywhere or i in spec.positions):
                out = list(args) if out is None else out
                out[i] = self._convert(arg, kinds, spec)
        kw: dict | None = None
        for key, arg in kwargs.items():
            if type(arg) in loose and key != "out" and (everywhere or key in spec.keywords):
                kw = dict(kwargs) if kw is None else kw
                kw[key] = self._convert(arg, kinds, spec)
        return (args if out is None else tuple(out)), (kwargs if kw is None else kw), kinds

    def convert_items(self, spec: CallSpec, args: tuple,
                      kwargs: dict) -> tuple[tuple, dict, dict[str, int]]:
        """The lists and numbers inside a list or tuple NumPy documents as a sequence of
        arrays (``np.stack((x, y))`` of two lists, ``np.ravel_multi_index((3, 1), dims)``)
        made device arrays, the sequence kept."""
        kinds: dict[str, int] = {}

        def items(value: Any) -> Any:
            if type(value) not in SEQUENCES or not any(type(v) in _LOOSE for v in value):
                return value
            return type(value)(self._convert(v, kinds, spec) if type(v) in _LOOSE else v
                               for v in value)

        new = tuple(items(a) if i in spec.sequence_positions else a for i, a in enumerate(args))
        kw = {k: items(v) if k in spec.sequences else v for k, v in kwargs.items()}
        return new, kw, kinds


def host_data(args: tuple, kwargs: dict) -> bool:
    """Whether data CuPy cannot hold is among the arguments: a NumPy array (kept on the host
    for its dtype or class) or text, also inside lists and tuples (``np.lexsort((first_names,
    surnames))``, whose indices then index those tuples)."""
    values = [*args, *kwargs.values()]  # a str here is an option (mode='median'), not data
    if any(isinstance(v, numpy.ndarray) for v in values):
        return True
    inside = [v for value in values if type(value) in SEQUENCES for v in value]
    while inside:
        value = inside.pop()
        if isinstance(value, (numpy.ndarray, str, bytes)):
            return True
        if type(value) in SEQUENCES and len(value) < 10_000:
            inside.extend(value)
    return False
