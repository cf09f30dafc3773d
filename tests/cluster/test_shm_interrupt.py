"""Ctrl-C while the ring makes or unlinks a shared-memory slot: a real :class:`~.shm.Ring`
and real segments, with a real SIGINT sent to this process at the instant in question (from
inside the call that makes the segment, or the one that unlinks it; a key press cannot be
timed there). The interrupt still reaches the caller, and no segment of this process is left
once the ring is closed."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from cupy_magic.cluster import shm, slots

SHM = "/dev/shm"
MiB = 1 << 20

pytestmark = pytest.mark.skipif(not os.path.isdir(SHM) or os.name != "posix",
                                reason="no /dev/shm to list here")


def segments() -> set[str]:
    """The shared-memory segments this process made."""
    return {n for n in os.listdir(SHM) if n.startswith(slots.segment_prefix())}


@pytest.fixture
def ring():
    before = segments()
    ring = shm.Ring(None, ("tcp://127.0.0.1:1",))  # no client: no worker opens its slots
    yield ring
    ring.close(workers=False)
    assert segments() - before == set()


def ctrl_c() -> None:
    """A Ctrl-C now: SIGINT to this process (Python raises it at its next check)."""
    os.kill(os.getpid(), signal.SIGINT)


def test_ctrl_c_as_a_segment_is_made_leaves_it_the_rings(ring, monkeypatch):
    made = []

    def interrupted(size: int):
        seg = slots.new_segment(size)
        made.append(seg.name)
        ctrl_c()  # before this call returns the segment to the ring
        return seg

    before = segments()
    monkeypatch.setattr(shm, "new_segment", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ring.take(MiB, MiB)
    # the segment exists and the ring knows it: closing the ring unlinks it
    assert set(made) == segments() - before == {s.name for s in ring.slots}
    monkeypatch.undo()
    ring.close(workers=False)
    assert segments() - before == set()


def test_an_error_as_a_segment_is_mapped_unlinks_it(ring, monkeypatch):
    before = segments()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(shm.np, "frombuffer", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ring.take(MiB, MiB)
    monkeypatch.undo()
    assert ring.slots == [] and segments() - before == set()


def test_ctrl_c_as_a_slot_is_retired_leaves_it_unlinked(ring, monkeypatch):
    before = segments()
    small = ring.take(MiB, MiB)
    ring.give_back(small)
    real = shm.track_again

    def interrupted(segs):
        ctrl_c()  # as the small slot is unlinked to make room for a bigger one
        real(segs)

    monkeypatch.setattr(shm, "track_again", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ring.take(3 * MiB, 3 * MiB)
    monkeypatch.undo()
    assert small not in ring.slots and small.name not in segments()
    ring.close(workers=False)
    assert segments() - before == set()


def test_the_interrupt_goes_to_the_handler_it_was_meant_for(ring, monkeypatch):
    """Held back, not swallowed: a handler of the caller's own gets the Ctrl-C once the
    slot is made, and the slot is usable."""
    got = []

    def interrupted(size: int):
        seg = slots.new_segment(size)
        ctrl_c()
        held.append(list(got))  # what the caller's handler had got by now
        return seg

    held: list[list[int]] = []
    monkeypatch.setattr(shm, "new_segment", interrupted)
    before = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        slot = ring.take(MiB, MiB)
    finally:
        signal.signal(signal.SIGINT, before)
    assert held == [[]] and got == [signal.SIGINT] and slot in ring.slots
    slot.view(0, (4,), np.float64)[:] = 1.0
