"""A cell run on the cluster, as a transaction: one task per block, results back as Dask
arrays (or NumPy with ``--to-host``), ``--reduce`` rules as Dask tree reductions.

Dask schedules; this module only picks how the blocks' data moves (:mod:`.transport`:
device slots on this kernel's GPU or shared memory on one host, run by :mod:`.pipeline`, or
scatter and gather; :mod:`.blocks` runs them), joins the results, and on a failure or Ctrl-C
cancels every future
of the cell (blocks, scattered chunks, shared inputs), so the workers keep nothing of it and
the namespace is untouched.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from typing import Any

import numpy as np

from ..backend import Backend
from ..run import progress
from ..run.batching import RULES, BatchOptions, check_rows
from ..run.commit import describe_value
from ..run.errors import CellError
from ..run.plan import CellPlan
from ..run.reduce import (
    agree,
    check_names,
    combine,
    like_partials,
    name_a_rule,
    over_rows,
    rows_by_chance,
)
from ..run.report import IN_PLACE, InputMove, OutputInfo, RunReport
from ..units import short_repr
from . import abandoned, connect
from .blocks import run_blocks
from .failure import CellBlocks, cancel, explain, hold_log, release_log, unstick
from .inplace import changed_in_place, write_home
from .inputs import cut_inputs, prepare, python_values, worker_addresses
from .report import ClusterRun
from .transport import choose
from .worker import BlockFailed, BlockSpec, block_info, drop_shared

__all__ = ["SPLIT_EVERY", "ClusterExecutor"]

SPLIT_EVERY = 8  # partials joined per task of a --reduce tree reduction


def _pick(result: dict[str, Any], name: str) -> Any:
    return result["values"][name]


def _to_numpy(block: Any) -> np.ndarray:
    return block.get() if hasattr(block, "get") and not isinstance(block, np.ndarray) \
        else np.asarray(block)


def _partial(result: dict[str, Any], name: str, rule: str) -> np.ndarray:
    """A block's partial result as a NumPy block of one row (a run of rows for concat)."""
    value = _to_numpy(result["values"][name])
    if rule == "concat":
        return np.atleast_1d(value)
    if rule == "mean":
        value = value.astype(np.float64) * result["stats"].rows
    return value[None]


class ClusterExecutor:
    """Runs cells on the cluster in use; ``run_cell``'s ``remote`` (see ``run/cell.py``).

    Parameters
    ----------
    darrs
        The cell's Dask inputs, by name.
    opts
        ``--batch`` options: block rows and bytes for scattered NumPy inputs, and ``--reduce``.
    scatter_numpy
        ``--cluster``: cut the cell's NumPy inputs into blocks too (sent through shared
        memory or scattered).
    """

    def __init__(self, darrs: dict[str, Any], opts: BatchOptions | None,
                 scatter_numpy: bool, source: str, fallback: bool, syncs: str) -> None:
        self.darrs, self.opts = darrs, opts or BatchOptions()
        self.scatter_numpy, self.source = scatter_numpy, source
        self.fallback, self.syncs = fallback, syncs
        self.names = frozenset(darrs)
        self.shared_keys: list[str] = []  # the workers' device copies to drop at the end
        self.over_rows: frozenset[str] = frozenset()  # n = len(x): a block's, never kept
        self.row_free: frozenset[str] = frozenset()  # eps = np.float32(1e-3): kept if agreed

    def __call__(self, plan: CellPlan, namespace: dict[str, Any], report: RunReport, *,
                 to_host: Any, dtype: str | None, filename: str, be: Backend) -> None:
        __tracebackhide__ = True
        client = connect.live()
        if client is None:
            raise CellError(self._no_cluster())
        if dtype is not None:
            raise CellError(f"--dtype {dtype} is not available on a cluster run yet; cast the "
                            f"input first (x = x.astype(np.float32)) or run with %gpu_cluster off")
        check_names(self.opts.reduce, plan.stored)
        self._check_rows(plan, namespace)
        unstick(client)  # what a Ctrl-C in an earlier cell left in the client
        connect.ensure_budget(be)
        wall0 = time.perf_counter()
        held: list[Any] = []
        # the workers now, one scheduler query: blocks are dealt over them, and a failure
        # names those that left meanwhile
        cell = CellBlocks(uuid.uuid4().hex[:8], worker_addresses(client))
        failure, own = None, False
        hold_log(cell)  # distributed's lines of a worker dying: dropped where the cell's says it
        try:
            results, info = self._run(client, plan, namespace, filename, be, held, cell,
                                      to_host)
        except BaseException as exc:
            cancel(client, held)  # queued, running and finished blocks, scattered inputs
            failure = explain(exc, be, filename, namespace, client, cell)
            own = isinstance(exc, BlockFailed)
        finally:
            progress.finish()
            self._drop_shared(client)
            release_log(cell)
        if own:  # a block's error, raised out of the handler: chained as the cell raised it
            raise failure  # type: ignore[misc]
        if failure is not None:
            raise failure from None
        held.clear()  # released: the results hold keys of their own now
        write_home(info.in_place, results, namespace)  # the cell succeeded
        self._commit(plan, results, namespace, report, be, info.in_place)
        report.batch = info
        report.gpu_seconds = info.run_seconds
        report.wall_seconds = time.perf_counter() - wall0
        report.peak_pool_bytes = max((w.peak_bytes for w in info.workers), default=0)
        for name in info.batched:
            report.inputs.append(InputMove(name, self._nbytes(plan, name), info.run_seconds,
                                           False, self._dtype(plan, name), streamed=True))

    def _check_rows(self, plan: CellPlan, namespace: dict[str, Any]) -> None:
        """Before anything is sent: a cell that certainly mixes the rows of its blocked
        inputs would give other results than NumPy on the whole array (run.rowwise)."""
        cut = [*self.darrs, *cut_inputs(plan, self.opts, self.scatter_numpy)]
        why = (f"the Dask input{'s' * (len(self.darrs) > 1)} {', '.join(self.darrs)} run in "
               "blocks on the cluster" if self.darrs else "--cluster runs the cell in blocks")
        check = check_rows(self.source, {**plan.inputs, **self.darrs}, cut, namespace,
                           plan.module_names, why, asked=True, rules=self.opts.reduce)
        self.over_rows, self.row_free = check.over_rows, check.row_free

    def _no_cluster(self) -> str:
        """Why the cell cannot run: it needs a cluster and none is in use; how to get one."""
        darrs = list(self.darrs)
        what = (f"the cell reads the Dask array{'s' * (len(darrs) > 1)} {', '.join(darrs)}"
                if darrs else "--cluster asks for a cluster")
        return (f"{what} and no cluster is in use; start one with %gpu_cluster local "
                "(cupy_magic.use_cluster('local')) or join one with %gpu_cluster "
                "tcp://HOST:8786" + (f", or compute it here first: {darrs[0]}.compute()"
                                     if darrs else ""))

    def _nbytes(self, plan: CellPlan, name: str) -> int:
        arr = self.darrs.get(name, plan.inputs.get(name))
        return int(arr.nbytes) if arr is not None else 0

    def _dtype(self, plan: CellPlan, name: str) -> str:
        arr = self.darrs.get(name, plan.inputs.get(name))
        return str(arr.dtype) if arr is not None else ""

    def _run(self, client: Any, plan: CellPlan, namespace: dict[str, Any], filename: str,
             be: Backend, held: list[Any], cell: CellBlocks,
             to_host: Any) -> tuple[dict[str, Any], ClusterRun]:
        workers, cell_id = () if self.darrs else cell.workers, cell.cell_id
        waited = abandoned.wait(client)  # an interrupted cell's blocks still running
        transport = choose(client, self.darrs, plan, self.opts, self.scatter_numpy, to_host,
                           workers, be)
        inputs = prepare(client, self.source, plan, self.darrs, namespace, self.opts,
                         self.scatter_numpy, be, workers,
                         local=transport.kind in ("ipc", "shm"))
        held.extend(inputs.futures)
        cell.starts, cell.sizes = tuple(inputs.starts), tuple(inputs.sizes)
        values = python_values(self.source, namespace, plan, be,
                               {*inputs.batched, *inputs.shared})
        # an input the cell changes in place gets a copy per block, like a batched input
        keys = {n: str(f.key) for n, f in inputs.shared.items() if n not in plan.stored}
        self.shared_keys = list(keys.values())
        spec = BlockSpec(self.source, filename, plan.module_names, values,
                         tuple(sorted(plan.stored)), len(inputs.blocks), self.fallback,
                         self.syncs, keys,
                         to_host=True if to_host is True else tuple(to_host or ()),
                         flags=plan.future_flags)
        [spec_f] = client.scatter([spec], broadcast=True, hash=False)
        held.append(spec_f)
        running = progress.current()
        progress.start(running.cell_label if running else filename, len(inputs.blocks),
                       inputs.input_bytes, unit="block")
        t0 = time.perf_counter()
        moved = run_blocks(client, transport, spec_f, inputs, cell_id, held, be, workers)
        transport, slotted, futures = moved.transport, moved.slotted, moved.futures
        filled, infos = (slotted.filled, slotted.infos) if futures is None else (None, None)
        if infos is None:
            infos = client.gather(client.map(block_info, futures, pure=False))
        run_seconds = time.perf_counter() - t0
        stats = [i["stats"] for i in infos]
        info = ClusterRun(connect.status().describe().removeprefix("cluster: "),
                          inputs.batched, tuple(inputs.shared), inputs.scattered, len(infos),
                          sum(s.rows for s in stats), inputs.input_bytes, run_seconds,
                          inputs.scatter_seconds, ClusterRun.shares(stats), transport=transport)
        if slotted is not None:
            info.slots = moved.slots
            info.copy_in_seconds = slotted.copy_in_seconds
            info.copy_out_seconds = slotted.copy_out_seconds
            info.sent_back = slotted.sent_back
        results = self._results(futures, infos, info, to_host, be, filled)
        info.in_place = tuple(changed_in_place(
            plan, namespace, infos, info.batched, True if to_host is True else set(to_host or ())))
        notes = [waited] * bool(waited) + moved.notes
        if notes:
            results.setdefault("__notes__", []).extend(notes)
        return results, info

    def _drop_shared(self, client: Any) -> None:
        """Drop the workers' device copies of the cell's shared inputs (the cell ended)."""
        keys, self.shared_keys = self.shared_keys, []
        if keys and client.status == "running":  # a closed cluster's workers hold nothing
            client.run(drop_shared, keys, on_error="ignore")  # a worker gone holds none

    # --- results ------------------------------------------------------------------------
    def _results(self, futures: list[Any] | None, infos: list[dict[str, Any]],
                 info: ClusterRun, to_host: Any, be: Backend,
                 filled: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
        """Join the blocks' results: from their futures, or (``filled``) the row results
        joined already from shared memory; the same rules and refusals either way."""
        host = None if isinstance(to_host, bool) else set(to_host)
        names = sorted({n for i in infos for n in i["names"]})
        out: dict[str, Any] = {}
        gathered, kept, skipped = [], [], []
        for name in names:
            kinds = [i["names"].get(name) for i in infos]
            if any(k is None for k in kinds):
                raise CellError(f"the cell assigned {name} in some blocks only, so rows would "
                                "be missing; assign it in every block")
            if name in self.opts.reduce:
                out[name] = self._reduce(futures, name, kinds, infos, to_host, be)
                info.reduced[name] = self.opts.reduce[name]
            elif all(k[0] == "rows" for k in kinds):
                if name in self.over_rows:  # np.histogram(v, bins=rows)[0]: rows by chance
                    raise CellError(rows_by_chance(name, f"{kinds[0][2]} {kinds[0][1]}",
                                                   kinds[0][1][0], "block"))
                _check_rows(name, kinds)
                if filled is not None:  # only a cell whose results all come back
                    out[name] = filled[name]
                    gathered.append(name)
                    continue
                arr = self._rows(futures, name, kinds, infos)
                if to_host is True or (host is not None and name in host):
                    out[name] = arr.map_blocks(_to_numpy, meta=np.empty(
                        (0,) * arr.ndim, arr.dtype)).compute()
                    gathered.append(name)
                else:
                    out[name] = arr.persist()
                    kept.append(name)
            elif all(k[0] == "python" for k in kinds):
                if name in self.over_rows:  # a block's count or test, even if all agree
                    first = kinds[0][1]
                    raise CellError(over_rows(name, f"{type(first).__name__} "
                                            f"{short_repr(first)}", infos[0]["stats"].rows,
                                              "block", first))
                out[name] = self._agreed(name, [k[1] for k in kinds])
            elif name in self.row_free and all(len(k) == 4 for k in kinds):
                out[name] = self._agreed(name, [k[3] for k in kinds])  # eps, mu: row-free
            elif all(k[0] == "skip" for k in kinds):
                skipped.append(name)
            else:
                raise CellError(self._no_rule(name, kinds, infos))
        info.gathered, info.kept = tuple(gathered), tuple(kept)
        if skipped:
            info_note = (f"{', '.join(skipped)}: functions and modules a cluster run defines "
                         "stay on the workers (not committed); define them in a plain cell")
            out.setdefault("__notes__", []).append(info_note)
        return out

    def _rows(self, futures: list[Any], name: str, kinds: list[Any],
              infos: list[dict[str, Any]]) -> Any:
        import dask
        import dask.array as da

        first = kinds[0]
        meta = _meta(infos[0]["stats"].backend, len(first[1]), first[2])
        parts = [da.from_delayed(dask.delayed(_pick, pure=True)(f, name), shape=k[1],
                                 dtype=k[2], meta=meta)
                 for f, k in zip(futures, kinds, strict=True)]
        return da.concatenate(parts, axis=0)

    def _reduce(self, futures: list[Any], name: str, kinds: list[Any],
                infos: list[dict[str, Any]], to_host: Any, be: Backend) -> Any:
        import dask
        import dask.array as da

        rule = self.opts.reduce[name]
        if all(k[0] == "python" for k in kinds):  # the numbers came back with the reports:
            return combine(rule, [(k[1], i["stats"].rows)  # joined here as a batched run's
                                  for k, i in zip(kinds, infos, strict=True)], np)
        parts = []
        for f, k, i in zip(futures, kinds, infos, strict=True):
            shape, dtype = (k[1], k[2]) if k[0] in ("rows", "array") else \
                (np.shape(k[1]), np.asarray(k[1]).dtype) if k[0] == "python" else ((), None)
            if dtype is None:
                raise CellError(f"--reduce {name}={rule}: {name!r} is a {k[1]} in block "
                                f"{i['stats'].index + 1}, not a number or an array")
            one = (max(1, shape[0]) if shape else 1, *shape[1:]) if rule == "concat" \
                else (1, *shape)
            dt = np.float64 if rule == "mean" else dtype
            parts.append(da.from_delayed(dask.delayed(_partial, pure=True)(f, name, rule),
                                         shape=one, dtype=dt, meta=np.empty((0,) * len(one), dt)))
        stack = da.concatenate(parts, axis=0)
        if rule == "concat":
            value = stack.compute()
        elif rule == "mean":
            value = stack.sum(axis=0, split_every=SPLIT_EVERY).compute() / \
                sum(i["stats"].rows for i in infos)
        else:
            value = getattr(da, rule)(stack, axis=0, split_every=SPLIT_EVERY).compute()
        if rule != "concat":  # the partials' dtype
            value = like_partials(np.asarray(value), rule, dtype)
        if not be.is_gpu or to_host is True or \
                (not isinstance(to_host, bool) and name in to_host):
            return value[()] if isinstance(value, np.ndarray) and value.ndim == 0 else value
        return be.to_device(np.asarray(value)).array

    def _agreed(self, name: str, values: list[Any]) -> Any:
        first = values[0]
        for j, v in enumerate(values[1:], start=2):
            if not agree(v, first):
                raise CellError(
                    f"the cell's result {name!r} is {short_repr(first)} in block 1 but "
                    f"{short_repr(v)} in block {j}: it depends on the block, so the blocks' "
                    f"values cannot be joined; {name_a_rule(name, first)}")
        return first

    @staticmethod
    def _no_rule(name: str, kinds: list[Any], infos: list[dict[str, Any]]) -> str:
        j = next(j for j, k in enumerate(kinds) if k[0] != "rows")
        k, rows = kinds[j], infos[j]["stats"].rows
        what = f"array {k[2]} {k[1]}" if k[0] in ("rows", "array") else type(k[1]).__name__
        return (f"the cell's result {name!r} ({what} in block {j + 1}) has no row axis of the "
                f"block's {rows} rows, so the blocks' values cannot be joined; "
                f"{name_a_rule(name, k[1] if k[0] == 'python' else 0)}")

    # --- commit -------------------------------------------------------------------------
    def _commit(self, plan: CellPlan, results: dict[str, Any], namespace: dict[str, Any],
                report: RunReport, be: Backend, in_place: tuple[str, ...]) -> None:
        report.notes.extend(results.pop("__notes__", []))
        for name in sorted(plan.deleted):
            if name in namespace and name not in results:
                del namespace[name]
                report.outputs.append(OutputInfo(name, "deleted", "deleted"))
        namespace.update(results)
        for name, value in results.items():
            row = _describe(name, value, be)
            report.outputs.append(replace(row, where=IN_PLACE) if name in in_place else row)


def _describe(name: str, value: Any, be: Backend) -> OutputInfo:
    """The report's row of a committed name: where it lives after a cluster run."""
    if hasattr(value, "chunks") and hasattr(value, "dask"):
        return OutputInfo(name, f"dask.array {value.dtype} {value.shape}, "
                          f"{value.npartitions} blocks", "workers (cluster)", int(value.nbytes))
    if be.is_device_array(value):
        where = "device" if be.is_gpu else "device (CPU fallback: host RAM)"
        return OutputInfo(name, f"{type(value).__module__.split('.')[0]}.ndarray {value.dtype} "
                          f"{value.shape}", where, int(value.nbytes))
    if isinstance(value, np.ndarray):
        return OutputInfo(name, f"numpy.ndarray {value.dtype} {value.shape}", "host",
                          int(value.nbytes))
    return OutputInfo(name, *describe_value(value, be))  # a NumPy scalar, a Python object


def _check_rows(name: str, kinds: list[Any]) -> None:
    """Refuse a row result whose rows differ in shape or dtype between blocks."""
    first = kinds[0]
    for j, k in enumerate(kinds):
        if k[1][1:] != first[1][1:] or k[2] != first[2]:
            raise CellError(
                f"the cell's result {name!r} is {k[2]} {k[1]} in block {j + 1} but "
                f"{first[2]} (rows, *{first[1][1:]}) in the first block; a row result "
                f"must keep one row per input row, or name a rule: --reduce {name}=concat "
                f"(or {', '.join(RULES[:-1])})")


def _meta(backend: str, ndim: int, dtype: np.dtype) -> Any:
    """An empty block of the kind the workers hold (CuPy on GPU workers)."""
    if backend == "cupy":
        import cupy

        return cupy.empty((0,) * ndim, dtype)
    return np.empty((0,) * ndim, dtype)
