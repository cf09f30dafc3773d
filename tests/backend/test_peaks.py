"""The high-water marks of measurements open together (``backend/peaks.py``): pure Python,
so the windows' bookkeeping is checked here on any machine; ``test_gpu.py`` checks it over
CuPy's pool."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cupy_magic.backend.peaks import HighWater


def _m(start: int) -> SimpleNamespace:
    return SimpleNamespace(peak_bytes=start, start_bytes=start)


def test_one_measurement_keeps_the_highest_level_and_nothing_after_it():
    hw = HighWater()
    assert not hw.active
    a = _m(10)
    hw.open(a, 10)
    assert hw.active
    for now in (50, 30, 40):
        hw.raise_to(now)
    hw.close(a)
    assert a.peak_bytes == 50 and not hw.active
    hw.raise_to(99)  # no measurement open: nothing is raised
    assert hw.level == [50]


def test_a_nested_measurement_sees_its_window_and_the_outer_one_all_of_it():
    hw = HighWater()
    outer, inner = _m(10), _m(20)
    hw.open(outer, 10)
    hw.raise_to(40)
    hw.open(inner, 20)
    hw.raise_to(30)
    hw.close(inner)
    assert inner.peak_bytes == 30 and hw.active
    hw.raise_to(35)
    hw.close(outer)
    assert outer.peak_bytes == 40


@pytest.mark.parametrize("later", [0, 60])
def test_crossing_measurements_each_see_only_their_own_window(later):
    # a opens, b opens, a closes, b closes (two threads): b never saw a's 50 before it
    # opened; a saw b's levels while both were open, not those after it closed
    hw = HighWater()
    a, b = _m(10), _m(20)
    hw.open(a, 10)
    hw.raise_to(50)
    hw.open(b, 20)
    hw.raise_to(25)
    hw.close(a)
    assert a.peak_bytes == 50
    hw.raise_to(30 + later)
    hw.close(b)
    assert b.peak_bytes == 30 + later and not hw.active


def test_three_open_the_middle_closing_first_leaves_the_first_its_window():
    hw = HighWater()
    a, b, c = _m(0), _m(5), _m(7)
    hw.open(a, 0)
    hw.open(b, 5)
    hw.raise_to(80)  # while a and b are open
    hw.open(c, 7)
    hw.raise_to(9)
    hw.close(b)
    assert b.peak_bytes == 80
    hw.close(c)
    assert c.peak_bytes == 9
    hw.close(a)
    assert a.peak_bytes == 80
