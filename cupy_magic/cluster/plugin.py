"""The worker plugin that puts the backend and the budget in force on every worker.

Imported only once a cluster is used (it needs ``distributed``); workers import it by name.
"""

from __future__ import annotations

from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from .. import backend as _backend
from ..backend import BudgetSpec, parse_budget

__all__ = ["BudgetPlugin"]


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
