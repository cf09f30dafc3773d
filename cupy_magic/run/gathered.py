"""Where a batched run's gathered results live: on the host, in the namespace and the report."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import Backend
from .batching import BatchPlan
from .report import OutputInfo, RunReport

__all__ = ["rows_on_host"]


def rows_on_host(bp: BatchPlan, namespace: dict[str, Any], report: RunReport,
                 be: Backend) -> None:
    """Gathered results live on the host: say so in the namespace and the report."""
    gathered = set(bp.gathered)
    for k, info in enumerate(report.outputs):
        if info.name in gathered and isinstance(namespace.get(info.name), np.ndarray):
            namespace[info.name] = be.to_host(namespace[info.name])
            report.outputs[k] = OutputInfo(info.name, info.kind.replace(" on device", ""),
                                           "host (rows gathered)", info.nbytes)
