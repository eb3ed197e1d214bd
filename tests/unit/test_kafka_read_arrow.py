"""`KafkaTailer.read_arrow`, `read_columns` (the same records as lists, the restore's read) and
`read_batch` without a codec (the stream processor's read) take what librdkafka has fetched in bulk
(positions moved once per run of records of one partition): these check that they keep what
one-by-one reading promised.
Each partition's records come once, in order; a batch never exceeds `max_records`; a record
fetched before a seek is never returned after it; a key that is not UTF-8 in the middle of a large
batch ends the batch before it (the records of other partitions after it come later, once), then
raises at it until `skip_one()`; a record without key or value reads as "" and b"". Every read
waits on records (a `timeout`), never on time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from log_fixtures import MANAGER_FACTORIES

from streamcore.errors import UndecodableRecordError
from streamcore.log import LogManager, LogOffset, LogPartition
from streamcore.names import Name

pytestmark = pytest.mark.kafka

NAME = "test/arrow"
PER_PARTITION = 3000
BAD_AT = 1500
BAD_KEY = b"\xff\xfebinary"


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[LogManager]:
    manager = MANAGER_FACTORIES["kafka"](tmp_path)
    yield manager
    manager.close()


Row = tuple[int, bytes | None, bytes | None]  # partition, key, value


def produce_foreign(manager: LogManager, rows: list[Row]) -> None:
    """A plain confluent-kafka producer (no streamcore) writes (partition, key, value) rows."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": manager.bootstrap_servers})  # type: ignore[attr-defined]
    topic = manager.topic(NAME)  # type: ignore[attr-defined]
    for partition, key, value in rows:
        producer.produce(topic, key=key, value=value, partition=partition)
    assert producer.flush(10) == 0


def read_rows(tailer: Any, how: str, max_records: int = 65536, timeout: float = 0.0) -> Any:
    """One read as rows (dicts of partition, offset, key, value; None when none arrived), by
    `read_arrow` or by `read_columns` (the restore's: lists, keys as UTF-8 bytes)."""
    if how == "arrow":
        batch = tailer.read_arrow(max_records, timeout)
        return None if batch is None else batch.to_pylist()
    if how == "batch":
        records = tailer.read_batch(max_records, timeout)
        return [
            {
                "partition": r.partition.partition,
                "offset": r.offset,
                "key": r.key,
                "value": r.message,
            }
            for r in records
        ] or None
    columns = tailer.read_columns(max_records, timeout)
    if columns is None:
        return None
    assert not columns.timestamps
    return [
        {"partition": p, "offset": o, "key": k.decode("utf-8"), "value": v}
        for p, o, k, v in zip(
            columns.partitions, columns.offsets, columns.keys, columns.values, strict=True
        )
    ]


def read_all(
    tailer: Any, count: int, max_records: int = 65536, how: str = "arrow"
) -> list[dict[str, Any]]:
    """Rows until `count` are read (each read waits up to 10 s for records)."""
    rows: list[dict[str, Any]] = []
    while len(rows) < count:
        batch = read_rows(tailer, how, max_records, timeout=10)
        assert batch is not None, f"{len(rows)} of {count} records read"
        assert len(batch) <= max_records
        rows += batch
    return rows


def offsets_of(rows: list[dict[str, Any]], partition: int) -> list[int]:
    return [r["offset"] for r in rows if r["partition"] == partition]


@pytest.mark.parametrize("how", ["arrow", "columns", "batch"])
@pytest.mark.parametrize("max_records", [65536, 700])
def test_read_arrow_across_partitions_keeps_each_partitions_order_and_positions(
    kafka: LogManager, max_records: int, how: str
) -> None:
    kafka.create(NAME, 3)
    with kafka.appender(NAME) as appender:
        for chunk in range(0, PER_PARTITION, 500):  # interleaved: runs of each partition
            for p in range(3):
                appender.append_batch(
                    [(f"k{p}-{i}", b"v%d" % i) for i in range(chunk, chunk + 500)], partition=p
                )
    with kafka.tailer("g", NAME) as tailer:
        rows = read_all(tailer, 3 * PER_PARTITION, max_records, how)
        assert read_rows(tailer, how, max_records) is None
        for p in range(3):
            assert offsets_of(rows, p) == list(range(PER_PARTITION))
            keys = [r["key"] for r in rows if r["partition"] == p]
            assert keys == [f"k{p}-{i}" for i in range(PER_PARTITION)]
            assert tailer.position(LogPartition(Name.of(NAME), p)) == PER_PARTITION
        assert tailer.lost == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("how", ["arrow", "batch"])
def test_records_fetched_before_a_seek_are_never_returned_after_it(
    kafka: LogManager, how: str
) -> None:
    kafka.create(NAME, 1)
    p = LogPartition(Name.of(NAME), 0)
    with kafka.appender(NAME) as appender:
        appender.append_batch([(f"k{i}", b"v") for i in range(PER_PARTITION)], partition=0)
    with kafka.tailer("g", NAME) as tailer:
        assert offsets_of(read_all(tailer, 10, 10, how), 0) == list(range(10))
        tailer.seek(LogOffset(p, 2000))  # forward, past records already fetched
        assert offsets_of(read_all(tailer, 5, 5, how), 0) == list(range(2000, 2005))
        tailer.seek(LogOffset(p, 3))  # back, below them
        rows = read_all(tailer, PER_PARTITION - 3, how=how)
        assert offsets_of(rows, 0) == list(range(3, PER_PARTITION))
        assert tailer.position(p) == PER_PARTITION


@pytest.mark.parametrize("how", ["arrow", "columns", "batch"])
def test_an_undecodable_key_in_a_large_batch_ends_it_and_stands_at_that_record(
    kafka: LogManager, how: str
) -> None:
    kafka.create(NAME, 2)
    p0, p1 = (LogPartition(Name.of(NAME), p) for p in range(2))
    rows: list[Row] = []
    for i in range(PER_PARTITION):
        rows.append((0, BAD_KEY if i == BAD_AT else b"a%d" % i, b"v%d" % i))
        key = "\u00e9b9".encode() if i == 9 else b"b%d" % i  # UTF-8, not ASCII: key by key
        rows.append((1, None if i == 7 else key, None if i == 7 else b"w%d" % i))
    produce_foreign(kafka, rows)
    with kafka.tailer("g", NAME) as tailer:
        got: list[dict[str, Any]] = []
        while True:  # the batch that meets the bad key ends before it, without raising
            try:
                batch = read_rows(tailer, how, timeout=10)
            except UndecodableRecordError as failed:
                first = failed
                break
            assert batch is not None
            got += batch
        assert first.offset == LogOffset(p0, BAD_AT) and first.key == BAD_KEY
        assert offsets_of(got, 0) == list(range(BAD_AT))
        assert tailer.position(p0) == BAD_AT
        with pytest.raises(UndecodableRecordError) as again:
            read_rows(tailer, how, timeout=1)
        assert again.value.offset == LogOffset(p0, BAD_AT)
        assert tailer.skip_one() == LogOffset(p0, BAD_AT)
        got += read_all(tailer, 2 * PER_PARTITION - 1 - len(got), how=how)
        assert read_rows(tailer, how) is None
        assert offsets_of(got, 0) == [i for i in range(PER_PARTITION) if i != BAD_AT]
        assert offsets_of(got, 1) == list(range(PER_PARTITION))  # once each, in order
        no_key = next(r for r in got if r["partition"] == 1 and r["offset"] == 7)
        assert (no_key["key"], no_key["value"]) == ("", b"")
        accented = next(r for r in got if r["partition"] == 1 and r["offset"] == 9)
        assert accented["key"] == "\u00e9b9"
        assert (tailer.position(p0), tailer.position(p1)) == (PER_PARTITION, PER_PARTITION)
        assert tailer.lost == 0  # type: ignore[attr-defined]


def test_read_batch_without_a_codec_returns_the_records_read_returns(kafka: LogManager) -> None:
    """Every field (timestamps, "" for no key, b"" for no value, the LogPartition) as `read`."""
    kafka.create(NAME, 2)
    rows: list[Row] = [
        (p, None if i == 3 else b"k%d" % i, None if i == 5 else b"v%d" % i)
        for i in range(200)
        for p in range(2)
    ]
    produce_foreign(kafka, rows)
    with kafka.tailer("singles", NAME) as tailer:
        singles = []
        while len(singles) < len(rows):
            record = tailer.read(timeout=10)
            assert record is not None, f"{len(singles)} of {len(rows)} records read"
            singles.append(record)
    with kafka.tailer("batches", NAME) as tailer:
        batched = []
        while len(batched) < len(rows):
            batch = tailer.read_batch(64, timeout=10)
            assert batch, f"{len(batched)} of {len(rows)} records read"
            assert len(batch) <= 64
            batched += batch
        assert tailer.read_batch(64) == []

    def where(record: Any) -> tuple[int, int]:
        return record.partition.partition, record.offset

    assert sorted(batched, key=where) == sorted(singles, key=where)
    no_key = next(r for r in batched if where(r) == (0, 3))
    no_value = next(r for r in batched if where(r) == (1, 5))
    assert (no_key.key, no_value.message) == ("", b"")


def test_a_subscribed_member_reads_every_record_once_in_order(kafka: LogManager) -> None:
    kafka.create(NAME, 2)
    with kafka.appender(NAME) as appender:
        for p in range(2):
            appender.append_batch([(f"k{i}", b"v") for i in range(PER_PARTITION)], partition=p)
    with kafka.subscribe("members", [NAME]) as member:
        rows = read_all(member, 2 * PER_PARTITION)
        assert member.read_arrow() is None
        for p in range(2):
            assert offsets_of(rows, p) == list(range(PER_PARTITION))
            assert member.position(LogPartition(Name.of(NAME), p)) == PER_PARTITION


def test_an_assignment_that_arrives_while_a_member_closes_is_refused(kafka: LogManager) -> None:
    """A group can assign a member while its close() leaves the group (the CI run saw it): the
    member takes nothing, so close() makes no broker call on a handle being destroyed
    (`_DESTROY: Failed to get committed offsets` escaped close() before)."""
    from confluent_kafka import TopicPartition

    kafka.create(NAME, 1)
    member = kafka.subscribe("test/closing", [NAME])

    class Consumer:
        assigned: list[Any] | None = None

        def assign(self, tps: list[Any]) -> None:
            self.assigned = tps

        incremental_assign = assign

    consumer = Consumer()
    try:
        member._closing = True  # type: ignore[attr-defined]  # as close() sets it
        member._on_assign(consumer, [TopicPartition(kafka.topic(NAME), 0)])  # type: ignore[attr-defined]
        assert consumer.assigned == []
        assert member.assignments == []
    finally:
        member._closing = False  # type: ignore[attr-defined]
        member.close()
