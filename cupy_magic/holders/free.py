"""``%vram_who --free``: drop a holder, release the cached blocks, measure what came back.

Targets: a user name (deleted only because the command names it), ``Out`` (the output
cache entries that hold arrays: ``Out[n]``, ``_n``, and ``_``, ``__``, ``___`` when they
do), ``traceback`` (the last traceback's frames are cleared and ``sys.last_*`` dropped), and
``all-unnamed`` (``Out`` and ``traceback``: every holder that is not one of your names).
IPython's own copies (its displayhook's ``_``, its traceback formatter's) are dropped by
the caller, which knows the shell; this module knows none.
"""

from __future__ import annotations

import gc
import sys
import traceback
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..backend import Backend
from ..units import format_bytes
from .account import listed
from .records import allocation
from .walk import Found, is_output_name, last_tracebacks, reaches, user_names, walk

__all__ = ["FREE_TARGETS", "FreeError", "FreeResult", "drop", "free", "shell_copies"]

FREE_TARGETS = ("Out", "traceback", "all-unnamed")  # besides the user's own names


class FreeError(ValueError):
    """A ``--free`` target that names nothing to drop; the message says the fix."""


@dataclass
class FreeResult:
    """What ``--free`` dropped and what the device (or host memory) got back, measured."""

    dropped: list[str] = field(default_factory=list)
    returned: int = 0
    before: int = 0
    after: int = 0
    cached_released: int = 0
    cached_kept: int = 0  # free blocks left in allocations that still hold live arrays
    measured_by: str = ""
    still_held: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        what = ", ".join(self.dropped) or "nothing"
        text = (f"dropped {what}; got back {format_bytes(self.returned)} "
                f"({self.measured_by}: {format_bytes(self.before)} -> "
                f"{format_bytes(self.after)}), of it {format_bytes(self.cached_released)} of "
                "cached blocks released")
        if self.cached_kept:
            text += (f"; {format_bytes(self.cached_kept)} of cached blocks stay in the pool: "
                     "they are parts of allocations that still hold live arrays (CuPy gives "
                     "back whole allocations only)")
        if self.still_held:
            text += f". Still held elsewhere: {'; '.join(self.still_held)}"
        return text

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))


def _drop_out(namespace: dict[str, Any], be: Backend) -> list[str]:
    is_array = listed(be)
    dropped: list[str] = []
    out = namespace.get("Out")
    if isinstance(out, dict):
        for key in [k for k, v in out.items() if reaches(v, is_array)]:
            value = out.pop(key)
            dropped.append(f"Out[{key}]")
            if namespace.get(f"_{key}") is value:
                del namespace[f"_{key}"]
                dropped.append(f"_{key}")
    for name in [n for n in namespace if is_output_name(n)]:
        if reaches(namespace[name], is_array):
            if name in ("_", "__", "___"):
                namespace[name] = ""  # IPython's empty value for them (as %reset out leaves)
            else:
                del namespace[name]
            dropped.append(name)
    return dropped


def _drop_traceback() -> list[str]:
    tbs = last_tracebacks()
    for tb in tbs:
        traceback.clear_frames(tb)
        entry: Any = tb
        while entry is not None:  # before 3.13 a frame keeps the f_locals dict it was read
            entry.tb_frame.f_locals  # into; reading it after clear() empties that copy  # noqa: B018
            entry = entry.tb_next
    for name in ("last_traceback", "last_value", "last_type", "last_exc"):
        if getattr(sys, name, None) is not None:
            setattr(sys, name, None)
    return ["the last traceback"] if tbs else []


def drop(targets: list[str], namespace: dict[str, Any], be: Backend) -> list[str]:
    """Drop the holders named by ``targets``; return what was dropped.

    Raises
    ------
    FreeError
        For a target that is neither a user name holding an array nor one of
        :data:`FREE_TARGETS`.
    """
    names, is_array = user_names(namespace), listed(be)
    if not targets:
        raise FreeError(f"--free needs what to drop: a name %vram_who lists, or "
                        f"{', '.join(FREE_TARGETS)}; e.g. %vram_who --free Out "
                        "(vram_free('Out') from Python)")
    for target in targets:
        if target in FREE_TARGETS:
            continue
        if target not in namespace or target not in names:
            raise FreeError(f"--free {target}: no variable of yours is named {target!r}; give "
                            f"a name that %vram_who (vram_holders() from Python) lists, or "
                            f"{', '.join(FREE_TARGETS)}")
        if not reaches(namespace[target], is_array):
            raise FreeError(f"--free {target}: {target} holds no {_kind(be)} array "
                            f"({type(namespace[target]).__name__}), so nothing was deleted; "
                            "give a name that %vram_who (vram_holders() from Python) lists")
    dropped: list[str] = []
    for target in dict.fromkeys(targets):
        if target in ("Out", "all-unnamed"):
            dropped += _drop_out(namespace, be)
        if target in ("traceback", "all-unnamed"):
            dropped += _drop_traceback()
        if target not in FREE_TARGETS:
            del namespace[target]
            dropped.append(target)
    return dropped


def _kind(be: Backend) -> str:
    return "device" if be.is_gpu else "device (CPU fallback)"


def _measure(be: Backend) -> int:
    if be.is_gpu:
        return be.device_memory()[0]
    return be.resident_bytes()  # type: ignore[attr-defined]


def free(targets: list[str], namespace: dict[str, Any], be: Backend,
         drop_shell_copies: Any = None) -> FreeResult:
    """Drop ``targets`` (:func:`drop`), collect garbage, release the pool's cached blocks,
    and measure what came back.

    ``drop_shell_copies(targets)``, when given, drops the shell's own copies (IPython's
    displayhook and traceback formatter) before the memory is measured.
    """
    # the background first launch allocates (cuBLAS, a 32 MiB upload probe) for ~0.3 s from
    # load on; measured across it, a free right after load found more memory in use after
    # than before and said 0 B came back (the likely cause of test_who's 0 B on an H100:
    # 804 MB in use before, 863 MB after)
    be.preheated.wait(30)
    before = _measure(be)
    watched = _watch(targets, namespace, be)
    result = FreeResult(before=before, measured_by="cudaMemGetInfo used" if be.is_gpu
                        else "host memory of the arrays cells made")
    result.dropped = drop(targets, namespace, be)
    if drop_shell_copies is not None:
        drop_shell_copies(targets)
    gc.collect()
    result.cached_released = be.free_cached()
    result.cached_kept = be.stats().cached_free
    result.after = _measure(be)
    result.returned = max(0, result.before - result.after)
    result.still_held = _still_held(watched, namespace, be)
    return result


def _still_held(watched: list[Any], namespace: dict[str, Any], be: Backend) -> list[str]:
    """Where the arrays the dropped holders held are still held, if anywhere."""
    alive = {id(a): a for a in (r() for r in watched) if a is not None}
    again = walk(namespace, listed(be)).found
    held = []
    for key, array in alive.items():
        found = again.get(key)
        if found is not None:
            held.append(f"{found.paths[0]} (%vram_who --free {found.roots[0]})")
            continue
        views = [f for f in again.values() if allocation(f.array)[0] == allocation(array)[0]]
        if views:  # a view the walk lists keeps the dropped array's whole allocation alive
            held += [_view_holder(f, allocation(array)[1]) for f in views]
            continue
        held.append(f"an array of {format_bytes(array.nbytes)} held where %vram_who does "
                    "not look (inside a library, a module's class, or another thread)")
    return held


def _view_holder(view: Found, nbytes: int) -> str:
    """The line for a view that keeps a dropped array's allocation of ``nbytes`` alive."""
    path = view.paths[0]
    return (f"{path}, a view of it, keeps its whole {format_bytes(nbytes)} alive (del {path}, "
            f"or {path} = {path}.copy() to keep only its own "
            f"{format_bytes(int(view.array.nbytes))}; %vram_who --free {view.roots[0]})")


def _watch(targets: list[str], namespace: dict[str, Any], be: Backend) -> list[Any]:
    """Weak references to the arrays the targets hold (no strong one outlives this call)."""
    roots = {r for t in targets for r in (("Out", "traceback") if t == "all-unnamed" else (t,))}
    return [weakref.ref(f.array) for f in walk(namespace, listed(be)).found.values()
            if roots.intersection(f.roots) and _weakable(f.array)]


def _weakable(obj: Any) -> bool:
    try:
        weakref.ref(obj)
    except TypeError:
        return False
    return True


def shell_copies(shell: Any, be: Backend) -> Callable[[list[str]], None]:
    """A function that drops IPython's own copies of what ``--free`` drops, reached through
    the shell object given (duck-typed; nothing here imports IPython): its displayhook's
    ``_``, ``__``, ``___``, the hidden ``_n`` names, the last execution result, and the
    traceback its formatter keeps."""
    is_array = listed(be)

    def drop_copies(targets: list[str]) -> None:
        if {"Out", "all-unnamed"} & set(targets):
            hook = getattr(shell, "displayhook", None)
            for attr in ("_", "__", "___"):  # names ending in __ are not mangled
                if reaches(getattr(hook, attr, None), is_array):
                    setattr(hook, attr, "")
            hidden = getattr(shell, "user_ns_hidden", {})
            for key in [k for k, v in hidden.items()
                        if is_output_name(k) and reaches(v, is_array)]:
                del hidden[key]
            last = getattr(shell, "last_execution_result", None)
            if reaches(getattr(last, "result", None), is_array):
                last.result = None
        if {"traceback", "all-unnamed"} & set(targets):
            formatter = getattr(shell, "InteractiveTB", None)
            if getattr(formatter, "tb", None) is not None:
                formatter.tb = None
    return drop_copies
