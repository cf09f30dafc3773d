"""The panel's compact rows as HTML and text: one per visible device, one per cluster worker.

Pure formatting of a :class:`~cupy_magic.monitor.sampler.Sample`'s ``devices`` and
``workers``; a figure that was not read reads "N/A", with the reason where there is one.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from ..monitor.nvml import NA
from ..monitor.rows import DeviceRow, WorkerRow
from ..monitor.sampler import Sample
from ..theme import DIM, SELECTED
from .fmt import nbytes, num, pct, rate

__all__ = ["device_cells", "devices_html", "rows_lines", "worker_cells", "workers_html"]

DEVICE_HEADS = ("device", "VRAM used / total", "SM", "PCIe RX / TX", "pool used / held",
                "budget")
WORKER_HEADS = ("worker", "runs on", "memory used / total", "utilisation", "pool used",
                "budget")


def _text(value: Any) -> str:
    return "N/A" if value is NA or value is None else str(value)


def _used_of(used: Any, total: Any) -> str:
    share = pct(used, total)
    return f"{nbytes(used)} / {nbytes(total)}" + (f" ({share})" if share != "N/A" else "")


def device_cells(row: DeviceRow) -> tuple[str, ...]:
    """The figures of one device's row, in the order of :data:`DEVICE_HEADS`."""
    pool = (f"{nbytes(row.pool_used)} / {nbytes(row.pool_held)}" if not row.pool_note
            else row.pool_note)
    return (f"{row.device}: {_text(row.name)}", _used_of(row.used, row.total),
            num(row.util_gpu, "%"), f"{rate(row.pcie_rx)} / {rate(row.pcie_tx)}", pool,
            _text(row.budget))


def worker_cells(row: WorkerRow) -> tuple[str, ...]:
    """The figures of one worker's row, in the order of :data:`WORKER_HEADS`."""
    name = f"{row.name} ({row.address})" if row.name and row.name != row.address \
        else row.address
    if row.note:
        return (name, f"N/A ({row.note})", "N/A", "N/A", "N/A", _text(row.budget))
    unit = "CPU" if row.memory == "host" else "SM"
    where = f"{_text(row.device)} [{_text(row.backend)}]"
    memory = _used_of(row.used, row.total) + (" host" if row.memory == "host" else "")
    return (name, where, memory, num(row.util, f"% {unit}"), nbytes(row.pool_used),
            _text(row.budget))


_CELL = '<td style="padding:1px 8px;white-space:nowrap">{}</td>'
_HEAD = (f'<th style="padding:1px 8px;text-align:left;color:{DIM};font-weight:600;'
         'white-space:nowrap">{}</th>')
_SELECTED = f' class="cm-selected" style="background:{SELECTED};font-weight:600"'


def _table(title: str, heads: Sequence[str], rows: Sequence[tuple[Sequence[str], bool]],
           css: str) -> str:
    head = "".join(_HEAD.format(escape(h)) for h in heads)
    body = "".join(
        f'<tr{_SELECTED if mark else ""}>'
        + "".join(_CELL.format(escape(c)) for c in cells) + "</tr>"
        for cells, mark in rows)
    return (f'<div class="{css}" style="font-size:12px;margin:2px 0 6px 0">'
            f"<div><b>{escape(title)}</b></div>"
            f'<table style="border-collapse:collapse"><tr>{head}</tr>{body}</table></div>')


def devices_html(s: Sample) -> str:
    """A row per visible device (the detailed one marked); empty with fewer than two."""
    if len(s.devices) < 2:
        return ""
    rows = [(device_cells(r), r.device == s.device) for r in s.devices]
    return _table(f"{len(s.devices)} devices (details below: device {s.device})",
                  DEVICE_HEADS, rows, "cm-devices")


def workers_html(s: Sample) -> str:
    """A row per worker of the cluster in use, as the workers report; empty without one."""
    if s.workers is None:
        return ""
    n = len(s.workers)
    title = (f"cluster at {s.cluster or 'N/A'}: {n} worker{'s' * (n != 1)}, "
             "figures read on each worker")
    return _table(title, WORKER_HEADS, [(worker_cells(r), False) for r in s.workers],
                  "cm-workers")


def _labelled(cells: Sequence[str], heads: Sequence[str]) -> str:
    return "; ".join([cells[0], *(f"{h} {c}" for h, c in zip(heads[1:], cells[1:],
                                                              strict=True))])


def rows_lines(s: Sample) -> dict[str, str]:
    """The rows as labelled text lines, for the one-shot summary."""
    lines: dict[str, str] = {}
    if len(s.devices) > 1:
        for r in s.devices:
            lines[f"device {r.device}"] = _labelled(device_cells(r), DEVICE_HEADS)
    if s.workers is not None:
        lines["cluster"] = f"{s.cluster or 'N/A'}, {len(s.workers)} worker(s)"
        for r in s.workers:
            lines[f"worker {r.name or r.address}"] = _labelled(worker_cells(r), WORKER_HEADS)
    return lines
