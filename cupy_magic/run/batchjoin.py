"""What the batches of a streamed run leave, and how they are joined: each stored name of a
batch sorted into a row result (copied into its full-length host array), a ``--reduce``
partial, or a Python value every batch must agree on; refused with the rule to name where
none of these fits (:class:`~.batched.BatchRun` runs the batches).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import numpy as np

from ..backend import Backend
from ..units import short_repr
from .batching import RULES, BatchOptions
from .errors import CellError
from .plan import CellPlan
from .reduce import agree, combine, compared, name_a_rule, over_rows, rows_by_chance

__all__ = ["BatchJoin", "lost_change", "mixed_change"]


_WHOLE = {"batched": "run the cell whole (no --batch, a larger budget)",
          "cluster": "run the cell in this kernel (no --cluster)"}


def lost_change(name: str, then: str, run: str) -> str:
    """Why an input a ``run`` (``"batched"``, ``"cluster"``) gathers, changed in place and
    then rebound or deleted (``then``), is refused: only the new value comes back."""
    return (f"the cell may change {name!r} in place and then {then}: a plain cell leaves "
            f"that change in the user's array, which a {run} run cannot write back; make the "
            f"change on a new array ({name} = {name} + 1, not {name} += 1), or {_WHOLE[run]}")


def mixed_change(name: str, first_kept: bool, i: int, unit: str) -> str:
    """Why batches (``unit``: ``"batch"``, ``"block"``) that change ``name`` in place and
    others that rebind it are refused; ``i``: the 0-based one that differs from the first."""
    first = "changed" if first_kept else "rebound"
    this = "rebound" if first_kept else "changed"
    return (f"the first {unit} {first} {name!r} and {unit} {i + 1} {this} it: a plain cell "
            f"changes the user's array in place or binds {name!r} to a new one for all of its "
            "rows at once; decide it for the whole array before the cell, or "
            f"{_WHOLE['cluster' if unit == 'block' else 'batched']}")


class BatchJoin:
    """The joining half of :class:`~.batched.BatchRun`, which makes every attribute named
    here."""

    plan: CellPlan
    namespace: dict[str, Any]
    opts: BatchOptions
    be: Backend
    eng: Any
    total: int
    inputs: dict[str, np.ndarray]
    specs: dict[str, tuple[tuple[int, ...], np.dtype]]
    out: dict[str, np.ndarray]
    written: dict[str, int]
    constants: dict[str, tuple[Any, int]]
    partials: dict[str, list[tuple[Any, int]]]
    partial_rows: dict[str, np.ndarray]
    first_slot: int
    last_work: dict[str, Any]
    first: list[tuple[str, Any]]
    may_leave: frozenset[str]
    left: set[str]
    touched: set[str]
    maybe_in_place: frozenset[str]
    moved_in_place: set[str]
    uploads: dict[str, Callable[[], Any]]
    in_place_rows: set[str]
    absent: set[str]  # the batched inputs the cell only read and then deleted (last batch)

    def collect(self, i: int, a: int, b: int, slot: int, work: dict[str, Any],
                given: dict[str, Callable[[], Any]]) -> None:
        """Take what batch ``i`` (rows ``a:b``, run on ``slot``) left in ``work``; ``given``:
        weak references to the copies it got of the inputs it may leave as they were
        (``may_leave``)."""
        rows = b - a
        for name in sorted(self.plan.stored):
            if name not in work:
                if name in self.uploads and name in self.plan.in_place:
                    raise CellError(lost_change(name, "deletes it", "batched"))
                continue
            value = work[name]
            if name in given and self._left(name, value is given[name](), i):
                continue
            if name in self.uploads:  # a batched input: its copy, or rebound?
                self._kept(name, value is not None and value is self.uploads[name](), i)
            if name in self.opts.reduce:
                self.keep_partial(i, slot, name, value, rows)
                continue
            is_array = isinstance(value, np.ndarray) or self.be.is_device_array(value)
            if not is_array:
                if isinstance(value, np.generic) and name not in self.plan.row_free:
                    # data: a per-batch reduction needs a rule (a constant is kept, below)
                    raise CellError(self._no_rule(name, value, rows))
                if name in self.plan.over_rows:  # n = len(x): a batch's, even if all agree
                    raise CellError(self._no_rule(name, value, rows, over=True))
                if not (callable(value) or isinstance(value, types.ModuleType)):
                    # numbers, strings, lists...: kept only if every batch agrees on them
                    self._same_in_every_batch(name, value, i)
                continue
            if name in self.plan.row_free:  # c = np.sqrt(2.0) under CuPy, mu = np.array([..])
                self._same_in_every_batch(name, compared(value, self.be.to_host), i)
                continue
            has_rows = value.ndim >= 1 and value.shape[0] == rows
            if has_rows and name in self.plan.over_rows:  # np.histogram(v, bins=rows)[0]
                raise CellError(rows_by_chance(name, f"{value.dtype} {value.shape}", rows, "batch"))
            if i == 0 and has_rows:
                self.specs[name] = (tuple(value.shape[1:]), np.dtype(value.dtype))
                self.written[name] = 0
            spec = self.specs.get(name)
            if spec is None:
                raise CellError(self._no_rule(name, value, rows))
            if not has_rows or tuple(value.shape[1:]) != spec[0] or value.dtype != spec[1]:
                raise CellError(
                    f"the cell's result {name!r} is {value.dtype} {tuple(value.shape)} in batch "
                    f"{i + 1} ({rows} rows) but {spec[1]} (rows, *{spec[0]}) in the first batch; "
                    f"a row result must keep one row per input row, or name a rule: "
                    f"--reduce {name}=concat (or {', '.join(RULES[:-1])})")
            if i == 0:  # outputs are allocated once the first batch is measured
                self.first.append((name, value))
            else:
                self.eng.download(slot, name, value, self.out[name], a, b)
            self.written[name] += rows
        # The other names are kept from the last batch (see tail). Row and reduced results,
        # and the rows of the inputs the cell only reads (tail gives the user's arrays back),
        # are dropped now: their device memory goes back to the slot's pool arena, and the next
        # batch does not run beside them (the first batch, which sizes the rest, did not).
        read_only = [n for n in self.inputs if n not in self.plan.stored]
        absent = {n for n in read_only if n not in work}  # `del x`: not the user's again
        if i and absent != self.absent:
            name = sorted(absent ^ self.absent)[0]
            raise CellError(_rows_decide(
                f"batch {i + 1} {'deleted' if name in absent else 'kept'} {name!r} and the first "
                f"batch {'kept' if name in absent else 'deleted'} it"))
        self.absent = absent
        for name in (*self.specs, *self.opts.reduce, *read_only, *self.left):
            work.pop(name, None)
        self.last_work = work

    def _left(self, name: str, left: bool, i: int) -> bool:
        """Whether batch ``i`` left the input ``name`` as it got it (``left``); refused where
        the first batch did otherwise: a plain cell leaves it the user's array
        (``if c: X = X * 2`` with ``c`` false) or rebinds it, for all of its rows at once."""
        if i == 0:
            if left:
                self.left.add(name)
        elif left != (name in self.left):
            first = f"rebound {name!r}" if left else f"left {name!r} as it was"
            this = "left it as it was" if left else "rebound it"
            raise CellError(_rows_decide(f"the first batch {first} and batch {i + 1} {this}"))
        return left

    def _kept(self, name: str, kept: bool, i: int) -> None:
        """Note whether batch ``i`` left the batched input ``name`` its copy of the rows,
        changed in place (``kept``), or rebound it; refused where batches differ, and where
        the source may change it in place before rebinding it."""
        if not kept and name in self.plan.in_place:
            raise CellError(lost_change(name, f"binds {name!r} to a new value", "batched"))
        if i == 0:
            if kept:
                self.in_place_rows.add(name)
        elif kept != (name in self.in_place_rows):
            raise CellError(mixed_change(name, name in self.in_place_rows, i, "batch"))

    def write_in_place(self, final: dict[str, Any]) -> list[str]:
        """At the commit: write the gathered rows of each batched input every batch changed in
        place into the user's array, which the name stays, as after a plain cell (its views
        and the lists holding it see the change); one cast by ``--dtype`` comes back a new
        array, as from a whole run. Returns the names written."""
        written = []
        for name in sorted(self.in_place_rows):
            user, rows = self.inputs[name], final.get(name)
            if (rows is not None and rows is self.out.get(name) and user is
                    self.namespace.get(name) and rows.dtype == user.dtype
                    and rows.shape == user.shape and user.flags.writeable):
                self.eng.copy_home(user, rows)
                final[name] = user
                written.append(name)
        return written

    def keep_partial(self, i: int, slot: int, name: str, value: Any, rows: int) -> None:
        """Keep batch ``i``'s ``--reduce`` partial ``name``: a device array is copied (on
        ``slot``'s stream) to row ``i`` of its host buffer where :meth:`rows_for_partials`
        made one, so that the partials of many batches do not pile up on the device (CuPy
        holds at least 512 bytes for each; under a small budget hundreds of batches ran over
        it); the device copy then goes back to the slot's pool arena."""
        buf = self.partial_rows.get(name)
        if (buf is not None and self.be.is_device_array(value)
                and (tuple(value.shape), value.dtype) == (buf.shape[1:], buf.dtype)):
            row = buf[i:i + 1].reshape(value.shape)  # a view, filled when the slot is done
            self.eng.download_small(slot, value, row)
            value = row
        self.partials.setdefault(name, []).append((value, rows))

    def rows_for_partials(self, batches: int) -> None:
        """Once the batches are counted: a page-locked host row per batch for each
        ``--reduce`` partial the first batch left as a device array (not ``concat``, whose
        partials differ in length), the first batch's copied into row 0."""
        for name, parts in self.partials.items():
            value, rows = parts[0]  # the first batch's, the only one so far
            if self.opts.reduce[name] == "concat" or not self.be.is_device_array(value):
                continue
            self.partial_rows[name] = self.eng.small_rows(name, (batches, *value.shape),
                                                          value.dtype)
            parts.clear()
            with self.eng.on(self.first_slot):  # behind batch 0 on its stream: the host
                self.keep_partial(0, self.first_slot, name, value, rows)  # reads it drained

    def more_partial_rows(self, batches: int) -> None:
        """The batches were resized into more of them (:mod:`.inflight`): each ``--reduce``
        partial's host rows made again for ``batches``, those kept so far copied over (the
        streams drained first: their copies into the old rows done)."""
        for name, buf in list(self.partial_rows.items()):
            if len(buf) >= batches:
                continue
            self.eng.drain()
            rows = self.eng.small_rows(f"{name}:{batches}", (batches, *buf.shape[1:]), buf.dtype)
            rows[:len(buf)] = buf
            self.partial_rows[name] = rows
            self.partials[name] = [
                (rows[j:j + 1].reshape(v.shape) if isinstance(v, np.ndarray)
                 and np.shares_memory(v, buf) else v, n)
                for j, (v, n) in enumerate(self.partials[name])]

    def joined(self, name: str, parts: list[tuple[Any, int]]) -> Any:
        """The partials of ``name`` joined by its rule: on the host where every batch's
        was copied there (the result then goes to the device once), else on the device."""
        rule, xp, on_device = self.opts.reduce[name], self.be.xp, self.be.is_device_array
        if name in self.partial_rows:
            if not any(on_device(v) for v, _ in parts):
                return xp.asarray(combine(rule, parts, np))
            parts = [(v if on_device(v) else xp.asarray(v), r) for v, r in parts]
        return combine(rule, parts, xp)

    def forget(self) -> None:
        """Drop everything the batches left so far (a first batch measured again)."""
        for table in (self.specs, self.written, self.constants, self.partials,
                      self.partial_rows, self.left, self.touched, self.moved_in_place,
                      self.in_place_rows):
            table.clear()
        self.first.clear()
        self.last_work = {}

    def tail(self) -> dict[str, Any]:
        """The last batch's other results; unrebound batched inputs: the user's arrays."""
        kept = dict(self.last_work)
        for name in self.inputs:
            if name not in self.specs and name not in self.plan.stored | self.absent:
                kept[name] = self.namespace[name]
        for name in self.left:  # `if c: X = X * 2` that no batch ran: the user's X
            kept[name] = self.namespace[name]
        return kept

    def _same_in_every_batch(self, name: str, value: Any, i: int) -> None:
        """A Python value (a loop counter, a constant) is kept if every batch agrees on it."""
        if name not in self.constants:
            self.constants[name] = (value, i)
            return
        first, j = self.constants[name]
        if not agree(value, first):
            raise CellError(
                f"the cell's result {name!r} is {short_repr(first)} in batch {j + 1} but "
                f"{short_repr(value)} in batch {i + 1}: it depends on the batch, so the "
                f"batches' values cannot be joined; {name_a_rule(name, value)}")

    def _no_rule(self, name: str, value: Any, rows: int, over: bool = False) -> str:
        shape = getattr(value, "shape", None)
        what = (f"{type(value).__module__.split('.')[0]} array {value.dtype} {tuple(shape)}"
                if shape is not None else type(value).__name__)
        if over:  # a number the row check saw made over the batch's rows (len(x), a total)
            return over_rows(name, f"{what} {short_repr(value)}", rows, "batch", value)
        return (f"the cell's result {name!r} ({what}) has no row axis of the batch's {rows} "
                f"rows, so the batches' values cannot be joined; {name_a_rule(name, value)}")

    def results(self) -> dict[str, Any]:
        """What the cell leaves: gathered rows, joined partials, and the last batch's rest."""
        unwritten = [n for n, w in self.written.items() if w != self.total]
        if unwritten:
            raise CellError(f"the cell assigned {', '.join(unwritten)} in some batches only, "
                            "so rows would be missing; assign it in every batch")
        final = self.tail()
        final.update(self.out)
        for name in self.maybe_in_place - self.moved_in_place:  # `if c: X += 1`, no batch ran
            if name in final:  # it: the user's X, as in a plain cell (its rows gathered equal)
                final[name] = self.namespace[name]
        for name, parts in self.partials.items():
            final[name] = self.joined(name, parts)
        return final


def _rows_decide(what: str) -> str:
    """The refusal of batches that did different things (``what``) a plain cell does once."""
    return (f"{what}: which one depends on the rows, where a plain cell does one or the other "
            "for all of them; decide it for the whole array before the cell (a condition "
            "computed in a plain cell), or run the cell whole (no --batch, a larger budget)")
