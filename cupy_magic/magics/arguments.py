"""The magics' argument parsing: IPython's ``parse_argstring`` with one-line messages that
name the value and the fix, and the message of a syntax error in a ``%%gpu`` cell."""

from __future__ import annotations

import argparse
import ast
import difflib
import inspect
import re
from typing import Any

from IPython.core.error import UsageError
from IPython.utils.process import arg_split

from ..config import BACKENDS
from ..monitor.sampler import DEFAULT_INTERVAL
from ..run.batching import DEFAULT_STREAMS
from ..run.cell import SYNC_MODES
from ..run.plan import CAST_TARGETS

__all__ = ["cell_usage", "parse_argstring", "ran_in", "syntax_message"]

_CELL_MAGICS = ("gpu",)
# Each magic in use, and a value for each option that takes one: the fixes of the messages
# for arguments argparse cannot read.
_EXAMPLES = {
    "gpu": "%%gpu --to-host y", "vram_budget": "%vram_budget 8GB",
    "vram_panel": f"%vram_panel --interval {DEFAULT_INTERVAL}",
    "gpu_syncs": f"%gpu_syncs {SYNC_MODES[0]}", "gpu_backend": f"%gpu_backend {BACKENDS[-1]}",
    "vram_who": "%vram_who --free Out",
    "gpu_fallback": "%gpu_fallback on",
    "gpu_cluster": "%gpu_cluster local",
}
_VALUES = {
    "--to-host": "y", "--dtype": next(iter(CAST_TARGETS)), "--syncs": SYNC_MODES[0],
    "--batch": "x", "--batch-rows": "100000", "--batch-bytes": "512MB",
    "--streams": str(DEFAULT_STREAMS), "--reduce": "total=sum",
    "--estimate": "20000x20000 float32", "--interval": str(DEFAULT_INTERVAL), "device": "0",
    "--free": "Out", "--workers": "2", "--timeout": "10", "--devices": "0,1",
    "--device": "1",
}
_REPEATABLE = ("--reduce",)
_HELP_FLAGS = ("-h", "--help", "-help", "-?")
_KINDS = {"int": "a whole number", "float": "a number"}
# The lines read, by parser and line (the line as IPython hands it over, its $names expanded):
# reading one takes 50-70 us (shlex, the repeat check, argparse), each time a cell runs
_PARSED: dict[tuple[argparse.ArgumentParser, str], argparse.Namespace] = {}
_PARSED_KEPT = 256


def cell_usage(magic_func: Any) -> Any:
    """Write the usage line of a cell magic's help as ``%%gpu ...``: IPython writes every
    magic's usage with one ``%``, a line magic's escape (``%gpu`` does not exist)."""
    head, sep, rest = (magic_func.__doc__ or "").partition(f"::\n\n  %{magic_func.parser.prog} ")
    if sep:  # the usage, up to its blank line: its wrapped lines move right by one, too
        usage, blank, rest = rest.partition("\n\n")
        magic_func.__doc__ = (head + sep.replace("%", "%%") + usage.replace("\n ", "\n  ")
                              + blank + rest)
    return magic_func


def parse_argstring(magic_func: Any, line: str) -> argparse.Namespace:
    """IPython's ``parse_argstring``, with one-line messages that name the value and the fix.

    An option with a value given twice is refused (argparse would keep the last silently),
    except the one meant to repeat (``--reduce``); a flag given twice means the same.
    """
    parser = magic_func.parser
    parsed = _PARSED.get((parser, line))
    if parsed is None:  # a line read before (a cell run again): argparse's answer again
        if len(_PARSED) >= _PARSED_KEPT:
            _PARSED.pop(next(iter(_PARSED)))
        parsed = _PARSED[parser, line] = _read(parser, line)
    # a copy: the caller may change its lists
    return argparse.Namespace(**{k: list(v) if isinstance(v, list) else v
                                 for k, v in vars(parsed).items()})


def _read(parser: argparse.ArgumentParser, line: str) -> argparse.Namespace:
    """argparse's reading of ``line``, or a :class:`UsageError` in one line."""
    magic = ("%%" if parser.prog in _CELL_MAGICS else "%") + parser.prog
    try:
        argv = arg_split(line, strict=True)
    except ValueError as exc:
        raise UsageError(f"cannot read {magic} {line.strip()}: {str(exc).lower()}; close the "
                         f"quote or remove it, e.g. {_EXAMPLES[parser.prog]}") from None
    _refuse_repeats(parser, argv, magic)
    try:
        return parser.parse_args(argv)
    except UsageError as exc:
        raise UsageError(_explain(str(exc), parser, argv, magic)) from None


def _option(parser: argparse.ArgumentParser, word: str) -> str | None:
    """The option ``word`` means (``--stream=2`` means ``--streams``), or None."""
    if not word.startswith("--") or word == "--":
        return None
    flag = word.partition("=")[0]
    options = parser._option_string_actions  # argparse's table; it has no public one
    matches = [o for o in options if o == flag] or [o for o in options if o.startswith(flag)]
    return matches[0] if len(matches) == 1 else None


def _refuse_repeats(parser: argparse.ArgumentParser, argv: list[str], magic: str) -> None:
    seen: dict[str, str] = {}
    for i, word in enumerate(argv):
        option = _option(parser, word)
        if (option is None or option in _REPEATABLE
                or parser._option_string_actions[option].nargs == 0):
            continue  # a flag said twice means the same
        value = word.partition("=")[2] if "=" in word else (
            argv[i + 1] if i + 1 < len(argv) else "")
        given = f"{option} {value}".strip()
        if option in seen:
            twice = "twice" if seen[option] == given else f"twice ({seen[option]}, {given})"
            raise UsageError(f"{magic} was given {option} {twice}; give it once, "
                             f"e.g. {magic} {given}")
        seen[option] = given


def _explain(message: str, parser: argparse.ArgumentParser, argv: list[str],
             magic: str) -> str:
    """argparse's ``message`` as one line that names the magic, the value and a fix."""
    example, help_ = _EXAMPLES[parser.prog], f"{magic}? lists the options"
    if m := re.fullmatch(r"unrecognized arguments: (.*)", message):
        extra = m.group(1)
        if not extra.startswith("-"):
            if stray := _stray(parser, argv, extra.split()[0], magic):
                return stray
            if parser.prog in _CELL_MAGICS:
                return (f"{magic} takes options only, got {extra!r}; write the code on the "
                        f"lines below the {magic} line, e.g. {example}")
            return f"{magic} takes no {extra!r} here; e.g. {example} ({help_})"
        flag = extra.split()[0].partition("=")[0]
        if flag in _HELP_FLAGS:  # IPython's magics take no --help; their help is magic?
            return (f"{magic} has no option {flag}; its help is {magic}? (the options, "
                    f"with examples), e.g. {example}")
        options = list(parser._option_string_actions)
        close = ([o for o in options if o[2:3] == flag[1:2]] if re.fullmatch(r"-\w", flag)
                 else difflib.get_close_matches(flag, options, n=1))
        close = close if len(close) == 1 else []
        if close:
            use = f"{close[0]} {_VALUES.get(close[0], '')}".strip()
            return f"{magic} has no option {flag}; did you mean {close[0]}? e.g. {magic} {use}"
        return f"{magic} has no option {flag}; e.g. {example} ({help_})"
    if m := re.fullmatch(r"argument (\S+): expected (?:at least )?one argument", message):
        option = m.group(1).split("/")[0]
        after = [w for i, w in enumerate(argv[1:]) if _option(parser, argv[i]) == option]
        got = "got none" if not after else f"got {after[0]!r}, which reads as an option" + (
            ": values cannot be negative" if re.match(r"-[0-9.]", after[0]) else "")
        return (f"{magic} {option} needs a value ({got}); e.g. {magic} {option} "
                f"{_VALUES.get(option, '')}".rstrip())
    if m := re.fullmatch(r"argument (\S+): invalid (\w+) value: '(.*)'", message):
        name, kind, value = m.groups()
        show = f"{magic} {name}" if name.startswith("-") else f"the {name} of {magic}"
        return (f"{show} must be {_KINDS.get(kind, kind)}, got {value!r}; e.g. "
                f"{magic} {'' if name == 'device' else name + ' '}{_VALUES.get(name, '')}")
    if m := re.fullmatch(r"ambiguous option: (\S+) could match (.*)", message):
        first = m.group(2).split(", ")[0]
        return (f"{magic} {m.group(1)} could mean {m.group(2)}; write the option in full, "
                f"e.g. {magic} {first}")
    if m := re.fullmatch(r"argument (\S+): ignored explicit argument '(.*)'", message):
        return (f"{magic} {m.group(1)} takes no value, got {m.group(1)}={m.group(2)}; "
                f"write {magic} {m.group(1)}")
    return f"{magic} {' '.join(argv)}: {message}; e.g. {example} ({help_})"


def _stray(parser: argparse.ArgumentParser, argv: list[str], word: str, magic: str) -> str:
    """The message for ``word``, a value argparse took for no option, when it follows an
    option: a flag that takes no value (``--fallback off``), or an option's value it was
    split from (``--batch-bytes 2 GB``); "" when it follows none."""
    for j in (j for j, w in enumerate(argv) if w == word and j > 0):
        prev = argv[j - 1]
        option = _option(parser, prev)
        if option is not None and "=" not in prev \
                and parser._option_string_actions[option].nargs == 0:
            if option == "--fallback" and word.lower() in ("on", "off"):
                return (f"{magic} --fallback takes no value, got --fallback {word}: it turns "
                        "the fallback on for this cell; for the session use %gpu_fallback "
                        f"{word.lower()} (cupy_magic.set_fallback('{word.lower()}'))")
            return f"{magic} {option} takes no value, got {option} {word}; write {magic} {option}"
        if option is not None and "=" in prev:
            value = prev.partition("=")[2]
        elif j > 1 and (option := _option(parser, argv[j - 2])) is not None \
                and "=" not in argv[j - 2] and not prev.startswith("-") \
                and parser._option_string_actions[option].nargs in (None, "?"):
            value = prev
        else:
            continue
        if option in ("--to-host", "--batch"):
            fix = f"separate names with commas only: {magic} {option} {value},{word}"
        elif option == "--batch-bytes":
            fix = f"write the size without a space: {magic} {option} {value}{word}"
        else:
            fix = f"e.g. {magic} {option} {value}"
        return f"{magic} {option} takes one value, got {value!r} and then {word!r}; {fix}"
    return ""


def syntax_message(exc: SyntaxError, cell: str) -> str:
    """The one-line message of a syntax error in a ``%%gpu`` cell, quoting its line.

    Errors raised on the whole tree (``'return' outside function``) carry no text: the
    line is then read from ``cell`` by its number.
    """
    text, lines = (exc.text or "").strip(), cell.splitlines()
    if not text and exc.lineno is not None and 0 < exc.lineno <= len(lines):
        text = lines[exc.lineno - 1].strip()
    text = text if len(text) <= 80 else text[:77] + "..."
    where = f", line {exc.lineno}" if exc.lineno is not None else ""
    quote = f" ({text!r})" if text else ""
    msg = " ".join(str(exc.msg).split())
    if _awaits_at_top(cell):  # valid in a plain cell, which IPython runs as a coroutine
        return (f"top-level await in the %%gpu cell{where}{quote}: %%gpu runs its cell "
                "synchronously; await in a plain cell before it (result = await ...) and use "
                "the result in the %%gpu cell")
    return (f"syntax error in the %%gpu cell{where}: {msg}{quote}; fix the line and run "
            "the cell again")


def _awaits_at_top(cell: str) -> bool:
    """Whether ``cell`` compiles once top-level ``await``, ``async for`` and ``async with``
    are allowed, as IPython compiles a plain cell (``autoawait``)."""
    try:
        code = compile(cell, "<cell>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                       dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return bool(code.co_flags & inspect.CO_COROUTINE)


def ran_in(exc: BaseException, filename: str) -> bool:
    """Whether ``exc`` was raised while code of ``filename`` ran (a frame of the cell is on
    its traceback), rather than while the cell was compiled."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            return True
        tb = tb.tb_next
    return False
