"""The per-record step of a windowed aggregation (Kafka Streams' `KStreamWindowAggregate`,
`KStreamSlidingWindowAggregate` and `KStreamSessionWindowAggregate`): given a record, update the
windows it belongs to in a window store and return them, or say the record is late.

A late record gets a `LateRecord` verdict, never a silent drop: the caller routes it to its late
side stream. The functions are pure but for the store they write: the caller passes the stream
time (this record included) and sends what they return (every update, or only
`store.take_closed(stream_time)` for `emit="final"`).

The aggregate functions take the record key first, as in Kafka Streams: `initializer()`,
`aggregator(key, value, aggregate) -> aggregate`, `merger(key, aggregate, other) -> aggregate`.
They may change the aggregate they are given and return it: the store encodes it at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from streamcore.state.windows.specs import SlidingWindows, TimeWindowSpec, Window
from streamcore.state.windows.store import SessionStore, TimeWindowStore, WindowedValue

__all__ = [
    "LateRecord",
    "SessionUpdate",
    "aggregate_session",
    "aggregate_windowed",
    "late_reason",
]

A = TypeVar("A")

Initializer = Callable[[], A]
Aggregator = Callable[[str, Any, A], A]
Merger = Callable[[str, A, A], A]


@dataclass(frozen=True)
class LateRecord:
    """The verdict on a record that arrived after every window it belongs to closed: the caller
    sends it to the late side stream and counts it. `reason` says which window closed when."""

    key: str
    timestamp: int
    stream_time: int
    reason: str


@dataclass(frozen=True)
class SessionUpdate(Generic[A]):
    """What a record did to its key's sessions: `session` is the session holding it now (new,
    extended or merged), `merged` the sessions it replaced, with their last aggregates (Kafka
    Streams forwards a tombstone for each)."""

    session: WindowedValue[A]
    merged: list[WindowedValue[A]]


def aggregate_windowed(
    store: TimeWindowStore[A],
    key: str,
    value: Any,
    timestamp: int,
    stream_time: int,
    initializer: Initializer[A],
    aggregator: Aggregator[A],
) -> list[WindowedValue[A]] | LateRecord:
    """Add a record to its tumbling, hopping or sliding windows in `store`; returns the windows
    it created or updated, by start, or a `LateRecord` when none is open. A record of tumbling or
    hopping windows updates only its open windows (some may have closed)."""
    now = store.stream_time(max(stream_time, timestamp))
    spec = store.spec
    if spec.is_late(timestamp, now):
        return LateRecord(key, timestamp, now, late_reason(spec, timestamp, now))
    if isinstance(spec, SlidingWindows):
        return _sliding(store, spec, key, value, timestamp, initializer, aggregator)
    updated = []
    for window in spec.windows_for(timestamp):
        if spec.is_closed(window, now):
            continue
        old = store.entry(key, window)
        if old is None:
            aggregate, latest = aggregator(key, value, initializer()), timestamp
        else:
            aggregate, latest = aggregator(key, value, old.value), max(old.timestamp, timestamp)
        store.write(key, window, aggregate, latest, new=old is None)
        updated.append(WindowedValue(key, window, aggregate, latest))
    return updated


def _sliding(
    store: TimeWindowStore[A],
    spec: SlidingWindows,
    key: str,
    value: Any,
    t: int,
    initializer: Initializer[A],
    aggregator: Aggregator[A],
) -> list[WindowedValue[A]]:
    # Kafka Streams' in-order algorithm (KStreamSlidingWindowAggregate): a new window's
    # aggregate is copied from an existing window holding exactly its records, because an
    # aggregate cannot take a record out. The windows that matter start in [t - 2d, t + 1].
    d = spec.time_difference_ms
    before = None  # the latest-starting window that ends before t: its records are the key's
    # latest records before t, so its largest timestamp is the previous record's
    after = None  # the latest-starting window holding t: its records after t are all those
    # within d + 1 after t, the content of t's right window
    starts, holding = set(), []
    left_exists = right_exists = False
    for entry in store.fetch(key, t - 2 * d, t + 1):
        window = entry.window
        starts.add(window.start)
        if window.end < t:
            before = entry
        elif window.start > t:
            right_exists = True  # starts at t + 1
        else:
            holding.append(entry)
            left_exists = left_exists or window.end == t
            if window.end > t:
                after = entry
    created = []
    if before is not None:
        previous = before.timestamp
        start = previous + 1  # the previous record's right window, which t now falls in
        if start not in starts and start + d >= t and start != t - d:
            created.append((Window(start, start + d), aggregator(key, value, initializer()), t))
    if not left_exists:
        base = before.value if before is not None and before.timestamp >= t - d else initializer()
        created.append((Window(t - d, t), aggregator(key, value, base), t))
    if not right_exists and after is not None and after.timestamp > t:
        # Written before `after` takes t: the right window does not hold t.
        created.append((Window(t + 1, t + 1 + d), after.value, after.timestamp))
    results = []
    for window, aggregate, latest in created:
        store.write(key, window, aggregate, latest, new=True)
        results.append(WindowedValue(key, window, aggregate, latest))
    for entry in holding:
        aggregate, latest = aggregator(key, value, entry.value), max(entry.timestamp, t)
        store.write(key, entry.window, aggregate, latest, new=False)
        results.append(WindowedValue(key, entry.window, aggregate, latest))
    results.sort(key=lambda item: item.window.start)
    return results


def aggregate_session(
    store: SessionStore[A],
    key: str,
    value: Any,
    timestamp: int,
    stream_time: int,
    initializer: Initializer[A],
    aggregator: Aggregator[A],
    merger: Merger[A],
) -> SessionUpdate[A] | LateRecord:
    """Add a record to its key's sessions in `store`: the sessions within the gap of it (one on
    each side at most: it may bridge two) merge with it into one, whose aggregate is the
    initializer merged with each of theirs, by start, then the record aggregated. Returns the
    session and the ones merged away, or a `LateRecord`."""
    spec = store.spec
    now = store.stream_time(max(stream_time, timestamp))
    if spec.is_late(timestamp, now):
        return LateRecord(key, timestamp, now, late_reason(spec, timestamp, now))
    gap = spec.inactivity_gap_ms
    found = store.find_sessions(key, timestamp - gap, timestamp + gap)
    aggregate, start, end, latest = initializer(), timestamp, timestamp, timestamp
    for session in found:
        aggregate = merger(key, aggregate, session.value)
        start, end = min(start, session.window.start), max(end, session.window.end)
        latest = max(latest, session.timestamp)
    aggregate = aggregator(key, value, aggregate)
    window = Window(start, end)
    merged = [session for session in found if session.window != window]
    for session in merged:
        store.remove(key, session.window)
    store.write(key, window, aggregate, latest, new=len(merged) == len(found))
    return SessionUpdate(WindowedValue(key, window, aggregate, latest), merged)


def late_reason(spec: Any, timestamp: int, now: int) -> str:
    """Why a record at `timestamp` is late at stream time `now` (a `LateRecord`'s reason)."""
    if isinstance(spec, TimeWindowSpec):
        last = spec.windows_for(timestamp)[-1]
        return (
            f"its last window [{last.start}, {last.end}) closed at stream time "
            f"{spec.close_time(last)} (end + grace {spec.grace_ms}); stream time is {now}"
        )
    return (
        f"timestamp {timestamp} + grace {spec.grace_ms} is below stream time {now}: "
        "every window holding it is closed"
    )
