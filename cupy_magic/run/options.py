"""The options of :func:`cupy_magic.run_cell`, checked before anything runs or moves.

One owner for what each option may be: the ``%%gpu`` magic passes its text through and gets
the same one-line messages (as ``UsageError``), a Python caller gets them as
:class:`~cupy_magic.run.errors.CellError`, whether the value is of the wrong kind or out of
range. ``TypeError`` is kept for what is no option: a source that is no string, a namespace
that is no dict, a keyword ``run_cell`` does not take. A message that the magic and Python
share names the fix in both forms: ``e.g. --to-host y (to_host=['y'] from Python)``.
"""

from __future__ import annotations

import codeop
import difflib
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..units import short_repr
from .batching import BatchOptions
from .batchoptions import split_names
from .compiled import SHOWS
from .errors import CellError
from .plan import CAST_TARGETS

__all__ = ["SYNC_MODES", "cast_name", "check_options", "check_sync_mode", "check_unknown",
           "to_host_names"]

SYNC_MODES = ("warn", "error", "off")  # run_cell(syncs=...), %%gpu --syncs, %gpu_syncs

_EXAMPLE = "cupy_magic.run_cell(source, namespace"


def to_host_names(value: Any) -> bool | list[str]:
    """``to_host`` as the run takes it: ``True``/``False``, or the names to bring back.

    A string is ``--to-host``'s text: ``"*"`` (every device array) or comma-separated names.

    Raises
    ------
    CellError
        For a string that is no list of names, or a value that is neither a flag, a string
        nor names.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        if value.strip() == "*":
            return True
        names = split_names(value)
        if not names or any(not n.isidentifier() for n in names):
            raise CellError(f"--to-host takes comma-separated variable names, got "
                            f"{short_repr(value)}; "
                            "e.g. --to-host y,total (to_host='y,total' from Python)")
        return names
    names = list(value) if isinstance(value, Iterable) else None
    if names is None or not all(isinstance(n, str) and n.isidentifier() for n in names):
        raise CellError(f"to_host={short_repr(value)} is not True, False or variable names; e.g. "
                        f"{_EXAMPLE}, to_host=['y'])")
    return names


def check_options(source: Any, namespace: Any, *, batch: Any, fallback: Any, syncs: Any,
                  filename: Any, label: Any, compiler: Any, shows: Any,
                  ast_transform: Any = None, **flags: Any) -> None:
    """Refuse a ``run_cell`` argument of the wrong kind, naming it and the fix.

    ``flags``: the options that are ``True`` or ``False`` (warmup, panel, lines, nvtx,
    cluster). ``syncs`` is
    ``None`` or a mode of :data:`SYNC_MODES`.

    Raises
    ------
    TypeError
        For a source that is no string or a namespace that is no dict.
    CellError
        For an option whose value is not of its kind or not one it takes.
    """
    if not isinstance(source, str):
        raise TypeError(f"source={short_repr(source)} is not the cell's code as a string; e.g. "
                        f"{_EXAMPLE})")
    if not isinstance(namespace, dict):
        raise TypeError(f"namespace={short_repr(namespace)} is not a dict of your variables; "
                        f"e.g. {_EXAMPLE})")
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise CellError(f"{name}={short_repr(value)} is not True or False; e.g. {_EXAMPLE}, "
                            f"{name}=True)")
    if fallback is not None and not isinstance(fallback, bool):
        raise CellError(f"fallback={short_repr(fallback)} is not True, False or None (the "
                        "session's "
                        f"setting); e.g. {_EXAMPLE}, fallback=True)")
    if syncs is not None:
        check_sync_mode(syncs, cell=True)
    if batch is not None and not isinstance(batch, BatchOptions):
        raise CellError(f"batch={short_repr(batch)} is not a BatchOptions; e.g. {_EXAMPLE}, "
                        "batch=cupy_magic.BatchOptions(forced=True))")
    for name, value in (("filename", filename), ("label", label)):
        if value is not None and not isinstance(value, str):
            raise CellError(f"{name}={short_repr(value)} is not a string; e.g. {_EXAMPLE}, "
                            f"{name}='In [3]')")
    if not (isinstance(shows, str) and shows in SHOWS):
        raise CellError(f"shows={short_repr(shows)} is not one of {', '.join(SHOWS)}; e.g. "
                        f"{_EXAMPLE}, shows='last_expr')")
    if compiler is not None and not isinstance(compiler, codeop.Compile):
        raise CellError(f"compiler={short_repr(compiler)} is not a codeop.Compile; give none, or "
                        "IPython's get_ipython().compile")
    if ast_transform is not None and not callable(ast_transform):
        raise TypeError(f"ast_transform={short_repr(ast_transform)} is not a function of the "
                        "parsed cell; give none, or IPython's get_ipython().transform_ast")


def check_sync_mode(mode: Any, *, cell: bool = False) -> str:
    """``mode`` when it is one of :data:`SYNC_MODES`; else a :class:`CellError` naming it
    and the modes, worded for a cell's ``--syncs`` (``cell``) or the session's mode
    (``%gpu_syncs``, :func:`cupy_magic.set_sync_mode`)."""
    if isinstance(mode, str) and mode in SYNC_MODES:
        return mode
    listed = f"{', '.join(SYNC_MODES[:-1])} or {SYNC_MODES[-1]}"
    if cell:
        shown = mode if isinstance(mode, str) and mode.strip() == mode != "" \
            else short_repr(mode)
        raise CellError(f"--syncs {shown} is not a mode; use --syncs {listed} "
                        f"(syncs='{SYNC_MODES[0]}' from Python)")
    raise CellError(f"unknown sync mode {short_repr(mode)}; use %gpu_syncs {listed} "
                    f"(cupy_magic.set_sync_mode('{SYNC_MODES[0]}'))")


def cast_name(dtype: Any) -> Any:
    """``dtype`` as the name ``--dtype`` takes when it is a NumPy type or dtype of one
    (``np.float32``, ``np.dtype('float16')``: ``"float32"``, ``"float16"``); any other
    value as given, for :func:`~cupy_magic.run.plan.plan_cell` to refuse after the cell's
    syntax is checked."""
    if dtype is None or isinstance(dtype, str):
        return dtype
    try:
        named = np.dtype(dtype).name
    except (TypeError, ValueError):
        return dtype
    return named if named in CAST_TARGETS else dtype


def check_unknown(options: dict[str, Any], known: Iterable[str]) -> None:
    """Refuse a keyword ``run_cell`` does not take, with the nearest it does."""
    known = list(known)
    for name in options:
        if name not in known:
            near = difflib.get_close_matches(name.lower(), known, n=1)
            hint = f"did you mean {near[0]}? " if near else ""
            raise TypeError(f"run_cell() has no option {name!r}; {hint}use one of "
                            f"{', '.join(known)}, e.g. {_EXAMPLE}, to_host=True)")
