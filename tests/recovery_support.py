"""Dead letters for the tests of jobs/recovery.py and the recovery DAG: written in the real
dead-letter format (`dead_letter_record`), to the logs of a configuration."""

from __future__ import annotations

import contextlib
from typing import Any

from streamcore.codecs import get_codec
from streamcore.computation.dlq import dead_letter_record
from streamcore.config import StreamcoreConfig
from streamcore.log import open_log_manager
from streamcore.log.api import LogPartition
from streamcore.names import Name
from streamcore.record import Record

CODEC = get_codec("avro")
DLQ, SOURCE = "app/dlq-parse", "app/in"
FAILED_AT = 1_763_800_000_000


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
