"""A cell's code objects, compiled once per text and compiler flags (issue 20).

A notebook runs the same cell text again and again (a loop of edits, a benchmark, a
workshop's re-run); parsing and compiling it took about 30 microseconds of a tiny cell's
fixed cost on the CPU, twice (the whole cell, then its body without the last expression),
every run. Each run gets its own file name (``<gpu-cell-N>``: tracebacks, the sync and
compile records and the line table find the cell's frames by it), so a kept code object is
handed out renamed, its nested functions too. A compiler (IPython's ``shell.compile``)
remembers the ``from __future__`` imports it compiles; a kept cell's future flags are added
to it as compiling would have.

Compiling also rewrites the places where CuPy gives a view and NumPy a copy (``v.ravel()``,
a kept ``x[i]``: :mod:`.rewrite`).
"""

from __future__ import annotations
import __future__

import ast
import codeop
import contextlib
import functools
import io
import tokenize
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from types import CodeType
from typing import Any

from .rewrite import device_semantics

__all__ = ["SHOWS", "CompiledCell", "Transform", "compile_cell", "ends_quiet"]

# IPython's ast_node_interactivity values: which expression statements a cell shows
SHOWS = ("last_expr", "last_expr_or_assign", "last", "all", "none")
_KEEP = 128  # cell texts kept, the least recently run dropped first
_FEATURES = tuple(getattr(__future__, name) for name in __future__.all_feature_names)
Transform = Callable[[ast.Module], ast.Module]
_KEPT: OrderedDict[tuple[str, int, type, str], CompiledCell] = OrderedDict()


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
        statement or its result is not shown. Under other ``shows`` modes ``body`` may be
        ``None`` and ``last`` a ``"single"`` mode code object that shows its expressions
        through ``sys.displayhook`` (:func:`_split`).
    displays
        Whether a part hands values to ``sys.displayhook`` as it runs (``"single"`` mode).
    """

    code: CodeType
    body: CodeType | None
    last: CodeType | None
    displays: bool = False

    def renamed(self, filename: str) -> CompiledCell:
        """The same code objects under ``filename`` (nested code objects too)."""
        return CompiledCell(_renamed(self.code, filename),
                            None if self.body is None else _renamed(self.body, filename),
                            None if self.last is None else _renamed(self.last, filename),
                            self.displays)


def _renamed(code: CodeType, filename: str) -> CodeType:
    if code.co_filename == filename:
        return code
    consts = tuple(_renamed(c, filename) if isinstance(c, CodeType) else c
                   for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _shown(tree: ast.Module, shows: str) -> list[ast.stmt]:
    """The cell's statements, with ``x = ...`` on its last line followed by ``x`` under
    ``last_expr_or_assign`` (as IPython shows an assignment to one name then)."""
    nodes = list(tree.body)
    if shows == "last_expr_or_assign" and nodes:
        last = nodes[-1]
        target = (last.targets[0] if isinstance(last, ast.Assign) and len(last.targets) == 1
                  else getattr(last, "target", None)
                  if isinstance(last, (ast.AugAssign, ast.AnnAssign)) else None)
        if isinstance(target, ast.Name):
            shown = ast.Expr(ast.Name(target.id, ast.Load()))
            nodes.append(ast.fix_missing_locations(ast.copy_location(shown, last)))
    return nodes


def _split(tree: ast.Module, filename: str, compiler: codeop.Compile,
           shows: str) -> tuple[CodeType | None, CodeType | None, bool]:
    """``(body, last, displays)`` as IPython's ``ast_node_interactivity`` ``shows`` runs the
    cell.

    ``last`` in ``"eval"`` mode returns the last expression's value (the cell's value); in
    ``"single"`` mode it hands the values of its expression statements to ``sys.displayhook``
    as they run and returns ``None`` (``all``, and ``last`` ending with a compound
    statement). ``body`` runs first, in ``"single"`` mode under ``all``. ``displays``: a
    part runs in ``"single"`` mode.
    """
    nodes = _shown(tree, shows)
    if shows == "none" or not nodes:
        return None, None, False
    ends_expr = isinstance(nodes[-1], ast.Expr)
    if not ends_expr and shows not in ("all", "last"):
        return None, None, False
    if not ends_expr:  # the last statement (all: every one) shows its expressions itself
        body = ast.Module(body=nodes[:-1], type_ignores=[]) if shows == "last" else None
        last = nodes[-1:] if shows == "last" else nodes
        return (None if body is None else compiler(body, filename, "exec"),
                compiler(ast.Interactive(body=last), filename, "single"), True)
    head, mode = ((ast.Interactive(body=nodes[:-1]), "single") if shows == "all"
                  else (ast.Module(body=nodes[:-1], type_ignores=[]), "exec"))
    expr = ast.Expression(body=nodes[-1].value)  # type: ignore[attr-defined]
    return compiler(head, filename, mode), compiler(expr, filename, "eval"), mode == "single"


def _compiled(source: str, filename: str, compiler: codeop.Compile, shows: str,
              transform: Transform | None = None) -> CompiledCell:
    tree = ast.parse(source, filename, "exec")
    if transform is not None:  # IPython's AST transformers, before the split, as it runs them
        tree = transform(tree)
    tree = device_semantics(tree, source)  # CuPy's views where NumPy copies (rewrite.py)
    code = compiler(tree, filename, "exec")
    body, last, displays = _split(tree, filename, compiler, shows)  # for a run that shows it
    return CompiledCell(code, body, last, displays)


def compile_cell(source: str, filename: str, compiler: codeop.Compile,
                 split: bool, shows: str = "last_expr",
                 transform: Transform | None = None) -> CompiledCell:
    """Compile ``source`` as ``filename`` with ``compiler`` (its flags, and the flags the
    cell's future imports add to it afterwards), from the kept code when the same text ran
    under the same flags before.

    ``split``: compile the body and the last expression apart too (the cell shows its last
    expression's value), as ``shows`` says: one of :data:`SHOWS`, IPython's
    ``ast_node_interactivity`` (``last_expr`` by default, ``all`` shows every expression
    statement's value, ``none`` none; :func:`~.options.check_options` refuses any other).
    A syntax error is raised as compiling raises it, and nothing is kept; nor is a text
    whose compiling shows a warning under the user's filters (each run warns again, as a
    plain cell's does). ``transform``: what the parsed cell goes through before it is
    compiled (IPython's ``shell.transform_ast``, its ``ast_transformers``); nothing is kept
    then either, as a transformer may give another tree each time.
    """
    key = (source, compiler.flags, type(compiler), shows)
    kept = _KEPT.get(key) if transform is None else None
    if transform is not None:  # once, under the user's warning filters; nothing kept
        cell = _compiled(source, filename, compiler, shows, transform)
    elif kept is not None:
        _KEPT.move_to_end(key)
        for feature in _FEATURES:  # what compiling would have left in the compiler
            if kept.code.co_flags & feature.compiler_flag:
                compiler.flags |= feature.compiler_flag
        cell = kept.renamed(filename)
    else:
        with _noticed() as warned:  # under the user's filters, which it leaves untouched
            cell = _compiled(source, filename, compiler, shows)
        if not warned:  # a text that warned is not kept: every run warns (SyntaxWarning,
            # DeprecationWarning) as a plain cell's does
            _KEPT[key] = cell
            if len(_KEPT) > _KEEP:
                _KEPT.popitem(last=False)
    return cell if split else replace(cell, body=None, last=None, displays=False)


@contextlib.contextmanager
def _noticed() -> Iterator[list[bool]]:
    """Whether a warning was shown inside: ``warnings.showwarning`` passes it on and says so.

    The filters are not touched: changing them (``catch_warnings``, ``simplefilter``) makes
    Python forget which warnings every module has shown once, so that a library's warning a
    plain cell showed once would show again after each new ``%%gpu`` cell.
    """
    shown: list[bool] = []
    previous = warnings.showwarning

    def show(*args: Any, **kwargs: Any) -> Any:
        shown.append(True)
        return previous(*args, **kwargs)

    warnings.showwarning = show
    try:
        yield shown
    finally:
        if warnings.showwarning is show:
            warnings.showwarning = previous


@functools.lru_cache(maxsize=256)
def ends_quiet(source: str) -> bool:
    """Whether the cell's last token is ``;``: a plain cell then shows nothing (kept per
    text: tokenizing took about a sixth of a tiny cell's own cost, every run)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return False
    skip = (tokenize.ENDMARKER, tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT,
            tokenize.DEDENT, tokenize.INDENT)
    last = next((t for t in reversed(tokens) if t.type not in skip), None)
    return last is not None and last.type == tokenize.OP and last.string == ";"
