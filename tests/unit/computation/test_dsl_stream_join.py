"""Windowed stream-stream joins in the DSL (`Stream.join/left_join/outer_join(other,
windows=JoinWindows(...))`, streamcore.computation.dsl_join) on the TopologyTestDriver, against a
brute-force reference in plain Python over the same input: out-of-order records, late records to
the late stream, unmatched records emitted once their window closed, and a bounded store."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from log_fixtures import make_config

from streamcore.codecs import get_codec
from streamcore.computation import Settings, StreamProcessor, Topology, TopologyTestDriver
from streamcore.computation.dsl_join import JoinWindows
from streamcore.computation.errors import DslDefinitionError
from streamcore.errors import InvalidArgumentError
from streamcore.log.local.manager import LocalLogManager
from streamcore.record import Record
from streamcore.watermark import Watermark

LEFT, RIGHT, OUT = "shop/views", "shop/clicks", "shop/joined"
LATE = "shop/views-dsl-late"
BEFORE, AFTER, GRACE = 100, 50, 20


def joiner(left: Any, right: Any) -> dict[str, Any]:
    return {"l": left, "r": right}


def topology(kind: str) -> Topology:
    builder = Topology.builder()
    views = builder.stream(LEFT, codec="json")
    clicks = builder.stream(RIGHT, codec="json")
    windows = JoinWindows(BEFORE, AFTER, grace_ms=GRACE)
    getattr(views, kind)(clicks, joiner, windows=windows).to(OUT)
    return builder.build()


def events(n: int, seed: int) -> list[tuple[str, str, int, int]]:
    """(stream, key, timestamp, id), timestamps moving forward with out-of-order jitter."""
    rng = random.Random(seed)
    clock, out = 1_000, []
    for i in range(n):
        clock += rng.randrange(0, 30)
        ts = clock - rng.randrange(0, 200) if rng.random() < 0.2 else clock
        out.append((rng.choice((LEFT, RIGHT)), f"k{rng.randrange(4)}", ts, i))
    return out


def reference(items: list[tuple[str, str, int, int]], kind: str) -> tuple[list[str], list[str]]:
    """The joined records and the late ones, each sorted (as JSON), by brute force."""
    lag = {LEFT: AFTER + GRACE, RIGHT: BEFORE + GRACE}
    st, sts, late, on_time = -(1 << 62), [], set(), []
    for i, (stream, _key, ts, _id) in enumerate(items):
        if ts + lag[stream] < st:
            late.add(i)
        st = max(st, ts)
        sts.append(st)
    on_time = [i for i in range(len(items)) if i not in late]

    def matches(i: int, j: int) -> bool:
        (s1, k1, t1, _), (s2, k2, t2, _) = items[i], items[j]
        if s1 == s2 or k1 != k2:
            return False
        left, right = (t1, t2) if s1 == LEFT else (t2, t1)
        return left - BEFORE <= right <= left + AFTER

    out = []
    for a, i in enumerate(on_time):
        for j in on_time[:a]:
            if matches(i, j):
                left, right = (i, j) if items[i][0] == LEFT else (j, i)
                out.append(joiner({"id": items[left][3]}, {"id": items[right][3]}))
    sides = {"join": (), "left_join": (LEFT,), "outer_join": (LEFT, RIGHT)}[kind]
    for i in on_time:
        stream, _key, ts, ident = items[i]
        if stream not in sides:
            continue
        closing = next((j for j in range(i, len(items)) if sts[j] > ts + lag[stream]), None)
        if closing is None:
            continue
        if not any(matches(i, j) for j in on_time if j <= closing):
            value = {"id": ident}
            out.append(joiner(value, None) if stream == LEFT else joiner(None, value))
    lates = [{"id": items[i][3]} for i in sorted(late)]
    return sorted(json.dumps(o) for o in out), sorted(json.dumps(x) for x in lates)


def run(kind: str, items: list[tuple[str, str, int, int]]) -> tuple[list[str], list[str], Any]:
    driver = TopologyTestDriver(topology(kind), Settings())
    for stream, key, ts, ident in items:
        driver.pipe(stream, key, json.dumps({"id": ident}).encode(), timestamp_ms=ts)
    joined = sorted(json.dumps(json.loads(r.data)) for r in driver.read_output(OUT))
    late = sorted(json.dumps(json.loads(r.data)) for r in driver.read_output(LATE))
    return joined, late, driver


@pytest.mark.parametrize("kind", ["join", "left_join", "outer_join"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_windowed_join_equals_the_reference(kind: str, seed: int) -> None:
    items = events(400, seed)
    joined, late, driver = run(kind, items)
    with driver:
        expected, expected_late = reference(items, kind)
        assert joined == expected
        assert late == expected_late and late  # some records are late, none dropped silently


def test_the_order_of_results_and_the_closing_of_unmatched_records() -> None:
    items = [
        (LEFT, "a", 1_000, 1),  # joins the click at 1040 (within after_ms = 50)
        (RIGHT, "a", 1_040, 2),
        (LEFT, "b", 1_050, 3),  # never matched: emitted by left/outer once 1050+50+20 passed
        (RIGHT, "a", 1_200, 4),  # no view of a in [1150, 1300]: the outer join emits it later
        (LEFT, "c", 1_500, 5),  # moves stream time past b's close (1120) and click 4's (1320)
        (LEFT, "a", 1_000, 6),  # late: its window closed at 1070
    ]
    for kind, expected in (
        ("join", [joiner({"id": 1}, {"id": 2})]),
        ("left_join", [joiner({"id": 1}, {"id": 2}), joiner({"id": 3}, None)]),
        (
            "outer_join",
            [joiner({"id": 1}, {"id": 2}), joiner({"id": 3}, None), joiner(None, {"id": 4})],
        ),
    ):
        with TopologyTestDriver(topology(kind), Settings()) as driver:
            for stream, key, ts, ident in items:
                driver.pipe(stream, key, json.dumps({"id": ident}).encode(), timestamp_ms=ts)
            assert [json.loads(r.data) for r in driver.read_output(OUT)] == expected
            assert [json.loads(r.data) for r in driver.read_output(LATE)] == [{"id": 6}]


def test_the_store_keeps_only_records_within_retention() -> None:
    with TopologyTestDriver(topology("outer_join"), Settings()) as driver:
        for i in range(2_000):
            stream = LEFT if i % 2 else RIGHT
            driver.pipe(stream, f"k{i % 50}", json.dumps({"id": i}).encode(), timestamp_ms=i * 10)
        store = driver.get_key_value_store("shop/views-dsl", "join")
        kinds = [key[0] for key, _ in store.all()]
        # Retention is before + after + grace = 170 ms: the last 18 records (10 ms apart) are
        # kept, each with its expiry entry; unmatched ones with their close entry too.
        assert kinds.count("d") <= 18 and kinds.count("x") == kinds.count("d")
        assert kinds.count("u") <= kinds.count("d")


def test_definitions_refused() -> None:
    builder = Topology.builder()
    views = builder.stream(LEFT, codec="json")
    clicks = builder.stream(RIGHT, codec="json")
    with pytest.raises(DslDefinitionError, match=r"windows=JoinWindows"):
        views.join(clicks, joiner)
    with pytest.raises(DslDefinitionError, match="codec"):
        views.join(builder.stream("shop/raw"), joiner, windows=JoinWindows(1, grace_ms=0))
    with pytest.raises(InvalidArgumentError, match="grace_ms"):
        JoinWindows(10, 10, grace_ms=-1)
    with pytest.raises(TypeError):
        JoinWindows(10, 10)  # type: ignore[call-arg]  # no hidden grace default


def test_the_two_streams_run_in_one_computation() -> None:
    built = topology("join")
    assert built.computation_names() == ["shop/views-dsl"]
    assert built.input_streams("shop/views-dsl") == [LEFT, RIGHT]


def test_an_aggregation_after_the_join_counts_each_result_once() -> None:
    builder = Topology.builder()
    views = builder.stream(LEFT, codec="json")
    clicks = builder.stream(RIGHT, codec="json")
    joined = views.join(clicks, joiner, windows=JoinWindows(BEFORE, AFTER, grace_ms=GRACE))
    joined.group_by_key().count().to_stream().to(OUT)
    items = events(300, 9)
    expected, _ = reference(items, "join")
    with TopologyTestDriver(builder.build(), Settings()) as driver:
        for stream, key, ts, ident in items:
            driver.pipe(stream, key, json.dumps({"id": ident}).encode(), timestamp_ms=ts)
        counts = {r.key: json.loads(r.data) for r in driver.read_output(OUT)}
    assert sum(counts.values()) == len(expected) > 0


def test_a_windowed_join_on_the_stream_processor_on_the_local_log(tmp_path: Path) -> None:
    """On the real processor (2 partitions per stream), with a grace long enough that no record
    is late whatever order the task takes the two streams in: every pair within the window."""
    manager = LocalLogManager(tmp_path / "log", config=make_config(tmp_path))
    codec = get_codec("avro")
    builder = Topology.builder()
    windows = JoinWindows(BEFORE, AFTER, grace_ms=10**9)
    builder.stream(LEFT, codec="json").join(
        builder.stream(RIGHT, codec="json"), joiner, windows=windows
    ).to(OUT)
    items = events(300, 4)
    for stream in (LEFT, RIGHT):
        manager.create(stream, 2)
        with manager.appender(stream, codec) as appender:
            appender.append_batch(
                [
                    (key, Record(key, json.dumps({"id": i}).encode(), Watermark.of(t).value))
                    for s, key, t, i in items
                    if s == stream
                ]
            )
    settings = Settings(drain_quiet=0.3, state_dir=tmp_path / "state")
    with StreamProcessor(manager, builder.build(), settings) as processor:
        assert processor.drain_and_stop(60)
    with manager.tailer("test/reader", OUT, codec) as tailer:
        out = sorted(json.dumps(json.loads(item.message.data)) for item in tailer)
    pairs = [
        json.dumps(joiner({"id": i}, {"id": j}))
        for s, k, t, i in items
        if s == LEFT
        for s2, k2, t2, j in items
        if s2 == RIGHT and k2 == k and t - BEFORE <= t2 <= t + AFTER
    ]
    assert out == sorted(pairs) and pairs
    manager.close()
