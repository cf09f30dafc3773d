"""The inputs of a cluster run: the cell's Dask arrays (checked, aligned) and, with
``--cluster``, its large NumPy inputs (chunked and scattered from this kernel); the other
inputs every block reads whole, scattered once to every worker.
"""

from __future__ import annotations

import math
import sys
import time
import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..backend import Backend
from ..run.batching import BatchOptions, select_inputs
from ..run.errors import CellError
from ..run.names import cell_names
from ..run.plan import CellPlan
from ..units import format_bytes

__all__ = ["BLOCK_BYTES", "MANY_BLOCKS", "SMALL_BLOCK", "BlockInputs", "block_sizes",
           "check_blocks", "cut_inputs", "dask_inputs", "is_dask_array", "prepare",
           "read_values", "row_bytes", "scatter_local", "scheduler_workers", "worker_addresses"]

BLOCK_BYTES = 128 << 20  # input bytes per block of a NumPy input under --cluster
# Each block is a task: the scheduler, the worker and this kernel spend milliseconds on it
# (5,000 blocks of one row took 18 s through shared memory, 46 s scattered, 50 s as a Dask
# array's chunks on 2 local workers, for work NumPy does in a millisecond). More blocks than
# MANY_BLOCKS, of less than SMALL_BLOCK input each on average, are refused with the fix.
MANY_BLOCKS = 1000
SMALL_BLOCK = 1 << 20


def is_dask_array(value: Any) -> bool:
    """Whether ``value`` is a ``dask.array.Array`` (without importing Dask)."""
    return type(value).__module__.startswith("dask.array") and hasattr(value, "chunks")


def dask_inputs(source: str, namespace: dict[str, Any]) -> dict[str, Any]:
    """The Dask arrays the cell reads, by name."""
    if "dask" not in sys.modules:  # no Dask imported: no Dask array anywhere (the common cell)
        return {}
    try:
        names = cell_names(source)
    except SyntaxError:  # compiling the cell reports it, with the cell's own line
        return {}
    read = (names.loaded | names.mutated) - names.written_first
    return {n: namespace[n] for n in sorted(read) if is_dask_array(namespace.get(n))}


def read_values(source: str, namespace: dict[str, Any], skip: set[str]) -> dict[str, Any]:
    """The other values the cell reads (numbers, functions, modules), sent with the cell."""
    names = cell_names(source)
    read = (names.loaded | names.mutated) - names.written_first - skip
    return {n: namespace[n] for n in sorted(read) if n in namespace}


@dataclass
class BlockInputs:
    """What each block reads: ``blocks[i]`` maps a batched input to its block ``i`` (a Dask
    block or a scattered chunk); ``shared`` the scattered whole inputs; ``local`` the
    batched NumPy inputs kept in this kernel (they go through shared memory instead)."""

    batched: tuple[str, ...]
    starts: list[int]
    blocks: list[dict[str, Any]]
    shared: dict[str, Any] = field(default_factory=dict)
    scattered: tuple[str, ...] = ()
    input_bytes: int = 0
    futures: list[Any] = field(default_factory=list)  # scattered: released after the run
    scatter_seconds: float = 0.0
    sizes: tuple[int, ...] = ()  # rows of each block
    local: dict[str, np.ndarray] = field(default_factory=dict)


def _shape(shape: tuple[float, ...]) -> str:
    """A Dask array's shape as text, ``?`` for a length it does not know (``nan``)."""
    dims = ["?" if math.isnan(n) else str(n) for n in shape]
    return f"({', '.join(dims)}{',' * (len(dims) == 1)})"


def _check(name: str, arr: Any) -> None:
    if arr.ndim == 0:
        raise CellError(f"Dask input {name!r} is 0-d and has no rows to cut into blocks; "
                        f"compute it first ({name} = {name}.compute())")
    if any(math.isnan(c) for axis in arr.chunks for c in axis):  # after a mask: x[x > 0]
        raise CellError(f"Dask input {name!r} has chunks of unknown size (shape "
                        f"{_shape(arr.shape)}, as after a boolean mask); blocks need their "
                        f"rows known: {name} = {name}.compute_chunk_sizes()")
    split = [k for k in range(1, arr.ndim) if len(arr.chunks[k]) > 1]
    if split:
        axes = ", ".join(f"{k}: -1" for k in split)
        where = f"axis {split[0]}" if len(split) == 1 else \
            f"axes {', '.join(map(str, split))}"
        raise CellError(f"Dask input {name!r} is chunked along {where} too (chunks "
                        f"{arr.chunksize} of {arr.shape}); blocks run along the leading axis "
                        f"only: {name} = {name}.rechunk({{{axes}}})")


def _align(darrs: dict[str, Any]) -> tuple[tuple[int, ...], dict[str, Any]]:
    """The leading-axis chunks of the first Dask input without its chunks of 0 rows (a
    mask's, after ``compute_chunk_sizes()``: a block of 0 rows would give ``mean`` a NaN and
    ``min`` an error NumPy on the whole array does not), every Dask input rechunked to them."""
    for name, arr in darrs.items():
        _check(name, arr)
    first = next(iter(darrs))
    rows = {n: a.shape[0] for n, a in darrs.items()}
    if len(set(rows.values())) > 1:
        shapes = ", ".join(f"{n} {a.shape}" for n, a in darrs.items())
        least = min(rows.values())
        longer = next(n for n, r in rows.items() if r > least)
        raise CellError(f"the Dask inputs have different leading lengths ({shapes}); blocks "
                        "need inputs whose rows match: slice them in a cell before this one, "
                        f"e.g. {longer} = {longer}[:{least}]")
    chunks = tuple(c for c in darrs[first].chunks[0] if c)
    if not chunks:  # 0 rows: refused by prepare, which names the input
        return chunks, darrs
    return chunks, {n: (a if a.chunks[0] == chunks else a.rechunk({0: chunks}))
                    for n, a in darrs.items()}


def check_blocks(chunks: tuple[int, ...], row_nbytes: int, names: Iterable[str],
                 dask: bool) -> None:
    """Refuse a cell cut into more than :data:`MANY_BLOCKS` blocks of less than
    :data:`SMALL_BLOCK` each (rows ``chunks`` of ``row_nbytes`` bytes of the inputs
    ``names``; ``dask``: the first is a Dask input, rechunked as the fix)."""
    n, total = len(chunks), sum(chunks)
    per = total * row_nbytes // max(n, 1)
    if n <= MANY_BLOCKS or per >= SMALL_BLOCK:
        return
    names = list(names)
    rows = min(total, max(-(-total // MANY_BLOCKS), -(-SMALL_BLOCK // max(row_nbytes, 1))))
    fix = f"{names[0]} = {names[0]}.rechunk({{0: {rows}}})" if dask else f"--batch-rows {rows}"
    raise CellError(f"{', '.join(names)} would run as {n:,} blocks of {format_bytes(per)} on "
                    "average; each block is a task costing the scheduler milliseconds, more "
                    f"than its work: give {fix} (at most {MANY_BLOCKS:,} blocks, or blocks of "
                    f"at least {format_bytes(SMALL_BLOCK)}), or run the cell in this kernel")


def scheduler_workers(client: Any) -> dict[str, Any]:
    """The scheduler's record of every worker, by address (its ``identity()["workers"]``).

    Asked of the scheduler itself, not through ``client.scheduler_info()``: that returns the
    client's cached identity, which the client's own refresh (every 2 s, on its event loop)
    replaces with one listing no workers, so a refresh landing between the fetch and the
    return read none (a ``--cluster`` cell then took the scatter path, "no workers to ask").
    Recent ``distributed`` lists only the first few unless asked for all (``n_workers=-1``);
    older releases take no ``n_workers`` and list all."""
    try:
        return client.sync(client.scheduler.identity, n_workers=-1)["workers"]
    except TypeError:  # a scheduler without n_workers
        return client.sync(client.scheduler.identity)["workers"]


def worker_addresses(client: Any) -> tuple[str, ...]:
    """The addresses of the cluster's workers, sorted (the blocks are dealt over them)."""
    return tuple(sorted(scheduler_workers(client)))


def block_sizes(inputs: dict[str, np.ndarray], cut: list[str], opts: BatchOptions,
                workers: int) -> tuple[int, ...]:
    """The rows of each block the NumPy inputs ``cut`` are cut into (``--cluster``)."""
    if not cut:
        return ()
    return _numpy_chunks(inputs[cut[0]].shape[0], row_bytes(inputs, cut), opts, workers)


def row_bytes(inputs: dict[str, np.ndarray], names: Iterable[str]) -> int:
    """Bytes of one row of each of the inputs ``names``, together."""
    return sum(int(inputs[n][:1].nbytes) for n in names)


def _numpy_chunks(total: int, row_bytes: int, opts: BatchOptions, workers: int) -> tuple[int, ...]:
    if opts.rows:
        rows = opts.rows
    else:
        per = opts.nbytes or BLOCK_BYTES
        rows = min(max(1, per // max(row_bytes, 1)), max(1, math.ceil(total / (2 * workers))))
    return tuple(min(rows, total - a) for a in range(0, total, rows))


def _device_to_host(value: Any) -> np.ndarray:
    return value.get() if hasattr(value, "get") and not isinstance(value, np.ndarray) \
        else np.asarray(value)


def cut_inputs(plan: CellPlan, opts: BatchOptions, scatter_numpy: bool) -> list[str]:
    """The NumPy inputs cut into blocks (``--cluster``; none without it)."""
    return select_inputs(dict(plan.inputs), opts)[0] if scatter_numpy and plan.inputs else []


def prepare(client: Any, source: str, plan: CellPlan, darrs: dict[str, Any],
            namespace: dict[str, Any], opts: BatchOptions, scatter_numpy: bool, be: Backend,
            workers: tuple[str, ...], local: bool = False) -> BlockInputs:
    """Cut the batched inputs into blocks (NumPy ones into a block per ``workers``' worker
    at least) and scatter what this kernel holds (with ``local``, all but the batched NumPy
    inputs, which stay here for the slots)."""
    numpy_in = dict(plan.inputs)
    cut = cut_inputs(plan, opts, scatter_numpy)
    chunks: tuple[int, ...] = ()
    if darrs:
        chunks, darrs = _align(darrs)
        total = sum(chunks)
        bad = [n for n in cut if numpy_in[n].shape[0] != total]
        if bad:
            raise CellError(f"--cluster batches {', '.join(bad)}, whose rows differ from the "
                            f"Dask inputs' {total:,}; name the inputs to cut: --batch "
                            f"{','.join(darrs)}")
    elif cut:
        chunks = block_sizes(numpy_in, cut, opts, max(1, len(workers)))
    names = [*darrs, *cut]
    if not chunks or sum(chunks) == 0:
        fix = f"compute it first ({names[0]} = {names[0]}.compute())" if darrs else \
            "run the cell in this kernel (without --cluster)"
        what = (f"the cell's batched input{'s' * (len(names) > 1)} {', '.join(names)} "
                f"ha{'ve' if len(names) > 1 else 's'} 0 rows" if names
                else "the cell reads no array to cut into blocks")
        raise CellError(f"{what}: no block to run on the cluster; {fix}")
    check_blocks(chunks, sum(int(a.dtype.itemsize) * math.prod(a.shape[1:])
                             for a in darrs.values()) + row_bytes(numpy_in, cut), names,
                 bool(darrs))
    starts = [sum(chunks[:i]) for i in range(len(chunks))]
    blocks: list[dict[str, Any]] = [{} for _ in chunks]
    for name, arr in darrs.items():
        for i, d in enumerate(arr.to_delayed().ravel()):
            blocks[i][name] = d
    t0 = time.perf_counter()
    whole = {n: a for n, a in numpy_in.items() if n not in cut}
    # arrays earlier cells left on this kernel's device: the workers get them as NumPy
    whole.update({k: _device_to_host(v) for k, v in
                  read_values(source, namespace, set(whole)).items()
                  if be.is_device_array(v)})
    # a list, not the dict: scattering a dict makes its names the keys, so the next cell's
    # "w" would race the release of this one's, and workers could not tell the cells apart
    shared = dict(zip(whole, client.scatter(list(whole.values()), broadcast=True, hash=False),
                      strict=True)) if whole else {}
    nbytes = sum(int(a.nbytes) for a in darrs.values()) + sum(numpy_in[n].nbytes for n in cut)
    inputs = BlockInputs((*darrs, *cut), starts, blocks, shared, (), nbytes,
                         list(shared.values()), time.perf_counter() - t0, chunks,
                         {n: numpy_in[n] for n in cut})
    if not local:
        scatter_local(client, inputs)
    return inputs


def scatter_local(client: Any, inputs: BlockInputs) -> list[Any]:
    """Scatter the batched NumPy inputs kept in this kernel (``inputs.local``) as the blocks'
    chunks, for a run that does not read them through slots; returns the new futures (also
    in ``inputs.futures``)."""
    t0 = time.perf_counter()
    futures: list[Any] = []
    for name, arr in inputs.local.items():
        parts = client.scatter([arr[a:a + n] for a, n in
                                zip(inputs.starts, inputs.sizes, strict=True)], hash=False)
        futures.extend(parts)
        for i, f in enumerate(parts):
            inputs.blocks[i][name] = f
    inputs.scattered, inputs.local = (*inputs.scattered, *inputs.local), {}
    inputs.futures.extend(futures)
    inputs.scatter_seconds += time.perf_counter() - t0
    return futures


def python_values(source: str, namespace: dict[str, Any], plan: CellPlan,
                  be: Backend, taken: set[str]) -> dict[str, Any]:
    """The non-array values the cell reads, sent with the cell (modules by reference)."""
    values = read_values(source, namespace, taken | set(plan.overrides))
    return {k: v for k, v in values.items()
            if not be.is_device_array(v) and not is_dask_array(v)
            and not (isinstance(v, types.ModuleType) and v is np)}
