"""Window specs: which windows a record belongs to, closing exactly at the grace boundary,
retention defaults and refusals, and the errors for invalid specs."""

from __future__ import annotations

import pytest

from streamcore.errors import ArgumentTypeError, InvalidArgumentError
from streamcore.state.windows import (
    HoppingWindows,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
    Window,
)


def test_tumbling_windows_are_aligned_and_half_open() -> None:
    spec = TumblingWindows(10, grace_ms=0)
    assert spec.windows_for(0) == [Window(0, 10)]
    assert spec.windows_for(9) == [Window(0, 10)]
    assert spec.windows_for(10) == [Window(10, 20)]
    assert spec.retention_ms == 10


def test_hopping_windows_start_at_multiples_of_the_advance_never_below_zero() -> None:
    spec = HoppingWindows(10, 5, grace_ms=2)
    assert spec.windows_for(3) == [Window(0, 10)]  # [-5, 5) would start below 0
    assert spec.windows_for(12) == [Window(5, 15), Window(10, 20)]
    assert spec.windows_for(15) == [Window(10, 20), Window(15, 25)]
    assert spec.retention_ms == 12
    brute = [s for s in range(0, 100, 5) if s <= 47 < s + 10]
    assert [w.start for w in spec.windows_for(47)] == brute


def test_a_time_window_closes_at_end_plus_grace() -> None:
    spec = TumblingWindows(10, grace_ms=5)
    window = Window(0, 10)
    assert not spec.is_closed(window, 14)  # end + grace - 1
    assert spec.is_closed(window, 15)  # end + grace
    assert not spec.is_late(9, 14)
    assert spec.is_late(9, 15)
    hopping = HoppingWindows(10, 5, grace_ms=5)
    # 12 is in [5, 15) and [10, 20): late only when the last one, [10, 20), is closed.
    assert not hopping.is_late(12, 24)
    assert hopping.is_late(12, 25)


def test_sliding_and_session_closing_boundaries() -> None:
    sliding = SlidingWindows(10, grace_ms=5)
    left = Window(90, 100)  # both ends included
    assert not sliding.is_closed(left, 105)  # end + grace: a record at 100 is still on time
    assert sliding.is_closed(left, 106)
    assert not sliding.is_late(100, 105)
    assert sliding.is_late(100, 106)
    assert sliding.retention_ms == 2 * 10 + 5 + 1
    session = SessionWindows(10, grace_ms=5)
    assert not session.is_closed(Window(0, 100), 115)  # a record at 110 could still extend it
    assert session.is_closed(Window(0, 100), 116)
    assert session.retention_ms == 16


def test_retention_is_settable_but_never_below_what_closing_needs() -> None:
    assert TumblingWindows(10, grace_ms=5, retention_ms=100).retention_ms == 100
    with pytest.raises(InvalidArgumentError, match=r"retention_ms=14 is below 15"):
        TumblingWindows(10, grace_ms=5, retention_ms=14)
    with pytest.raises(InvalidArgumentError, match=r"retention_ms=20 is below 26"):
        SlidingWindows(10, grace_ms=5, retention_ms=20)
    with pytest.raises(InvalidArgumentError, match=r"below 16"):
        SessionWindows(10, grace_ms=5, retention_ms=15)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: TumblingWindows(0, grace_ms=0), r"size_ms must be >= 1, got 0"),
        (lambda: TumblingWindows(10, grace_ms=-1), r"grace_ms must be >= 0, got -1; give 0"),
        (lambda: HoppingWindows(10, 20, grace_ms=0), r"advance_ms=20 is above size_ms=10"),
        (lambda: HoppingWindows(10, 0, grace_ms=0), r"advance_ms must be >= 1"),
        (lambda: SlidingWindows(0, grace_ms=0), r"time_difference_ms must be >= 1"),
        (lambda: SessionWindows(-5, grace_ms=0), r"inactivity_gap_ms must be >= 1, got -5"),
    ],
)
def test_invalid_specs_name_the_value_and_the_fix(make, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidArgumentError, match=message):
        make()


def test_grace_is_required_and_times_are_ints() -> None:
    with pytest.raises(TypeError, match="grace_ms"):
        TumblingWindows(10)  # type: ignore[call-arg]
    with pytest.raises(ArgumentTypeError, match=r"size_ms must be an int .* got float 1.5"):
        TumblingWindows(1.5, grace_ms=0)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="got bool True"):
        SessionWindows(10, grace_ms=True)
