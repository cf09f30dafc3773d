"""Host buffers for :mod:`~cupy_magic.backend.hostmem`: whole pages of their own, raw bytes at
an address, the best fit among free buffers, and how much locked memory to keep cached."""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["best_fit", "bytes_at", "default_cache_limit", "pages"]


def default_cache_limit() -> int:
    """A quarter of the host's memory (8 GiB where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


def pages(nbytes: int) -> np.ndarray:
    """A ``uint8`` buffer of ``nbytes`` rounded up to whole pages, starting on a page.

    CUDA registers whole pages, never one twice: two heap buffers from ``np.empty`` can share
    a page (malloc's adaptive mmap threshold), so each buffer gets pages of its own."""
    page = mmap.PAGESIZE
    size = -(-max(nbytes, 1) // page) * page
    raw = np.empty(size + page, np.uint8)
    start = -raw.ctypes.data % page
    return raw[start:start + size]


def bytes_at(ptr: int, nbytes: int) -> Any:
    """``nbytes`` at ``ptr`` as a ctypes object (a lease whose collection can be watched)."""
    return (ctypes.c_char * nbytes).from_address(ptr)


def best_fit(items: list[Any], nbytes: int, size: Callable[[Any], int],
             mutex: threading.RLock) -> Any:
    """Take out of ``items`` the smallest one of ``nbytes`` to ``2 * nbytes``, or None."""
    with mutex:
        fits = [i for i, item in enumerate(items) if nbytes <= size(item) <= 2 * nbytes]
        if not fits:
            return None
        # by position: list.remove would compare NumPy arrays element by element
        return items.pop(min(fits, key=lambda i: size(items[i])))
