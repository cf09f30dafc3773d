"""Cluster runs against NumPy, cell by cell (:mod:`parity_corpus`), on a real LocalCluster
of 2 worker processes (CPU fallback). Each cell runs in plain NumPy and three times through
a real shell as ``%%gpu --quiet --to-host``: with its NumPy inputs cut into blocks
(``--cluster --batch-rows 3000``: seven equal blocks, sent through shared memory on this
host, scattered where the cell changes its input), with ``x`` and ``v`` as Dask arrays of
3,000-row chunks (seven blocks again), and batched in this kernel (``test_batched_parity``'s
run on request). Each cluster run must give NumPy's results or stop with a one-line error
that names the place and a fix (:mod:`parity_check`), and its verdict must be the kernel's:
a cell the kernel refuses and the cluster runs (or the reverse) has found a gap in one of
them. Seven equal blocks agree on a count of their own rows (``n = len(x)``), so only the
row check's word tells such a value from a true one.

No corpus cell is left out: every one reads ``x`` or ``v``, so every one runs in blocks."""

from __future__ import annotations

import numpy as np
import pytest
from IPython.core.error import UsageError
from parity_check import ASKED, CUPY_REFUSED, compare, inputs, judged
from parity_corpus import CELLS, ROW_WISE
from parity_rowwise import CONSTANTS, CUPY_LACKS, EARLIER, MIXING, MUST_RUN, SCALAR_TOTALS

import cupy_magic
from cupy_magic import backend

da = pytest.importorskip("dask.array")

ON_CLUSTER = "--cluster --batch-rows 3000"
BLOCKS = 7  # the corpus's 21,000 rows in blocks of 3,000


@pytest.fixture
def joined(joined):
    """The module's cluster, its workers on the kernel's backend, as ``%gpu_cluster local``
    starts them: a worker of a cluster given by the user picks its own (CuPy on a GPU
    machine), and the verdicts compared here are the kernel's backend's. On the H100 the host
    kernel's tests met CuPy's refusals from such workers (``np.select`` of scalars)."""
    from cupy_magic.cluster.plugin import BudgetPlugin

    be = backend.current()
    joined.register_plugin(BudgetPlugin(be.name, be.budget), name=BudgetPlugin.name)
    return joined


def dask_inputs() -> dict[str, object]:
    """The corpus's inputs with ``x`` and ``v`` as Dask arrays of 3,000-row chunks."""
    given: dict[str, object] = dict(inputs())
    given["x"] = da.from_array(given["x"], chunks=(3000, 4))
    given["v"] = da.from_array(given["v"], chunks=(3000,))
    return given


def outcome(ip, cell: str, rules: str, how: str, earlier: dict | None = None) -> str:
    """'same', 'refused', or what went wrong, for one way of running ``cell`` (``earlier``:
    names an earlier cell set)."""
    line = "--quiet --to-host" + (f" --reduce {rules}" if rules else "")
    if how == "kernel":
        return compare(ip, cell, f"{line} {ASKED}", earlier=earlier)
    if how == "--cluster":
        got = compare(ip, cell, f"{line} {ON_CLUSTER}", earlier=earlier)
    else:
        got = compare(ip, cell, line, dask_inputs(), earlier)
    if got == "same":  # it ran on the workers, in the blocks asked for
        info = cupy_magic.last_report().batch
        if info is None or info.blocks != BLOCKS:
            return f"ERROR: not run in {BLOCKS} blocks on the cluster ({info})"
        moved = info.transport
        # scattered only where the cell changes its input: each block needs a copy of its own;
        # on a GPU whose workers share it, device slots by CUDA IPC stand for shared memory
        if how == "--cluster" and moved.kind not in ("shm", "ipc") \
                and "changes its input" not in moved.why:
            return f"ERROR: the blocks went by {moved.kind} ({moved.why}), not shared memory"
    return got


@pytest.mark.parametrize(("cell", "rules"), CELLS, ids=[f"{i}" for i in range(len(CELLS))])
def test_a_cluster_cell_gives_numpy_s_results_or_the_kernel_s_refusal(ip, joined, cell,
                                                                      rules):
    got = {how: outcome(ip, cell, rules, how) for how in ("--cluster", "dask", "kernel")}
    assert all(g in ("same", "refused") for g in got.values()), got
    assert len(set(got.values())) == 1, got  # the cluster's verdict is the kernel's
    if cell in ROW_WISE and not rules:
        assert got["dask"] == "same", got


# a module a cluster run imports stays on the workers (not committed, the report says so)
IN_BLOCKS = [(c, r) for c, r in MUST_RUN if "import " not in c]


@pytest.mark.parametrize(("cell", "rules"), IN_BLOCKS,
                         ids=[f"{i}" for i in range(len(IN_BLOCKS))])
def test_a_row_wise_cell_runs_in_blocks_and_gives_numpy_s_results(ip, joined, cell, rules):
    """The row-wise corpus (:mod:`parity_rowwise`) on the cluster as in the kernel: a
    refusal is a false refusal here too; only on the cupy backend, a cell of
    :data:`~parity_rowwise.CUPY_LACKS` is refused by the compat layer, naming --fallback."""
    got = {how: judged(outcome(ip, cell, rules, how, EARLIER)) for how in ("--cluster", "dask")}
    if backend.current().name == "cupy" and cell in CUPY_LACKS:
        assert got["--cluster"] == CUPY_REFUSED and got["dask"] in (CUPY_REFUSED, "same"), got
    else:
        assert set(got.values()) == {"same"}, got


@pytest.mark.parametrize("cell", MIXING, ids=[f"{i}" for i in range(len(MIXING))])
def test_a_cell_that_mixes_rows_is_refused_on_the_cluster_as_in_the_kernel(ip, joined, cell):
    got = {how: judged(outcome(ip, cell, "", how)) for how in ("--cluster", "dask", "kernel")}
    assert set(got.values()) <= {"refused", CUPY_REFUSED}, got


@pytest.mark.parametrize("cell", CONSTANTS, ids=[f"{i}" for i in range(len(CONSTANTS))])
def test_a_numpy_scalar_constant_is_kept_as_the_kernel_keeps_it(ip, joined, cell):
    got = {how: outcome(ip, cell, "", how) for how in ("--cluster", "dask", "kernel")}
    assert set(got.values()) == {"same"}, got


@pytest.mark.parametrize("cell", SCALAR_TOTALS, ids=[f"{i}" for i in range(len(SCALAR_TOTALS))])
def test_a_numpy_scalar_over_a_block_s_rows_is_refused_as_in_the_kernel(ip, joined, cell):
    got = {how: judged(outcome(ip, cell, "", how)) for how in ("--cluster", "dask", "kernel")}
    assert set(got.values()) <= {"refused", CUPY_REFUSED}, got


def _refusal(ip, how: str, cell: str) -> str:
    """The one-line error a cluster run of ``cell`` stops with; it commits nothing."""
    ip.user_ns.update(inputs() if how == "--cluster" else dask_inputs())
    line = f"--quiet --to-host {ON_CLUSTER}" if how == "--cluster" else "--quiet --to-host"
    with pytest.raises(UsageError) as err:
        ip.run_cell_magic("gpu", line, cell)
    assert "y" not in ip.user_ns
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize("how", ["--cluster", "dask"])
def test_a_count_of_a_block_s_rows_is_refused_though_every_block_agrees_on_it(ip, joined,
                                                                             how):
    """Seven blocks of 3,000 rows each say n = 3000; NumPy says 21000."""
    for cell, name, value in (("y = x * 2\nn = len(x)\n", "n", "int 3000"),
                              ("y = x * 2\nflag = bool(x.sum() > 40000)\n", "flag",
                               "bool False")):
        msg = _refusal(ip, how, cell)
        assert f"result '{name}' ({value}) is a value over the block's 3000 rows" in msg
        assert f"--reduce {name}=sum" in msg and name not in ip.user_ns


@pytest.mark.parametrize("how", ["--cluster", "dask"])
def test_a_list_of_a_block_s_arrays_is_refused_in_one_short_line(ip, joined, how):
    cell = "cols = []\nfor j in range(4):\n    cols.append(x[:, j] * j)\ny = np.stack(cols, 1)\n"
    msg = _refusal(ip, how, cell)
    assert "result 'cols' is [array([" in msg and "in block 2" in msg and len(msg) < 700


def test_the_inputs_are_the_corpus_s():
    assert set(dask_inputs()) == set(inputs())
    assert all(isinstance(a, np.ndarray) for a in inputs().values())
