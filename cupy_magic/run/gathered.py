"""Where a batched run's gathered results live: on the host, in the namespace and the report."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import Backend
from .batching import BatchPlan
from .commit import describe_value
from .report import IN_PLACE, OutputInfo, RunReport

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
    for name in bp.in_place:  # the user's own array again, which commit left out as unbound
        kind = describe_value(namespace[name], be)[0]
        report.outputs.append(OutputInfo(name, kind, IN_PLACE, namespace[name].nbytes))
