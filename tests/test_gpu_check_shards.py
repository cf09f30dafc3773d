"""scripts/gpu_check_shards.py: shards of one gpu-check run, judged together."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from gpu_check_shards import code_digest, combine  # noqa: E402


def _shard(k: int, n: int, ok: bool = True, code: str = "abc", failed: list[str] | None = None,
           tests: str = "all", gpu: str = "NVIDIA H200", gpu_passed: int = 1) -> dict:
    return {"shard": f"{k}/{n}", "ok": ok, "code": code, "failed": failed or [], "gpu": gpu,
            "selection": {"tests": tests, "gpu_only": False},
            "tests": {"passed": 10 * k, "failure": len(failed or []), "error": 0, "skipped": 1},
            "gpu_tests": {"passed": k * gpu_passed, "failure": 0, "error": 0, "skipped": 0}}


def test_every_shard_of_the_same_code_green_is_a_green_run() -> None:
    green, lines = combine([_shard(2, 3), _shard(1, 3), _shard(3, 3)])
    assert green
    assert lines == ["green: 3 shard(s), tests 60 passed, 0 failure, 0 error, 3 skipped; "
                     "gpu tests 6 passed, 0 failure, 0 error, 0 skipped; code abc"]


@pytest.mark.parametrize(("shards", "why"), [
    ([_shard(1, 3), _shard(3, 3)],
     "shards 1/3, 3/3: not one run (want each of 1/3, 2/3, 3/3 once)"),
    ([_shard(1, 2), _shard(1, 2), _shard(2, 2)], "shards 1/2, 1/2, 2/2: not one run"),
    ([_shard(1, 2), _shard(2, 3)], "shards 1/2, 2/3: not one run (want each of K/N with one N"),
    ([_shard(1, 2), _shard(2, 2, code="def")], 'the shards differ in code: "abc", "def"'),
    ([_shard(1, 2), _shard(2, 2, tests="tests/run")], "the shards differ in selection"),
    ([_shard(1, 2), _shard(2, 2, ok=False, failed=["t::a", "t::b"])],
     "shard 2/2 not green: 2 failed (t::a, t::b)"),
    ([_shard(1, 1, ok=False)], "shard 1/1 not green: 0 failed (interrupted, or a notebook failed)"),
    ([_shard(1, 2), _shard(2, 2, gpu="NVIDIA H100")], "the shards differ in gpu"),
    ([_shard(1, 1, gpu_passed=0)], "no gpu test passed: not a check on the GPU"),
])
def test_a_missing_repeated_foreign_or_red_shard_is_not_green(shards: list[dict], why: str) -> None:
    green, lines = combine(shards)
    assert not green
    assert lines[0].startswith("NOT green")
    assert any(line.startswith(why) for line in lines[1:]), lines


def test_the_code_digest_follows_the_code_and_not_caches_or_results(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    (tmp_path / "cupy_magic").mkdir()
    (tmp_path / "cupy_magic" / "a.py").write_text("x = 1\n")
    first = code_digest(tmp_path)
    (tmp_path / "cupy_magic" / "__pycache__").mkdir()
    (tmp_path / "cupy_magic" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "r.md").write_text("1 GB/s\n")
    assert code_digest(tmp_path) == first
    (tmp_path / "cupy_magic" / "a.py").write_text("x = 2\n")
    assert code_digest(tmp_path) != first


def test_the_command_line_reads_the_folders_and_exits_by_the_verdict(tmp_path: Path) -> None:
    for k, ok in ((1, True), (2, False)):
        (tmp_path / f"gc{k}").mkdir()
        (tmp_path / f"gc{k}" / "gpu-check.json").write_text(json.dumps(_shard(k, 2, ok=ok)))
    run = [sys.executable, str(ROOT / "scripts" / "gpu_check_shards.py")]
    done = subprocess.run([*run, str(tmp_path / "gc1")], capture_output=True, text=True)
    assert done.returncode == 1 and "shards 1/2: not one run" in done.stdout
    done = subprocess.run([*run, str(tmp_path / "gc1"), str(tmp_path / "gc2")],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "shard 2/2 not green" in done.stdout
    (tmp_path / "gc2" / "gpu-check.json").write_text(json.dumps(_shard(2, 2)))
    done = subprocess.run([*run, str(tmp_path / "gc1"), str(tmp_path / "gc2")],
                          capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("green: 2 shard(s)")
    done = subprocess.run([*run, str(tmp_path / "nowhere")], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"{tmp_path / 'nowhere' / 'gpu-check.json'}: no such file; "
                                   "give the folders gpu-check wrote ($OUT of each call)")


def test_times_are_recorded_per_file_from_a_real_junit_and_merged(tmp_path: Path) -> None:
    from gpu_check_shards import record_times

    run = tmp_path / "gc1"
    run.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"--junitxml={run / 'junit.xml'}", "tests/test_units.py", "tests/test_source.py"],
        cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-2000:]
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
         "tests/test_units.py"], cwd=ROOT, capture_output=True, text=True, check=False)
    units = sum("::" in line for line in collected.stdout.splitlines())
    into = tmp_path / "gpu-times.json"
    into.write_text(json.dumps({"seconds": {"tests/old.py": [5.0, 2],
                                            "tests/test_source.py": [99.0, 1]}}))
    kept = record_times([str(run)], into)
    assert kept["tests/test_units.py"][1] == units > 0
    assert kept["tests/test_source.py"][1] > 1  # this run's figure replaced the old one
    assert kept["tests/old.py"] == [5.0, 2]  # a file this run left out is kept
    assert json.loads(into.read_text())["seconds"] == kept


def test_a_file_cut_between_two_shards_counts_the_tests_of_both(tmp_path: Path) -> None:
    """Shards end inside files: each half's tests are in its own junit.xml, and the file's
    figure is their sum (it was the last folder's half alone); a test in both counts once."""
    from gpu_check_shards import record_times

    def junit(folder: str, cases: list[tuple[str, float]]) -> str:
        (tmp_path / folder).mkdir()
        rows = "".join(f'<testcase classname="tests.run.test_x" name="{n}" time="{t}"/>'
                       for n, t in cases)
        (tmp_path / folder / "junit.xml").write_text(
            f'<testsuites><testsuite name="pytest">{rows}</testsuite></testsuites>')
        return str(tmp_path / folder)

    first = junit("gc1", [("test_a", 1.5), ("test_b", 2.0)])
    second = junit("gc2", [("test_c", 4.0), ("test_b", 3.0)])  # test_b again: its last time
    kept = record_times([first, second], tmp_path / "gpu-times.json")
    assert kept == {"tests/run/test_x.py": [8.5, 3]}
