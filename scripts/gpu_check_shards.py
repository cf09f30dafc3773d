"""Whether the shards of one ``scripts/gpu-check`` run are, together, a green run.

A full run of the tests on the GPU takes longer than one device call; ``GPU_CHECK_SHARD=K/N``
runs the K-th of N groups of whole test files (``pytest --shard``) and the notebooks with
``N/N``. Each shard's ``gpu-check.json`` records its shard, what it selected and a digest of
the code it ran. This reads the shards' folders and says whether they are one run of the same
code, every shard there once, each green; it prints the counts summed and exits 0 only then::

    python3 scripts/gpu_check_shards.py build/gc1 build/gc2 build/gc3
"""

from __future__ import annotations

import hashlib
import json
import sys
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


def main(argv: list[str]) -> int:
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
