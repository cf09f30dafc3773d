"""benchmarks/cluster_ipc.py's ``ipc_events`` path, the part that needs no GPU: the host order
of its fills and drains (a slot is refilled only after its last block was drained, at most
``slots`` blocks in flight), the order of the timed runs, and its options."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # its `from cluster_shm import _bounds`
    try:
        spec = importlib.util.spec_from_file_location("cluster_ipc",
                                                      ROOT / "benchmarks" / "cluster_ipc.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return module


@pytest.mark.parametrize("slots", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("blocks", [0, 1, 2, 3, 4, 5, 8, 13])
def test_plan_refills_a_slot_only_after_its_last_block_was_drained(bench, blocks, slots):
    steps = bench.plan(blocks, slots)
    fills = [k for step, k in steps if step == "fill"]
    drains = [k for step, k in steps if step == "drain"]
    assert fills == list(range(blocks)) and drains == list(range(blocks))
    flying: set[int] = set()
    last_in_slot: dict[int, int] = {}  # slot -> its block filled last
    for step, k in steps:
        if step == "fill":
            i = k % slots
            assert last_in_slot.get(i) not in flying  # that block's copy out already queued
            last_in_slot[i] = k
            flying.add(k)
            assert len(flying) <= slots
        else:
            assert k in flying and k == min(flying)  # drained in order, after its fill
            flying.remove(k)
    assert not flying
    if blocks >= slots:  # the pipeline is full: as many in flight as there are slots
        assert steps[:slots] == [("fill", k) for k in range(slots)]


def test_runs_go_there_and_back(bench):
    assert bench._runs(list(bench.PATHS), [3, 4]) == [
        "kernel", "ipc", "ipc_events/3", "ipc_events/4",
        "ipc_events/4", "ipc_events/3", "ipc", "kernel"]
    assert bench._runs(["kernel", "ipc"], []) == ["kernel", "ipc", "ipc", "kernel"]


def test_options(bench):
    assert bench._paths("ipc_events, kernel") == ["kernel", "ipc_events"]
    assert bench._slot_counts("4,3,4") == [3, 4]
    for bad in ("ipc", "kernel,shm"):
        with pytest.raises(argparse.ArgumentTypeError):
            bench._paths(bad)
    for bad in ("0", "3,x", "", "17"):
        with pytest.raises(argparse.ArgumentTypeError):
            bench._slot_counts(bad)
