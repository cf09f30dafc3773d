"""Batches the budget sizes stay within it: the batches after the first are sized from what the
first held per row, and must hold no more than that (issue 20's measured first batch)."""

from __future__ import annotations

import numpy as np
from run.test_batched import fresh, gpu


def test_the_next_batches_hold_no_more_than_the_first_measured(ip, poisoned):
    """One stream: a batch may take 80% of the free budget, by the first batch's bytes per
    row. The rows of the inputs of each batch used to stay held while the next one ran (with
    the rest of its names, for the cell's last values), which the first batch never held: a
    third more here, and the cell stopped over its own budget (1.05 MiB of 976.56 KiB)."""
    ip.run_line_magic("vram_budget", "1MB")
    x = fresh((400_000,), "float64")
    ip.user_ns["x"] = x
    report = gpu(ip, "y = x * 2\n", "--streams 1")
    np.testing.assert_array_equal(ip.user_ns["y"], x * 2)
    bp = report.batch
    assert bp.streams == 1 and bp.rows > bp.first_rows and bp.batches > 3
    assert report.peak_pool_bytes <= 1_000_000
    if report.backend != "cupy":  # on the host the peak is the cell's bytes, one batch at a time
        assert report.peak_pool_bytes <= bp.rows * bp.peak_row_bytes  # what the plan allowed


def test_the_last_values_of_a_batched_cell_are_kept_without_its_input_rows(ip):
    """The batched inputs the cell only reads are the user's arrays again afterwards; the
    Python values it binds come from the last batch."""
    x = np.arange(1000.0)
    ip.user_ns["x"] = x
    gpu(ip, "y = x + 1\nn_rows = 7\n", "--batch-rows 300")
    assert ip.user_ns["x"] is x and ip.user_ns["n_rows"] == 7
    np.testing.assert_array_equal(ip.user_ns["y"], x + 1)


def test_the_inputs_to_cut_are_chosen_once(ip, poisoned, monkeypatch):
    """The row check, the warm-up and the batches cut the inputs _run_here chose: one
    select_inputs a batched cell (run_batched chose them a second time before)."""
    import cupy_magic.run.batched as batched_mod
    import cupy_magic.run.cell as cell_mod
    from cupy_magic.run.batching import select_inputs

    calls: list[list[str]] = []

    def counted(inputs, opts):
        calls.append(sorted(inputs))
        return select_inputs(inputs, opts)

    for mod in (cell_mod, batched_mod):
        if hasattr(mod, "select_inputs"):
            monkeypatch.setattr(mod, "select_inputs", counted)
    ip.user_ns["x"] = fresh((1001, 3), "float32")
    report = gpu(ip, "y = x * 2\n", "--batch --batch-rows 100")
    np.testing.assert_array_equal(ip.user_ns["y"], ip.user_ns["x"] * 2)
    assert report.batch.batches == 11
    assert calls == [["x"]]
