"""The holding back of ``distributed``'s log records of a worker's death during a cell on the
kernel's own cluster (:mod:`cupy_magic.cluster.deathlog`), through the real loggers: what the
cell's one line told is dropped, everything else is shown (late, in order), nothing is held
between cells or on a cluster the user joined. The kernel test
(``test_cluster_kernel.py``) shows it on a real cluster whose worker is killed."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from cupy_magic.cluster import deathlog

SCHED, CLIENT, NANNY = (logging.getLogger(n) for n in deathlog.LOGGERS)
W, V = "tcp://127.0.0.1:4001", "tcp://127.0.0.1:4002"


class Seen(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def seen() -> Iterator[list[str]]:
    handler = Seen()
    log = logging.getLogger("distributed")
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    yield handler.lines
    log.removeHandler(handler)
    log.setLevel(level)


@pytest.fixture
def own(seen) -> Iterator[list[str]]:
    """The kernel's own cluster in use."""
    deathlog.install()
    yield seen
    deathlog.uninstall()


def removed(address: str, keys: str = "{'cupy-magic-c1-block-6'}") -> str:
    return (f"Removing worker '{address}' caused the cluster to lose already computed "
            f"task(s), which will be recomputed elsewhere: {keys} (stimulus_id='x')")


def test_what_the_cells_line_told_is_dropped_and_the_rest_shown_in_order(own):
    deathlog.hold("c1")
    SCHED.warning(removed(W))
    SCHED.error("Removing worker %r caused the cluster to lose scattered data, which can't "
                "be recovered: {'BlockSpec-1'}", W)
    SCHED.error("Couldn't gather keys: {'cupy-magic-c1-block-6': 'processing'}")
    CLIENT.warning("Couldn't gather %s keys, rescheduling %s", 1, ("cupy-magic-c1-block-6",))
    NANNY.warning("Restarting worker (status=Status.running)")
    SCHED.warning(removed(V, "{'other-task'}"))  # a worker the line did not name
    SCHED.warning("Unrelated warning")  # not a death record: shown at once
    assert own == ["Unrelated warning"]
    deathlog.release("c1", frozenset({W}), 2)
    assert own == ["Unrelated warning", removed(V, "{'other-task'}")]
    # the second death's nanny record, just after the cell: dropped too; a third is not
    NANNY.warning("Restarting worker (status=Status.running)")
    NANNY.warning("Restarting worker (status=Status.running)")
    assert own[2:] == ["Restarting worker (status=Status.running)"]


def test_a_cell_that_told_no_death_shows_every_record_it_held(own):
    """Dask ran the lost blocks again and the cell finished, or it failed otherwise: the
    records are the only word of the death, shown as the cell ends."""
    deathlog.hold("c2")
    SCHED.warning(removed(W, "{'cupy-magic-c2-block-1'}"))
    NANNY.warning("Restarting worker (status=Status.running)")
    assert own == []
    deathlog.release("c2")
    assert own == [removed(W, "{'cupy-magic-c2-block-1'}"),
                   "Restarting worker (status=Status.running)"]
    NANNY.warning("Restarting worker (status=Status.running)")  # after: nothing dropped
    assert len(own) == 3


def test_between_cells_and_on_a_joined_cluster_nothing_is_held(seen):
    deathlog.hold("c3")  # no cluster of the kernel's own: nothing held
    SCHED.warning(removed(W))
    deathlog.release("c3", frozenset({W}), 1)
    assert seen == [removed(W)]
    deathlog.install()
    try:
        NANNY.warning("Restarting worker (status=Status.running)")  # no cell running
        assert seen[1:] == ["Restarting worker (status=Status.running)"]
        deathlog.hold("c4")
        SCHED.warning(removed(V))
    finally:
        deathlog.uninstall()  # leaving the cluster shows what a cell still held
    assert seen[2:] == [removed(V)] and not deathlog.installed()
