"""``__main__`` while a cell runs: the cell's own namespace.

A plain IPython cell runs in the user namespace, which is ``sys.modules["__main__"]``'s, so
``pickle`` (and ``multiprocessing``, ``concurrent.futures``, ``copy`` of a class) finds a
function or class the cell defines by its name, ``__main__.f``. A ``%%gpu`` cell runs in a
copy of that namespace (the transaction), so for the length of the run ``__main__`` is made a
module over that copy, as IPython makes its own (a ``DummyMod`` whose ``__dict__`` is the
namespace). Names the cell binds through it are committed as the cell's others are; a name
bound to the stand-in itself (``import __main__``) is bound to the real ``__main__`` after.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["as_main"]


class _Main:
    """A module stand-in whose ``__dict__`` is the running cell's namespace."""


@contextlib.contextmanager
def as_main(namespace: dict[str, Any], user: dict[str, Any] | None,
            bound: Iterable[str] = ()) -> Iterator[None]:
    """While inside, ``sys.modules["__main__"]`` is a module over ``namespace`` (the cell's
    copy) when the real ``__main__`` is the ``user`` namespace it copied (IPython's terminal
    and kernel); otherwise nothing changes, as a plain cell there pickles nothing by name.
    ``bound``: the names the cell binds, which get the real ``__main__`` back where the cell
    bound the stand-in (``import __main__``)."""
    main = sys.modules.get("__main__")
    if user is None or main is None or getattr(main, "__dict__", None) is not user:
        yield
        return
    stand_in = _Main()
    stand_in.__dict__ = namespace
    sys.modules["__main__"] = stand_in  # type: ignore[assignment]
    try:
        yield
    finally:
        if sys.modules.get("__main__") is stand_in:
            sys.modules["__main__"] = main
        for name in bound:  # the cell's names only: a notebook's namespace holds thousands
            if namespace.get(name) is stand_in:
                namespace[name] = main  # `import __main__`: the real one is committed
