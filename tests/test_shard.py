"""``--shard K/N`` (tests/conftest.py): stretches in collection order, every test in exactly one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import file_weights, shard_of

ROOT = Path(__file__).resolve().parents[1]
FILES = ["tests/test_units.py", "tests/test_source.py", "tests/test_config.py"]


def _collected(*extra: str) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
         *extra, *FILES], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.returncode, [line for line in done.stdout.splitlines() if "::" in line]


def test_the_shards_are_stretches_in_order_and_together_are_the_whole_run() -> None:
    rc, whole = _collected()
    assert rc == 0 and whole
    shards = [_collected("--shard", f"{k}/3")[1] for k in (1, 2, 3)]
    assert all(shards) and [t for shard in shards for t in shard] == whole


def test_the_shards_share_the_tests_that_k_and_m_selected() -> None:
    """The stretches are cut after ``-k``/``-m`` deselect (gpu-check selects
    ``-m gpu``): cut before, a selection of one quick file was all in the first shard."""
    # test_units.py: 48 tests of 0.05 s in all, the first of FILES (test_config.py takes 5 s)
    rc, whole = _collected("-k", "test_units")
    assert rc == 0 and len(whole) >= 3 and all("test_units.py" in t for t in whole)
    shards = [_collected("-k", "test_units", "--shard", f"{k}/3") for k in (1, 2, 3)]
    assert all(rc == 0 and tests for rc, tests in shards)  # none empty (exit 5)
    assert [t for _, tests in shards for t in tests] == whole


def test_a_shard_out_of_range_is_a_one_line_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
         "--shard", "4/3", FILES[0]], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 4
    assert "--shard '4/3': give K/N with 1 <= K <= N, e.g. --shard 1/3" in done.stderr


@pytest.mark.parametrize(("weights", "count", "groups"), [
    ([10, 6, 5, 1], 2, [0, 1, 1, 1]),  # the middles at 5, 13, 18.5, 21.5 of 22
    ([1, 1, 1, 1, 1, 1], 3, [0, 0, 1, 1, 2, 2]),
    ([30, 1, 1, 1], 2, [0, 1, 1, 1]),  # a heavy first test: the rest together
    ([0, 0], 2, [0, 1]),  # no weight at all: split by count
    ([30, 1, 1, 1], 4, [0, 1, 2, 3]),  # no group left empty (their middles: 1, 3, 3, 3)
    ([1, 1], 3, [0, 2]),  # fewer tests than groups: one must be empty
    ([1, 1, 1, 1, 30], 2, [0, 0, 0, 0, 1]),
    ([1, 1, 100], 3, [0, 1, 2]),  # their middles: 0, 0, 1
])
def test_tests_go_to_the_stretch_that_holds_their_middle(weights: list[float], count: int,
                                                         groups: list[int]) -> None:
    assert shard_of(weights, count) == groups


def test_a_file_of_many_slow_tests_is_split_where_a_stretch_ends() -> None:
    weights = [1.0] * 10 + [0.1] * 20  # one slow file, then a fast one
    groups = shard_of(weights, 2)
    assert groups[:5] == [0] * 5 and groups[10:] == [1] * 20 and 0 < groups.count(0) < 10 + 1


def test_file_weights_scale_measured_seconds_and_count_the_rest_at_the_mean() -> None:
    weights = file_weights({"a.py": 20, "b.py": 5, "c.py": 4},
                           {"a.py": [10.0, 10], "b.py": [2.0, 10]})
    assert weights == pytest.approx({"a.py": 20.0, "b.py": 1.0, "c.py": 4 * 12.0 / 20})
