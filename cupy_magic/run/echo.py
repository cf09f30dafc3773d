"""What a batched cell prints and does outside itself, once per batch.

A batched run runs the cell once per batch; a plain cell runs once. What the cell prints
can depend on no batch (the row check refuses a print of a batch's values), so every batch
prints the same: it is shown once, from the first batch, and of a later batch's output only
what differs (what follows the first batch's output, when it begins the same: a batch that
failed after printing it). What acts outside the cell (``hist.append(...)``,
``plt.plot(...)``, a log, a file: :func:`~.graphscan.outside_effect`) cannot be undone that
way; the report says it ran once per batch.
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["BatchEcho", "effect_note"]


class BatchEcho:
    """The output of a batched run's batches: the first shown, the same again dropped."""

    def __init__(self) -> None:
        self.first: tuple[str, str] | None = None
        self.dropped = 0  # batches whose output was the first's
        self.runs = 0  # times the cell ran (a batch run again on fewer rows counts again)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Run one batch with its ``stdout`` and ``stderr`` held; show them once it ends
        (also when it fails) unless they are the first batch's again."""
        out, err = io.StringIO(), io.StringIO()
        self.runs += 1
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                yield
        finally:
            text = (out.getvalue(), err.getvalue())
            first = self.first or ("", "")
            if any(text) and text == first:
                self.dropped += 1
            else:  # what differs from the first batch's: what follows the same beginning
                for stream, now, was in zip((sys.stdout, sys.stderr), text, first, strict=True):
                    stream.write(now[len(was):] if now.startswith(was) else now)
            if self.first is None:
                self.first = text

    def note(self) -> str:
        """The report's note when batches printed the same (``""`` when none did)."""
        if not self.dropped:
            return ""
        return (f"what the cell printed is shown once: {self.dropped + 1} batches printed "
                "the same, as one plain cell prints it")


def effect_note(effect: str, report: Any) -> str:
    """The report's note for a batched run (``report``, a :class:`~.report.RunReport` with
    its ``batch``) whose cell ``effect`` (a phrase of :func:`~.graphscan.outside_effect`),
    or ``""``: once per batch, and up to once more for each batch run again on fewer rows
    over the budget (which stopped where it went over: before or after the effect)."""
    batches, runs = report.batch.batches, report.batch_runs
    if not effect or batches < 2:
        return ""
    again = runs - batches  # run again, each up to the line that went over the budget
    times = f"{batches} times" + (f"; up to {again} more where a batch went over the budget "
                                  "and ran again on fewer rows" if again > 0 else "")
    return (f"the cell {effect}: a batched run did that once per batch ({times}), "
            "where a plain cell does it once (a list appended to, a figure drawn on, a line "
            "logged that many times); run it in a plain cell before or after this one, or "
            "run this one whole")
