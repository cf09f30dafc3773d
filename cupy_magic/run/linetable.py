"""The ``%%gpu --lines`` table as text, with the hottest line marked and what to try for it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..units import format_bytes
from .lines import LineStat

__all__ = ["hot_advice", "table_lines"]

_LOOP = 100  # runs of a line above which its cost is that of a Python loop over the device
_CODE_WIDTH = 48


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:,.2f}"


def _moved(row: LineStat, on_host: bool) -> str:
    if on_host:
        return "-"
    if not row.bytes_moved:
        return "0"
    return f"{format_bytes(row.bytes_moved)} {row.transfer_s * 1e3:,.1f}ms"


def _syncs(row: LineStat) -> str:
    if row.syncs is None:
        return "-"
    wait = f" ({row.wait_s * 1e3:,.1f}ms)" if row.wait_s else ""
    return f"{row.syncs:,}{wait}"


def hot_advice(row: LineStat, syncs: Iterable[Any], on_host: bool) -> str:
    """What to try for the hottest line: the sync record's fix for a line that makes the host
    wait, the transfer rule for a line that copies, or what its figures point to."""
    fix = next((s.findings[0].fix for s in syncs if s.line == row.line and s.findings), "")
    if fix and (row.syncs or on_host):
        return f"it makes the host wait for the GPU; instead: {fix}"
    if row.bytes_moved and row.transfer_s >= 0.5 * row.seconds:
        return (f"it copies {format_bytes(row.bytes_moved)} between host and device; keep "
                "arrays on the device across lines and cells, and bring results back once "
                "(--to-host, or one cp.asnumpy(x) after the loop)")
    if row.compile_s and row.compile_s >= 0.5 * (row.host_s or row.compile_s):
        return ("its time is kernel compiling: CuPy keeps the kernels in its cache, so a "
                "second run is faster; --warmup compiles before the timed run")
    if row.count >= _LOOP:
        return (f"it ran {row.count:,} times: a Python loop launches one small operation per "
                "iteration; write it as one array operation over all of them")
    where = "CPU" if on_host else "GPU"
    return (f"its own {where} time (no sync, copy or compile on it): if it computes, use "
            "float32 where the precision allows (--dtype float32), fewer temporaries, or a "
            "fused kernel (a function of whole-array expressions under @cp.fuse, which runs "
            "as plain NumPy on the CPU fallback)")


def table_lines(rows: list[LineStat], syncs: Iterable[Any], on_host: bool) -> list[str]:
    """The table: one row per line that ran, the hottest marked ``*``, then its advice."""
    if not rows:
        return ["no line of the cell ran"]
    syncs = list(syncs)
    what = ("host time per line (CPU fallback: no GPU time, no PCIe, no sync record)"
            if on_host else "GPU time per line from CUDA events at each line, less kernel "
            "builds")
    out = [f"{what}; share of the cell's {'CPU' if on_host else 'GPU'} time",
           f"  {'line':>5} {'runs':>8} {'GPU ms':>10} {'host ms':>10} {'moved':>18} "
           f"{'syncs (wait)':>16} {'compile ms':>10} {'share':>6}  code"]
    hot = max(rows, key=lambda r: r.seconds)
    for r in rows:
        code = r.code if len(r.code) <= _CODE_WIDTH else r.code[:_CODE_WIDTH - 3] + "..."
        fallbacks = f" [{r.fallbacks:,} NumPy fallbacks]" if r.fallbacks else ""
        out.append(f"{'*' if r is hot else ' '} {r.line:>5} {r.count:>8,} {_ms(r.gpu_s):>10} "
                   f"{_ms(r.host_s):>10} {_moved(r, on_host):>18} {_syncs(r):>16} "
                   f"{'-' if on_host else _ms(r.compile_s):>10} {r.share:>6.0%}  {code}{fallbacks}")
    out.append(f"* hottest: line {hot.line} `{hot.code}` ({hot.share:.0%}): "
               f"{hot_advice(hot, syncs, on_host)}")
    return out
