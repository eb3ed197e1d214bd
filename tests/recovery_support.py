"""Logs for the recovery tests: dead letters for the tests of jobs/recovery.py and the recovery DAG,
written in the real dead-letter format (`dead_letter_record`) to the logs of a configuration; and
a stream whose oldest records retention purged (`purged_stream`)."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from streamcore.codecs import get_codec
from streamcore.computation.dlq import dead_letter_record
from streamcore.config import StreamcoreConfig
from streamcore.log import LogPartition, open_log_manager
from streamcore.names import Name
from streamcore.record import Record

CODEC = get_codec("avro")
DLQ, SOURCE = "app/dlq-parse", "app/in"
FAILED_AT = 1_763_800_000_000
# Recent append times: the test broker's time-based retention (7 days) would delete older ones.
T0 = (time.time_ns() // 1_000_000 - 3_600_000) // 1000 * 1000


def _letter(key: str, data: bytes, n: int, error: Exception, **extra: Any) -> Record:
    failed = Record(key, data, 100 + n, 1, extra.pop("trace", None))
    return dead_letter_record(
        failed,
        computation=extra.pop("computation", "parse"),
        stream=SOURCE,
        partition=0,
        offset=n,
        failure=error,
        attempts=3,
        failed_at=FAILED_AT + n,
        **extra,
    )


def write_dead_letters(config: StreamcoreConfig) -> None:
    """Seven dead letters of two computations and three error classes (one undecodable, one
    with a trace context) and one foreign record, in a two-partition dead-letter stream; and
    the two-partition stream they failed on, empty."""
    with open_log_manager(config) as manager:
        manager.create(SOURCE, 2)
        manager.create(DLQ, 2)
        letters = [_letter(f"k{n}", f"v{n}".encode(), n, ValueError(f"bad {n}")) for n in range(4)]
        letters += [
            _letter("k4", b"v4", 4, TimeoutError("slow"), computation="enrich"),
            _letter("k5", b"v5", 5, TimeoutError("slow"), computation="enrich", trace=b"t-5"),
            _letter("u6", b"\xff\xferaw", 6, KeyError("codec"), undecodable=True),
        ]
        with manager.appender(DLQ, CODEC) as appender:
            appender.append_batch([(r.key, r) for r in letters])
            appender.append("f7", Record("f7", b"not a dead letter", 7))


def source_records(config: StreamcoreConfig) -> tuple[list[Any], list[bytes]]:
    """(records of SOURCE decoded, raw values of SOURCE), in partition and offset order."""
    with open_log_manager(config) as manager:
        ends = manager.end_offsets(SOURCE)
        decoded, raw = [], []
        for p, end in enumerate(ends):
            partition = LogPartition.of(Name.of(SOURCE), p)
            with manager.tailer("test/reader", [partition], None) as tailer:
                for _ in range(end):
                    rec = tailer.read(5.0)
                    assert rec is not None
                    raw.append(rec.message)
                    with contextlib.suppress(Exception):
                        decoded.append(CODEC.decode(rec.message))
        return decoded, raw


def purged_stream(manager: Any, backend: str, stream: str = "app/in") -> None:
    """`stream`, one partition: ten Records of watermark 100..109 appended at T0, T0+100, ...,
    T0+900 ms in two batches of five, then what retention does: offsets 0-4 purged. `manager`
    is a `LocalLogManager` (`backend` "local") or a `KafkaLogManager` ("kafka")."""
    if backend == "local":
        # 1 KiB records in 4 KiB segments: the second batch starts a segment at offset 5, and a
        # purge two hours on removes the sealed first one (forced: nothing archived it).
        manager.create(stream, 1, segment_bytes=4096, retention="1h")
    else:
        manager.create(stream, 1)
    with manager.appender(stream, CODEC) as appender:
        for first in (0, 5):
            appender.append_batch(
                [(f"k{i}", Record(f"k{i}", b"x" * 1024, 100 + i)) for i in range(first, first + 5)],
                partition=0,
                timestamps=[T0 + 100 * i for i in range(first, first + 5)],
            )
    if backend == "local":
        manager.purge(stream, now_ms=time.time_ns() // 1_000_000 + 7_200_000, force=True)
    else:
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": manager.bootstrap_servers})
        tp = TopicPartition(manager.topic(stream), 0, 5)
        admin.delete_records([tp])[tp].result(timeout=10)
    assert (manager.start_offsets(stream), manager.end_offsets(stream)) == ([5], [10])
