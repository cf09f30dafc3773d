"""A cluster run's NumPy input that every block changed in place (``x *= 2``): its rows,
gathered under ``--to-host``, are written into the user's array at the commit, so that the
name stays that object and its earlier views and lists see the change, as after a plain cell
(:mod:`cupy_magic.run.batchjoin` does the same for a batched run in this kernel). Without
``--to-host`` the result stays a Dask array on the workers and the user's array as it was,
as a whole run leaves its device copy. Refused: blocks that change it and blocks that rebind
it, and a change in place followed by a rebinding or a ``del`` of a result that comes home
(only the new value comes back).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..run.batchjoin import lost_change, mixed_change
from ..run.errors import CellError
from ..run.plan import CellPlan

__all__ = ["changed_in_place", "write_home"]


def changed_in_place(plan: CellPlan, namespace: dict[str, Any], infos: list[dict[str, Any]],
                     batched: tuple[str, ...], home: set[str] | bool) -> list[str]:
    """The NumPy inputs of ``batched`` whose gathered rows go into the user's arrays;
    ``infos``: the blocks' (:func:`~.worker.block_info`), each with the names its block left
    on its copy (``stats.kept``); ``home``: the names that come to the host (``True``: all)."""
    names = []
    for name in batched:
        user = plan.inputs.get(name)
        if name not in plan.stored or user is None or not (home is True or name in home):
            continue
        kept = [name in info["stats"].kept for info in infos]
        differs = next((j for j, k in enumerate(kept) if k != kept[0]), None)
        if differs is not None:
            raise CellError(mixed_change(name, kept[0], differs, "block"))
        if not kept[0]:
            if name in plan.in_place:
                present = all(name in info["names"] for info in infos)
                then = f"binds {name!r} to a new value" if present else "deletes it"
                raise CellError(lost_change(name, then, "cluster"))
            continue
        if user is namespace.get(name) and user.flags.writeable:
            names.append(name)
    return names


def write_home(names: list[str], results: dict[str, Any], namespace: dict[str, Any]) -> None:
    """At the commit: the gathered rows of ``names`` into the user's arrays, which the names
    stay (:func:`changed_in_place` chose them)."""
    for name in names:
        np.copyto(namespace[name], results[name])
        results[name] = namespace[name]
