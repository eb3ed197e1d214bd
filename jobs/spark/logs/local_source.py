"""`streamcore_log`: a Python Data Source that reads explicit offset ranges of a local log (of any
log whose description opens cursors: `streamcore.log.capabilities.CursorDescription`).

One Spark partition per log partition, or per `SPLIT_RECORDS` of its range when it holds more (a
one-partition log such as `audit/entries` would otherwise be read, and written on, by one task);
each executor opens its partition itself from the log's description, e.g.
`LocalLogDescription` (a read-only cursor, any number of processes may read; the on-disk layout
stays in `streamcore.log.local`) and yields Arrow record batches
built straight from the segment buffers, so records never become Python objects. Columns:
`stream, partition, offset, timestamp, key, value` (`value` = the raw log bytes, a Record envelope
for streamcore logs; `jobs.spark.logs.streams` unwraps it).

    spark.dataSource.register(LocalLogDataSource)
    spark.read.format("streamcore_log")
        .option("description", encode_description(manager.describe("import/docs")))
        .option("ranges", '{"0": [0, 100], "1": [0, 80]}').load()   # option split_records
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from streamcore.errors import ConfigError, LogError
from streamcore.log import LogDescription
from streamcore.log.capabilities import CursorDescription
from streamcore.log.registry import description_from_json

__all__ = ["RAW_SCHEMA", "SPLIT_RECORDS", "LocalLogDataSource", "encode_description"]

RAW_SCHEMA = (
    "stream string, partition int, offset long, timestamp timestamp, key string, value binary"
)
_MAX_BATCH = 16_384
# Records per Spark partition at most: 1M records of one log partition are read by 4 tasks.
SPLIT_RECORDS = 250_000


def encode_description(description: LogDescription) -> str:
    """The `description` option of a log whose description opens cursors (a local log's)."""
    return _readable(description).to_json()


def _readable(description: LogDescription) -> CursorDescription:
    if not isinstance(description, CursorDescription):
        raise ConfigError(
            f"log {description.name} is a {description.backend} log, whose partitions other "
            "processes cannot open with cursors; the streamcore_log source reads local logs"
        )
    return description


@dataclass(frozen=True)
class LogRange(InputPartition):
    """Offsets `[start, end)` of partition `partition` of the described log."""

    log: CursorDescription
    partition: int
    start: int
    end: int


class LocalLogDataSource(DataSource):
    """Batch reads of offset ranges of one local log (options `description`, `ranges`)."""

    @classmethod
    def name(cls) -> str:
        return "streamcore_log"

    def schema(self) -> str:
        return RAW_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return LocalLogReader(self.options)


class LocalLogReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        missing = [k for k in ("description", "ranges") if k not in options]
        if missing:
            raise LogError(
                f"the streamcore_log source needs option(s) {', '.join(missing)}: description "
                "= encode_description(manager.describe(name)), ranges = JSON {partition: "
                "[start, end]}"
            )
        self.log = _readable(description_from_json(options["description"]))
        self.ranges = {
            int(p): (int(s), int(e)) for p, (s, e) in json.loads(options["ranges"]).items()
        }
        self.split = max(1, int(options.get("split_records", SPLIT_RECORDS)))

    def partitions(self) -> list[InputPartition]:
        return [
            LogRange(self.log, p, lo, min(lo + self.split, end))
            for p, (start, end) in sorted(self.ranges.items())
            for lo in range(start, max(end, start + 1), self.split)
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, LogRange)
        yield from read_range(partition)


def read_range(part: LogRange) -> Iterator[Any]:
    """Arrow batches of the records at offsets `[start, end)`; `LogError` if any is missing (purged
    by retention, or the log was truncated), because a silent gap would lose data. Offsets key
    compaction removed are the one gap allowed: the cursor tells them apart."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if part.end <= part.start:
        return
    label = part.log.label(part.partition)
    cursor = part.log.open_cursor(part.partition)
    try:
        if part.start < cursor.start_offset():
            raise LogError(
                f"{label}: offsets {part.start}..{cursor.start_offset() - 1} were purged by "
                "retention before this job read them; the range cannot be read exactly: reset "
                "the group's position past them (`streamcore position`) to accept the loss"
            )
        cursor.seek(part.start)
        expected = part.start
        stream = pa.scalar(part.log.name, pa.string())
        number = pa.scalar(part.partition, pa.int32())
        compacted = cursor.compacted
        while expected < part.end:
            batch = cursor.next_arrow(min(_MAX_BATCH, part.end - expected))
            if batch is None:
                raise LogError(
                    f"{label}: the log ends at offset {expected}, before the requested end "
                    f"{part.end}; was it truncated or recreated? Re-plan the batch from the "
                    "current end offsets"
                )
            first = batch.column(0)[0].as_py()
            if first - expected != cursor.compacted - compacted:  # only compaction leaves gaps
                raise LogError(f"{label}: expected offset {expected}, the log returned {first}")
            compacted = cursor.compacted
            if first >= part.end:
                break  # key compaction removed the range's last records
            n = min(batch.num_rows, part.end - first)
            batch = batch.slice(0, n)
            millis = batch.column(1)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.repeat(stream, n),
                    pa.repeat(number, n),
                    batch.column(0),
                    pc.multiply(millis, 1000).cast(pa.timestamp("us", tz="UTC")),
                    batch.column(2),
                    batch.column(3),
                ],
                names=["stream", "partition", "offset", "timestamp", "key", "value"],
            )
            expected = first + n
    finally:
        cursor.close()
