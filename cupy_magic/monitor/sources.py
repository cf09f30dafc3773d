"""Where the sampler's figures come from: the live backend's pool, NVML, the running cell.

:class:`LiveSources` is what :class:`cupy_magic.monitor.sampler.Sampler` reads by default;
tests give the sampler sources of their own. CuPy is reached only through the live backend object.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from .. import backend
from ..backend import HostBackend, PoolStats
from ..backend.streams import batch_streams
from ..run import progress
from ..run.progress import CellProgress
from . import nvml
from .contexts import has_context
from .nvml import NA, DeviceReading
from .rows import HOST_NO_POOL, NOT_USED, DeviceRow, device_row

__all__ = ["POOL_NOT_USED", "POOL_UNAVAILABLE", "LiveSources", "PoolFigures", "arena_figures",
           "budget_text", "byte_pair", "device_pool", "is_instance", "kernel_figures",
           "pool_figures", "release_cached", "sampled_row", "strings_of"]


@dataclass(frozen=True)
class PoolFigures(PoolStats):
    """The backend's pool at one instant (bytes), with what the panel adds; arena figures
    may be :data:`NA`.

    ``largest_free`` and ``arena_free`` come from the per-stream arenas of a pool that
    exposes them (the legacy stream's and the batch streams'); ``fragmentation_note`` says
    why they are missing otherwise. When the pool could not be read at all, every figure is
    :data:`NA` (:data:`POOL_UNAVAILABLE`), never a zero.
    """

    free_blocks: Any = NA
    largest_free: Any = NA
    arena_free: Any = NA
    arenas: int = 0
    pinned_free_blocks: Any = NA
    host_locked: Any = NA  # bytes of page-locked host memory (inputs and result blocks)
    host_cached: Any = NA  # of which result blocks kept for reuse
    fragmentation_note: str = ""
    budget_text: str = ""  # this device's budget as written ("": the session's is shown)
    unused_device: bool = False  # no pool read: this kernel never used the device

    @property
    def cached_free(self) -> Any:
        """Bytes the pool holds in cached free blocks, or NA when the pool was not read."""
        if not isinstance(self.used, int) or not isinstance(self.held, int):
            return NA
        return max(0, self.held - self.used)

    @property
    def fragmentation(self) -> Any:
        """1 - largest free block / free bytes: 0 when all free bytes form one block."""
        if not isinstance(self.largest_free, int) or not isinstance(self.arena_free, int):
            return NA
        return 0.0 if self.arena_free == 0 else 1.0 - self.largest_free / self.arena_free


log = logging.getLogger(__name__)
log.addHandler(logging.NullHandler())
_said: set[str] = set()


def kernel_figures(reading: DeviceReading, device_used: int, pool_held: int) -> DeviceReading:
    """"This kernel" from the pool and ``cudaMemGetInfo``; NVML gives only the device's
    totals and the other processes.

    When NVML's process list includes this process, this kernel is the device's used bytes
    less the other processes' (its context and libraries included). When it does not (a
    container's PID namespace: NVML gives host PIDs), the other processes cannot be told
    apart from this one: this kernel is its pool's held bytes, and the other processes N/A;
    said once in the log, and in the panel's device line.
    """
    others = reading.other_processes
    if reading.pids_match is True and isinstance(others, int):
        return replace(reading, this_process=max(pool_held, device_used - others))
    if reading.pids_match is False and "pids" not in _said:
        _said.add("pids")
        log.info("NVML's process IDs do not include this process (a container's PID "
                 "namespace): this kernel's figure is its pool's, other processes N/A")
    return replace(reading, this_process=pool_held,
                   other_processes=NA if reading.pids_match is False else others)


POOL_UNAVAILABLE = PoolFigures(used=NA, held=NA, device_used=NA, device_total=NA,
                               fragmentation_note="the pool could not be read")
POOL_NOT_USED = PoolFigures(used=NA, held=NA, device_used=NA, device_total=NA,
                            fragmentation_note=f"no pool: the device is {NOT_USED}",
                            unused_device=True)


def budget_text(be: Any, device: int) -> str:
    """The budget in force on ``device`` as the user wrote it, or ``"off"``."""
    spec = be.budgets.get(device)
    return spec.describe() if spec is not None else "off"


def device_pool(be: Any, device: int) -> Any:
    """The CuPy pool of ``device``, or ``None`` where this kernel never used the device.

    The cells' device has the pool the extension installed. Another device is read only if
    this process already holds its CUDA context (:func:`~.contexts.has_context`), because
    making it current would create one; its pool is the extension's when there is one for
    it, else CuPy's default pool (read with that device current).
    """
    if not be.is_gpu:
        return None
    if device == be.home:
        return be.pool
    if not has_context(device):
        return None
    return be.made_pool(device) or be.cp.get_default_memory_pool()

# --- pool introspection (CuPy through the backend object) --------------------------------

def _entry_size(entry: Any) -> int:
    # CuPy 14 yields ((size, chunk_address), chunk) or (size, chunk): take the size.
    head = entry[0]
    return int(head[0] if isinstance(head, tuple) else head)


def arena_figures(pool: Any, stream_idents: Sequence[int]) -> tuple[Any, Any, int, str]:
    """Largest free block, free bytes and arena count over the given stream arenas.

    Returns ``(largest, free, arenas, note)``; ``largest`` and ``free`` are NA with a note
    when ``pool`` hides its arenas (CuPy's default ``MemoryPool`` does; a
    ``SingleDeviceMemoryPool`` has ``_debug_arena_get_index`` from CuPy 14.1).
    """
    index_of = getattr(pool, "_debug_arena_get_index", None)
    if index_of is None:
        return NA, NA, 0, "CuPy's default pool hides its arenas"
    largest, free, arenas = 0, 0, 0
    for ident in dict.fromkeys(stream_idents):
        sizes = [_entry_size(e) for e in index_of(ident)]
        if sizes:
            arenas += 1
            largest = max(largest, max(sizes))
            free += sum(sizes)
    return largest, free, arenas, ""


def _stats(be: Any, device: int | None = None) -> dict[str, Any]:
    """The backend's :class:`PoolStats` (of ``device``, default the home one) as keyword
    arguments of :class:`PoolFigures`."""
    st = be.stats(device)
    return {f.name: getattr(st, f.name) for f in fields(PoolStats)}


def pool_figures(be: Any, device: int) -> PoolFigures:
    """Read the pool of ``device`` from the backend ``be`` (in any thread);
    :data:`POOL_NOT_USED` for a device this kernel never used."""
    if not be.is_gpu:
        return PoolFigures(**_stats(be, device), fragmentation_note=HOST_NO_POOL,
                           budget_text=budget_text(be, device))
    pool = device_pool(be, device)
    if pool is None:
        return replace(POOL_NOT_USED, budget_text=budget_text(be, device))
    cp = be.cp
    # Pool figures are per current device, and the current device is per thread.
    with cp.cuda.Device(device):
        if pool is be.pool:
            stats = _stats(be)
        else:
            used, total = be.device_memory(device)
            stats = {"used": int(pool.used_bytes()), "held": int(pool.total_bytes()),
                     "limit": int(pool.get_limit()) or None, "device_used": used,
                     "device_total": total}
        pinned = cp.get_default_pinned_memory_pool().n_free_blocks()
        # the legacy stream's arena and those of the streams batched cells ran on
        idents = [0, *(int(s.ptr) for s in batch_streams(device))]
        largest, free, arenas, note = arena_figures(pool, idents)
        host = be.host.stats()
        return PoolFigures(**stats, free_blocks=int(pool.n_free_blocks()),
                           largest_free=largest,
                           arena_free=free, arenas=arenas, pinned_free_blocks=int(pinned),
                           host_locked=host["locked_bytes"], host_cached=host["cached_bytes"],
                           fragmentation_note=note, budget_text=budget_text(be, device))


def sampled_row(device: int, backend_name: str, reading: DeviceReading, pool: PoolFigures,
                budget: Any) -> DeviceRow:
    """The row of the device a panel details, from its full sample (no second reading)."""
    budget = pool.budget_text or budget
    if pool.unused_device:
        return device_row(device, reading, NA, NA, budget, NOT_USED)
    if backend_name != "cupy":
        return device_row(device, reading, NA, NA, budget, HOST_NO_POOL)
    return device_row(device, reading, pool.used, pool.held, budget)


def _stands_for(be: Any) -> int:
    """How many devices a host backend stands for (``CUPY_MAGIC_HOST_DEVICES``); 0 on a GPU.
    Where it stands for several, they have no NVML handle, even on a machine with a GPU,
    whose figures are not theirs."""
    return 0 if be.is_gpu else be.device_count()


def _standing_for(be: Any, device: int, reading: DeviceReading) -> DeviceReading:
    """``reading``, named for the device a host backend stands for where it stands for
    several."""
    if _stands_for(be) < 2:
        return reading
    return replace(reading, name=be.device_name(device))


class LiveSources:
    """The real sources: the live backend, NVML, the session budget and the running cell."""

    def __init__(self) -> None:
        # by backend and the devices a host backend stands for (one, or several)
        self._handles: dict[tuple[str, int, int], Any] = {}
        self._labels: dict[tuple[str, int], list[str]] = {}

    def _backend(self) -> Any:
        return backend.current()

    def _handle(self, device: int) -> Any:
        be = self._backend()
        key = (be.name, _stands_for(be), device)
        if key not in self._handles:
            if be.is_gpu:
                bus_id = be.cp.cuda.Device(device).pci_bus_id
                self._handles[key] = nvml.handle_for(bus_id, device)
            elif _stands_for(be) > 1:  # devices the CPU stands for: no GPU's figures
                self._handles[key] = NA
            else:
                handles = nvml.visible_handles()
                self._handles[key] = handles[device] if device < len(handles) else NA
        return self._handles[key]

    def devices(self) -> list[str]:
        """A label per visible device (asked once per backend: devices do not come and go)."""
        be = self._backend()
        key = (be.name, _stands_for(be))
        if key not in self._labels:
            count = (be.cp.cuda.runtime.getDeviceCount() if be.is_gpu
                     else 0 if _stands_for(be) > 1 else len(nvml.visible_handles()))
            names = [nvml.query("nvmlDeviceGetName", self._handle(i)) for i in range(count)]
            self._labels[key] = (  # no GPU: the devices the host backend stands for
                [f"{i}: {name if name is not NA else 'GPU'}" for i, name in enumerate(names)]
                or [f"{i}: {be.device_name(i)}" for i in range(be.device_count())])
        return list(self._labels[key])

    def reading(self, device: int) -> DeviceReading:
        be = self._backend()
        reading = _standing_for(be, device, nvml.read_device(self._handle(device)))
        pool = device_pool(be, device)
        if pool is None:  # the host backend, or a device without a context here: none held
            return reading if not be.is_gpu else replace(reading, this_process=0)
        used = be.device_memory(device)[0]
        return kernel_figures(reading, used, int(pool.total_bytes()))

    def row(self, device: int) -> DeviceRow:
        """The compact row of ``device``: five NVML figures and its pool's used and held."""
        be = self._backend()
        reading = _standing_for(be, device, nvml.read_brief(self._handle(device)))
        pool = device_pool(be, device)
        if pool is None:
            note = NOT_USED if be.is_gpu else HOST_NO_POOL
            return device_row(device, reading, NA, NA, budget_text(be, device), note)
        with be.cp.cuda.Device(device):  # CuPy's default pool answers for the current device
            used, held = int(pool.used_bytes()), int(pool.total_bytes())
        return device_row(device, reading, used, held, budget_text(be, device))

    def pool(self, device: int) -> PoolFigures:
        return pool_figures(self._backend(), device)

    def host(self) -> tuple[int, int]:
        return HostBackend().device_memory()

    def budget(self) -> str:
        """The home device's budget (each device's own is in its pool figures and row)."""
        be = self._backend()
        return budget_text(be, be.home)

    def cell(self) -> CellProgress | None:
        return progress.current()

    def status(self) -> tuple[str, str, str]:
        be = self._backend()
        why = "" if be.is_gpu else (be.info().reason or "host backend chosen")
        return be.name, why, nvml.reason()


def release_cached(device: int = 0) -> tuple[int, int, int]:
    """Free the pool's cached blocks on ``device``, the pinned pool's free blocks and the
    page-locked result blocks kept for reuse (:mod:`cupy_magic.backend.hostmem`).

    Returns ``(device bytes, pinned blocks, page-locked host bytes)`` released (guide
    section 5). A device this kernel never used has nothing to release and is not touched.
    """
    be = backend.current()
    if not be.is_gpu:
        return be.free_cached(), 0, 0
    pool = device_pool(be, device)
    if pool is None:
        return 0, 0, 0
    cp = be.cp
    with cp.cuda.Device(device):
        if pool is be.pool:
            released = be.free_cached()
        else:
            before = int(pool.total_bytes())
            pool.free_all_blocks()
            released = before - int(pool.total_bytes())
    pinned_pool = cp.get_default_pinned_memory_pool()
    before = pinned_pool.n_free_blocks()
    pinned_pool.free_all_blocks()
    return released, before - pinned_pool.n_free_blocks(), be.host.release_cached()


# --- what a source must return (the sampler's checks: anything else is a failure) ----------
def is_instance(kind: type | tuple[type, ...]) -> Callable[[Any], bool]:
    """A check that a value is an instance of ``kind``."""
    return lambda value: isinstance(value, kind)


def strings_of(n: int) -> Callable[[Any], bool]:
    """A check that a value is a tuple of ``n`` strings."""
    return lambda value: (isinstance(value, tuple) and len(value) == n
                          and all(isinstance(v, str) for v in value))


def byte_pair(value: Any) -> bool:
    """Whether ``value`` is two byte counts (non-negative ints): used and total memory."""
    return (isinstance(value, tuple) and len(value) == 2
            and all(isinstance(v, int) and v >= 0 for v in value))
