"""Windowed aggregations in the DSL (streamcore.computation.dsl_windowed) through the
TopologyTestDriver, against references computed in plain Python over the same records:
out-of-order and late records, grace boundaries, session merges, emit update and final, the late
stream, expiry."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from streamcore.computation import Settings, Topology, TopologyTestDriver
from streamcore.computation.errors import DslDefinitionError
from streamcore.record import Record
from streamcore.state.windows import (
    HoppingWindows,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
)
from streamcore.watermark import Watermark

IN, OUT = "shop/clicks", "shop/windows"
NAME = "shop/clicks-dsl"
LATE = "shop/clicks-dsl-late"


def js(value: Any) -> bytes:
    return json.dumps(value).encode()


def record(key: str, ts: int, value: Any = 1) -> Record:
    return Record(key, js(value), Watermark.of(ts).value)


def shuffled_times(n: int, seed: int, spread: int = 400_000, jitter: int = 30_000) -> list[int]:
    """Timestamps moving forward with out-of-order records (some beyond any grace)."""
    rng = random.Random(seed)
    base = 1_000_000
    out = []
    for i in range(n):
        t = base + i * spread // n + rng.randrange(-jitter, jitter)
        if rng.random() < 0.05:
            t -= rng.randrange(60_000, 120_000)  # far behind: late for small graces
        out.append(t)
    return out


def run(topology: Topology, records: list[Record]) -> TopologyTestDriver:
    driver = TopologyTestDriver(topology, Settings(), start_ms=1_000_000)
    for one in records:  # one by one: each record moves stream time before the next
        driver.pipe_record(IN, one)
    return driver


def emitted(driver: TopologyTestDriver) -> list[tuple[str, int, int, Any]]:
    return [
        (r.key, json.loads(r.data)["start"], json.loads(r.data)["end"], json.loads(r.data)["value"])
        for r in driver.read_output(OUT)
    ]


def tumbling_reference(
    events: list[tuple[str, int]], size: int, grace: int
) -> tuple[list[tuple[str, int, int, int]], dict[tuple[str, int], int], list[tuple[str, int]]]:
    """(windows closed in order of closing, counts of every window, late events)."""
    st = -1
    counts: dict[tuple[str, int], int] = {}
    late = []
    closed: list[tuple[str, int, int, int]] = []
    emitted_keys: set[tuple[str, int]] = set()
    for key, t in events:
        st = max(st, t)
        start = t - t % size
        if start + size + grace <= st:
            late.append((key, t))
        else:
            counts[key, start] = counts.get((key, start), 0) + 1
        now_closed = sorted(
            (s + size, k, s)
            for (k, s) in counts
            if s + size + grace <= st and (k, s) not in emitted_keys
        )
        for end, k, s in now_closed:
            emitted_keys.add((k, s))
            closed.append((k, s, end, counts[k, s]))
    return closed, counts, late


def tumbling_topology(size: int, grace: int, emit: str) -> Topology:
    builder = Topology.builder()
    (
        builder.stream(IN, codec="json")
        .group_by_key()
        .windowed_by(TumblingWindows(size, grace_ms=grace))
        .count(emit=emit)
        .to_stream()
        .to(OUT)
    )
    return builder.build()


@pytest.mark.parametrize("seed", [1, 2])
def test_a_final_tumbling_count_sends_each_closed_window_once_and_late_records_aside(
    seed: int,
) -> None:
    size, grace = 60_000, 20_000
    times = shuffled_times(400, seed)
    rng = random.Random(seed)
    events = [(f"u{rng.randrange(5)}", t) for t in times]
    closed, _counts, late = tumbling_reference(events, size, grace)
    with run(tumbling_topology(size, grace, "final"), [record(k, t) for k, t in events]) as driver:
        assert emitted(driver) == closed
        assert late, "the input has late records"
        late_out = driver.read_output(LATE)
        assert [(r.key, r.watermark >> 17) for r in late_out] == late
        assert [json.loads(r.data) for r in late_out] == [1] * len(late)  # unchanged values
        assert driver.stats(NAME).late == len(late)


def test_the_grace_boundary_of_a_tumbling_window() -> None:
    size, grace = 10_000, 2_000
    events = [
        ("a", 5_000),  # window [0, 10000)
        ("a", 11_999),  # stream time 11999: [0, 10000) closes at 12000
        ("a", 9_999),  # on time: still open
        ("a", 12_000),  # stream time 12000: [0, 10000) closes
        ("a", 9_000),  # late
    ]
    with run(tumbling_topology(size, grace, "final"), [record(k, t) for k, t in events]) as driver:
        assert emitted(driver) == [("a", 0, 10_000, 2)]
        assert [r.watermark >> 17 for r in driver.read_output(LATE)] == [9_000]


def test_an_updating_hopping_count_ends_at_the_reference_counts() -> None:
    size, advance, grace = 60_000, 20_000, 30_000
    times = shuffled_times(300, 7)
    rng = random.Random(7)
    events = [(f"u{rng.randrange(4)}", t) for t in times]
    st, reference, late = -1, {}, []
    for key, t in events:
        st = max(st, t)
        starts = [
            s for s in range(t - t % advance - size + advance, t + 1, advance) if s >= 0 and s <= t
        ]
        open_starts = [s for s in starts if s + size + grace > st]
        if not open_starts:
            late.append((key, t))
        for s in open_starts:
            reference[key, s] = reference.get((key, s), 0) + 1
    builder = Topology.builder()
    (
        builder.stream(IN, codec="json")
        .group_by_key()
        .windowed_by(HoppingWindows(size, advance, grace_ms=grace))
        .count()
        .to_stream()
        .to(OUT)
    )
    with run(builder.build(), [record(k, t) for k, t in events]) as driver:
        last: dict[tuple[str, int], int] = {}
        for key, start, end, value in emitted(driver):
            assert end == start + size
            last[key, start] = value
        assert last == reference
        assert len(driver.read_output(LATE)) == len(late)


def session_reference(
    events: list[tuple[str, int, int]], gap: int, grace: int
) -> dict[str, list[tuple[int, int, int]]]:
    """Per key, its sessions (start, end, sum) after every on-time record."""
    st = -1
    sessions: dict[str, list[list[int]]] = {}
    for key, t, value in events:
        st = max(st, t)
        if t + grace < st:
            continue  # late
        mine = sessions.setdefault(key, [])
        near = [s for s in mine if s[0] - gap <= t <= s[1] + gap]
        start = min([t, *(s[0] for s in near)])
        end = max([t, *(s[1] for s in near)])
        total = value + sum(s[2] for s in near)
        sessions[key] = [s for s in mine if s not in near] + [[start, end, total]]
    return {k: sorted(tuple(s) for s in v) for k, v in sessions.items()}


def test_session_sums_merge_like_the_reference() -> None:
    gap, grace = 5_000, 3_000
    rng = random.Random(11)
    events = []
    t = 1_000_000
    for _ in range(250):
        t += rng.choice([200, 800, 2_000, 4_000, 7_000])
        events.append((f"s{rng.randrange(3)}", t - rng.randrange(0, 6_000), rng.randrange(1, 9)))
    builder = Topology.builder()
    (
        builder.stream(IN, codec="json")
        .group_by_key()
        .windowed_by(SessionWindows(gap, grace_ms=grace))
        .aggregate(int, lambda k, v, total: total + v, merger=lambda k, a, b: a + b)
        .to_stream()
        .to(OUT)
    )
    with run(builder.build(), [record(k, t, v) for k, t, v in events]) as driver:
        live: dict[str, dict[tuple[int, int], int]] = {}
        for key, start, end, value in emitted(driver):
            windows = live.setdefault(key, {})
            if value is None:  # merged away
                windows.pop((start, end), None)
            else:
                windows[start, end] = value
        got = {k: sorted((s, e, v) for (s, e), v in w.items()) for k, w in live.items()}
        assert got == session_reference(events, gap, grace)


def test_sliding_windows_count_every_record_within_the_time_difference() -> None:
    d = 10_000
    events = [("a", 1_000_000), ("a", 1_004_000), ("a", 1_012_000), ("a", 1_013_000)]
    builder = Topology.builder()
    (
        builder.stream(IN, codec="json")
        .group_by_key()
        .windowed_by(SlidingWindows(d, grace_ms=0))
        .count()
        .to_stream()
        .to(OUT)
    )
    with run(builder.build(), [record(k, t) for k, t in events]) as driver:
        last: dict[tuple[int, int], int] = {}
        for _key, start, end, value in emitted(driver):
            last[start, end] = value
        for (start, end), value in last.items():
            assert value == sum(1 for _, t in events if start <= t <= end)


def test_expired_windows_leave_the_store() -> None:
    size, grace = 1_000, 0
    events = [(f"k{i % 10}", 1_000_000 + i * 100) for i in range(2_000)]  # 200 windows
    with run(tumbling_topology(size, grace, "final"), [record(k, t) for k, t in events]) as driver:
        assert len(emitted(driver)) == 199 * 10  # every window but the open last one
        store = driver.get_key_value_store(NAME, "windowed_count")
        entries = [k for k, _ in store.all() if k[0] in "wx"]
        assert len(entries) <= 2 * 2 * 10  # windows of the last two periods, with their index


def test_bad_window_arguments_name_the_fix() -> None:
    grouped = Topology.builder().stream(IN, codec="json").group_by_key()
    with pytest.raises(DslDefinitionError, match="TumblingWindows"):
        grouped.windowed_by(60_000)  # type: ignore[arg-type]
    windowed = grouped.windowed_by(TumblingWindows(60_000, grace_ms=0))
    with pytest.raises(DslDefinitionError, match="emit='final'"):
        windowed.count(emit="once")  # type: ignore[arg-type]
    sessions = grouped.windowed_by(SessionWindows(1_000, grace_ms=0))
    with pytest.raises(DslDefinitionError, match="merger="):
        sessions.aggregate(int, lambda k, v, a: a + v)


def test_a_retried_record_counts_once_in_its_windows() -> None:
    from streamcore.computation import ComputationPolicy

    failed: set[tuple[str, int]] = set()

    def flaky(key: str, value: Any, count: int) -> int:
        if (key, count) not in failed:  # the first attempt at each count fails
            failed.add((key, count))
            raise RuntimeError("once")
        return count + 1

    builder = Topology.builder()
    (
        builder.stream(IN, codec="json")
        .group_by_key()
        .windowed_by(HoppingWindows(10_000, 5_000, grace_ms=0))
        .aggregate(int, flaky, emit="final")
        .to_stream()
        .to(OUT)
    )
    policy = ComputationPolicy(max_retries=3, delay=0.0, max_delay=0.0)
    events = [("a", 1_000_000 + i * 1_000) for i in range(40)]
    driver = TopologyTestDriver(builder.build(), Settings().set_policy(NAME, policy))
    with driver:
        for key, t in events:
            driver.pipe_record(IN, record(key, t))
        got = {(start, end): value for _k, start, end, value in emitted(driver)}
        for (start, end), value in got.items():
            assert value == sum(1 for _, t in events if start <= t < end)
        assert len(got) >= 6


def test_a_record_failing_after_the_windows_it_closed_were_written_loses_no_count() -> None:
    """The record that closes windows writes them from the cache to the store before sending
    them; when sending fails, the retry must find every key's window as before the failure."""
    from streamcore.computation import ComputationPolicy

    sent_once: set[tuple[str, int]] = set()

    def fail_first(key: str, result: dict[str, Any]) -> dict[str, Any]:
        # Each window's first send fails: the closing record's retries get one further each.
        if (key, result["start"]) not in sent_once:
            sent_once.add((key, result["start"]))
            raise RuntimeError("sink down once")
        return result

    builder = Topology.builder()
    (
        builder.stream(IN, codec="json")
        .group_by_key()
        .windowed_by(TumblingWindows(10_000, grace_ms=0))
        .count(emit="final")
        .to_stream()
        .map(lambda key, result: (key, fail_first(key, result)))
        .to(OUT)
    )
    policy = ComputationPolicy(max_retries=6, delay=0.0, max_delay=0.0)
    events = [(f"k{i % 5}", 1_000_000 + i * 500) for i in range(200)]
    driver = TopologyTestDriver(builder.build(), Settings().set_policy(NAME, policy))
    with driver:
        for key, t in events:
            driver.pipe_record(IN, record(key, t))
        got = {(key, start): value for key, start, _end, value in emitted(driver)}
    expected: dict[tuple[str, int], int] = {}
    for key, t in events:
        start = t - t % 10_000
        if start + 10_000 <= events[-1][1]:  # closed by the last record
            expected[key, start] = expected.get((key, start), 0) + 1
    assert got == expected
    assert len(expected) == 45


def test_list_aggregates_are_written_through_and_match_the_reference() -> None:
    size, grace = 60_000, 20_000
    times = shuffled_times(200, 3)
    rng = random.Random(3)
    events = [(f"u{rng.randrange(3)}", t) for t in times]
    closed, _counts, _late = tumbling_reference(events, size, grace)
    builder = Topology.builder()
    (
        builder.stream(IN, codec="json")
        .group_by_key()
        .windowed_by(TumblingWindows(size, grace_ms=grace))
        .aggregate(list, lambda k, v, seen: [*seen, v], emit="final")
        .to_stream()
        .to(OUT)
    )
    with run(builder.build(), [record(k, t) for k, t in events]) as driver:
        got = [(k, s, e, len(v)) for k, s, e, v in emitted(driver)]
        assert got == closed
