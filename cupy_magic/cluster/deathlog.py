"""What ``distributed`` logs in this kernel when a worker of the kernel's own cluster
(``%gpu_cluster local``) dies while a cell runs on it.

That cluster's scheduler and nannies run in the kernel's process, and their log lines go to
the notebook as red stderr: "Removing worker ... caused the cluster to lose ...", "Couldn't
gather keys ...", the nanny's "Restarting worker". When the cell then fails with its own one
line naming the workers that died (:func:`.failure.died`), those lines say it again. So while
a cell runs, such records are held back; when it ends, those about the workers its line named
(and the cell's own gather) are dropped, with as many of the nannies' restart records as
workers died (they may come just after the cell), and every other one is shown, late but
unchanged: a worker that died while Dask finished the cell anyway, or died between cells, is
still told by ``distributed``. A cluster the user joined keeps its logging as it is.
"""

from __future__ import annotations

import logging
import re
import threading
import time

__all__ = ["EVERY", "LOGGERS", "RESTART_SECONDS", "hold", "install", "installed", "release",
           "uninstall"]

LOGGERS = ("distributed.scheduler", "distributed.client", "distributed.nanny")
RESTART_SECONDS = 30.0  # how long after the cell a nanny's record of a death it told is dropped
EVERY = "*"  # in ``told``: every worker that left during the cell (a block that ends any)

_REMOVED = re.compile(r"^Removing worker '(?P<address>[^']+)' caused the cluster to lose")
_GATHER = re.compile(r"^Couldn't gather ")
_NANNY = {"restart": re.compile(r"^Restarting worker\b"),
          "exit": re.compile(r"^Worker process \d+ (was killed|exited)")}
_SHOWN = "cupy_magic_shown"  # set on a held record given back to its logger


def _kind(record: logging.LogRecord) -> str | None:
    """Which of the records about a worker's death ``record`` is, or ``None``."""
    text = record.getMessage()
    if record.name == "distributed.nanny":
        return next((k for k, pattern in _NANNY.items() if pattern.match(text)), None)
    if _REMOVED.match(text):
        return "removed"
    return "gather" if _GATHER.match(text) else None


class _Holder(logging.Filter):
    """The filter on :data:`LOGGERS` while the kernel's own cluster is in use."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.cell: str | None = None  # the running cell's id while its records are held
        self.records: list[logging.LogRecord] = []
        self.left: dict[str, int] = {}  # nanny records still to drop, by kind
        self.until = 0.0

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, _SHOWN, False):
            return True
        kind = _kind(record)
        if kind is None:
            return True
        with self.lock:
            if self.cell is not None:
                self.records.append(record)
                return False
            if self.left.get(kind, 0) > 0 and time.monotonic() < self.until:
                self.left[kind] -= 1
                return False
        return True

    def release(self, cell: str, told: frozenset[str], deaths: int) -> None:
        with self.lock:
            if self.cell != cell:
                return
            records, self.records, self.cell = self.records, [], None
            shown, dropped = [], dict.fromkeys(_NANNY, 0)
            for record in records:
                kind = _kind(record)
                if told and kind in dropped and dropped[kind] < deaths:
                    dropped[kind] += 1  # a nanny's record of a death the line told
                elif not (told and _told(record, cell, told)):
                    shown.append(record)
            # the rest of the nannies' records of those deaths may come after the cell
            self.left = {k: deaths - n for k, n in dropped.items()} if told else {}
            self.until = time.monotonic() + RESTART_SECONDS
        for record in shown:  # as they came, through the logger's own handlers
            setattr(record, _SHOWN, True)
            logging.getLogger(record.name).handle(record)


def _told(record: logging.LogRecord, cell: str, told: frozenset[str]) -> bool:
    """Whether the cell's one line, naming the workers ``told``, says what ``record`` does."""
    text = record.getMessage()
    m = _REMOVED.match(text)
    if m is not None:
        return EVERY in told or m["address"] in told
    return bool(_GATHER.match(text)) and f"cupy-magic-{cell}-" in text  # the cell's gather


_holder = _Holder()


def install() -> None:
    """Hold back, during cells, the death records of the cluster this kernel started."""
    for name in LOGGERS:
        log = logging.getLogger(name)
        if _holder not in log.filters:
            log.addFilter(_holder)


def uninstall() -> None:
    """Leave ``distributed``'s logging as it was (the cluster was left); nothing is held."""
    for name in LOGGERS:
        logging.getLogger(name).removeFilter(_holder)
    with _holder.lock:
        records, _holder.records, _holder.cell = _holder.records, [], None
        _holder.left = {}
    for record in records:
        setattr(record, _SHOWN, True)
        logging.getLogger(record.name).handle(record)


def installed() -> bool:
    """Whether the records are held during cells (the kernel's own cluster is in use)."""
    return _holder in logging.getLogger(LOGGERS[0]).filters


def hold(cell: str) -> None:
    """Hold the death records from now until :func:`release` of ``cell`` (a cell's id);
    nothing where the cluster is not the kernel's own."""
    if installed():
        with _holder.lock:
            _holder.cell, _holder.records = cell, []


def release(cell: str, told: frozenset[str] = frozenset(), deaths: int = 0) -> None:
    """The cell ``cell`` ended: drop what its one line said (``told``: the workers it named
    as dead, :data:`EVERY` for every one that left; ``deaths``: how many processes ended)
    and show the other records held."""
    _holder.release(cell, told, deaths)
