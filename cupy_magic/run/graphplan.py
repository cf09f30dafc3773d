"""Whether a batched run replays its batches' work as CUDA graphs, and what its report says
(issue 20, point 2).

Pure logic, like :mod:`.batchcost`: :mod:`.graphscan` reads the cell before it runs,
:mod:`.graphs` captures, checks and replays, this module decides from the measured figures
and words the report's line.

On the H200 (``benchmarks/graph_replay.py``, 2026-12-03) a Black-Scholes batch of 37,183
float64 rows took 329 us launched op by op and 82 us replayed as one graph (ratio 0.25);
0.48 at 131,072 rows, 0.96 at 1M rows: a graph pays where launches, not bytes, cost the
time, which is where a batch's fixed cost exceeds :data:`~.batchcost.COST_SHARE` of its
transfer.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..units import format_bytes
from .batchcost import COST_SHARE, BatchCost

__all__ = ["CHECK_RATE", "MIN_REPLAYS", "REPLAYS_PER_STREAM", "REPLAY_GAIN", "REPLAY_SAVES",
           "GraphNote", "consider", "not_kept"]

# Each stream's graph is captured and checked on a batch that runs twice (launched, then
# replayed), with the stream waited for both times: about three batches' fixed cost, and
# the overlap of that stream lost meanwhile. A replay saves about three quarters of a
# batch's fixed cost (the ratio 0.25 above), so four replays per stream repay its check;
# and fewer than eight replays in all are not worth a run's extra code path.
REPLAYS_PER_STREAM = 4
MIN_REPLAYS = 8

# Graphs are kept only where a checked batch replayed takes at most this share of the same
# batch launched: a clear gain, not noise. On the H200 (2026-12-05), under a 16MB budget a
# checked batch took 0.302 ms replayed against 0.882 ms launched (ratio 0.34; the run 0.125 s
# with graphs, 0.368 s without), while cluster_bench's 128MiB batches of 32,768 rows took
# 5.696 ms replayed against 5.789 ms launched (0.98), and that run took 1.09 s with graphs
# against 0.38 s without (benchmarks/results/cluster-2026-12-04T1929.md): a few per cent
# measured on one batch per stream does not pay for the captures, checks and replays. (With
# the graphs checked but not kept the same run took 1.11 to 1.18 s on 2026-12-05: the checks
# themselves, most likely, CHECK_RATE below.)
REPLAY_GAIN = 0.8

# A replay saves at most this share of a batch's fixed cost (the ratio 0.25 above).
REPLAY_SAVES = 0.75

# Bytes of a batch's row results per second that checking one stream's graph goes at: the
# capture, the checking replay, the waits, and on the host the launched rows copied aside and
# the replayed rows compared with them byte for byte.
# On the H200 (2026-12-05, cluster_bench's cell) a run of 128 MiB batches (134 MB of results
# each) took 1.178 s after checking three graphs (results/cluster-2026-12-05T0415-pause3s.md)
# and 0.345 s without graphs (results/again-profile-2026-12-05T0410.log, another run): about
# 0.28 s per check if the difference is the checks, 0.48 GB/s. They saved nothing there
# (5.744 ms replayed against 5.761 ms launched, each waited for), while row sums over the
# same input (128 KiB of results per batch) ran at 49.8 GB/s after checking their graphs.
CHECK_RATE = 0.48e9


def consider(refusal: str | None, graph: bool, gpu: bool, cost: BatchCost | None, rows: int,
             row_bytes: int, full_batches: int, streams: int,
             out_row_bytes: int = 0) -> tuple[bool, str | None]:
    """Whether to capture graphs for a run, and the report's reason when not.

    Parameters
    ----------
    refusal
        What the cell's text and the run's options refuse (:func:`.graphscan.refusal`):
        ``""`` nothing, ``None`` not checked (no graphs then).
    graph
        ``BatchOptions.graph`` (``False``: ``--no-graph``).
    gpu
        Whether the batches run on a GPU (the CPU fallback has no graphs and says nothing).
    cost
        The first batch's measured cost: graphs are considered only where it exceeds
        :data:`COST_SHARE` of a batch's transfer (where they pay).
    rows, row_bytes
        Rows per batch as planned, input bytes per row.
    full_batches
        Batches of ``rows`` rows after the first one (the last, shorter one not counted).
    streams
        Slots in use, one graph each.
    out_row_bytes
        Bytes per row of the row results the batches download (checked on the host).

    Returns
    -------
    tuple
        ``(capture, why_not)``: ``why_not`` is ``None`` where the report says nothing.
    """
    if not gpu:
        return False, None
    if not graph:
        return False, "off (--no-graph; BatchOptions(graph=False))"
    if cost is None or cost.share(rows, row_bytes) <= COST_SHARE:
        return False, None  # the batches pay for their launches already
    if refusal is None:
        return False, None
    if refusal:
        return False, refusal
    slots = min(streams, full_batches)
    need = max(MIN_REPLAYS, REPLAYS_PER_STREAM * slots)
    if full_batches - slots < need:
        return False, (f"{full_batches} batches of {rows:,} rows leave {full_batches - slots} "
                       f"to replay after checking one graph per stream, fewer than the {need} "
                       f"that repay the checks")
    checks = slots * rows * out_row_bytes / CHECK_RATE
    saves = (full_batches - slots) * cost.seconds * REPLAY_SAVES
    if checks > saves:
        return False, (f"checking one graph per stream would take about {checks:.2f} s "
                       f"({slots} x {format_bytes(rows * out_row_bytes)} of row results; "
                       f"checks went at {CHECK_RATE / 1e9:.2f} GB/s of them on the H200: "
                       f"capture, replay, waits and the comparison on the host), "
                       f"more than the {saves * 1e3:.1f} ms the replays could save "
                       f"({full_batches - slots} batches of {cost.seconds * 1e3:.2f} ms fixed "
                       "cost)")
    return True, None


def not_kept(launched: float, replayed: float) -> str | None:
    """Why the checked graphs are not kept (``None``: keep them).

    Parameters
    ----------
    launched, replayed
        Host seconds one checked batch took on average to queue its uploads, work and
        downloads, launched op by op and replayed.

    Returns
    -------
    str or None
        The report's reason where ``replayed`` exceeds :data:`REPLAY_GAIN` of ``launched``.
    """
    if replayed <= REPLAY_GAIN * launched:
        return None
    gain = round((1 - REPLAY_GAIN) * 100)
    return (f"replayed {replayed * 1e3:.3f} ms vs launched {launched * 1e3:.3f} ms of host "
            f"time per checked batch: under the {gain}% gain that pays for capturing, "
            "checking and replaying the graphs")


@dataclass
class GraphNote:
    """What a batched run did about CUDA graphs (``BatchPlan.graph``).

    Attributes
    ----------
    why_not
        Why graphs were not used, or why they stopped (``""``: used to the end).
    captured
        Graphs captured and checked (one per stream).
    replayed
        Batches whose work was replayed from a graph (the checking batches not counted).
    launched_seconds, replay_seconds
        Host seconds one batch took on the checking batches to queue its upload, work and
        download (not waited for): launched op by op, and replayed from its graph.
    cost_seconds
        Host seconds of a launched batch beyond its upload (:class:`~.batchcost.BatchCost`,
        measured on the first batch).
    issue_seconds
        Host seconds a replayed batch took beyond its upload (the launch and the
        downloads queued), on average.
    """

    why_not: str = ""
    captured: int = 0
    replayed: int = 0
    launched_seconds: float = 0.0
    replay_seconds: float = 0.0
    cost_seconds: float = 0.0
    issue_seconds: float = 0.0

    @property
    def used(self) -> bool:
        """Whether any batch was replayed from a graph."""
        return self.replayed > 0

    def lines(self, batches: int) -> list[str]:
        """The report's line (``batches``: the run's batches)."""
        if not self.used:
            checked = (f" (after checking {self.captured} graph"
                       f"{'s' * (self.captured != 1)})" if self.captured else "")
            return [f"batch graphs: not used{checked}: {self.why_not}"]
        stopped = f"; then stopped: {self.why_not}" if self.why_not else ""
        return [f"batch graphs: {self.replayed} of {batches} batches replayed as CUDA graphs "
                f"({self.captured} captured, one per stream, each checked bit for bit against "
                f"its batch launched op by op; a checked batch took "
                f"{self.replay_seconds * 1e3:.3f} ms of host time replayed, "
                f"{self.launched_seconds * 1e3:.3f} ms launched); fixed cost per batch "
                f"{self.cost_seconds * 1e3:.3f} ms launched, "
                f"{self.issue_seconds * 1e3:.3f} ms replayed{stopped}"]
