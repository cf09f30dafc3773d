"""How a benchmark records its results: the one owner of the results folder, the time stamp in
the file names, writing ``<name>.json`` (and ``.md``), the GPU's name and the Python version.

The benchmarks are scripts (``python3 benchmarks/x.py``), so ``benchmarks/`` is the first
entry of ``sys.path`` and they import this module as ``_results``. File names and JSON keys
are read by ``scripts/gpu-check`` and ``benchmarks/README.md``: each script still picks its own
name (``stream-<date>``, ``peer-<stamp>-host``, ...); this module only writes it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
"""Where results go when ``--out`` is not given (``benchmarks/results``)."""

MINUTE = "%Y-%m-%dT%H%M"
"""The stamp most results are named by: ``2026-12-04T1301``."""

DAY = "%Y-%m-%d"
"""The stamp of the results kept one a day (``stream-``, ``first-touch-``, ...)."""


def stamp(fmt: str = MINUTE) -> str:
    """The time now in UTC, formatted for a result's file name.

    Parameters
    ----------
    fmt : str
        A ``strftime`` format: ``MINUTE`` (the default), ``DAY`` or the script's own.

    Returns
    -------
    str
        The stamp, e.g. ``2026-12-04T1301``.
    """
    return dt.datetime.now(dt.timezone.utc).strftime(fmt)


def when() -> str:
    """The time now in UTC as ISO 8601 to the second, for a record's date field.

    Returns
    -------
    str
        E.g. ``2026-12-04T13:01:07+00:00``.
    """
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def python() -> str:
    """The Python version a record's ``python`` field holds.

    Returns
    -------
    str
        ``platform.python_version()``, e.g. ``3.12.3``.
    """
    return platform.python_version()


def host() -> str:
    """The machine's name a record's ``host`` field holds.

    Returns
    -------
    str
        ``platform.node()``.
    """
    return platform.node()


def gpu_name(device: int = 0) -> str:
    """The name of a CUDA device as CuPy's runtime reports it (a GPU must be there).

    Parameters
    ----------
    device : int
        The device's number.

    Returns
    -------
    str
        E.g. ``NVIDIA H200``.
    """
    import cupy

    return str(cupy.cuda.runtime.getDeviceProperties(device)["name"].decode())


def add_out(parser: argparse.ArgumentParser, default: str | Path = RESULTS) -> None:
    """Give a benchmark's parser its ``--out`` folder.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The benchmark's parser.
    default : str or Path
        The folder when ``--out`` is not given (``RESULTS`` unless the script says otherwise).
    """
    parser.add_argument("--out", default=str(default),
                        help=f"folder for the results (default {default})")


def write(out: str | Path, name: str, record: dict[str, Any],
          markdown: str | None = None) -> Path:
    """Write ``<out>/<name>.json`` (and ``<name>.md``), making the folder, and say so.

    Parameters
    ----------
    out : str or Path
        The folder (made with its parents if missing).
    name : str
        The file name without its suffix, e.g. ``f"peer-{stamp()}-host"``.
    record : dict
        The figures; values JSON cannot hold are written as their ``str``.
    markdown : str, optional
        The Markdown table written next to it as ``<name>.md``.

    Returns
    -------
    Path
        The JSON file's path.
    """
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(record, indent=1, default=str) + "\n", encoding="utf-8")
    if markdown is None:
        print(f"wrote {path}")
    else:
        (folder / f"{name}.md").write_text(markdown.rstrip("\n") + "\n", encoding="utf-8")
        print(f"wrote {folder / name}.json and .md")
    return path
