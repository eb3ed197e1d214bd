"""Time intervals to offset ranges on the hot log, on every backend (no Spark); intervals older
than retention on the backends that purge (local, Kafka)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from jobs.spark.logs.intervals import INTERVAL_PROBE_GROUP, interval_ranges
from streamcore.errors import StreamcoreError
from streamcore.log import LogManager

# Recent append times: the test broker's time-based retention (7 days) would delete 1970 ones.
T0 = (time.time_ns() // 1_000_000 - 3_600_000) // 1000 * 1000
NAME = "test/interval"


def _fill(
    manager: LogManager, value: bytes = b"v", times: list[int] | None = None, **options: Any
) -> None:
    """Partition 0: 10 records appended at T0+1000, T0+1100, ..., T0+1900 ms (or T0+`times`),
    in two batches of 5 (offsets 0-4 and 5-9); partition 1: none."""
    times = times or [1000 + 100 * i for i in range(10)]
    manager.create(NAME, 2, **options)
    with manager.appender(NAME) as appender:
        for first in (0, 5):
            appender.append_batch(
                [(f"k{i}", value) for i in range(first, first + 5)],
                partition=0,
                timestamps=[T0 + t for t in times[first : first + 5]],
            )


def test_an_interval_maps_to_the_records_appended_in_it(manager: LogManager) -> None:
    _fill(manager)
    found = interval_ranges(manager, NAME, T0 + 1200, T0 + 1500)
    assert found.ranges == {0: (2, 5), 1: (0, 0)}
    assert found.before_retention_ms == {0: 0, 1: 0}
    assert found.records == 3 and found.complete
    assert INTERVAL_PROBE_GROUP not in manager.list_groups(NAME)  # the probe commits nothing


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (0, 1000, (0, 0)),
        (0, 1001, (0, 1)),
        (1900, 5000, (9, 10)),
        (5000, 6000, (10, 10)),
        (1250, 1250, (3, 3)),
    ],
)
def test_interval_edges(manager: LogManager, start: int, end: int, expected: tuple) -> None:
    _fill(manager)
    found = interval_ranges(manager, NAME, T0 + start, T0 + end)
    assert found.ranges[0] == expected
    assert found.complete


def test_an_open_interval_maps_to_everything_appended_since_its_start(manager: LogManager) -> None:
    _fill(manager)
    found = interval_ranges(manager, NAME, T0 + 1250, None)
    assert found.ranges == {0: (3, 10), 1: (0, 0)} and found.complete
    assert interval_ranges(manager, NAME, T0 + 5000, None).ranges[0] == (10, 10)


def test_an_interval_that_ends_before_it_starts_is_refused(manager: LogManager) -> None:
    _fill(manager)
    with pytest.raises(StreamcoreError, match="ends before it starts"):
        interval_ranges(manager, NAME, T0 + 2000, T0 + 1000)


# -- intervals older than retention: local and Kafka purge, the memory log keeps everything ------

PURGING = [pytest.param("local"), pytest.param("kafka", marks=pytest.mark.kafka)]
HOUR = 3_600_000


def _fill_and_purge_first_batch(
    manager: LogManager, backend: str, times: list[int] | None = None
) -> None:
    """`_fill`, then what retention does: partition 0 keeps offsets 5-9 (T0+1500 ... T0+1900)."""
    if backend == "local":
        # 1 KiB records in 4 KiB segments: the second batch starts a new segment at offset 5,
        # and a purge an hour past the retention removes the sealed first one.
        _fill(manager, b"x" * 1024, times, segment_bytes=4096, retention="1h")
        # forced: the log was never archived, and the archiver would hold it
        manager.purge(NAME, now_ms=time.time_ns() // 1_000_000 + 2 * HOUR, force=True)
    else:
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import AdminClient

        _fill(manager, times=times)
        admin = AdminClient({"bootstrap.servers": manager.bootstrap_servers})
        tp = TopicPartition(manager.topic(NAME), 0, 5)
        admin.delete_records([tp])[tp].result(timeout=10)
    assert manager.start_offsets(NAME) == [5, 0]
    assert manager.end_offsets(NAME) == [10, 0]


@pytest.mark.parametrize("backend", PURGING)
@pytest.mark.parametrize(
    ("start", "end", "expected", "before"),
    [
        # partly purged: [1200, 1500] may have had records (1500 too: a purged one may share it)
        (1200, 1700, (5, 7), 301),
        # wholly purged
        (1000, 1300, (5, 5), 300),
        # starts at the oldest retained record's millisecond: that millisecond may be incomplete
        (1500, 1700, (5, 7), 1),
        # after the oldest retained record: the hot log holds it all
        (1501, 1700, (6, 7), 0),
        (1600, 5000, (6, 10), 0),
        (5000, 6000, (10, 10), 0),
    ],
)
def test_an_interval_before_retention_is_reported_incomplete(
    manager: LogManager, backend: str, start: int, end: int, expected: tuple, before: int
) -> None:
    _fill_and_purge_first_batch(manager, backend)
    found = interval_ranges(manager, NAME, T0 + start, T0 + end)
    assert found.ranges == {0: expected, 1: (0, 0)}
    assert found.before_retention_ms == {0: before, 1: 0}
    assert found.complete is (before == 0)


@pytest.mark.parametrize("backend", PURGING)
def test_an_open_interval_before_retention_is_reported_incomplete(
    manager: LogManager, backend: str
) -> None:
    _fill_and_purge_first_batch(manager, backend)
    found = interval_ranges(manager, NAME, T0 + 1200, None)
    assert found.ranges == {0: (5, 10), 1: (0, 0)}
    assert found.before_retention_ms == {0: 301, 1: 0} and not found.complete
    assert interval_ranges(manager, NAME, T0 + 1501, None).complete


@pytest.mark.parametrize("backend", PURGING)
def test_purged_records_of_the_oldest_retained_millisecond_are_not_missed(
    manager: LogManager, backend: str
) -> None:
    # Offsets 3-7 all at T0+1500: retention cut that millisecond in two (3 and 4 are purged).
    _fill_and_purge_first_batch(manager, backend, [1000, 1100, 1200] + [1500] * 5 + [1800, 1900])
    found = interval_ranges(manager, NAME, T0 + 1500, T0 + 1600)
    assert found.ranges[0] == (5, 8)  # 5-7 from the hot log; 3 and 4 only in the archive
    assert found.before_retention_ms[0] == 1
    assert not found.complete


@pytest.mark.parametrize("backend", [pytest.param("kafka", marks=pytest.mark.kafka)])
def test_a_partition_purged_to_its_end_reports_the_whole_interval(
    manager: LogManager, backend: str
) -> None:
    # Kafka only: a local log never purges its active segment, so it always keeps a record.
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    _fill(manager)
    admin = AdminClient({"bootstrap.servers": manager.bootstrap_servers})
    tp = TopicPartition(manager.topic(NAME), 0, 10)
    admin.delete_records([tp])[tp].result(timeout=10)
    assert manager.start_offsets(NAME) == [10, 0]
    # Nothing retained says where the purged records were, even for an interval after them.
    for start, end in [(1200, 1500), (5000, 6000)]:
        found = interval_ranges(manager, NAME, T0 + start, T0 + end)
        assert found.ranges == {0: (10, 10), 1: (0, 0)}
        assert found.before_retention_ms == {0: end - start, 1: 0}
        assert not found.complete
