"""Streams as DataFrames: `read_stream()` reads offset ranges of any log (local or Kafka, as the
log config routes it) and unwraps the Record envelope into these columns.

    stream, partition, offset, timestamp, key, watermark, flags, data, record_error

`data` is the payload (usually Avro single-object bytes, see `jobs.spark.logs.avro`). A value that
is not a Record envelope is kept, not dropped: its `data` is the raw value and `record_error` says
why, so jobs can quarantine it. `with_trace=True` adds the Record's `trace_context` (bytes), which
dead-letter streams use for their failure metadata."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from jobs.spark.logs.local_source import SPLIT_RECORDS, LocalLogDataSource, encode_description
from streamcore.codecs.framing import single_object_header
from streamcore.codecs.record_binary import RECORD_FINGERPRINT, RECORD_SCHEMA
from streamcore.errors import ConfigError, LogError
from streamcore.log import LogManager
from streamcore.log.capabilities import CursorDescription, TopicDescription
from streamcore.names import Name

__all__ = ["read_raw", "read_stream", "unwrap_records"]

logger = logging.getLogger(__name__)
Ranges = Mapping[int, tuple[int, int]]
_RECORD_HEADER = single_object_header(RECORD_FINGERPRINT)


def read_raw(
    spark: SparkSession,
    manager: LogManager,
    name: str | Name,
    ranges: Ranges,
    *,
    split_records: int = SPLIT_RECORDS,
) -> DataFrame:
    """The raw records (`stream, partition, offset, timestamp, key, value`) of `[start, end)`
    per partition of log `name`, opened from the description its backend gives (so a memory log
    is refused there, with what to do), in Spark partitions of at most `split_records`."""
    description = manager.describe(name)
    clean = {int(p): (int(s), int(e)) for p, (s, e) in ranges.items()}
    if isinstance(description, CursorDescription):  # a local log
        spark.dataSource.register(LocalLogDataSource)
        return (
            spark.read.format(LocalLogDataSource.name())
            .option("description", encode_description(description))
            .option("ranges", json.dumps({str(p): list(r) for p, r in clean.items()}))
            .option("split_records", str(split_records))
            .load()
        )
    if isinstance(description, TopicDescription):  # a Kafka topic
        from jobs.spark.logs.kafka_source import read_kafka_ranges

        if description.compacted:
            _check_retained(manager, description, clean)
        return read_kafka_ranges(spark, description, clean, split_records=split_records)
    raise ConfigError(
        f"log {description.name} lives in a {description.backend} log, which Spark jobs cannot "
        "read; route it to a local or kafka log config in include/streamcore.toml"
    )


def _check_retained(manager: LogManager, log: TopicDescription, ranges: Ranges) -> None:
    """On a compacted topic Spark reads with `failOnDataLoss` off (compaction gaps are not
    losses), so a range that retention already deleted is refused here, before reading."""
    starts = manager.start_offsets(log.name)
    for p, (start, end) in sorted(ranges.items()):
        if end > start and start < starts[p]:
            raise LogError(
                f"{log.name}-{p:02d}: offsets {start}..{starts[p] - 1} were deleted by the "
                "topic's retention before this job read them; the range cannot be read "
                "exactly: reset the group's position past them (`streamcore position`) to "
                "accept the loss"
            )


def unwrap_records(raw: DataFrame, *, with_trace: bool = False) -> DataFrame:
    """Raw log records → Record columns (see the module docstring), in the JVM (spark-avro)."""
    value = F.col("value")
    is_record = F.substring(value, 1, len(_RECORD_HEADER)) == F.lit(_RECORD_HEADER)
    body = F.expr(f"substring(value, {len(_RECORD_HEADER) + 1})")
    record = from_avro(body, json.dumps(RECORD_SCHEMA), {"mode": "PERMISSIVE"})
    unwrapped = raw.withColumn("_record", F.when(is_record, record))
    ok = F.col("_record").isNotNull()
    return unwrapped.select(
        "stream",
        "partition",
        "offset",
        "timestamp",
        F.coalesce(F.col("_record.key"), F.col("key")).alias("key"),
        F.col("_record.watermark").alias("watermark"),
        F.col("_record.flagsAsByte").alias("flags"),
        F.when(ok, F.col("_record.data")).otherwise(value).alias("data"),
        F.when(ok, F.lit(None).cast("string"))
        .when(~is_record, F.lit("not a Record envelope (no Avro single-object Record header)"))
        .otherwise(F.lit("Record envelope does not decode with include/schemas/Record.avsc"))
        .alias("record_error"),
        *([F.col("_record.traceContext").alias("trace_context")] if with_trace else []),
    )


def read_stream(
    spark: SparkSession,
    manager: LogManager,
    name: str | Name,
    ranges: Ranges,
    *,
    split_records: int = SPLIT_RECORDS,
    with_trace: bool = False,
) -> DataFrame:
    """Records of `[start, end)` per partition of log `name`, envelope unwrapped."""
    raw = read_raw(spark, manager, name, ranges, split_records=split_records)
    return unwrap_records(raw, with_trace=with_trace)
