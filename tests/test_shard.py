"""``--shard K/N`` (tests/conftest.py): whole files, every test in exactly one group."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import shard_of

ROOT = Path(__file__).resolve().parents[1]
FILES = ["tests/test_units.py", "tests/test_source.py", "tests/test_config.py"]


def _collected(*extra: str) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
         *extra, *FILES], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.returncode, [line for line in done.stdout.splitlines() if "::" in line]


def test_the_shards_split_whole_files_and_together_are_the_whole_run() -> None:
    rc, whole = _collected()
    assert rc == 0 and whole
    shards = [_collected("--shard", f"{k}/3")[1] for k in (1, 2, 3)]
    assert sorted(t for shard in shards for t in shard) == sorted(whole)
    files = [{t.split("::")[0] for t in s} for s in shards]
    assert all(files) and not files[0] & files[1] and not files[1] & files[2] \
        and not files[0] & files[2]


def test_a_shard_out_of_range_is_a_one_line_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
         "--shard", "4/3", FILES[0]], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 4
    assert "--shard '4/3': give K/N with 1 <= K <= N, e.g. --shard 1/3" in done.stderr


@pytest.mark.parametrize(("files", "count", "groups"), [
    ({"a": 10, "b": 6, "c": 5, "d": 1}, 2, {"a": 0, "b": 1, "c": 1, "d": 0}),
    ({"a": 3, "b": 3}, 3, {"a": 0, "b": 1}),
])
def test_files_go_largest_first_to_the_smallest_group(files: dict[str, int], count: int,
                                                      groups: dict[str, int]) -> None:
    assert shard_of(files, count) == groups
