"""Under ``--to-host``, an input the cell changed in place is changed in the user's array.

A plain cell that runs ``X -= X.mean(axis=0)`` changes the array ``X`` names: ``X`` stays the
same object, and a view made in an earlier cell (``Xtr = X[:800]``) or a list holding ``X``
sees the change, though the cell never names them. A ``%%gpu`` cell changes the device copy;
under ``--to-host`` that copy comes back to the host anyway, so it is written into the
user's own memory (its *home*) rather than into a new array, and each name the cell leaves
on that copy (``X``, ``y = X[::2]``) becomes the user's array or a view of it, as after a plain
cell.

An input has a home where its device copy holds its bytes as the host does: not cast
(``--dtype``), contiguous on the host with the same strides on the device, writeable; inputs
sharing memory (:mod:`.overlap`) share the home of their stretch of bytes, and so does a
writeable strided view the cell may change (``X = big[:, ::2]``), copied as the stretch of
``big`` that holds it. A sparser one (a column of a wide matrix), whose device copy is
contiguous, has a home of its own kind (:class:`StridedHome`): the copy comes back through a
contiguous host array into the view, so ``big`` holds the change; a view the cell makes of
it comes back as a new array.
A read-only one (``x.flags.writeable`` false, a read-only ``np.load(..., mmap_mode="r")``) has
a home that is never written: its copy, unchanged, comes back as the user's array and its
views as views of it; a copy the cell changed comes back a new array (a GPU refuses the
cell). Others (cast, read-only strided) come back as new arrays, and their views made
earlier keep the old values. A home is written back when the run may have changed one of its
inputs' copies (in place through a name, or as the input watch saw) and a name it commits
lies in it: a copy only read, then rebound (``X = X.T``, ``Xtr = Xtr * 2``), holds the
user's bytes, and writing it back would undo a change the cell made meanwhile through the
host. Also when the source changes one in place through its own name (``X -= 1``, ``X[0] = 1``,
``X.sort()``) or a name a top-level ``Y = X`` bound to it, and the cell then rebinds or
deletes the names (``X -= 1; X = 0``, ``Y = X; Y += 1; del X, Y``): in a plain cell the
user's array keeps that change, and its earlier views see it. For those inputs only the
home keeps the device copy alive to the commit.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..backend import Backend, address, byte_span
from .errors import CellError
from .inputmoves import shared_input_spans
from .overlap import items_apart
from .plan import CellPlan, cast_target

__all__ = ["Home", "Homes", "StridedHome", "in_device_memory", "input_homes", "view_kinds"]


@dataclass
class Home:
    """A device allocation that holds the bytes of user arrays: ``host`` (a ``uint8`` view of
    the user's memory), ``start`` (the byte of the allocation ``host[0]`` is copied to), the
    user's arrays in it by name, and weak references to their device copies: the home holds
    no device memory (a cell that rebinds ``X`` frees its copy, as before), and is known to
    be this allocation only while one of them lives (a freed allocation's key may name a new
    one)."""

    host: np.ndarray
    start: int
    inputs: dict[str, np.ndarray]
    copies: list[weakref.ref[Any]]
    written: bool = field(default=False)
    kept: dict[str, Any] = field(default_factory=dict)  # copies held to the commit: the
    # source changes these inputs in place, and may rebind their names after
    writes: bool = True  # a change of its inputs the run made goes into the user's memory
    # the arrays the copies are views of, weakly: a view made in the cell (`X = X.T`) holds
    # that one (NumPy's and CuPy's `base`), not the copy, which may be gone
    owners: list[weakref.ref[Any]] = field(default_factory=list)

    def lives(self, be: Backend, key: int) -> bool:
        """Whether the allocation ``key`` names is still this home's: one of its copies, or
        an array they are views of, lives in it."""
        return any(c is not None and be.allocation(c)[0] == key
                   for c in (ref() for ref in self.copies + self.owners))

    def write(self, be: Backend, whole: Any) -> None:
        """Copy the home's stretch of the allocation ``whole`` into the user's memory."""
        if not self.written:
            n = self.host.size
            be.to_host_into(be.view_of(whole, self.start, (n,), (1,), np.uint8), self.host)
            self.written = True

    def place(self, array: np.ndarray) -> int:
        """Where the user's ``array`` starts in ``host``."""
        return address(array) - address(self.host)

    @property
    def nbytes(self) -> int:
        """The bytes of the allocation, from ``start`` on, that are the home's."""
        return int(self.host.size)

    def own(self, value: Any, at: int) -> np.ndarray | None:
        """The user's array or a view of it for ``value``, a device array at byte ``at`` of
        the home; ``None``: brought to the host as a new array. The user's array itself only
        for its own copy: a view of the copy laid out as it (``Y = X.view()``,
        ``X = X.reshape(X.shape)``) is a new view, as NumPy's is another object."""
        if any(ref() is value for ref in self.copies):
            for arr in self.inputs.values():  # the user's own array where the value is it
                if (self.place(arr), arr.shape, arr.strides, arr.dtype) == \
                        (at, value.shape, value.strides, value.dtype):
                    return arr
        if value.ndim == 0:  # CuPy's x[0, 0] is a view, NumPy's a scalar: brought as one
            return None
        return np.ndarray(value.shape, value.dtype, buffer=self.host, offset=at,
                          strides=value.strides)


@dataclass
class StridedHome(Home):
    """The home of a strided input (``X = big[:, ::2]``, ``X = big.T[1:]``): its device copy
    is contiguous, so the copy comes back through a contiguous host array into the user's
    view, whose base (``big``) then holds the change, as after a plain cell; the bytes
    between its items stay as they were. ``host`` is empty; the name that leaves the whole
    copy becomes the user's view, a view of the copy a new array.

    Written back only where the source changes the input through its name or a name bound to
    it (``writes``). On the copy every view or reshape of ``X`` is a view of the copy, where
    NumPy's may be a view of ``big`` (``X[1:]``) or a copy (``X.ravel()``), so a cell that
    changes it only through another name, seen by the input watch, is refused
    (:meth:`Homes.settle`).
    """

    user: np.ndarray = field(default_factory=lambda: np.empty(0))
    copy_strides: tuple[int, ...] = ()

    @property
    def nbytes(self) -> int:
        return int(self.user.nbytes)

    def write(self, be: Backend, whole: Any) -> None:
        if not self.written:
            user = self.user  # the copy as it lies (C or F order) into a C-ordered host
            flat = np.empty(user.shape, user.dtype)  # array (CuPy's copy out wants one)
            be.to_host_into(be.view_of(whole, self.start, user.shape, self.copy_strides,
                                       user.dtype), flat)
            np.copyto(user, flat)
            self.written = True

    def own(self, value: Any, at: int) -> np.ndarray | None:
        # the copy itself only: a view of it laid out as it (`Z = X.T.T`) is another
        # object in NumPy, and comes back a new array as the other views do
        user = self.user
        if any(ref() is value for ref in self.copies) and \
                (at, value.shape, value.dtype, tuple(value.strides)) == \
                (0, user.shape, user.dtype, self.copy_strides):
            return user
        return None


class Homes:
    """The homes of a whole run's inputs (built right after they moved)."""

    def __init__(self, be: Backend) -> None:
        self.be = be
        self.by_key: dict[int, Home] = {}
        # the inputs whose copies the run may have changed (settle); None: any stored one
        self.made: set[str] | frozenset[str] | None = None

    def add(self, copies: list[Any], host: np.ndarray, start_in_copy: int,
            inputs: dict[str, np.ndarray], keep: set[str] | frozenset[str] = frozenset()
            ) -> None:
        """Note that the allocation of ``copies`` (the device copies of ``inputs``, in their
        order) holds ``host`` (the user's bytes, ``uint8``) from byte ``start_in_copy`` of
        the first on (negative: before it); the copies of the inputs in ``keep`` are held to
        the commit."""
        if not host.flags.c_contiguous or not host.size:
            return
        # read-only bytes are never written: a copy the run changed comes back a new array
        # (a GPU refuses such a cell before the commit, InputWatch), one it did not is the
        # user's array, or a view of it, as after a plain cell (`Y = X`, `Q = [X]`, `X[1:]`)
        writes = bool(host.flags.writeable)
        key, _, offset = self.be.allocation(copies[0])
        self.by_key[key] = Home(host, offset + start_in_copy, inputs,
                                [weakref.ref(c) for c in copies],
                                kept={n: c for n, c in zip(inputs, copies, strict=True)
                                      if n in keep} if writes else {},
                                writes=writes, owners=_owners(copies))

    def add_strided(self, copy: Any, name: str, user: np.ndarray,
                    keep: set[str] | frozenset[str] = frozenset(),
                    writes: bool = False) -> None:
        """Note that ``copy``, contiguous, is the device copy of ``user``, a strided
        writeable view (:class:`StridedHome`; ``writes``: the source changes it in place
        through its name)."""
        key, _, offset = self.be.allocation(copy)
        self.by_key[key] = StridedHome(np.empty(0, np.uint8), offset, {name: user},
                                       [weakref.ref(copy)],
                                       kept={name: copy} if name in keep else {}, user=user,
                                       copy_strides=tuple(copy.strides), writes=writes,
                                       owners=_owners([copy]))

    def _made(self, stored: set[str] | frozenset[str]) -> set[str] | frozenset[str]:
        """The inputs of ``stored`` whose copies the run changed (``made``, once settled)."""
        return stored if self.made is None else stored & self.made

    def settle(self, unseen: set[str], made: set[str] | frozenset[str]) -> None:
        """Take what the run did to the inputs: ``unseen``, those it changed through another
        name than their own; ``made``, those whose copies the run may have changed (in
        place, or seen changed by the input watch), not those it may change and left as
        they were (``if c: X += 1``, ``if c: X = X * 2``: :class:`~.inputwrites.InputWatch`):
        a home none of them lies in is not written back, the user's array holding the
        bytes. Raise where a strided view with a contiguous copy (:class:`StridedHome`)
        changed unseen: whether NumPy's change would reach the array it views (``X[1:]`` a
        view, ``X.ravel()`` a copy) the copy cannot tell."""
        self.made = made
        for home in self.by_key.values():
            name = next(iter(home.inputs))  # a strided home holds one input
            if isinstance(home, StridedHome) and not home.writes and name in unseen:
                raise CellError(
                    f"the cell changed {name!r}, a strided view of another array, through "
                    f"another name (a view, a reshape, a function it was passed to); its "
                    f"device copy is laid out apart from that array, so whether the change "
                    f"reaches it, as NumPy decides, cannot be followed; change it through its "
                    f"name ({name}[...] = ..., {name} += ...), or make it a copy in a plain "
                    f"cell first ({name} = {name}.copy())")

    def write_changed(self, work: dict[str, Any], stored: set[str] | frozenset[str]
                      ) -> list[tuple[str, str]]:
        """Write back the homes held for inputs changed in place that no committed name
        wrote; each such input with how the cell left its name (``work``): ``"deleted"``,
        ``"rebound"``, or ``""`` (still its copy: shown mid-cell). Only a copy the run
        changed is written (``stored``: the inputs the input watch found changed, too): one
        held for a change the source may make (``if c: Y += 1``) and did not make would undo
        a change of the user's array made meanwhile through the host. The held copies go."""
        done: list[tuple[str, str]] = []
        stored = self._made(stored)
        for home in self.by_key.values():
            if home.kept and not home.written and stored.intersection(home.kept):
                home.write(self.be, self.be.allocation(next(iter(home.kept.values())))[1])
                done += [(n, "deleted" if n not in work else "" if work[n] is c
                          else "rebound") for n, c in sorted(home.kept.items())]
            home.kept = {}
        return done

    def host_of(self, value: Any, stored: set[str]) -> np.ndarray | None:
        """``value`` (a device array the cell commits) as the user's array or a view of it,
        its home written back first if the cell stored one of its inputs; ``None`` where it
        lies in no home."""
        if not self.by_key or not in_device_memory(value, self.be) or not value.size:
            return None
        key, whole, offset = self.be.allocation(value)
        home = self.by_key.get(key)
        if home is None or not home.lives(self.be, key):
            return None  # nothing of its copies lives: the key names another allocation now
        at = offset - home.start
        low, high = byte_span(at, value)
        if low < 0 or high > home.nbytes:
            return None
        if self._made(stored).intersection(home.inputs):
            if not home.writes:  # changed where NumPy's copy would not be: a new array
                return None
            home.write(self.be, whole)
        return home.own(value, at)


def _owners(copies: list[Any]) -> list[weakref.ref[Any]]:
    """Weak references to the arrays ``copies`` are views of (their ``base``)."""
    return [weakref.ref(c.base) for c in copies
            if getattr(c, "base", None) is not None and _weakly(c.base)]


def _weakly(obj: Any) -> bool:
    try:
        weakref.ref(obj)
    except TypeError:  # a base that is no array (bytes, an mmap)
        return False
    return True


def in_device_memory(value: Any, be: Backend) -> bool:
    """Whether ``value`` is an array with bytes in the backend's device memory, which
    :meth:`~cupy_magic.backend.Backend.allocation` can place: a device array, or on the CPU
    fallback a NumPy array (its copies; its "device" ones only once committed), not one of
    references (``dtype=object``, ``StringDType``), which has no bytes to view."""
    return (be.is_device_array(value) or (not be.is_gpu and issubclass(type(value), np.ndarray))) \
        and not (value.dtype.hasobject or value.dtype.kind == "T")


def input_homes(plan: CellPlan, moved: dict[str, Any], dtype: str | None,
                be: Backend, to_host: bool | set[str] = True,
                unseen: frozenset[str] = frozenset()) -> Homes:
    """The homes of the inputs ``moved`` holds the device copies of (see the module); the
    copies of inputs changed in place whose names come to the host (``to_host``: all, or
    those) are held to the commit, and those of ``unseen`` (:attr:`~.plan.CellPlan.unseen`)."""
    homes = Homes(be)
    keep = plan.in_place | unseen
    keep = keep if to_host is True else keep & to_host
    spans = shared_input_spans(plan, dtype)
    for group, span in spans.items():
        first = group[0]
        homes.add([moved[n] for n in group], span.host, -span.offsets[first],
                  {n: plan.inputs[n] for n in group}, keep)
    grouped = {n for group in spans for n in group}
    for name, arr in plan.inputs.items():
        copy = moved.get(name)
        if name in grouped or copy is None or cast_target(arr, dtype) != arr.dtype:
            continue
        # the same items as the user's: a byte order the device does not hold is swapped
        if copy.shape != arr.shape or copy.dtype != arr.dtype or not arr.size:
            continue
        if (arr.flags.c_contiguous or arr.flags.f_contiguous) and copy.strides == arr.strides:
            homes.add([copy], arr.reshape(-1, order="A").view(np.uint8), 0, {name: arr}, keep)
        elif arr.flags.writeable and (copy.flags.c_contiguous or copy.flags.f_contiguous) \
                and items_apart(arr):
            homes.add_strided(copy, name, arr, keep, writes=name in plan.in_place)
    return homes


def view_kinds(plan: CellPlan, dtype: str | None) -> dict[str, str]:
    """How each input's unchanged device copy comes back under ``--to-host``, read before
    anything moves: ``"views"`` where the copy and the views the cell makes of it come back
    as the user's array and views of it (a home of the contiguous kind, or the stretch of a
    group sharing memory); ``"whole"`` where only the copy itself does (a
    :class:`StridedHome`: ``x[1:]`` comes back a new array); an input not named comes back
    as new arrays (cast by ``--dtype``, a byte order the device does not hold, a read-only
    strided view). :func:`~.heldwrites.stale_read` allows such reads after a change through
    a holder, where they show the user's array as the change left it."""
    kinds = {n: "views" for group in shared_input_spans(plan, dtype) for n in group}
    for name, arr in plan.inputs.items():
        if name in kinds or cast_target(arr, dtype) != arr.dtype or not arr.dtype.isnative \
                or not arr.size:
            continue
        if arr.strides in (_strides(arr.shape, arr.itemsize), _strides(
                arr.shape[::-1], arr.itemsize)[::-1]):  # C or F order, as the device copy's
            kinds[name] = "views"
        elif arr.flags.writeable and items_apart(arr):
            kinds[name] = "whole"
    return kinds


def _strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The strides of a C-ordered array of ``shape``: those CuPy gives its copy."""
    out, step = [], itemsize
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))
