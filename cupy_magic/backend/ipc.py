"""CUDA IPC on one GPU: device buffers this process makes and another process on the same
GPU opens (``cudaIpcGetMemHandle`` here, ``cudaIpcOpenMemHandle`` there), the device slots
of ``%%gpu --cluster`` (:mod:`cupy_magic.cluster.devring`). Only this module calls CUDA's
IPC functions; CuPy is imported when one is called, never on the CPU fallback.

A buffer is an allocation of its own (``cudaMalloc``), not a block of the pool: a handle
names a whole allocation, so a pool block inside a larger one would open at that
allocation's start. Its bytes are held against the budget by the caller
(:meth:`~.base.Backend.reserve`). CUDA's rule: calling ``cudaFree`` on a buffer before every
process that opened it closed it is undefined behaviour, so the kernel frees a slot only
once the workers closed theirs.

Measured on the H200 (``benchmarks/cluster_ipc.py``, 8 GiB float32, one LocalCUDACluster
worker): the kernel copying blocks of 512 MiB and 1 GiB into such buffers and the worker
computing on them ran at 0.49 and 0.56 of the kernel's own batched run.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["DeviceBuffer", "close_handle", "copy_in", "copy_out", "device_view", "open_handle"]


def _cupy() -> Any:
    import cupy

    return cupy


def device_view(ptr: int, size: int, offset: int, shape: tuple[int, ...], dtype: Any,
                owner: Any) -> Any:
    """The C-ordered CuPy array of ``shape`` and ``dtype`` at ``offset`` of the ``size``
    bytes at ``ptr`` (memory CuPy does not own; ``owner`` is kept alive with the view)."""
    cp = _cupy()
    dtype = np.dtype(dtype)
    if offset + math.prod(shape) * dtype.itemsize > size:
        raise ValueError(f"a view of {shape} {dtype} at byte {offset:,} runs past the "
                         f"buffer's {size:,} bytes")
    mem = cp.cuda.UnownedMemory(ptr, size, owner)
    return cp.ndarray(shape, dtype, cp.cuda.MemoryPointer(mem, offset))


class DeviceBuffer:
    """``nbytes`` of device memory on the current device, an allocation of its own, with
    the IPC handle another process opens it by and two streams for this process's copies:
    ``stream`` for copies in, ``out_stream`` for copies out (a block's results can leave
    while the next block's inputs arrive, each on its own copy engine).

    Raises CuPy's ``CUDARuntimeError`` (or ``OutOfMemoryError``) where CUDA refuses the
    memory or the handle; nothing is left allocated then.
    """

    def __init__(self, nbytes: int) -> None:
        cp = _cupy()
        rt = cp.cuda.runtime
        self.nbytes = nbytes
        self.ptr = int(rt.malloc(nbytes))
        try:
            self.handle = bytes(rt.ipcGetMemHandle(self.ptr))
            self.stream = cp.cuda.Stream(non_blocking=True)
            self.out_stream = cp.cuda.Stream(non_blocking=True)
        except BaseException:
            rt.free(self.ptr)
            self.ptr = 0
            raise

    def view(self, offset: int, shape: tuple[int, ...], dtype: Any) -> Any:
        """This process's view of ``shape`` and ``dtype`` at ``offset``."""
        return device_view(self.ptr, self.nbytes, offset, shape, dtype, self)

    def synchronize(self) -> None:
        """Wait for the copies queued on this buffer's streams (both, even if one fails)."""
        try:
            self.stream.synchronize()
        finally:
            self.out_stream.synchronize()

    def free(self) -> None:
        """Free the memory (every process that opened it closed it before); idempotent."""
        if self.ptr:
            self.synchronize()
            _cupy().cuda.runtime.free(self.ptr)
            self.ptr = 0


def open_handle(handle: bytes) -> int:
    """Open another process's buffer by its handle: its address in this process. A handle
    this process has open already is refused ("resource already mapped": CUDA maps one
    per context), so a caller opens each handle once and shares the opening."""
    rt = _cupy().cuda.runtime
    return int(rt.ipcOpenMemHandle(handle, rt.cudaIpcMemLazyEnablePeerAccess))


def close_handle(ptr: int) -> None:
    """Close one opening of another process's buffer (:func:`open_handle`)."""
    _cupy().cuda.runtime.ipcCloseMemHandle(ptr)


def copy_in(be: Any, dev: Any, host: np.ndarray, stream: Any) -> None:
    """Queue ``host -> dev`` (a C-ordered view of ``host``'s shape and dtype) on ``stream``:
    asynchronous from page-locked memory (``be.host``, the CuPy backend's), else from a
    C-ordered copy through the driver's buffer."""
    if host.nbytes == 0:
        return
    if host.flags.c_contiguous and be.host is not None and be.host.copy_in(dev, host, stream):
        return
    dev.set(np.ascontiguousarray(host), stream=stream)


def copy_out(be: Any, host: np.ndarray, dev: Any, stream: Any) -> None:
    """Queue ``dev -> host`` on ``stream`` into page-locked memory, else copy it now; the
    caller synchronises ``stream`` before it reads ``host``."""
    if host.nbytes == 0:
        return
    if host.flags.c_contiguous and be.host is not None and be.host.copy_out(host, dev, stream):
        return
    if host.flags.c_contiguous:
        dev.get(stream=stream, out=host)
    else:
        np.copyto(host, dev.get(stream=stream))
