"""The per-record windowed aggregation against references computed in plain Python over the same
input: random out-of-order records with late ones, for tumbling, hopping, sliding and session
windows, on every engine, the store checkpointed as it goes and expired at each record; plus the
exact grace boundaries and a record bridging two sessions."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamcore.codecs.json_codec import JsonCodec
from streamcore.computation.dsl_values import resolve_value_codec
from streamcore.state.engines import ENGINES, open_engine
from streamcore.state.store import KeyValueStore
from streamcore.state.windows import (
    HoppingWindows,
    LateRecord,
    SessionStore,
    SessionUpdate,
    SessionWindows,
    SlidingWindows,
    TimeWindowStore,
    TumblingWindows,
    Window,
    aggregate_session,
    aggregate_windowed,
)

KEYS = ["a", "b\x00c", "é", "日本"]


@pytest.fixture(params=ENGINES)
def kv(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KeyValueStore[Any]]:
    engine = open_engine(request.param, tmp_path / "store", 5.0)
    yield KeyValueStore("windows", engine, resolve_value_codec("bytes", where="test"))
    engine.close()


def _init() -> list[int]:
    return []


def _collect(key: str, value: int, aggregate: list[int]) -> list[int]:
    return [*aggregate, value]  # the record ids: a reference check of exact membership


def _merge(key: str, aggregate: list[int], other: list[int]) -> list[int]:
    return aggregate + other


def _records(seed: int, count: int = 600) -> list[tuple[str, int, int]]:
    """(key, id, timestamp): time moving forward with records up to 60 ms out of order."""
    rng = random.Random(seed)
    return [(rng.choice(KEYS), i, max(0, i * 2 + rng.randint(-60, 3))) for i in range(count)]


def _run(kv: KeyValueStore[Any], store: Any, records: list[tuple[str, int, int]], step: Any):  # type: ignore[no-untyped-def]
    """Feed the records through `step`, taking closed windows and expiring at every record as
    emit='final' would; returns the final aggregates per (key, window) and the late ids."""
    final: dict[tuple[str, Window], list[int]] = {}
    late: set[int] = set()
    stream_time = -1
    for n, (key, ident, t) in enumerate(records):
        stream_time = max(stream_time, t)
        verdict = step(store, key, ident, t, stream_time)
        if isinstance(verdict, LateRecord):
            assert verdict.key == key and verdict.timestamp == t and verdict.reason
            late.add(ident)
        for entry in store.take_closed(stream_time):
            assert (entry.key, entry.window) not in final  # once per window
            final[entry.key, entry.window] = sorted(entry.value)
        store.expire(stream_time)
        if n % 37 == 0:
            kv.flush(kv.changes(), b"cp")
    for entry in store.take_closed(1 << 60):
        final[entry.key, entry.window] = sorted(entry.value)
    store.expire(1 << 60)
    assert len(list(kv.all())) == 1  # everything closed and expired but the marks
    return final, late


def _time_step(store, key, ident, t, stream_time):  # type: ignore[no-untyped-def]
    return aggregate_windowed(store, key, ident, t, stream_time, _init, _collect)


@pytest.mark.parametrize(
    "spec",
    [
        TumblingWindows(50, grace_ms=0),
        TumblingWindows(50, grace_ms=20),
        HoppingWindows(40, 10, grace_ms=15),
        HoppingWindows(30, 30, grace_ms=5),
    ],
    ids=["tumbling-no-grace", "tumbling", "hopping", "hopping-as-tumbling"],
)
@pytest.mark.parametrize("seed", [1, 2])
def test_time_windows_match_the_reference(kv: KeyValueStore[Any], spec: Any, seed: int) -> None:
    records = _records(seed)
    size, advance = spec.size_ms, spec.advance
    expected: dict[tuple[str, Window], list[int]] = {}
    expected_late = set()
    stream_time = -1
    for key, ident, t in records:
        stream_time = max(stream_time, t)
        starts = [s for s in range(0, t + 1, advance) if s <= t < s + size]
        open_starts = [s for s in starts if s + size + spec.grace_ms > stream_time]
        if not open_starts:
            expected_late.add(ident)
        for s in open_starts:
            expected.setdefault((key, Window(s, s + size)), []).append(ident)
    store = TimeWindowStore(kv, spec, JsonCodec())
    final, late = _run(kv, store, records, _time_step)
    assert late == expected_late and late  # some records are late, and only those
    assert final == {k: sorted(v) for k, v in expected.items()}


def _sliding_reference(records, d, grace):  # type: ignore[no-untyped-def]
    on_time: dict[str, list[tuple[int, int]]] = {}
    late = set()
    stream_time = -1
    for key, ident, t in records:
        stream_time = max(stream_time, t)
        if t + grace < stream_time:
            late.add(ident)
        else:
            on_time.setdefault(key, []).append((t, ident))
    expected = {}
    for key, items in on_time.items():
        times = {t for t, _ in items}
        windows = {Window(t - d, t) for t in times}
        windows |= {
            Window(t + 1, t + 1 + d) for t in times if any(t < u <= t + 1 + d for u in times)
        }
        for w in windows:
            expected[key, w] = sorted(i for t, i in items if w.start <= t <= w.end)
    return expected, late


@pytest.mark.parametrize(("d", "grace"), [(30, 0), (30, 25), (7, 40)])
@pytest.mark.parametrize("seed", [3, 4])
def test_sliding_windows_match_a_brute_force_reference(
    kv: KeyValueStore[Any], d: int, grace: int, seed: int
) -> None:
    records = _records(seed, 500)
    # Some records at the same timestamp, and a key's records sparse enough to leave gaps.
    records += [
        (key, 10_000 + i, records[-1][2] + 200 + (i // 2) * 5) for i, key in enumerate(KEYS * 3)
    ]
    expected, expected_late = _sliding_reference(records, d, grace)
    store = TimeWindowStore(kv, SlidingWindows(d, grace_ms=grace), JsonCodec())
    final, late = _run(kv, store, records, _time_step)
    assert late == expected_late
    assert final == expected


def test_sliding_windows_updates_follow_kafka_streams() -> None:
    kv = KeyValueStore(
        "w", open_engine("memory", Path("unused"), 5.0), resolve_value_codec("bytes", where="t")
    )
    store = TimeWindowStore(kv, SlidingWindows(10, grace_ms=100), JsonCodec())

    def add(ident: int, t: int) -> list[tuple[int, int, list[int]]]:
        got = aggregate_windowed(store, "k", ident, t, 0, _init, _collect)
        assert isinstance(got, list)
        return [(e.window.start, e.window.end, e.value) for e in got]

    assert add(1, 100) == [(90, 100, [1])]  # its left window only: nothing after it
    # 105 is in 100's right window [101, 111] (created) and in its own left window [95, 105],
    # which holds 100 too; 100's left window [90, 100] does not hold it.
    assert add(2, 105) == [(95, 105, [1, 2]), (101, 111, [2])]
    # 98, out of order: its left window [88, 98] is new; its right window [99, 109] holds 100 and
    # 105 (copied from [95, 105]); [90, 100] and [95, 105] hold it.
    assert add(3, 98) == [(88, 98, [3]), (90, 100, [1, 3]), (95, 105, [1, 2, 3]), (99, 109, [1, 2])]


def _session_step(store, key, ident, t, stream_time):  # type: ignore[no-untyped-def]
    return aggregate_session(store, key, ident, t, stream_time, _init, _collect, _merge)


@pytest.mark.parametrize(("gap", "grace"), [(5, 0), (12, 30), (40, 10)])
@pytest.mark.parametrize("seed", [5, 6])
def test_session_windows_match_the_reference(
    kv: KeyValueStore[Any], gap: int, grace: int, seed: int
) -> None:
    records = _records(seed)
    on_time: dict[str, list[tuple[int, int]]] = {}
    expected_late = set()
    stream_time = -1
    for key, ident, t in records:
        stream_time = max(stream_time, t)
        if t + grace < stream_time:
            expected_late.add(ident)
        else:
            on_time.setdefault(key, []).append((t, ident))
    expected = {}
    for key, items in on_time.items():
        items.sort()
        session = [items[0]]
        for item in items[1:]:
            if item[0] - session[-1][0] > gap:
                expected[key, Window(session[0][0], session[-1][0])] = sorted(i for _, i in session)
                session = []
            session.append(item)
        expected[key, Window(session[0][0], session[-1][0])] = sorted(i for _, i in session)
    store = SessionStore(kv, SessionWindows(gap, grace_ms=grace), JsonCodec())
    final, late = _run(kv, store, records, _session_step)
    assert late == expected_late
    assert final == expected


def test_a_record_bridging_two_sessions_merges_them(kv: KeyValueStore[Any]) -> None:
    store = SessionStore(kv, SessionWindows(10, grace_ms=50), JsonCodec())
    for ident, t in ((1, 0), (2, 20)):
        aggregate_session(store, "k", ident, t, 20, _init, _collect, _merge)
    kv.flush(kv.changes(), b"cp")
    update = aggregate_session(store, "k", 3, 10, 20, _init, _collect, _merge)
    assert isinstance(update, SessionUpdate)
    assert (update.session.window, update.session.value) == (Window(0, 20), [1, 2, 3])
    assert [(s.window, s.value) for s in update.merged] == [
        (Window(0, 0), [1]),
        (Window(20, 20), [2]),
    ]
    assert [(e.window, e.value) for e in store.fetch("k")] == [(Window(0, 20), [1, 2, 3])]
    inside = aggregate_session(store, "k", 4, 5, 20, _init, _collect, _merge)
    assert isinstance(inside, SessionUpdate) and inside.merged == []
    assert inside.session.value == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("spec", "boundary"),
    [
        (TumblingWindows(10, grace_ms=5), 15),  # [0, 10): end + grace
        (SlidingWindows(10, grace_ms=5), 15),  # a record at 9: its left window [-1, 9]
        (SessionWindows(10, grace_ms=5), 15),  # a record at 9 on time while 9 + grace >= time
    ],
    ids=["tumbling", "sliding", "session"],
)
def test_grace_boundary(kv: KeyValueStore[Any], spec: Any, boundary: int) -> None:
    make = SessionStore if isinstance(spec, SessionWindows) else TimeWindowStore
    store = make(kv, spec, JsonCodec())

    def step(ident: int, t: int, now: int) -> Any:
        if isinstance(spec, SessionWindows):
            return aggregate_session(store, "k", ident, t, now, _init, _collect, _merge)
        return aggregate_windowed(store, "k", ident, t, now, _init, _collect)

    if isinstance(spec, TumblingWindows):
        on_time, late_at = boundary - 1, boundary
    else:
        on_time, late_at = 9 + spec.grace_ms, 9 + spec.grace_ms + 1
    assert not isinstance(step(1, on_time, on_time), LateRecord)
    assert not isinstance(step(2, 9, on_time), LateRecord)  # end + grace - 1: still open
    verdict = step(3, 9, late_at)
    assert isinstance(verdict, LateRecord)
    assert verdict.stream_time == late_at
