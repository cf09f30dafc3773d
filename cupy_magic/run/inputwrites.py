"""Inputs a cell changed in place through another name than their own.

The cell's source shows ``x[0] = 1`` as a change of ``x`` (``CellPlan.stored``), but not
``y = x; y += 1``, ``r = x[0]; r[:] = 0`` or ``center(x)`` with ``def center(a): a -= a.mean()``.
A plain cell leaves ``x`` changed after all of them, so the run asks the backend which device
copies changed (:meth:`~cupy_magic.backend.Backend.watch`, ``changed``), or changed their shape,
strides or dtype in place (``y = x; y.shape = (2, 3)``), and commits those as if the source
had shown it. A read-only input (``x.flags.writeable`` false) the cell changed is
refused, as NumPy refuses the write, where its copy cannot be read-only (CuPy's); on the CPU
fallback the copy is read-only too, so the write itself raises NumPy's error at its line, and
a cell that makes it writeable first (``x.flags.writeable = True``) may write it, as NumPy
lets it.

It also watches the inputs a cell may change or rebind but need not (``unsure``:
``if c: x += 1``, ``if c: x = x * 2``, ``x = np.asarray(x)``): where the run left the copy as
it was and the name still holds it, the cell did nothing to ``x``, and writing the copy back,
or binding ``x`` to it, would undo a change the cell made to the user's array through the
host (``L[0][:] = -1``) and leave ``x`` another object than ``L[0]``. Those copies are held
weakly: a rebinding that ran lets the copy go, as it does unwatched, and a copy gone is taken
for changed (it is not what the name holds, so nothing is left as it was).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..backend import Backend
from ..backend.writes import holders
from .errors import CellError

__all__ = ["InputWatch", "layout", "unseen_change"]

_NONE: frozenset[str] = frozenset()


def _writeable(arr: Any) -> bool:
    """Whether NumPy lets the cell write ``arr`` (a device array: always)."""
    return bool(getattr(arr.flags, "writeable", True))


def layout(arr: Any) -> tuple[Any, ...]:
    """What a change of ``arr``'s metadata alters (``y = x; y.shape = (2, 3)`` reshapes
    ``x`` in a plain cell, ``x.flags.writeable = False`` makes it read-only) and its bytes'
    fingerprint does not see."""
    return arr.shape, arr.strides, arr.dtype, _writeable(arr)


class InputWatch:
    """The device copies of a cell's inputs that may change unseen, watched from their upload
    to the cell's end."""

    def __init__(self, inputs: dict[str, Any], stored: set[str], moved: dict[str, Any],
                 be: Backend, only_read: frozenset[str] = frozenset(),
                 overlaps: tuple[tuple[str, ...], ...] = (),
                 unsure: frozenset[str] = frozenset()) -> None:
        # the names the source does not show changing, and the read-only ones whose copies
        # cannot be read-only (a GPU's): refused if changed, even through their own name,
        # but for one sharing memory with a writeable input (changed through that one, as
        # NumPy lets it) that the source does not show changing
        self.inputs = inputs
        through = {n for g in overlaps if any(_writeable(inputs[m]) for m in g)
                   for n in g if n not in stored}
        self.unguarded = {n for n in moved if n in inputs and not _writeable(inputs[n])
                          and not hasattr(moved[n].flags, "writeable") and n not in through}
        self.names = [n for n in moved if n in inputs and n not in only_read
                      and (n not in stored or n in self.unguarded or n in unsure)]
        self.be = be
        self._changed: set[str] | None = None
        self.copies: list[Any] = []
        self.layouts: list[tuple[Any, ...]] = []
        self.token = None
        if self.names:
            copies = [moved[n] for n in self.names]
            weak = [n in unsure and n not in self.unguarded for n in self.names]
            self.copies = holders(copies, weak)
            self.layouts = [layout(c) for c in copies]
            self.token = be.watch(copies, weak)
        # the unsure inputs' copies, held weakly, to see whether their names hold them at the
        # end: those the source can only read (`if c: x = x * 2`) need no fingerprint
        kept = [n for n in unsure if n in moved and n in inputs]
        self.kept = dict(zip(kept, holders([moved[n] for n in kept], [True] * len(kept)),
                             strict=True))

    def changed(self) -> set[str]:
        """The watched inputs whose copies the cell changed (read once, after the run); a
        read-only one raises."""
        if self.token is None:
            return set()
        if self._changed is not None:
            return self._changed
        changed = self._changed = {
            n for n, c, held, was in zip(self.names, self.be.changed(self.token), self.copies,
                                         self.layouts, strict=True)
            if c or (copy := held()) is None or layout(copy) != was}  # c: a copy gone
        for name in sorted(changed):
            if name in self.unguarded:
                raise CellError(
                    f"the cell changed {name!r}, which is read-only ({name}.flags.writeable is "
                    "False), where NumPy raises 'ValueError: assignment destination is "
                    f"read-only'; make it writeable in a plain cell first ({name}.flags."
                    f"writeable = True), or change a copy ({name} = {name}.copy())")
        return changed

    def gone(self) -> set[str]:
        """The watched inputs whose copies nothing holds after the run (rebound to new
        memory, ``x = x * 2``): :meth:`changed` reads each as changed, not knowing."""
        return {n for n, held in zip(self.names, self.copies, strict=True) if held() is None}

    def unmade(self, work: dict[str, Any]) -> tuple[frozenset[str], frozenset[str]]:
        """The ``unsure`` inputs whose copies the run left as they were, and of those the ones
        whose names still hold their copies (``work``: the cell's namespace after it)."""
        if not self.kept:
            return _NONE, _NONE  # no allocation: on the CPU fallback tracemalloc counts each
        left = frozenset(self.kept.keys() - self.changed())
        return left, frozenset(n for n in left
                               if (copy := self.kept[n]()) is not None and work.get(n) is copy)

    def refuse_unseen(self, run: str) -> None:
        """Raise if the cell changed a watched input: ``run`` (a batched run, a run over
        several devices) cannot write back a change its source does not show. This watches
        the first batch; :class:`~.batchwatch.BatchWatch` the others."""
        changed = self.changed()
        if changed:
            raise CellError(unseen_change(sorted(changed)[0], run))

    def commit_plan(self, plan: Any) -> Any:
        """``plan`` with the inputs the cell changed unseen among the names it stores."""
        changed = self.changed()
        return replace(plan, stored=plan.stored | changed) if changed - plan.stored else plan


def unseen_change(name: str, run: str, batch: int = 0) -> str:
    """The refusal of a change to the input ``name`` that the source does not show, made in
    ``run`` (a batched run, a run over several devices), in its batch ``batch`` (1-based;
    0: the first, said without a number; -1: any, to the one copy all batches share)."""
    where = f" in batch {batch}" if batch > 1 else " (one copy all batches share)" \
        if batch < 0 else ""
    return (f"the cell changes {name!r}{where} through another name than its own (an alias, "
            f"a view or a function it is passed to), which {run} cannot write back; change "
            f"it through its name ({name}[...] = ..., {name} += ...), or run the cell whole "
            "(a larger budget, no --batch)")
