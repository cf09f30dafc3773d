"""The report's rows of a cluster run: the plan, each worker's share, the scheduler's time.

A :class:`ClusterRun` sits where a batched run's plan sits (``report.batch``), so the
report shows its lines in text and HTML alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..run.report import IN_PLACE_ROWS
from ..units import format_bytes
from .transport import Transport
from .worker import BlockStats

__all__ = ["ClusterRun", "WorkerShare"]


@dataclass(frozen=True)
class WorkerShare:
    """What one worker did for the cell: blocks, input bytes, busy time, syncs, peak pool."""

    worker: str
    device: str
    blocks: int
    nbytes: int
    seconds: float
    syncs: int
    peak_bytes: int
    uploads: int = 0  # shared inputs copied to this worker's device


@dataclass
class ClusterRun:
    """How a cell ran on the cluster (``report.batch`` of such a run).

    Attributes
    ----------
    cluster
        Which cluster (``%gpu_cluster show``'s first line).
    batched, shared
        Inputs cut into blocks along the leading axis; inputs every block reads whole
        (scattered once to every worker).
    scattered
        NumPy inputs this kernel chunked and scattered first (``--cluster``).
    blocks, total_rows, input_bytes
        Blocks run, their rows and their input bytes.
    run_seconds
        From the first task sent to the last block done.
    scatter_seconds
        Sending the kernel's NumPy data (chunks and shared inputs) to the workers.
    workers
        One :class:`WorkerShare` per worker that ran blocks.
    gathered, reduced, kept
        Row results (Dask arrays, or NumPy with ``--to-host``), ``--reduce`` results
        (Dask tree reductions), results left as Dask arrays on the workers.
    in_place
        Of ``gathered``, the inputs every block changed in place, written into the user's
        arrays (:mod:`.inplace`).
    transport
        How the blocks' data moved (:class:`~.transport.Transport`): shared memory on this host,
        scatter and gather (and why), or the Dask arrays' blocks where they are.
    slots, copy_in_seconds, copy_out_seconds, sent_back
        Through slots (shared memory, or device slots by CUDA IPC): the ring's slots, this
        kernel's copies into and out of them (:class:`~.pipeline.SlotRun`), and how many
        blocks sent their row results back over the socket (larger than their slot).
    """

    cluster: str
    batched: tuple[str, ...]
    shared: tuple[str, ...]
    scattered: tuple[str, ...]
    blocks: int
    total_rows: int
    input_bytes: int
    run_seconds: float = 0.0
    scatter_seconds: float = 0.0
    workers: list[WorkerShare] = field(default_factory=list)
    gathered: tuple[str, ...] = ()
    reduced: dict[str, str] = field(default_factory=dict)
    kept: tuple[str, ...] = ()
    in_place: tuple[str, ...] = ()  # of those gathered, written into the user's arrays
    transport: Transport | None = None
    slots: str = ""
    copy_in_seconds: float = 0.0
    copy_out_seconds: float = 0.0
    sent_back: int = 0

    @property
    def copy_seconds(self) -> float:
        """This kernel's copies into and out of the slots."""
        return self.copy_in_seconds + self.copy_out_seconds

    @property
    def input_gbps(self) -> float:
        """Input bytes per second of the run (blocks' inputs over the run's time)."""
        return self.input_bytes / self.run_seconds / 1e9 if self.run_seconds > 0 else 0.0

    @property
    def scheduler_seconds(self) -> float:
        """The run's time outside the busiest worker's blocks: scheduling, transfers between
        processes, (de)serialisation, and workers waiting."""
        busiest = max((w.seconds for w in self.workers), default=0.0)
        return max(0.0, self.run_seconds - busiest)

    @staticmethod
    def shares(stats: list[BlockStats]) -> list[WorkerShare]:
        """Sum the blocks' stats per worker."""
        out: dict[str, WorkerShare] = {}
        for s in stats:
            w = out.get(s.worker) or WorkerShare(s.worker, s.device, 0, 0, 0.0, 0, 0)
            out[s.worker] = WorkerShare(w.worker, w.device, w.blocks + 1, w.nbytes + s.nbytes,
                                        w.seconds + s.seconds, w.syncs + s.syncs,
                                        max(w.peak_bytes, s.peak_bytes),
                                        w.uploads + s.uploads)
        return sorted(out.values(), key=lambda w: w.worker)

    def lines(self, host: bool = False) -> list[str]:
        """The plain-text report lines (``host``: the workers ran NumPy on their CPUs)."""
        pool = "peak memory" if host else "peak pool"
        out = [f"  cluster {self.cluster}",
               f"  cluster {self.blocks} blocks over the leading axis of "
               f"{', '.join(self.batched)} ({self.total_rows:,} rows, "
               f"{format_bytes(self.input_bytes)}): {self.input_gbps:.2f} GB/s of input in "
               f"{self.run_seconds * 1e3:.1f} ms; {self.scheduler_seconds * 1e3:.1f} ms outside "
               "the busiest worker's blocks (scheduler, transfers, serialisation)"]
        if self.transport is not None:
            out.append(f"  cluster transport: {self.transport.describe()}" + (
                f"; {self.slots}, this kernel's copies {self.copy_seconds * 1e3:.1f} ms (in "
                f"{self.copy_in_seconds * 1e3:.1f}, out {self.copy_out_seconds * 1e3:.1f})"
                if self.transport.kind in ("ipc", "shm") else "") + (
                f"; {self.sent_back} of {self.blocks} blocks sent their row results back over "
                "the socket (larger than their slot; the slots have grown since)"
                if self.sent_back else ""))
        if self.scattered or self.shared:
            uploads = sum(w.uploads for w in self.workers)
            out.append(f"  cluster scattered from this kernel in {self.scatter_seconds * 1e3:.1f}"
                       f" ms: {', '.join([*self.scattered, *self.shared])}"
                       + (f" (shared, sent once to every worker: {', '.join(self.shared)}; "
                          f"{uploads} device cop{'y' if uploads == 1 else 'ies'} for "
                          f"{self.blocks} blocks)" if self.shared else ""))
        for w in self.workers:
            out.append(f"  cluster worker {w.worker} ({w.device}): {w.blocks} blocks, "
                       f"{format_bytes(w.nbytes)} in, {w.seconds * 1e3:.1f} ms busy, "
                       f"{w.syncs} host syncs, {pool} {format_bytes(w.peak_bytes)}")
        joined = [f"{n} (Dask array on the workers)" for n in self.kept]
        joined += [f"{n} ({IN_PLACE_ROWS if n in self.in_place else 'rows gathered as NumPy'})"
                   for n in self.gathered]
        joined += [f"{n} ({r}, Dask tree reduction)" for n, r in self.reduced.items()]
        if joined:
            out.append(f"  cluster results: {', '.join(joined)}")
        return out
