"""Whether this process holds a CUDA context on a device, asked without creating one.

The panel reads a device's pool and ``cudaMemGetInfo`` inside ``with cupy.cuda.Device(i)``,
and making a device current creates its primary context (from CUDA 12 on, at once): a few
hundred MiB of that GPU taken by a kernel that never used it. So before touching a device
other than the one cells run on, the sources ask the driver: ``cuDevicePrimaryCtxGetState``
says whether the device's primary context (the one CuPy and the CUDA runtime use) is active,
and creates nothing. CuPy does not expose that call; ctypes reaches ``libcuda`` for it.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

__all__ = ["has_context"]

CUDA_SUCCESS = 0
CUDA_ERROR_NOT_INITIALIZED = 3  # cuInit never ran: no context exists in this process

_lock = threading.Lock()
# "lib": the loaded driver, or None when it cannot be loaded; absent until first asked
_state: dict[str, Any] = {}


def _driver() -> Any:
    """``libcuda`` through ctypes, loaded once; ``None`` where there is no driver."""
    with _lock:
        if "lib" not in _state:
            try:
                _state["lib"] = ctypes.CDLL("libcuda.so.1")
            except OSError:
                _state["lib"] = None
        return _state["lib"]


def has_context(device: int) -> bool | None:
    """Whether CUDA device ``device`` (as CuPy numbers it) has an active primary context in
    this process; ``None`` when the driver cannot tell (no driver, an unknown device)."""
    lib = _driver()
    if lib is None:
        return None
    handle = ctypes.c_int()
    rc = lib.cuDeviceGet(ctypes.byref(handle), ctypes.c_int(device))
    if rc == CUDA_ERROR_NOT_INITIALIZED:
        return False
    if rc != CUDA_SUCCESS:
        return None
    flags, active = ctypes.c_uint(), ctypes.c_int()
    rc = lib.cuDevicePrimaryCtxGetState(handle, ctypes.byref(flags), ctypes.byref(active))
    return bool(active.value) if rc == CUDA_SUCCESS else None
