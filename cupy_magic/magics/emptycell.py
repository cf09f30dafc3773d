"""A notebook cell holding only ``%%gpu`` runs as an empty plain cell does, instead of
stopping Run All.

IPython refuses a cell magic whose body is empty before the magic is called
(``run_cell_magic``: "UsageError: %%gpu is a cell magic, but the cell body is empty"),
whereas an empty plain cell runs and does nothing. An input transformer, registered at load
and removed at unload, gives such a cell an empty line as its body, so that ``%%gpu``'s own
note for a blank body is shown ("the %%gpu cell is empty; nothing ran"). It changes only a
cell that is the ``%%gpu`` line alone: no other magic, no cell with a body, not ``%%gpu?``;
and not IPython's test of whether a cell is complete (``has_side_effects``), so a terminal
still waits for the body after ``%%gpu``.
"""

from __future__ import annotations

import re
from typing import Any

from .. import lifecycle

__all__ = ["give_empty_cells_a_body", "with_a_body"]

_ALONE = re.compile(r"%%gpu(?:[ \t][^\n]*)?\n?\Z")


def with_a_body(lines: list[str]) -> list[str]:
    """The cell's lines, with an empty line after a ``%%gpu`` line that is all of them."""
    if len(lines) == 1 and _ALONE.match(lines[0]):
        return [lines[0].rstrip("\n") + "\n", "\n"]
    return lines


with_a_body.has_side_effects = True  # type: ignore[attr-defined]  # check_complete skips it


def give_empty_cells_a_body(shell: Any) -> None:
    """Add :func:`with_a_body` to ``shell``'s cleanup transformers; removed at unload."""
    transforms = shell.input_transformers_cleanup
    if with_a_body in transforms:
        return
    transforms.append(with_a_body)

    def remove() -> None:
        if with_a_body in shell.input_transformers_cleanup:
            shell.input_transformers_cleanup.remove(with_a_body)

    lifecycle.on_unload(remove)
