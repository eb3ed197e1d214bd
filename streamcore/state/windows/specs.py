"""Window specs on event time (Kafka Streams' `TimeWindows`, `SlidingWindows`, `SessionWindows`):
which windows a record belongs to, when a window closes on stream time, how long its state is
kept, and whether a record is late.

Every spec takes an explicit `grace_ms` (0 allowed): there is no hidden default, because Kafka
Streams' 24-hour one surprised its users for years (KIP-633). Times are epoch milliseconds;
closing and expiry compare against **stream time** (the largest timestamp seen), never the wall
clock, so a replay closes the same windows as the live run.

- `TumblingWindows` and `HoppingWindows`: `[start, end)` half-open, aligned to the epoch (a start
  is a multiple of the advance, never below 0). A window closes when `end + grace <= stream
  time`; a record is late when all of its windows are closed.
- `SlidingWindows`: `[start, start + time_difference]`, both ends included, defined by records
  (see the class). A window closes when `end + grace < stream time`; a record is late when
  `timestamp + grace < stream time` (all windows holding it are then closed, none otherwise).
- `SessionWindows`: `[first, last]` record timestamps of a key's session, both included. A
  session closes when `end + gap + grace < stream time` (no record on time can reach it any
  more); a record is late when `timestamp + grace < stream time`.

`retention_ms` is how long a window's state is kept after its start (a session: after its end);
None takes the smallest that works, which every spec documents, and a smaller one is refused.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import KW_ONLY, dataclass
from typing import Any, NamedTuple

from streamcore.errors import ArgumentTypeError, InvalidArgumentError

__all__ = [
    "HoppingWindows",
    "SessionWindows",
    "SlidingWindows",
    "TimeWindowSpec",
    "TumblingWindows",
    "Window",
    "WindowSpec",
]


class Window(NamedTuple):
    """A window's bounds in epoch ms. `end` is excluded for tumbling and hopping windows and
    included for sliding and session windows (as in Kafka Streams). Ordered by start, then end.
    A named tuple, not a frozen dataclass: closing windows makes one per window, and a frozen
    dataclass costs about six times as much to make."""

    start: int
    end: int


def _ms(spec: str, name: str, value: Any, minimum: int, fix: str) -> int:
    if type(value) is not int:
        raise ArgumentTypeError(
            f"{spec}: {name} must be an int number of milliseconds, got "
            f"{type(value).__name__} {value!r}"
        )
    if value < minimum:
        raise InvalidArgumentError(f"{spec}: {name} must be >= {minimum}, got {value}; {fix}")
    return value


def _retention(spec: str, given: int | None, minimum: int, why: str) -> int:
    if given is None:
        return minimum
    _ms(spec, "retention_ms", given, 0, "")
    if given < minimum:
        raise InvalidArgumentError(
            f"{spec}: retention_ms={given} is below {minimum} ({why}): a window would be "
            f"deleted before it closes; give retention_ms >= {minimum} or None"
        )
    return given


class WindowSpec(ABC):
    """What every spec answers (the fields are the subclasses')."""

    grace_ms: int
    retention_ms: int | None

    @property
    def retention(self) -> int:
        """`retention_ms` as an int (the default is filled in when the spec is made)."""
        assert self.retention_ms is not None
        return self.retention_ms

    @abstractmethod
    def close_time(self, window: Window) -> int:
        """The stream time from which `window` is closed."""

    @abstractmethod
    def expiry_time(self, window: Window) -> int:
        """The stream time from which `window`'s state may be deleted (at or after it closes)."""

    def is_closed(self, window: Window, stream_time: int) -> bool:
        """True when `window` takes no more records at `stream_time`."""
        return self.close_time(window) <= stream_time

    @abstractmethod
    def is_late(self, timestamp: int, stream_time: int) -> bool:
        """True when a record at `timestamp` has no open window at `stream_time`."""


class TimeWindowSpec(WindowSpec):
    """Tumbling and hopping windows: fixed size, aligned to the epoch."""

    size_ms: int

    @property
    @abstractmethod
    def advance(self) -> int:
        """The distance between two window starts."""

    def window_at(self, start: int) -> Window:
        """The window starting at `start`."""
        return Window(start, start + self.size_ms)

    def windows_for(self, timestamp: int) -> list[Window]:
        """The windows holding `timestamp`, by start: the starts are the multiples of the advance
        in `(timestamp - size, timestamp]`, none below 0 (as Kafka Streams' `windowsFor`)."""
        size, advance = self.size_ms, self.advance
        start = max(0, timestamp - size + advance) // advance * advance
        windows = []
        while start <= timestamp:
            windows.append(Window(start, start + size))
            start += advance
        return windows

    def close_time(self, window: Window) -> int:
        return window.end + self.grace_ms

    def expiry_time(self, window: Window) -> int:
        return window.start + self.retention

    def _check_grace_and_retention(self, name: str) -> None:
        """Check `grace_ms` and settle `retention_ms` (default and minimum: size + grace)."""
        _ms(name, "grace_ms", self.grace_ms, 0, "give 0 for no grace period")
        minimum = self.size_ms + self.grace_ms
        retention = _retention(name, self.retention_ms, minimum, "size_ms + grace_ms")
        object.__setattr__(self, "retention_ms", retention)

    def is_late(self, timestamp: int, stream_time: int) -> bool:
        # The last window holding the record closes last.
        last_start = timestamp // self.advance * self.advance
        return last_start + self.size_ms + self.grace_ms <= stream_time


@dataclass(frozen=True)
class TumblingWindows(TimeWindowSpec):
    """Windows of `size_ms` one after the other, `[k * size, (k + 1) * size)`: a record is in
    exactly one. Default retention: `size_ms + grace_ms`."""

    size_ms: int
    _: KW_ONLY
    grace_ms: int
    retention_ms: int | None = None

    def __post_init__(self) -> None:
        _ms("TumblingWindows", "size_ms", self.size_ms, 1, "a window lasts at least 1 ms")
        self._check_grace_and_retention("TumblingWindows")

    @property
    def advance(self) -> int:
        return self.size_ms


@dataclass(frozen=True)
class HoppingWindows(TimeWindowSpec):
    """Windows of `size_ms` starting every `advance_ms` (`advance_ms <= size_ms`): a record is in
    `size / advance` windows (fewer near 0). Default retention: `size_ms + grace_ms`."""

    size_ms: int
    advance_ms: int
    _: KW_ONLY
    grace_ms: int
    retention_ms: int | None = None

    def __post_init__(self) -> None:
        name = "HoppingWindows"
        _ms(name, "size_ms", self.size_ms, 1, "a window lasts at least 1 ms")
        _ms(name, "advance_ms", self.advance_ms, 1, "windows advance by at least 1 ms")
        if self.advance_ms > self.size_ms:
            raise InvalidArgumentError(
                f"HoppingWindows: advance_ms={self.advance_ms} is above size_ms={self.size_ms}: "
                "records between windows would belong to none; give advance_ms <= size_ms "
                "(advance_ms == size_ms: TumblingWindows)"
            )
        self._check_grace_and_retention(name)

    @property
    def advance(self) -> int:
        return self.advance_ms


@dataclass(frozen=True)
class SlidingWindows(WindowSpec):
    """Kafka Streams' sliding windows (KIP-450): the windows of `time_difference_ms` (d) that
    records of a key define, `[start, start + d]` with both ends included. Each record at t
    defines its **left window** `[t - d, t]` and its **right window** `[t + 1, t + 1 + d]`; a
    window exists when it holds at least one record, and its aggregate is over the records of the
    key whose timestamps are within its bounds. So a record at t updates every existing window
    with `t - d <= start <= t`, creates its left window when absent, creates its right window when
    records after t are within d + 1 of it, and creates the right window of the key's previous
    record (the latest before t) when t falls in it. Unlike Kafka Streams, a record before d has
    its left window start below 0 (Kafka Streams folds those into `[0, d]`).

    A window closes when `end + grace_ms < stream time`; a record is late when `t + grace_ms <
    stream time`. Default and smallest retention (after the start): `2 * d + grace_ms + 1`,
    because a new left window is built from an existing window starting up to 2d earlier."""

    time_difference_ms: int
    _: KW_ONLY
    grace_ms: int
    retention_ms: int | None = None

    def __post_init__(self) -> None:
        name = "SlidingWindows"
        _ms(name, "time_difference_ms", self.time_difference_ms, 1, "give at least 1 ms")
        _ms(name, "grace_ms", self.grace_ms, 0, "give 0 for no grace period")
        minimum = 2 * self.time_difference_ms + self.grace_ms + 1
        retention = _retention(
            name, self.retention_ms, minimum, "2 * time_difference_ms + grace_ms + 1"
        )
        object.__setattr__(self, "retention_ms", retention)

    def window_at(self, start: int) -> Window:
        """The window starting at `start`."""
        return Window(start, start + self.time_difference_ms)

    def close_time(self, window: Window) -> int:
        return window.end + self.grace_ms + 1

    def expiry_time(self, window: Window) -> int:
        return window.start + self.retention

    def is_late(self, timestamp: int, stream_time: int) -> bool:
        return timestamp + self.grace_ms < stream_time


@dataclass(frozen=True)
class SessionWindows(WindowSpec):
    """Sessions of a key: records at most `inactivity_gap_ms` apart are in the same session
    `[first, last]`; a record within the gap of two sessions merges them. A session closes when
    `end + gap + grace_ms < stream time` and a record is late when `t + grace_ms < stream time`,
    so a record on time only ever reaches open sessions. Default and smallest retention (after
    the session's end): `inactivity_gap_ms + grace_ms + 1`."""

    inactivity_gap_ms: int
    _: KW_ONLY
    grace_ms: int
    retention_ms: int | None = None

    def __post_init__(self) -> None:
        name = "SessionWindows"
        _ms(name, "inactivity_gap_ms", self.inactivity_gap_ms, 1, "give at least 1 ms")
        _ms(name, "grace_ms", self.grace_ms, 0, "give 0 for no grace period")
        minimum = self.inactivity_gap_ms + self.grace_ms + 1
        retention = _retention(name, self.retention_ms, minimum, "inactivity_gap_ms + grace_ms + 1")
        object.__setattr__(self, "retention_ms", retention)

    def close_time(self, window: Window) -> int:
        return window.end + self.inactivity_gap_ms + self.grace_ms + 1

    def expiry_time(self, window: Window) -> int:
        return window.end + self.retention

    def is_late(self, timestamp: int, stream_time: int) -> bool:
        return timestamp + self.grace_ms < stream_time
