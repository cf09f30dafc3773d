"""Running a cell's blocks by the transport :func:`~.transport.choose` picked: through device
slots (:mod:`.devring`), falling back to shared memory (or scatter) for the run where CUDA IPC
cannot be used after all, through shared memory (:mod:`.shm`), or as tasks over scattered
chunks and Dask blocks; the pipeline of slots is :mod:`.pipeline`'s for both rings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..backend import Backend
from ..run import progress
from . import shm
from .devring import DeviceRing
from .devslots import IpcUnavailable
from .failure import cancel
from .inputs import BlockInputs, row_bytes, scatter_local
from .pipeline import SlotRun, check_done, run_through_slots
from .transport import Transport, shm_or_scatter
from .worker import run_block

__all__ = ["BlocksRun", "run_blocks"]


@dataclass
class BlocksRun:
    """How a cell's blocks ran.

    Attributes
    ----------
    transport
        The transport they went by (shared memory where CUDA IPC fell back).
    futures
        Each block's future, where the results stay on the workers (``None``: the row
        results came back through the slots: :attr:`slotted`).
    slotted
        A run through slots: its blocks' infos, the joined rows, the kernel's copies.
    slots
        The ring's slots, for the report.
    notes
        The report's notes (a fallback from CUDA IPC).
    """

    transport: Transport
    futures: list[Any] | None = None
    slotted: SlotRun | None = None
    slots: str = ""
    notes: list[str] = field(default_factory=list)


def run_blocks(client: Any, transport: Transport, spec_f: Any, inputs: BlockInputs,
               cell_id: str, held: list[Any], be: Backend, workers: tuple[str, ...]
               ) -> BlocksRun:
    """Run every block of the cell; ``held`` gets every future (the caller cancels them on
    a failure)."""
    run = BlocksRun(transport)
    if transport.kind == "ipc":
        try:
            return _through_device(client, run, spec_f, inputs, cell_id, held, be, workers)
        except IpcUnavailable as exc:
            why = str(exc)
            run.notes.append(f"CUDA IPC could not be used for this run ({why}); it ran "
                             "through shared memory or the network instead, as the cluster "
                             "transport line says")
            sizes = inputs.sizes
            run.transport = shm_or_scatter(
                client, max(sizes, default=0) * row_bytes(inputs.local, inputs.local),
                len(sizes), workers, transport.why, f"it fell back for this run: {why}")
            running = progress.current()
            if running is not None:  # the blocks run again: counted again
                progress.start(running.cell_label, running.batches_total,
                               running.bytes_total, unit=running.unit)
    if run.transport.kind == "shm":
        ring = shm.ring(client, workers)
        ring.settle()
        run.slotted = run_through_slots(client, ring, spec_f, inputs, cell_id, held, be,
                                        run.transport.place)
        run.slots = ring.describe()
        if not run.transport.place:  # the results stay on the workers
            run.futures = run.slotted.futures
        return run
    if inputs.local:  # CUDA IPC fell back, and shared memory cannot be used either
        held.extend(scatter_local(client, inputs))
    import dask

    run.futures = client.compute([dask.delayed(run_block, pure=False)(
        spec_f, i, inputs.starts[i], inputs.blocks[i], inputs.shared,
        dask_key_name=f"cupy-magic-{cell_id}-block-{i}")
        for i in range(len(inputs.blocks))])
    held.extend(run.futures)
    _wait(run.futures, inputs)
    return run


def _through_device(client: Any, run: BlocksRun, spec_f: Any, inputs: BlockInputs,
                    cell_id: str, held: list[Any], be: Backend,
                    workers: tuple[str, ...]) -> BlocksRun:
    """The blocks through a ring of device slots made for this run and freed after it; on a
    failure or Ctrl-C the blocks' futures are cancelled before the workers close the slots,
    so no block still queued opens one."""
    ring = DeviceRing(client, workers, be, f"{cell_id}-ipc")
    mark = len(held)
    try:
        run.slotted = run_through_slots(client, ring, spec_f, inputs, cell_id, held, be,
                                        run.transport.place)
    except BaseException:
        blocks = held[mark:]
        del held[mark:]
        cancel(client, blocks)
        raise
    finally:
        run.slots = ring.describe()
        ring.close()
    if not run.transport.place:
        run.futures = run.slotted.futures
    return run


def _wait(futures: list[Any], inputs: BlockInputs) -> None:
    """Wait for the blocks, counting them for the progress bar; stop at the first error."""
    from distributed import as_completed

    per_block = inputs.input_bytes // max(len(futures), 1)
    for f in as_completed(futures):
        check_done(f)
        progress.step(1, per_block)
