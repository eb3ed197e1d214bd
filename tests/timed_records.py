"""A local stream with records appended at known times, for the tests of interval jobs
(jobs/stream_stats.py and its DAG): which records fall in a day, and what a job must count.

Written with streamcore's own log and codecs (Record envelopes, as producers write them), in
the pytest process: no Spark, no Airflow.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DAY_MS = 86_400_000
DAY = datetime(2026, 3, 10, tzinfo=UTC)  # the interval of the tests: [DAY, DAY + 1 day)
T = int(DAY.timestamp() * 1000)

# (partition, key, payload bytes, append time in ms): ascending times per partition
RECORDS: list[tuple[int, str, int, int]] = [
    (0, "before", 10, T - 1),  # the millisecond before the interval
    (0, "a", 11, T),  # its first millisecond
    (0, "b", 12, T + 1_000),
    (0, "b", 13, T + 1_000),  # same key, same millisecond
    (0, "c", 14, T + DAY_MS - 1),  # its last millisecond
    (0, "after", 15, T + DAY_MS),  # the next interval's first
    (1, "d", 20, T + 5_000),
    (1, "e", 21, T + 6_000),
    (2, "later", 30, T + DAY_MS + 10),  # nothing of partition 2 in the interval
]
# What a stats job counts for [DAY, DAY + 1 day): offsets, records, distinct keys, payload bytes
EXPECTED = {
    "0": {"offsets": [1, 5], "records": 4, "keys": 3, "bytes": 11 + 12 + 13 + 14},
    "1": {"offsets": [0, 2], "records": 2, "keys": 2, "bytes": 20 + 21},
    "2": {"offsets": [0, 0], "records": 0, "keys": 0, "bytes": 0},
}


def append_timed_records(home: Path, stream: str, records: list[Any] = RECORDS) -> None:
    """Create `stream` (3 partitions, kept forever) under STREAMCORE_HOME `home` and append
    `records` as Record envelopes with their append times."""
    from streamcore.codecs import SchemaStore, get_codec
    from streamcore.config import load_config
    from streamcore.log import open_log_manager
    from streamcore.record import Record

    config = load_config(home=home)
    store = SchemaStore(config.schemas_dir)
    manager = open_log_manager(config)
    try:
        manager.create(stream, 3, retention="0")
        with manager.appender(stream, get_codec("avro", store=store)) as appender:
            for partition, key, size, ms in records:
                record = Record.of(key, bytes([partition]) * size)
                appender.append_batch([(key, record)], partition=partition, timestamps=[ms])
    finally:
        manager.close()
