"""Dead letters as a DataFrame: the records of `*/dlq-*` streams (`read_stream`) with the failure
metadata of their trace context (streamcore/computation/dlq.py) parsed in the JVM, and filtered as
a `streamcore.recovery.DeadLetterFilter` says, with the same rules as the in-process scan.

Columns: those of `DeadLetterEntry.to_dict()` (`LISTING_COLUMNS`), plus what a redrive appends
again: `data`, `watermark`, `flags`, `trace` (the original trace context) and `record_value`
(the record to append: a Record envelope, or the raw bytes of an undecodable one; null for
a foreign record).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.spark.logs.avro import encode_record
from jobs.spark.logs.streams import read_stream
from streamcore.log import LogManager
from streamcore.recovery.deadletters import Bounds, DeadLetterFilter

__all__ = ["LISTING_COLUMNS", "read_dead_letters"]

_FORMAT = 1  # the "dlq" field of streamcore.computation.dlq's metadata
_META = (
    "dlq int, computation string, stream string, partition int, offset long, "
    "error_type string, error string, attempts int, first_failed_at long, failed_at long, "
    "trace_context string, undecodable boolean"
)
_REQUIRED = (
    "computation",
    "stream",
    "partition",
    "offset",
    "error_type",
    "error",
    "attempts",
    "failed_at",
)
LISTING_COLUMNS = (
    "dlq",
    "partition",
    "offset",
    "appended_ms",
    "key",
    "computation",
    "stream",
    "source_partition",
    "source_offset",
    "attempts",
    "error_type",
    "error",
    "first_failed_ms",
    "last_failed_ms",
    "undecodable",
    "foreign",
)
_FOREIGN = "not a streamcore dead-letter record (no dead-letter metadata in its trace context)"


def read_dead_letters(
    spark: SparkSession, manager: LogManager, bounds: Bounds, selection: DeadLetterFilter
) -> DataFrame | None:
    """The dead letters of `bounds` (`selection_bounds`, which checked the selection) that
    `selection` matches; None when the streams hold no record to read."""
    frames = []
    for name, (starts, ends) in bounds.items():
        ranges = _ranges(starts, ends, selection)
        if ranges:
            records = read_stream(spark, manager, name, ranges, with_trace=True)
            frames.append(records.withColumn("dlq", F.lit(name.urn)))
    if not frames:
        return None
    records = frames[0]
    for frame in frames[1:]:
        records = records.unionByName(frame)
    return _letters(records).where(_matches(selection))


def _ranges(
    starts: list[int], ends: list[int], selection: DeadLetterFilter
) -> dict[int, tuple[int, int]]:
    """Per partition, what to read: everything, or the span of the selected offsets."""
    if not selection.offsets:
        return {p: (s, e) for p, (s, e) in enumerate(zip(starts, ends, strict=True)) if e > s}
    spans: dict[int, tuple[int, int]] = {}
    for p, offset in selection.offsets:
        lo, hi = spans.get(p, (offset, offset + 1))
        spans[p] = (min(lo, offset), max(hi, offset + 1))
    return spans


def _letters(records: DataFrame) -> DataFrame:
    meta = F.from_json(F.col("trace_context").cast("string"), _META)
    valid = F.col("record_error").isNull() & (meta["dlq"] == _FORMAT)
    for field in _REQUIRED:
        valid = valid & meta[field].isNotNull()
    framed = records.select("*", meta.alias("_meta"), valid.alias("_valid"))

    def part(field: str) -> Column:
        return F.when(F.col("_valid"), F.col(f"_meta.{field}"))

    undecodable = F.coalesce(part("undecodable"), F.lit(False))
    trace = F.unbase64(part("trace_context"))
    return framed.select(
        "dlq",
        "partition",
        "offset",
        F.unix_millis("timestamp").alias("appended_ms"),
        F.when(F.col("_valid"), F.col("key")).alias("key"),  # as the in-process listing
        part("computation").alias("computation"),
        part("stream").alias("stream"),
        part("partition").alias("source_partition"),
        part("offset").alias("source_offset"),
        part("attempts").alias("attempts"),
        part("error_type").alias("error_type"),
        part("error").alias("error"),
        F.coalesce(part("first_failed_at"), part("failed_at")).alias("first_failed_ms"),
        part("failed_at").alias("last_failed_ms"),
        F.when(F.col("_valid"), undecodable).alias("undecodable"),
        F.when(~F.col("_valid"), F.coalesce("record_error", F.lit(_FOREIGN))).alias("foreign"),
        "data",
        "watermark",
        "flags",
        trace.alias("trace"),
        # CASE is lazy: a foreign record (maybe no envelope, no watermark) is never encoded.
        F.when(~F.col("_valid"), F.lit(None).cast("binary"))
        .when(undecodable, F.col("data"))
        .otherwise(
            encode_record(F.col("key"), F.col("data"), F.col("watermark"), F.col("flags"), trace)
        )
        .alias("record_value"),
    )


def _matches(selection: DeadLetterFilter) -> Column:
    """`DeadLetterFilter.matches` as a Spark condition: user values are literals, never SQL."""
    condition: Any = F.lit(True)
    if selection.offsets:
        chosen: Any = F.lit(False)
        for p in sorted({p for p, _ in selection.offsets}):
            offsets = sorted(o for q, o in selection.offsets if q == p)
            chosen = chosen | ((F.col("partition") == p) & F.col("offset").isin(offsets))
        condition = condition & chosen
    letter = F.col("foreign").isNull()
    criteria: Any = F.lit(True)
    if selection.computation is not None:
        criteria = criteria & (F.col("computation") == F.lit(selection.computation))
    if selection.error is not None:
        error = F.lit(selection.error)
        criteria = criteria & ((F.col("error_type") == error) | F.col("error").contains(error))
    if selection.since_ms is not None:
        criteria = criteria & (F.col("last_failed_ms") >= selection.since_ms)
    if selection.until_ms is not None:
        criteria = criteria & (F.col("last_failed_ms") < selection.until_ms)
    filtered = bool(
        selection.computation or selection.error or selection.since_ms or selection.until_ms
    )
    # Foreign records match only a filter that selects by position or by nothing.
    foreign = F.lit(not filtered)
    return condition & F.when(letter, criteria).otherwise(foreign)
