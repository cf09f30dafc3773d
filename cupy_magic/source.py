"""A cell's line as messages quote it (``line 3 `y = x * 2` ``): one owner for reading it.

The cell's source is registered with :mod:`linecache` under its file name when it is planned;
a quoted line is stripped and its trailing comment left out (``x = np.ones(N)  # 8 GB here``
is quoted as ``x = np.ones(N)``), as the comment is not code.
"""

from __future__ import annotations

import io
import linecache
import tokenize

__all__ = ["line_code"]


def line_code(filename: str | None, line: int | None) -> str:
    """The code of ``line`` of the source known as ``filename``, without its comment.

    Parameters
    ----------
    filename : str or None
        The name the source was registered under (the cell's ``co_filename``).
    line : int or None
        Its line number, from 1.

    Returns
    -------
    str
        The line stripped, without a trailing comment; ``""`` when the line is unknown.
    """
    if not filename or not line:
        return ""
    return _uncommented(linecache.getline(filename, line)).strip()


def _uncommented(text: str) -> str:
    """``text`` (one line) up to its comment; as it is where it cannot be read alone (a line
    inside a bracket or a string that spans lines)."""
    if "#" not in text:
        return text
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                return text[:token.start[1]]
    except (tokenize.TokenError, SyntaxError):
        return text
    return text
