"""`KafkaLogManager.subscribe`: members of one Kafka consumer group share the partitions, the
RebalanceListener sees every move, marked positions are committed on revoke (after the
listener), and nothing is read twice across a handover."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from kafka_broker import scratch_prefix

from streamcore.log import LogOffset, LogPartition, LogRecord, LogTailer, RebalanceListener
from streamcore.log.kafka import KafkaLogManager
from streamcore.names import Name

pytestmark = pytest.mark.kafka
GROUP_CONFIG = {"session.timeout.ms": 3000, "heartbeat.interval.ms": 250, "fetch.wait.max.ms": 50}


@pytest.fixture
def kafka(kafka_bootstrap: str) -> Iterator[KafkaLogManager]:
    manager = KafkaLogManager(
        kafka_bootstrap, topic_prefix=scratch_prefix(), config=GROUP_CONFIG, timeout=10.0
    )
    yield manager
    manager.close()


class Recorder(RebalanceListener):
    def __init__(self, name: str, events: list, on_revoke: Callable | None = None) -> None:
        self.name = name
        self.events = events
        self.on_revoke = on_revoke

    def on_assigned(self, tailer: LogTailer, partitions: list[LogPartition]) -> None:
        self.events.append((self.name, "assigned", sorted(p.partition for p in partitions)))

    def on_revoked(self, tailer: LogTailer, partitions: list[LogPartition]) -> None:
        self.events.append((self.name, "revoked", sorted(p.partition for p in partitions)))
        if self.on_revoke is not None:
            self.on_revoke(tailer, partitions)


def pump(
    members: dict[str, LogTailer],
    seen: list[tuple[str, LogRecord]],
    until: Callable[[], bool],
    timeout: float = 20.0,
) -> None:
    """Read (and mark) with every member until `until()` holds."""
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "the group did not settle in time"
        for name, tailer in members.items():
            record = tailer.read(0.02)
            if record is not None:
                seen.append((name, record))
                tailer.mark(record)


def test_members_share_partitions_and_hand_over_without_duplicates(
    kafka: KafkaLogManager,
) -> None:
    kafka.create("test/work", 4)
    app = kafka.appender("test/work")
    app.append_batch([(f"k{i}", str(i).encode()) for i in range(400)])
    events: list = []
    seen: list[tuple[str, LogRecord]] = []
    a = kafka.subscribe("workers", ["test/work"], Recorder("a", events))
    a.commit_interval = 3600  # marks are committed on revoke and close only
    pump({"a": a}, seen, lambda: len(seen) >= 100)
    assert events == [("a", "assigned", [0, 1, 2, 3])]
    assert len(a.assignments) == 4

    b = kafka.subscribe("workers", ["test/work"], Recorder("b", events))
    b.commit_interval = 3600
    members = {"a": a, "b": b}
    pump(members, seen, lambda: len(a.assignments) == 2 and len(b.assignments) == 2)
    assert ("a", "revoked", [0, 1, 2, 3]) in events
    mine = {n: {p.partition for p in t.assignments} for n, t in members.items()}
    assert mine["a"] | mine["b"] == {0, 1, 2, 3} and not mine["a"] & mine["b"]
    assert ("b", "assigned", sorted(mine["b"])) in events
    app.append_batch([(f"late{i}", b"late") for i in range(100)])
    pump(members, seen, lambda: len(seen) >= 450)

    a.close()  # revokes (listener, marks committed) and leaves the group
    assert events[-1][:2] == ("a", "revoked")
    pump({"b": b}, seen, lambda: len(b.assignments) == 4)
    pump({"b": b}, seen, lambda: len(seen) >= 500)
    assert b.read(0) is None
    b.close()

    offsets = [(r.partition.partition, r.offset) for _, r in seen]
    assert len(offsets) == len(set(offsets)) == 500  # every record once, across the handovers
    assert kafka.committed("test/work", "workers") == kafka.end_offsets("test/work")
    assert kafka.list_groups("test/work") == ["workers"]


def test_listener_runs_before_the_marks_of_revoked_partitions_are_committed(
    kafka: KafkaLogManager,
) -> None:
    kafka.create("test/work", 2)
    kafka.appender("test/work").append_batch([("k", b"v")] * 10, partition=0)
    at_revoke: list = []

    def check(tailer: LogTailer, partitions: list[LogPartition]) -> None:
        at_revoke.append(kafka.committed("test/work", "g"))

    events: list = []
    a = kafka.subscribe("g", ["test/work"], Recorder("a", events, check))
    a.commit_interval = 3600
    seen: list = []
    pump({"a": a}, seen, lambda: len(seen) >= 4)
    assert kafka.committed("test/work", "g") == [None, None]  # marked, not committed yet
    a.close()
    assert at_revoke == [[None, None]]
    assert kafka.committed("test/work", "g") == [4, None]


def test_subscribed_tailer_positions_and_commits(kafka: KafkaLogManager) -> None:
    kafka.create("test/a", 1)
    kafka.create("test/b", 1)
    kafka.appender("test/a").append_batch([(f"a{i}", b"a") for i in range(5)])
    kafka.appender("test/b").append_batch([(f"b{i}", b"b") for i in range(3)])
    tailer = kafka.subscribe("g", ["test/a", "test/b"])
    assert tailer.assignments == []  # the group is joined inside read()
    records = []
    deadline = time.monotonic() + 20
    while len(records) < 8 and time.monotonic() < deadline:
        if (record := tailer.read(0.1)) is not None:
            records.append(record)
    assert len(records) == 8
    pa, pb = LogPartition.of("test/a", 0), LogPartition.of("test/b", 0)
    assert set(tailer.assignments) == {pa, pb}
    assert (tailer.position(pa), tailer.position(pb)) == (5, 3)
    tailer.seek(LogOffset(pa, 3))
    assert [r.offset for r in tailer] == [3, 4]
    assert tailer.commit() == {pa: 5, pb: 3}
    tailer.reset(pb)
    assert kafka.committed("test/b", "g") == [0]
    assert [r.key for r in tailer] == ["b0", "b1", "b2"]
    tailer.close()
    assert kafka.committed("test/a", "g") == [5]


def test_group_members_lists_the_subscribed_consumers_only_while_they_live(
    kafka: KafkaLogManager,
) -> None:
    kafka.create("test/work", 2)
    assert kafka.group_members("test/never_used") == []
    tailer = kafka.subscribe("members", ["test/work"])
    deadline = time.monotonic() + 20
    while len(tailer.assignments) < 2:  # the group is joined inside read()
        assert time.monotonic() < deadline, "the consumer was never assigned its partitions"
        tailer.read(0.1)
    [member] = kafka.group_members("members")
    assert member.member_id == tailer._consumer.memberid()
    assert member.logs == ("test/work",)
    assert member.host  # the client address as the broker sees it
    # A static-assignment tailer commits under a group but never joins it.
    static = kafka.tailer("static", "test/work")
    static.commit_offset(LogPartition.of("test/work", 0), 0)
    assert kafka.group_members("static") == []
    static.close()
    tailer.close()  # leaves the group at once, without waiting for the session to end
    assert kafka.group_members("members") == []


def test_a_subscription_to_several_topics_is_co_partitioned_whatever_the_strategy(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    # cooperative-sticky spreads each topic on its own: with three members of two 4-partition
    # topics it gave partition 1 of the two topics to different members (checked on this
    # broker; with two members it happened to pair them). Several topics get range instead.
    config = {**GROUP_CONFIG, "partition.assignment.strategy": "cooperative-sticky"}
    manager = KafkaLogManager(
        kafka_bootstrap, topic_prefix=scratch_prefix(), config=config, timeout=10.0
    )
    try:
        names = [Name.of("test/left"), Name.of("test/right")]
        for name in names:
            manager.create(name, 4)
        members = {m: manager.subscribe("joined", names) for m in ("a", "b", "c")}
        assert "partition.assignment.strategy=range instead of 'cooperative-sticky'" in caplog.text

        def co_partitioned() -> bool:
            held = [set(t.assignments) for t in members.values()]
            numbers = [{p.partition for p in h} for h in held]
            return sorted(len(n) for n in numbers) == [1, 1, 2] and all(
                h == {LogPartition(name, p) for name in names for p in n}
                for h, n in zip(held, numbers, strict=True)
            )

        pump(members, [], co_partitioned)
        caplog.clear()
        manager.subscribe("alone", names[:1]).close()  # one topic: the configured strategy
        assert "instead of" not in caplog.text
    finally:
        manager.close()
