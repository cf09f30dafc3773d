"""Whether the shards of one ``scripts/gpu-check`` run are, together, a green run.

A full run of the tests on the GPU takes longer than one device call; ``GPU_CHECK_SHARD=K/N``
runs the K-th of N groups of whole test files (``pytest --shard``) and the notebooks with
``N/N``. Each shard's ``gpu-check.json`` records its shard, what it selected and a digest of
the code it ran. This reads the shards' folders and says whether they are one run of the same
code, every shard there once, each green; it prints the counts summed and exits 0 only then::

    python3 scripts/gpu_check_shards.py build/gc1 build/gc2 build/gc3

``--times DIR...`` instead records each test file's seconds on the GPU from the folders'
``junit.xml`` into ``tests/gpu-times.json``, by which ``--shard`` balances the groups (a file
cut between two shards: its tests' seconds summed; a test in several folders: the last
one given wins)::

    python3 scripts/gpu_check_shards.py --times build/gc1 build/gc2 build/gc3
"""

from __future__ import annotations

import hashlib
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

# what a test run's outcome rests on (the notebooks are left out: --inplace rewrites them)
CODE = ("cupy_magic", "tests", "scripts", "benchmarks", "jupyter-config")
COUNTS = ("passed", "failure", "error", "skipped")


def code_digest(root: str | Path) -> str:
    """SHA-256 of the package, tests, scripts, benchmarks, jupyter-config and pyproject.toml
    under ``root`` (paths and bytes, in path order; caches and benchmark results left out),
    first 16 hex digits."""
    root = Path(root)
    paths = [root / "pyproject.toml"]
    for top in CODE:
        paths += [p for p in (root / top).rglob("*") if p.is_file()
                  and not {"__pycache__", "results"} & set(p.relative_to(root).parts)
                  and p.suffix != ".pyc"]
    digest = hashlib.sha256()
    for path in sorted(paths, key=lambda p: p.relative_to(root).as_posix()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def combine(summaries: list[dict]) -> tuple[bool, list[str]]:
    """Whether ``summaries`` (each a ``gpu-check.json``) make one green run, with the lines
    that say why or why not."""
    lines: list[str] = []
    shards = [s.get("shard", "1/1") for s in summaries]
    counts = {s.partition("/")[2] for s in shards}
    want = {f"{k}/{n}" for n in counts for k in range(1, int(n) + 1)} if len(counts) == 1 else set()
    if len(counts) != 1 or sorted(shards) != sorted(want):
        lines.append(f"shards {', '.join(shards)}: not one run (want each of "
                     f"{', '.join(sorted(want)) or 'K/N with one N'} once)")
    for key in ("code", "selection", "gpu"):
        seen = {json.dumps(s.get(key), sort_keys=True) for s in summaries}
        if len(seen) != 1:
            lines.append(f"the shards differ in {key}: {', '.join(sorted(seen))}")
    for shard, s in zip(shards, summaries, strict=True):
        if not s.get("ok"):
            failed = s.get("failed") or []
            lines.append(f"shard {shard} not green: {len(failed)} failed"
                         + (f" ({', '.join(failed[:5])}{' ...' if len(failed) > 5 else ''})"
                            if failed else " (interrupted, or a notebook failed)"))
    total = {c: sum(s.get("tests", {}).get(c, 0) for s in summaries) for c in COUNTS}
    gpu = {c: sum(s.get("gpu_tests", {}).get(c, 0) for s in summaries) for c in COUNTS}
    if summaries and not gpu["passed"]:
        lines.append("no gpu test passed: not a check on the GPU")
    green = not lines
    lines.insert(0, f"{'green' if green else 'NOT green'}: {len(summaries)} shard(s), tests "
                 + ", ".join(f"{v} {k}" for k, v in total.items())
                 + "; gpu tests " + ", ".join(f"{v} {k}" for k, v in gpu.items())
                 + f"; code {summaries[0].get('code') if summaries else '-'}")
    return green, lines


def case_times(junit: str | Path) -> dict[tuple[str, str], float]:
    """Seconds of each test in a pytest ``junit.xml``, keyed by its file (``tests/x.py``)
    and its name; a test interrupted by the run's timeout is not in it, nor its time."""
    times: dict[tuple[str, str], float] = {}
    for case in ET.parse(junit).iter("testcase"):
        name = case.get("classname")
        if not name:
            continue
        parts = name.split(".")
        while len(parts) > 1 and parts[-1][:1].isupper():  # a test class: TestThat
            parts.pop()
        times["/".join(parts) + ".py", f"{name}::{case.get('name')}"] = \
            float(case.get("time") or 0)
    return times


def file_times(junits: list[Path]) -> dict[str, list[float]]:
    """Seconds and tests per test file over ``junits``: the shards of one run, where a file
    cut by a shard's end is in two of them (its tests summed); a test in several (a run
    again) counts once, as the last one gives it."""
    cases: dict[tuple[str, str], float] = {}
    for junit in junits:
        cases.update(case_times(junit))
    times: dict[str, list[float]] = {}
    for (path, _), seconds in cases.items():
        entry = times.setdefault(path, [0.0, 0])
        entry[0] = round(entry[0] + seconds, 3)
        entry[1] += 1
    return times


def record_times(folders: list[str], into: Path) -> dict[str, list[float]]:
    """Merge the folders' ``junit.xml`` times into ``into`` (kept: files none of them ran)."""
    kept = json.loads(into.read_text())["seconds"] if into.is_file() else {}
    kept.update(file_times([Path(folder) / "junit.xml" for folder in folders]))
    rows = ",\n".join(f"  {json.dumps(f)}: {json.dumps(v)}" for f, v in sorted(kept.items()))
    about = ("seconds and tests of each test file in a scripts/gpu-check run on the GPU "
             "(scripts/gpu_check_shards.py --times); --shard balances its groups by them")
    into.write_text(f'{{\n "about": {json.dumps(about)},\n "seconds": {{\n{rows}\n }}\n}}\n')
    return kept


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--times":
        missing = [f for f in argv[1:] if not (Path(f) / "junit.xml").is_file()]
        if len(argv) < 2 or missing:
            print(f"--times: no junit.xml in {', '.join(missing) or '(no folder given)'}; give "
                  "the folders gpu-check wrote", file=sys.stderr)
            return 2
        into = Path(__file__).resolve().parents[1] / "tests" / "gpu-times.json"
        kept = record_times(argv[1:], into)
        print(f"{into}: {len(kept)} files, {sum(t for t, _ in kept.values()):.0f} s")
        return 0
    if not argv:
        print("usage: python3 scripts/gpu_check_shards.py DIR... (each with a gpu-check.json)",
              file=sys.stderr)
        return 2
    summaries = []
    for folder in argv:
        path = Path(folder) / "gpu-check.json"
        if not path.is_file():
            print(f"{path}: no such file; give the folders gpu-check wrote ($OUT of each call)",
                  file=sys.stderr)
            return 2
        summaries.append(json.loads(path.read_text()))
    green, lines = combine(summaries)
    print("\n".join(lines))
    return 0 if green else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
