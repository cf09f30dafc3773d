"""``get_ipython()`` inside a ``%%gpu`` cell: magics the cell runs see the cell's names (less
the cell's own stand-ins, which ``%who`` does not list);
which of its expression statements the cell shows, as the shell says; and the cell as the
shell transforms it (``%magics``, ``!cmd``, ``x?``), as a plain cell's."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from ..compat.proxy import ArrayModule

__all__ = ["magics_see_the_cell", "shown", "transformed"]

# Cells of several lines the shell transformed, by the shell, the cell and its transformers
_TRANSFORMED: dict[tuple[Any, ...], str] = {}
_TRANSFORMED_KEPT = 64


class _CellShell:
    """What ``get_ipython()`` returns inside a ``%%gpu`` cell: the shell, except that a line
    or cell magic the cell runs (``%timeit np.power(x, 3)``) sees the cell's names, its
    device copies and ``np`` meaning CuPy, rather than the user's NumPy arrays."""

    def __init__(self, shell: Any) -> None:
        self._shell = shell
        self._getter: Any = None  # the cell's get_ipython, which returns this

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shell, name)

    def _cell_ns(self, depth: int) -> dict[str, Any] | None:
        """The globals of the frame ``depth`` up from the caller if they are the cell's
        namespace (its ``get_ipython`` is this shell's): the cell's code or a function over
        it asks; ``None`` for another (a library handed the shell)."""
        here = sys._getframe(depth + 1).f_globals
        return here if here.get("get_ipython") is self._getter else None

    def _in_cell(self, method: str, *args: Any, **kwargs: Any) -> Any:
        cell_ns = self._cell_ns(2)  # the cell's code calls get_ipython().method
        if cell_ns is None:  # elsewhere: the shell as it is, on the user namespace
            return getattr(self._shell, method)(*args, **kwargs)
        saved, hidden = self._shell.user_ns, self._shell.user_ns_hidden
        self._shell.user_ns = cell_ns
        self._shell.user_ns_hidden = {**hidden, **_stand_ins(cell_ns, saved)}
        try:
            return getattr(self._shell, method)(*args, **kwargs)
        finally:
            self._shell.user_ns, self._shell.user_ns_hidden = saved, hidden

    def run_line_magic(self, name: str, line: str, _stack_depth: int = 1) -> Any:
        return self._in_cell("run_line_magic", name, line, _stack_depth + 2)

    def run_cell_magic(self, name: str, line: str, cell: str) -> Any:
        return self._in_cell("run_cell_magic", name, line, cell)

    # what a plain cell runs in its own namespace through the shell, this one runs in the
    # cell's: its names are there, and what it binds is committed with the cell (or dropped)
    def ex(self, cmd: str) -> Any:
        return self._in_cell("ex", cmd)

    def ev(self, expr: str) -> Any:
        return self._in_cell("ev", expr)

    def run_cell(self, *args: Any, **kwargs: Any) -> Any:
        return self._in_cell("run_cell", *args, **kwargs)

    @property
    def user_ns(self) -> dict[str, Any]:
        """The cell's namespace where the cell's code (or a function running over it) asks,
        as a plain cell's ``get_ipython().user_ns`` is the namespace it runs in; the user
        namespace elsewhere (a library handed this shell)."""
        cell_ns = self._cell_ns(1)
        return self._shell.user_ns if cell_ns is None else cell_ns


def _stand_ins(cell_ns: dict[str, Any], user_ns: dict[str, Any]) -> dict[str, Any]:
    """The names the cell has that a plain cell would not list (``%who``, ``%whos``): its
    ``get_ipython``, and ``cp`` where only the cell has it (the array module)."""
    found = {"get_ipython": cell_ns.get("get_ipython")}
    if "cp" not in user_ns and isinstance(cell_ns.get("cp"), ArrayModule):
        found["cp"] = cell_ns["cp"]
    return found


@contextlib.contextmanager
def magics_see_the_cell(shell: Any) -> Iterator[None]:
    """Point the cell's ``get_ipython`` at a :class:`_CellShell` while the cell runs."""
    had = "get_ipython" in shell.user_ns
    saved = shell.user_ns.get("get_ipython")
    proxy = _CellShell(shell)
    shell.user_ns["get_ipython"] = proxy._getter = lambda: proxy
    try:
        yield
    finally:
        if had:
            shell.user_ns["get_ipython"] = saved
        else:
            shell.user_ns.pop("get_ipython", None)


def shown(shell: Any, running: Any) -> str:
    """Which expression statements' values the running cell shows: the shell's
    ``ast_node_interactivity``, or ``"none"`` for a silent cell (``running`` is IPython's
    ``ExecutionResult`` of the cell, ``None`` outside one)."""
    info = getattr(running, "info", None)
    return "none" if getattr(info, "silent", False) else str(shell.ast_node_interactivity)


def transformed(shell: Any, cell: str) -> str:
    """``shell.transform_cell(cell)``: ``%magics``, ``!cmd`` and ``x?`` as in a plain cell.

    A cell of several lines run again (a loop of runs, a notebook run twice) gets the text
    the shell gave the last time: the same text through the same transformers, which read
    only the text (IPython's transforms that read the user's names, autocall and the
    like, apply to a one-line cell alone, which is transformed each time, as are all cells
    where the shell has post-transformers). Transforming took 60-120 us a cell of a few
    lines, each run (``benchmarks/cell_overhead.py``'s magic row).
    """
    manager = shell.input_transformer_manager
    try:
        key = (shell, cell, *(tuple(getattr(manager, name)) for name in (
            "cleanup_transforms", "line_transforms", "token_transformers")))
        known = _TRANSFORMED.get(key)
    except (AttributeError, TypeError):  # another IPython's manager, a transform not hashable
        return shell.transform_cell(cell)
    if known is not None:
        return known
    source = shell.transform_cell(cell)
    if len(cell.splitlines()) > 1 and len(source.splitlines()) > 1 \
            and not shell.input_transformers_post:
        if len(_TRANSFORMED) >= _TRANSFORMED_KEPT:
            _TRANSFORMED.pop(next(iter(_TRANSFORMED)))
        _TRANSFORMED[key] = source
    return source
