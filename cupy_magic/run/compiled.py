"""A cell's code objects, compiled once per text and compiler flags (issue 20).

A notebook runs the same cell text again and again (a loop of edits, a benchmark, a
workshop's re-run); parsing and compiling it took about 30 microseconds of a tiny cell's
fixed cost on the CPU, twice (the whole cell, then its body without the last expression),
every run. Each run gets its own file name (``<gpu-cell-N>``: tracebacks, the sync and
compile records and the line table find the cell's frames by it), so a kept code object is
handed out renamed, its nested functions too. A compiler (IPython's ``shell.compile``)
remembers the ``from __future__`` imports it compiles; a kept cell's future flags are added
to it as compiling would have.
"""

from __future__ import annotations
import __future__

import ast
import codeop
import warnings
from collections import OrderedDict
from dataclasses import dataclass, replace
from types import CodeType

__all__ = ["CompiledCell", "compile_cell"]

_KEEP = 128  # cell texts kept, the least recently run dropped first
_FEATURES = tuple(getattr(__future__, name) for name in __future__.all_feature_names)
_KEPT: OrderedDict[tuple[str, int, type], CompiledCell] = OrderedDict()


@dataclass(frozen=True)
class CompiledCell:
    """The cell's code, and its body and last expression apart when it ends with one.

    Parameters
    ----------
    code
        The whole cell.
    body, last
        The cell without its last expression statement and that expression (``"eval"``
        mode), as IPython's ``last_expr`` runs a cell; ``None`` when the cell ends with a
        statement or its result is not shown.
    """

    code: CodeType
    body: CodeType | None
    last: CodeType | None

    def renamed(self, filename: str) -> CompiledCell:
        """The same code objects under ``filename`` (nested code objects too)."""
        return CompiledCell(_renamed(self.code, filename),
                            None if self.body is None else _renamed(self.body, filename),
                            None if self.last is None else _renamed(self.last, filename))


def _renamed(code: CodeType, filename: str) -> CodeType:
    if code.co_filename == filename:
        return code
    consts = tuple(_renamed(c, filename) if isinstance(c, CodeType) else c
                   for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _split(tree: ast.Module, filename: str,
           compiler: codeop.Compile) -> tuple[CodeType | None, CodeType | None]:
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return None, None
    body = ast.Module(body=tree.body[:-1], type_ignores=[])
    last = ast.Expression(body=tree.body[-1].value)
    return compiler(body, filename, "exec"), compiler(last, filename, "eval")


def _compiled(source: str, filename: str, compiler: codeop.Compile) -> CompiledCell:
    tree = ast.parse(source, filename, "exec")
    code = compiler(tree, filename, "exec")
    body, last = _split(tree, filename, compiler)  # kept for a run that shows it
    return CompiledCell(code, body, last)


def compile_cell(source: str, filename: str, compiler: codeop.Compile,
                 split: bool) -> CompiledCell:
    """Compile ``source`` as ``filename`` with ``compiler`` (its flags, and the flags the
    cell's future imports add to it afterwards), from the kept code when the same text ran
    under the same flags before.

    ``split``: compile the body and the last expression apart too (the cell shows its last
    expression's value). A syntax error is raised as compiling raises it, and nothing is kept;
    nor is a text whose compiling warns (each run warns again, as a plain cell's does).
    """
    key = (source, compiler.flags, type(compiler))
    kept = _KEPT.get(key)
    if kept is not None:
        _KEPT.move_to_end(key)
        for feature in _FEATURES:  # what compiling would have left in the compiler
            if kept.code.co_flags & feature.compiler_flag:
                compiler.flags |= feature.compiler_flag
        cell = kept.renamed(filename)
    else:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cell = _compiled(source, filename, compiler)
        if caught:  # compiled again under the user's filters, and not kept, so that every
            # run warns (SyntaxWarning, DeprecationWarning) as a plain cell's does
            cell = _compiled(source, filename, compiler)
        else:
            _KEPT[key] = cell
            if len(_KEPT) > _KEEP:
                _KEPT.popitem(last=False)
    return cell if split else replace(cell, body=None, last=None)
