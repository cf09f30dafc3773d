"""The worker plugins: the backend and the budget in force on every worker, and (on a local
cluster) no worker log of the blocks the kernel reports itself.

Imported only once a cluster is used (it needs ``distributed``); workers import it by name.
"""

from __future__ import annotations

import logging
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from .. import backend as _backend
from ..backend import BudgetSpec, parse_budget

__all__ = ["BudgetPlugin", "QuietPlugin"]

TASK_PREFIX = "cupy-magic-"  # the keys of the blocks the kernel submits


class BudgetPlugin(WorkerPlugin):
    """A ``distributed`` worker plugin: each worker selects the backend (CuPy on a GPU
    worker) and sets the budget, which on a GPU is its CuPy pool's limit.

    Registered with ``Client.register_plugin``; ``setup`` runs on every worker, also on
    workers that join later.
    """

    name = "cupy-magic-budget"

    def __init__(self, backend: str | None, budget: BudgetSpec | None) -> None:
        self.backend, self.budget = backend, budget

    def setup(self, worker: Any = None) -> None:
        """Put the backend and the budget in force on this worker's process."""
        _backend.select(self.backend)
        be = _backend.current()
        # a fraction ("80%") means this worker's device, as it does the kernel's
        be.set_budget(None if self.budget is None
                      else parse_budget(self.budget.text, be.info().total_bytes))

    def teardown(self, worker: Any = None) -> None:
        """Leave the worker's budget off (the plugin was replaced or the worker closes)."""
        _backend.current().set_budget(None)


class _OwnFailures(logging.Filter):
    """Drops ``distributed.worker``'s "Compute Failed" records of cupy_magic's blocks."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Compute Failed"):
            return True
        return TASK_PREFIX not in record.getMessage()


class QuietPlugin(WorkerPlugin):
    """A worker plugin for the local cluster the kernel starts, whose workers write to the
    kernel's terminal: a failing block is reported by the cell's own error (its line, the
    block, the rows, the worker), so the worker's "Compute Failed" log and traceback of it
    are left out. Other tasks' failures, and every other worker log, are kept.
    """

    name = "cupy-magic-quiet"

    def setup(self, worker: Any = None) -> None:
        """Add the filter to this worker process's ``distributed.worker`` logger."""
        self.teardown()
        logging.getLogger("distributed.worker").addFilter(_OwnFailures())

    def teardown(self, worker: Any = None) -> None:
        """Remove the filter."""
        log = logging.getLogger("distributed.worker")
        for f in [f for f in log.filters if isinstance(f, _OwnFailures)]:
            log.removeFilter(f)
