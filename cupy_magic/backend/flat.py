"""NumPy's ``x.flat[i]`` with a device index, on CuPy's flat iterator."""

from __future__ import annotations

from types import ModuleType
from typing import Any


def flat_device_index(cupy: ModuleType) -> Any:
    """Let ``x.flat[i]`` take a device integer index, as NumPy's takes ``np.argmax(x)``; give
    the function that puts CuPy's own back (a no-op where CuPy's class is not where it was).

    CuPy's flat iterator takes only Python ints and slices ("unsupported iterator index"); a
    device index reads ``x.ravel()[i]`` (NumPy's values), and writes through it where that
    is a view (a C-contiguous ``x``)."""
    flatiter = getattr(getattr(getattr(cupy, "_indexing", None), "iterate", None), "flatiter",
                       None)
    if (flatiter is None or "__getitem__" not in vars(flatiter)
            or hasattr(flatiter.__getitem__, "__cupy_magic__")):  # absent, or already done
        return lambda: None
    get, put = flatiter.__getitem__, flatiter.__setitem__

    def device_index(ind: Any) -> bool:
        return isinstance(ind, cupy.ndarray) and ind.dtype.kind in "iu"

    def getitem(self: Any, ind: Any) -> Any:
        return self.base.ravel()[ind] if device_index(ind) else get(self, ind)

    def setitem(self: Any, ind: Any, value: Any) -> None:
        if device_index(ind) and self.base.flags.c_contiguous:
            self.base.ravel()[ind] = value
        else:
            put(self, ind, value)

    getitem.__cupy_magic__ = True  # type: ignore[attr-defined]
    flatiter.__getitem__, flatiter.__setitem__ = getitem, setitem

    def restore() -> None:
        flatiter.__getitem__, flatiter.__setitem__ = get, put
    return restore
