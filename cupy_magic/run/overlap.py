"""Inputs that share memory: one a view of another, or two views of one array.

After ``X = ...; Xtr = X[:800]`` in earlier cells, a plain cell that normalises ``X`` in
place sees the change through ``Xtr``. Copied one by one, the two device copies would not
share memory, and ``Xtr`` would silently keep the old values. So inputs whose memory overlaps
move together: the smallest stretch of bytes that holds them all is copied once, and each is
made a view into that copy with its own offset, shape and strides, as NumPy has them; a change
through one shows through the others, and those the cell changed are committed as views of
one device array, as in a plain cell. Where they cannot (a ``--dtype`` cast, a byte order the
device does not hold, memory that is not one NumPy array's, a batched or cluster run, which
copies rows of each apart), a cell that may change one of them is refused before anything
moves; one that only reads them runs on separate copies.

A strided view the cell may change (``X = B[:, ::2]``) moves the same way, as a group of one:
the stretch of ``B`` that holds it, with ``X`` a view of the same strides into it, so that
what the cell makes of it is a view or a copy as in NumPy (``X[1:]`` and ``X.reshape(-1)``
views into ``B``, ``np.ascontiguousarray(X)`` a copy), where its contiguous copy made each a
view of that copy. Only where the stretch is at most :data:`STRETCH_LIMIT` times the
view's bytes; a sparser view (a column of a wide matrix) moves as a contiguous copy
(:class:`~.homes.StridedHome`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..backend import Backend, address, byte_span
from ..units import dtype_name, format_bytes
from .errors import CellError
from .report import InputMove

__all__ = [
    "MAY_HOLD",
    "STRETCH_LIMIT",
    "Span",
    "host_together",
    "items_apart",
    "move_overlaps",
    "overlapping",
    "refuse_overlaps",
    "shared_spans",
    "span_of",
    "spans_words",
    "strided_spans",
    "whole_groups",
]

try:  # NumPy 2
    from numpy.lib.array_utils import byte_bounds
except ImportError:  # pragma: no cover - NumPy 1.x
    byte_bounds = np.byte_bounds  # type: ignore[attr-defined]


def _shares(a: np.ndarray, b: np.ndarray) -> bool:
    if not np.may_share_memory(a, b):
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=10_000))
    except np.exceptions.TooHardError:  # cannot tell cheaply: as if they did
        return True


def overlapping(inputs: dict[str, np.ndarray]) -> list[tuple[str, ...]]:
    """The groups (two names or more, sorted) of ``inputs`` whose memory overlaps, directly
    or through another input."""
    names = [n for n, a in inputs.items() if a.size]
    if len(names) < 2:
        return []
    group = {n: n for n in names}

    def find(n: str) -> str:
        while group[n] != n:
            n = group[n]
        return n

    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if find(a) != find(b) and _shares(inputs[a], inputs[b]):
                group[find(b)] = find(a)
    found: dict[str, list[str]] = {}
    for n in names:
        found.setdefault(find(n), []).append(n)
    return sorted(tuple(sorted(g)) for g in found.values() if len(g) > 1)


_ALIGN = 256  # what CUDA's allocations are aligned to


def _owner(arr: np.ndarray) -> np.ndarray:
    while isinstance(arr.base, np.ndarray):
        arr = arr.base
    return arr


class Span:
    """The bytes a group of overlapping inputs lies in (``host``: a ``uint8`` view of them),
    and where each input starts in it."""

    def __init__(self, host: np.ndarray, offsets: dict[str, int]) -> None:
        self.host, self.offsets = host, offsets


def span_of(arrays: dict[str, np.ndarray], cast: Callable[[np.ndarray], bool]) -> Span | None:
    """The :class:`Span` of ``arrays`` (a group :func:`overlapping` found), or None where
    they cannot share one copy: one cast (``cast(array)``: under ``--dtype``), a byte order
    other than the machine's, an array not aligned to its items (a GPU reads none such), or
    no one contiguous NumPy array that owns them all. The span starts at a multiple of 256
    bytes from the owner's start, so each view keeps its alignment in the device's copy."""
    if any(map(cast, arrays.values())) or not all(a.dtype.isnative and a.flags.aligned
                                                  for a in arrays.values()):
        return None
    owners = {id(_owner(a)): _owner(a) for a in arrays.values()}
    if len(owners) != 1:
        return None
    owner = next(iter(owners.values()))
    if not (owner.flags.c_contiguous or owner.flags.f_contiguous):
        return None
    raw = owner.reshape(-1, order="A").view(np.uint8)
    start = address(owner)
    # the copy starts 256-aligned where the owner starts: an array at another offset of its
    # items' alignment (a memmap opened at byte 4) would be misaligned on the device
    if any((address(a) - start) % a.dtype.alignment for a in arrays.values()):
        return None
    bounds = [byte_bounds(a) for a in arrays.values()]
    low, high = min(b[0] for b in bounds), max(b[1] for b in bounds)
    low -= (low - start) % _ALIGN
    offsets = {n: address(a) - low for n, a in arrays.items()}
    return Span(raw[low - start:high - start], offsets)


def items_apart(arr: np.ndarray) -> bool:
    """Whether no two items of ``arr`` share memory (a sufficient test: each stride, from the
    smallest, clears the reach of the smaller ones). ``np.lib.stride_tricks.as_strided`` can
    make views that fail it (``X[0, 1]`` is ``X[1, 0]``); their copies have the items apart."""
    reach = arr.itemsize
    dims = zip(arr.strides, arr.shape, strict=True)
    for stride, n in sorted((abs(st), n) for st, n in dims if n > 1):
        if stride < reach:
            return False
        reach += stride * (n - 1)
    return True


def refuse_overlaps(groups: list[tuple[str, ...]], only_read: frozenset[str], run: str,
                    inputs: dict[str, np.ndarray], casts: Any = None) -> None:
    """Raise, naming the fix, where a group of overlapping inputs the cell may change cannot
    share one copy: in ``run`` (a batched or cluster run, which copies rows of each apart:
    ``casts`` None), or in a whole run where :func:`span_of` finds none (``casts``: whether
    ``--dtype`` casts an input); and where the cell may change an input whose own items share
    memory (:func:`items_apart`), which no copy keeps."""
    for name, arr in inputs.items():
        if name not in only_read and arr.flags.writeable and not items_apart(arr):
            raise CellError(
                f"the input {name!r} is a view whose items share memory (as "
                f"np.lib.stride_tricks.as_strided makes), which {run} cannot keep: a change "
                f"the cell makes to one item would not show in the others; make it a copy in "
                f"a plain cell first ({name} = {name}.copy()), or run the cell without %%gpu")
    for group in groups:
        if set(group) <= only_read:
            continue
        if casts is not None and span_of({n: inputs[n] for n in group}, casts) is not None:
            continue
        a, b = group[0], group[1]
        whole = ", or run the cell whole (a larger budget, no --batch)" if casts is None else ""
        raise CellError(
            f"the inputs {a!r} and {b!r} share memory (one is a view of the other, or both of "
            f"one array), which {run} cannot keep: a change the cell makes through one would "
            f"not show through the other; make one a copy in a plain cell first ({b} = "
            f"{b}.copy()){whole}")


def shared_spans(inputs: dict[str, np.ndarray], groups: tuple[tuple[str, ...], ...],
                 cast: Callable[[np.ndarray], bool], only_read: frozenset[str] = frozenset()
                 ) -> dict[tuple[str, ...], Span]:
    """The groups of overlapping ``inputs`` (``groups``: :func:`overlapping`'s) copied to the
    device as one stretch of bytes, and their :class:`Span`. Left out, to be copied one by one:
    a group that cannot share (:func:`span_of`), and one the cell only reads (``only_read``)
    whose span is larger than its arrays (a row and a column of a matrix)."""
    spans: dict[tuple[str, ...], Span] = {}
    for group in groups:
        arrays = {n: inputs[n] for n in group}
        span = span_of(arrays, cast)
        if span is None or (set(group) <= only_read
                            and _larger(span.host.nbytes, arrays.values())):
            continue
        spans[group] = span
    return spans


# a strided input moves as the stretch of bytes that holds it up to this many times its own
STRETCH_LIMIT = 4


def strided_spans(inputs: dict[str, np.ndarray], grouped: Iterable[tuple[str, ...]],
                  cast: Callable[[np.ndarray], bool], only_read: frozenset[str]
                  ) -> dict[tuple[str, ...], Span]:
    """The strided views among ``inputs`` (in no group of ``grouped``) the cell may change,
    each a group of one with its :class:`Span`, where that is at most :data:`STRETCH_LIMIT`
    times its bytes (a 256-byte alignment aside) and holds no byte of another input
    (``X = B[:, ::2]`` and ``Y = B[:, 1::2]``: written back whole, one stretch would undo
    the other's change); see the module."""
    out: dict[tuple[str, ...], Span] = {}
    done: set[str] | None = None
    for name, arr in inputs.items():
        if name in only_read:
            continue
        flags = arr.flags
        if flags.c_contiguous or flags.f_contiguous or not flags.writeable or not arr.size:
            continue
        if done is None:
            done = {n for group in grouped for n in group}
        if name in done:
            continue
        span = span_of({name: arr}, cast)
        if span is not None and span.host.nbytes <= STRETCH_LIMIT * arr.nbytes + _ALIGN \
                and not any(other is not arr and np.may_share_memory(span.host, other)
                            for other in inputs.values()):
            out[(name,)] = span
    return out


def spans_words(spans: dict[tuple[str, ...], Span], inputs: dict[str, np.ndarray]) -> str:
    """What a budget message says of the spans larger than their arrays (``""``: none)."""
    return "".join(
        (f"; {', '.join(map(repr, g[:-1]))} and {g[-1]!r} share memory and move as the one "
         f"stretch of {format_bytes(s.host.nbytes)} that holds them" if len(g) > 1 else
         f"; {g[0]!r}, a strided view, moves as the stretch of {format_bytes(s.host.nbytes)} "
         "that holds it")
        for g, s in spans.items() if _larger(s.host.nbytes, (inputs[n] for n in g)))


def move_overlaps(inputs: dict[str, np.ndarray], spans: dict[tuple[str, ...], Span],
                  be: Backend) -> dict[str, tuple[Any, InputMove]]:
    """The groups of :func:`shared_spans` (``spans``) each copied to the device once as one
    stretch of bytes and each input a view into it (two names for one array: one view), with
    the report's row (the first carries the bytes, the others name it)."""
    shared: dict[str, tuple[Any, InputMove]] = {}
    for group, span in spans.items():
        arrays = {n: inputs[n] for n in group}
        t = be.to_device(span.host)
        if hasattr(t.array.flags, "writeable"):  # a read-only owner's writeable view stays so
            t.array.flags.writeable = True
        views: dict[int, Any] = {}  # by id of the user's array: y = x is one array
        for k, (name, arr) in enumerate(arrays.items()):
            view = views.get(id(arr))
            if view is None:
                view = views[id(arr)] = be.view_of(t.array, span.offsets[name], arr.shape,
                                                   arr.strides, arr.dtype)
                if not arr.flags.writeable and hasattr(view.flags, "writeable"):
                    view.flags.writeable = False  # read-only stays so (the CPU fallback's)
            shared[name] = view, InputMove(name, 0 if k else t.nbytes, 0.0 if k else t.seconds,
                                           t.pinned, dtype_name(arr.dtype),
                                           view_of=group[0] if k else "",
                                           own_bytes=arr.nbytes if len(group) == 1 else 0)
    return shared


def _larger(nbytes: int, arrays: Iterable[Any]) -> bool:
    """Whether a stretch of ``nbytes`` is larger than ``arrays`` together (one array named
    twice counted once): a row and a column of a matrix, whose stretch is the matrix."""
    return nbytes > sum({id(a): a.nbytes for a in arrays}.values())


def host_together(values: dict[str, Any], be: Backend) -> dict[str, np.ndarray]:
    """Device arrays (by name) that are views of one allocation, brought to the host as views
    of one host copy of the stretch of bytes that holds them, as NumPy's views of one array
    share its memory: where the stretch is no larger than they are together (``X`` and
    ``Xtr = X[:800]``; a row and a column of a matrix are left out, to come back one by one),
    from a multiple of 256 bytes into the allocation, so that each keeps its alignment."""
    groups: dict[int, list[tuple[str, Any, int, Any]]] = {}
    for name, a in values.items():
        key, whole, offset = be.allocation(a)
        groups.setdefault(key, []).append((name, a, offset, whole))
    out: dict[str, np.ndarray] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        bounds = [byte_span(offset, a) for _, a, offset, _ in members]
        low, high = min(b[0] for b in bounds), max(b[1] for b in bounds)
        low -= low % _ALIGN
        if _larger(high - low - _ALIGN, (a for _, a, _, _ in members)):
            continue
        host = be.to_host(be.view_of(members[0][3], low, (high - low,), (1,), np.uint8))
        made: dict[int, np.ndarray] = {}  # two names for one array (y = x): one array
        for name, a, offset, _ in members:
            if id(a) not in made:
                made[id(a)] = np.ndarray(a.shape, a.dtype, buffer=host, offset=offset - low,
                                         strides=a.strides)
            out[name] = made[id(a)]
    return out


MAY_HOLD = -1  # a key for a value that may hold a view of any allocation (a list, an object)


def whole_groups(stored: set[str], groups: tuple[tuple[str, ...], ...],
                 key: Callable[[str], int | None]) -> set[str]:
    """``stored`` with every input of a group where one of them in ``stored`` may still hold
    a view into the group's device array: views of one device array are committed together,
    so that a later cell's change through one shows through the others. ``key(name)``: the
    allocation of what ``name`` holds after the run (``None``: holds no device memory, as a
    number; :data:`MAY_HOLD`: may hold any, as a list); an input not in ``stored`` holds its
    copy, so the group's allocation is theirs. A group whose stored inputs were all rebound
    to new arrays (``Xtr = Xtr * 2``) holds nothing of the device array, and its other
    inputs stay the user's arrays (a change through one of them was seen by the input
    watch, which stored it)."""
    out = set(stored)
    for group in groups:
        inside = out.intersection(group)
        if not inside or len(inside) == len(group):
            continue
        shared = {key(m) for m in group if m not in out} - {None}
        if any(k == MAY_HOLD or k in shared for k in map(key, inside)):
            out.update(group)
    return out
