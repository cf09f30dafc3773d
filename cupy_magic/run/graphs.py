"""Replaying a batched run's per-batch work as CUDA graphs (issue 20, point 2).

Where a batch's launches cost more than its transfer (:func:`.graphplan.consider`), each
stream slot captures one graph while it runs a batch of the planned full size, and the
other full batches replay it: rows uploaded into the captured input buffers, the graph
launched, the row results downloaded from the captured outputs, ``--reduce`` partials
copied to the host. The first batch (which measures) and the last, shorter one run as
before, launched op by op.

A graph writes to the addresses it was captured with, so this protects itself:

- Captured on the slot's own stream: the temporaries it frees go back to that stream's
  arena of CuPy's pool and serve only later work on that stream, which waits for the
  replay. Between replays nothing allocates on the device (uploads go into the captured
  buffers, downloads need contiguous results). From the first capture on, a release of
  cached blocks (the backend's count of them, or the pool's bytes held dropping: a graph's
  temporaries may be gone, or given to another stream) stops the replays; the launched
  check batches and captures, and the last, shorter batch, are what may allocate. The
  graphs are dropped before that last batch, whose slot's arena then holds its graph's
  buffers again (launched, it needs them: the budget sized the batches for no more).
- Checked before trusted: each slot's batch runs launched first, then captured and replayed
  into the same rows; the rows, partials and row-free values must agree bit for bit, and
  a replay must take at most :data:`.graphplan.REPLAY_GAIN` of the host time the launched
  batch took to queue (uploads, kernels, downloads; the streams overlap the device's work,
  so a batch costs a run its host time where that is the longer), or no graph is kept.
- A capture that fails (a host sync, a library CuPy cannot capture, host data copied to the
  device, refused through CuPy's pinned allocator while capturing) ends cleanly and the run
  goes on launched; the report says why (:class:`.graphplan.GraphNote`).
- The graphs are dropped when replays stop, at the end of the run and when it fails.
"""

from __future__ import annotations

import contextlib
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backend.compiles import timed
from ..syncs.record import uncharged
from .graphplan import GraphNote, consider, not_kept
from .mainmod import as_main
from .reduce import agree, compared

__all__ = ["GraphReplay", "HostCopyRefused", "graph_replay"]


class HostCopyRefused(RuntimeError):
    """Raised by CuPy's pinned allocator while a graph is captured: the cell copies host
    memory to the device, and a graph would keep that one batch's host address."""


@dataclass
class _SlotGraph:
    """One slot's graph and every device array it reads or writes (kept alive with it)."""

    graph: Any
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    partials: dict[str, Any]
    work: dict[str, Any]


class GraphReplay:
    """The CUDA graphs of one batched run on a GPU (built by :meth:`BatchRun.rest`).

    Parameters
    ----------
    run
        The run (a :class:`~.batched.BatchRun`: its engine, inputs, gathered rows and
        partials).
    rows
        Rows per full batch.
    full
        Full batches after the first (the most that may replay).
    note
        The report's record, filled as the run goes (``None``: the report says nothing).
    on
        Whether to capture at all (:func:`graph_replay`).
    """

    def __init__(self, run: Any, rows: int, full: int, note: GraphNote | None,
                 on: bool = True) -> None:
        self.run, self.eng, self.rows = run, run.eng, rows
        self.note = note if note is not None else GraphNote()
        self.reported = note is not None
        self.graphs: dict[int, _SlotGraph] = {}
        self.to_check = set(range(min(run.in_flight, full))) if on else set()
        self.full = full
        self.on = on
        self.seen: tuple[int, int] | None = None  # releases, bytes held: since the first capture
        self.times: list[tuple[float, float]] = []  # (launched, replayed) per checked batch
        self.issued = 0.0
        self.note.cost_seconds = run.cost.seconds if run.cost is not None else 0.0

    @property
    def record(self) -> GraphNote | None:
        """The report's record (``BatchPlan.graph``), or ``None`` where it says nothing."""
        return self.note if self.reported else None

    # --- a batch --------------------------------------------------------------------------
    def batch(self, i: int, a: int, b: int) -> bool:
        """Run batch ``i`` here (capture and check it, or replay it); ``False``: the run
        launches it as usual."""
        if not self.on:
            return False
        if b - a != self.rows:  # the last batch: launched, with its slot's arena whole again
            self.drop()
            return False
        slot = self.run.slot_for(i, a, b)
        if slot in self.to_check:
            self.check(i, a, b, slot)
            return True
        if self.to_check or slot not in self.graphs:
            return False
        if self.released():
            return False
        self.run.current = (i, a, b)
        self.run.waited(slot)
        self.eng.start(slot)
        self.issued += self.replay(a, b, slot, self.graphs[slot])
        self.eng.record(slot)
        self.note.replayed += 1
        return True

    def replay(self, a: int, b: int, slot: int, g: _SlotGraph, check: bool = False) -> float:
        """Queue one replay of ``g`` over rows ``a:b``; return the host seconds it took
        beyond the upload (``check``: the checking replay, whose rows and partials the
        launched run already counted)."""
        run, eng = self.run, self.eng
        with eng.on(slot):
            for name, arr in run.inputs.items():
                eng.upload_into(slot, name, arr, a, b, g.inputs[name])
            t1 = time.perf_counter()
            later = run.later.start(run.at(), g.inputs, run.left)  # (checking replays too)
            g.graph.launch(eng.streams[slot])
            run.refuse_later(run.later.end(slot, later))
            for name, dev in g.outputs.items():
                eng.download(slot, name, dev, run.out[name], a, b)
            if not check:
                for name in g.outputs:
                    run.written[name] += b - a
                for name, dev in g.partials.items():  # into the run's host row (no allocation)
                    run.keep_partial(run.current[0], slot, name, dev, b - a)
            return time.perf_counter() - t1

    # --- capture and check ----------------------------------------------------------------
    def check(self, i: int, a: int, b: int, slot: int) -> None:
        """Run batch ``i`` launched (its results are the run's), then capture its work on
        the slot's stream, replay it into the same rows and compare."""
        run, eng = self.run, self.eng
        self.to_check.discard(slot)
        eng.wait(slot)
        t0 = time.perf_counter()
        with timed() as built:  # a reduction over the full batch's length may compile
            run.batch(i, a, b)
        launched = time.perf_counter() - t0 - built.seconds  # queued, not waited for
        eng.wait(slot)  # the launched rows are in run.out now
        if self.released():  # the launched batch released blocks an earlier graph wrote
            return None
        self.seen = self.seen or (self.run.be.releases, self.run.be.pool_held())
        try:
            made = self.capture(slot, a, b)
        except Exception as exc:  # Ctrl-C and the like stop the run; the capture is ended
            return self.stop(f"the cell's work could not be captured ({_line(exc)})")
        if isinstance(made, str):
            return self.stop(made)
        if self.released():
            return None
        refs = {n: run.out[n][a:b].copy() for n in made.outputs}
        made.graph.upload(eng.streams[slot])
        t0 = time.perf_counter()
        self.replay(a, b, slot, made, check=True)
        eng.record(slot)
        replayed = time.perf_counter() - t0  # queued, as the launched batch was timed
        eng.wait(slot)
        differs = self.differs(made, a, b, refs)
        if differs:
            for name, ref in refs.items():  # the launched rows stand
                run.out[name][a:b] = ref
            return self.stop(f"a replay differed from its batch launched op by op ({differs})")
        self.graphs[slot] = made
        self.note.captured += 1
        self.times.append((launched, replayed))
        if not self.to_check:
            self.all_checked()

    def capture(self, slot: int, a: int, b: int) -> _SlotGraph | str:
        """Capture the cell's work over rows ``a:b`` on the slot's stream into a graph, with
        input buffers allocated and filled before (outside the graph); a reason instead
        where what it left cannot be replayed."""
        run, eng, cp = self.run, self.eng, self.run.be.cp
        stream = eng.streams[slot]
        work = dict(run.base)
        with eng.on(slot):
            inputs = {n: eng.upload_into(slot, n, arr, a, b,
                                         cp.empty((b - a, *arr.shape[1:]), run.dtypes[n]))
                      for n, arr in run.inputs.items()}
            work.update(inputs)
            with _no_host_copies(cp), uncharged():
                try:
                    stream.begin_capture()
                    with as_main(work, run.namespace, run.plan.stored):
                        exec(run.plan.code, work)
                except BaseException:  # ended, so that the stream runs work again
                    with contextlib.suppress(Exception):
                        stream.end_capture()
                    raise
                graph = stream.end_capture()
        return self.sort(graph, inputs, work, b - a)

    def sort(self, graph: Any, inputs: dict[str, Any], work: dict[str, Any],
             rows: int) -> _SlotGraph | str:
        """The captured batch's results: row results and partials to copy out per replay,
        values every batch shares; a reason where one is neither."""
        run, is_device = self.run, self.run.be.is_device_array
        outputs: dict[str, Any] = {}
        partials: dict[str, Any] = {}
        for name in sorted(run.plan.stored):
            value = work.get(name)
            if name in run.opts.reduce:
                if not (is_device(value) and value.flags.c_contiguous):
                    return f"the --reduce partial {name!r} is not one contiguous device array"
                row = run.partial_rows.get(name)
                if row is None or (tuple(value.shape), value.dtype) != (row.shape[1:], row.dtype):
                    return (f"the --reduce partial {name!r} has no host row of its shape to be "
                            "copied to, and a replay would write the next batch's over it")
                partials[name] = value
            elif name in run.specs:
                if not (is_device(value) and value.shape[:1] == (rows,)
                        and value.flags.c_contiguous):
                    return (f"the result {name!r} is not a contiguous device array of the "
                            "batch's rows (its download would allocate between replays)")
                if (tuple(value.shape[1:]), value.dtype) != run.specs[name]:
                    return f"the result {name!r} is not shaped as in the launched batches"
                if (name in run.in_place_rows) != (value is inputs.get(name)):
                    return (f"the captured batch left {name!r} otherwise than the launched "
                            "ones did (changed in place, or rebound)")
                outputs[name] = value
            elif name in work and not (name in run.plan.row_free or _plain(value)
                                       or callable(value) or isinstance(value, types.ModuleType)):
                return (f"the cell's value {name!r} is made by its Python, which a replay "
                        "does not run, and the row check cannot tell it is the same in every "
                        "batch")
        return _SlotGraph(graph, inputs, outputs, partials, work)

    def differs(self, g: _SlotGraph, a: int, b: int, refs: dict[str, np.ndarray]) -> str:
        """What the checking replay gave otherwise than the launched batch (``""``: none)."""
        run = self.run
        for name, ref in refs.items():
            if run.out[name][a:b].tobytes() != ref.tobytes():
                return f"result {name!r}"
        for name, dev in g.partials.items():
            launched = run.partials[name][-1][0]
            if _bytes(run.be.to_host(dev)) != _bytes(run.be.to_host(launched)):
                return f"--reduce partial {name!r}"
        for name, (value, _) in run.constants.items():
            mine = g.work.get(name)
            if run.be.is_device_array(mine):  # a row-free array, compared as collect keeps it
                mine = compared(mine, run.be.to_host)
            if name in g.work and not agree(mine, value):
                return f"value {name!r}"
        return ""

    def all_checked(self) -> None:
        """Every slot's graph is checked: keep them if replays were clearly faster
        (:func:`.graphplan.not_kept`)."""
        launched = sum(t for t, _ in self.times)
        replayed = sum(t for _, t in self.times)
        self.note.launched_seconds = launched / len(self.times)
        self.note.replay_seconds = replayed / len(self.times)
        why = not_kept(self.note.launched_seconds, self.note.replay_seconds)
        if why:
            return self.stop(why)

    # --- the end --------------------------------------------------------------------------
    def released(self) -> bool:
        """Whether the pool gave cached blocks back since the first capture (then replays
        stop): counted by the backend, or seen as fewer bytes held than at the last look."""
        if self.seen is None or not self.on:
            return False
        count, held = self.run.be.releases, self.run.be.pool_held()
        if count == self.seen[0] and held >= self.seen[1]:
            self.seen = (count, held)
            return False
        self.stop("the pool released cached blocks, which a graph's buffers may have been")
        return True

    def stop(self, why: str) -> None:
        """No more replays, and why (the report says): drop the graphs."""
        self.note.why_not = why
        self.drop()

    def drop(self) -> None:
        """Drop the graphs and their buffers (freed to their streams' arenas, where later
        work on each stream waits for its replays)."""
        self.on = False
        self.graphs.clear()
        self.to_check.clear()

    def finish(self) -> None:
        """After the streams are drained: drop the graphs, fill the report's record."""
        self.graphs.clear()
        self.on = False
        if self.note.replayed:
            self.note.issue_seconds = self.issued / self.note.replayed
        self.run = None  # no cycle with the run, whose device arrays then go when it does


@contextlib.contextmanager
def _no_host_copies(cp: Any) -> Iterator[None]:
    """While inside, CuPy's pinned allocator refuses: CuPy stages every host-to-device copy
    of an array it makes (``cupy.asarray(a_list)``, fancy indexing by a list) through pinned
    memory, and a captured copy would read that one batch's buffer at every replay. The
    default pinned pool is put back after (cupy_magic sets no other)."""
    def refuse(size: int) -> Any:
        raise HostCopyRefused(f"it copies {size:,} bytes of host memory to the device, and a "
                              "graph would read that one batch's host buffer at every replay")

    cp.cuda.set_pinned_memory_allocator(refuse)
    try:
        yield
    finally:
        cp.cuda.set_pinned_memory_allocator(cp.get_default_pinned_memory_pool().malloc)


def _plain(value: Any) -> bool:
    """A Python number, string, ``None`` or tuple of them (``r, v = 0.02, 0.3``, which the
    row check's constants do not include): without a host sync, which fails the capture,
    the cell's Python can make it only from literals, shapes and what the cell reads, the
    same in every full batch (:mod:`.graphscan` refuses state outside the cell); the
    checking batches compare it with the launched ones'."""
    if isinstance(value, tuple):
        return all(_plain(v) for v in value)
    return value is None or type(value) in (int, float, complex, bool, str)


def _bytes(value: Any) -> bytes:
    return np.asarray(value).tobytes()


def _line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def graph_replay(run: Any, rows: int, bounds: list[tuple[int, int]]) -> GraphReplay:
    """The graphs of a :class:`~.batched.BatchRun` about to launch its batches after the
    first (``bounds``): off where :func:`.graphplan.consider` says no (its note, if any, is
    the report's line)."""
    full = sum(1 for a, b in bounds if b - a == rows)
    out_row = sum(a.nbytes for a in run.out.values()) // run.total  # row results' bytes
    capture, why_not = consider(run.plan.graph_refusal, run.opts.graph, run.be.is_gpu,
                                run.cost, rows, run.row_bytes, full, run.in_flight, out_row)
    note = GraphNote(why_not=why_not or "") if capture or why_not is not None else None
    return GraphReplay(run, rows, full, note, on=capture)
