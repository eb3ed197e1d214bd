"""Reading Kafka partitions written in transactions (issue 29 §1): offsets are not contiguous
(each commit or abort leaves a marker, and read_committed skips aborted records), so a reader's
position is the consumer's, past the markers, and its end is the last stable offset: a tailer
at the end of a partition that ends in a marker is caught up in bounded time, `lost` counts no
marker, and a restore of a changelog holding committed and aborted transactions applies only
the committed ones and finishes. Each wait is bounded by the manager's timeout or the
restore's `stall_timeout`; none sleeps."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kafka_broker import scratch_prefix

from streamcore.log import LogOffset, LogPartition
from streamcore.log.kafka import KafkaLogManager, KafkaTransactions
from streamcore.names import Name
from streamcore.state.changelog import ChangelogWriter, encode_positions, put_header
from streamcore.state.engines.memory import MemoryEngine
from streamcore.state.restore import RestoreSettings, restore

pytestmark = pytest.mark.kafka
FAST = {"fetch.wait.max.ms": 50}
TIMEOUT = 10.0  # the manager's: a reader waiting for a marker would take this long per read
ORDERS = LogPartition(Name.of("test/orders"), 0)


@pytest.fixture
def kafka(kafka_bootstrap: str) -> Iterator[KafkaLogManager]:
    manager = KafkaLogManager(
        kafka_bootstrap, topic_prefix=scratch_prefix(), config=FAST, timeout=TIMEOUT
    )
    yield manager
    manager.close()


def write(tx: KafkaTransactions, name: str, items: list[tuple[str, bytes]], commit: bool) -> None:
    tx.begin()
    tx.appender(name).append_batch(items, partition=0)
    if commit:
        tx.commit()
    else:
        tx.abort()


def test_a_tailer_at_a_commit_marker_is_caught_up_and_its_position_passes_the_marker(
    kafka: KafkaLogManager,
) -> None:
    kafka.create("test/out", 1)
    tx = kafka.transactions("g/0")
    write(tx, "test/out", [("k", b"a"), ("k", b"b")], commit=True)  # offsets 0, 1; marker 2
    p0 = LogPartition.of("test/out", 0)
    tailer = kafka.tailer("g", "test/out")
    assert [r.offset for r in (tailer.read(5), tailer.read(5))] == [0, 1]
    started = time.monotonic()
    assert tailer.read(0) is None
    assert tailer.read(0.1) is None
    assert time.monotonic() - started < TIMEOUT / 2  # caught up, not waiting for the marker
    assert tailer.position(p0) == 3 == kafka.end_offsets("test/out")[0]
    assert tailer.commit() == {p0: 3}
    assert tailer.lost == 0
    tailer.close()
    # a reader that starts on the marker itself (a commit of "last record + 1") is caught up too
    kafka.commit_position(p0, "g", 2)
    again = kafka.tailer("g", "test/out")
    started = time.monotonic()
    assert again.read(0) is None
    assert time.monotonic() - started < TIMEOUT / 2
    assert again.position(p0) == 3
    again.close()


def test_an_open_transaction_ends_the_readable_partition_at_its_start(
    kafka: KafkaLogManager,
) -> None:
    kafka.create("test/out", 1)
    tx = kafka.transactions("g/0")
    write(tx, "test/out", [("k", b"a")], commit=True)  # 0; marker 1
    write(tx, "test/out", [("k", b"aborted")], commit=False)  # 2; marker 3
    tx.begin()
    tx.appender("test/out").append("k", b"pending")  # 4, not committed yet
    p0 = LogPartition.of("test/out", 0)
    tailer = kafka.tailer("g", "test/out")
    assert tailer.read(5).message == b"a"
    started = time.monotonic()
    assert tailer.read(0) is None  # the last stable offset (4) is the end, not the high mark
    assert tailer.read(0.1) is None
    assert time.monotonic() - started < TIMEOUT / 2
    assert tailer.position(p0) == 4 == kafka.end_offsets("test/out")[0]
    tx.commit()
    record = tailer.read(5)
    assert (record.offset, record.message) == (4, b"pending")
    assert tailer.read(0) is None
    assert tailer.position(p0) == 6
    assert tailer.lost == 0  # markers and the aborted record are no lost records
    tailer.seek(LogOffset(p0, 0))
    assert [r.message for r in iter(lambda: tailer.read(0), None)] == [b"a", b"pending"]
    tailer.close()


def test_read_columns_skips_aborted_records_and_ends_past_the_markers(
    kafka: KafkaLogManager,
) -> None:
    kafka.create("test/out", 1)
    tx = kafka.transactions("g/0")
    for i in range(3):
        write(tx, "test/out", [(f"k{i}", b"x"), (f"k{i}", b"y")], commit=i != 1)
    p0 = LogPartition.of("test/out", 0)
    tailer = kafka.tailer("g", "test/out")
    offsets: list[int] = []
    end = kafka.end_offsets("test/out")[0]
    started = time.monotonic()
    while tailer.position(p0) < end:
        columns = tailer.read_columns(100, 0.1)
        if columns is not None:
            offsets += columns.offsets
        assert time.monotonic() - started < TIMEOUT / 2
    assert offsets == [0, 1, 6, 7]  # 2: marker; 3, 4: aborted; 5: marker; 8: marker
    assert tailer.position(p0) == end == 9
    assert tailer.lost == 0
    tailer.close()


def test_a_restore_applies_committed_transactions_only_and_finishes(
    kafka: KafkaLogManager,
) -> None:
    name = "test/count-counts-changelog"
    kafka.create(name, 1)
    header = put_header(encode_positions({ORDERS: 5}))
    tx = kafka.transactions("count/0")
    write(tx, name, [("a", header + b"1"), ("b", header + b"1")], commit=True)
    write(tx, name, [("a", header + b"999"), ("c", header + b"999")], commit=False)
    write(tx, name, [("b", header + b"2")], commit=True)
    changelog = LogPartition.of(name, 0)
    engine = MemoryEngine()
    settings = RestoreSettings(batch_size=2, stall_timeout=TIMEOUT / 2)
    with ChangelogWriter(kafka, name) as writer:
        result = restore(kafka, changelog, "counts", engine, {ORDERS: 5}, writer, settings=settings)
        assert dict(engine.items()) == {b"a": b"1", b"b": b"2"}
        assert (result.restored, result.end) == (3, kafka.end_offsets(name)[0])
        assert result.seconds < TIMEOUT / 2
        # again from the store's checkpoint (past the last marker): nothing to read
        again = restore(kafka, changelog, "counts", engine, {ORDERS: 5}, writer, settings=settings)
        assert again.restored == 0 and not again.full
        assert dict(engine.items()) == {b"a": b"1", b"b": b"2"}
