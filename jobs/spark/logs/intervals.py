"""Time-interval batches (docs/design.md, "Micro-batches, exactly-once and intervals"): which
records of a stream were appended in `[start_ms, end_ms)`, and how to write an interval's result
idempotently.

    found = interval_ranges(manager, "audit/entries", start_ms, end_ms)
    found.ranges                 # {partition: (first offset, end offset)} on the hot log
    interval_ranges(manager, "audit/entries", start_ms, None)   # all appended since start_ms
    found.complete               # False: part of the interval is older than retention
    found.before_retention_ms    # {partition: ms of the interval the archive must serve}
    replace_interval(df, path, "event_date", start_ms, end_ms)   # rerun-safe write

`interval_ranges` finds the offsets per partition with `offset_for_timestamp` on the hot log. It
takes append timestamps not to go backwards within a partition (true of every backend's own clock;
explicit `timestamps=` of an append must keep it). The ranges never go past the end offsets seen
at the start of the call. A partition whose oldest records were purged (start offset > 0) reports
the interval's part up to and including its oldest retained record's millisecond,
`[start_ms, min(end_ms, t_oldest + 1))`, because purged records can share that millisecond; one
purged to its end reports the whole interval (nothing tells where its records were). Read the
interval's records below the partition's start offset from the `archive` table; the hot log
serves `ranges`.

`replace_interval` writes an interval's rows to a Delta table with `replaceWhere` on a `timestamp`
column (`column >= start AND column < end`, compared as instants: no time zone involved; convert
an epoch-ms column with `timestamp_millis`). A rerun replaces exactly the rows of its interval and
nothing else, so clearing an Airflow task or backfilling is safe. A row outside the interval (or
with no time) is refused and nothing is written.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from streamcore.errors import StreamcoreError, TableError
from streamcore.log import LogPartition
from streamcore.names import Name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from streamcore.log import LogManager

__all__ = [
    "IntervalMismatchError",
    "IntervalRanges",
    "interval_ranges",
    "offsets_at",
    "replace_interval",
]

INTERVAL_PROBE_GROUP = "streamcore/interval-probe"  # reads offsets only; never commits


class IntervalMismatchError(TableError):
    """Rows given for an interval's write lie outside the interval (or have no time): filter the
    DataFrame on the interval, or write those rows with their own interval."""


@dataclass(frozen=True)
class IntervalRanges:
    """Offsets `[start, end)` per partition of the records appended in an interval, and per
    partition the milliseconds of the interval the hot log may no longer hold because records
    were purged (0: the hot log holds the whole interval)."""

    ranges: dict[int, tuple[int, int]]
    before_retention_ms: dict[int, int]

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.ranges.values())

    @property
    def complete(self) -> bool:
        """True if the hot log holds every record of the interval."""
        return not any(self.before_retention_ms.values())


def _check_interval(start_ms: int, end_ms: int) -> None:
    if end_ms < start_ms:
        raise StreamcoreError(
            f"interval [{start_ms}, {end_ms}) ends before it starts; give start <= end"
        )


def interval_ranges(
    manager: LogManager, stream: str | Name, start_ms: int, end_ms: int | None
) -> IntervalRanges:
    """The offset ranges of `stream` whose append timestamps fall in `[start_ms, end_ms)`; with
    `end_ms` None, every record appended at or after `start_ms` (what its purged part may have
    held is then counted up to now)."""
    if end_ms is not None:
        _check_interval(start_ms, end_ms)
    name = Name.of(stream)
    starts, ends = manager.start_offsets(name), manager.end_offsets(name)
    until = end_ms if end_ms is not None else max(start_ms, time.time_ns() // 1_000_000)
    ranges: dict[int, tuple[int, int]] = {}
    missing: dict[int, int] = {}
    with manager.tailer(INTERVAL_PROBE_GROUP, name) as tailer:
        for p, (oldest, end) in enumerate(zip(starts, ends, strict=True)):
            partition = LogPartition(name, p)
            first = tailer.offset_for_timestamp(partition, start_ms)
            after = None if end_ms is None else tailer.offset_for_timestamp(partition, end_ms)
            # Bounded by the end seen above: records appended meanwhile are not in this batch.
            lo = end if first is None else min(first.offset, end)
            hi = end if after is None else min(after.offset, end)
            ranges[p] = (lo, max(lo, hi))
            missing[p] = _before_retention(manager, partition, oldest, end, start_ms, until)
    return IntervalRanges(ranges, missing)


def offsets_at(manager: LogManager, stream: str | Name, at_ms: int) -> dict[int, int]:
    """Per partition of `stream`, the first offset appended at or after `at_ms` (the end offset
    when none is): the records before it are older than `at_ms`."""
    name = Name.of(stream)
    ends = manager.end_offsets(name)
    out: dict[int, int] = {}
    with manager.tailer(INTERVAL_PROBE_GROUP, name) as tailer:
        for p, end in enumerate(ends):
            found = tailer.offset_for_timestamp(LogPartition(name, p), at_ms)
            out[p] = end if found is None else min(found.offset, end)
    return out


def _before_retention(
    manager: LogManager, partition: LogPartition, oldest: int, end: int, start_ms: int, end_ms: int
) -> int:
    """Milliseconds of `[start_ms, end_ms)` the purged records of `partition` may have been in:
    up to and including the oldest retained record's time (a purged record may have the same
    millisecond). A partition still starting at offset 0 lost nothing."""
    if oldest == 0:
        return 0
    record = manager.record_at(partition, oldest) if oldest < end else None
    if record is None:  # everything purged: the whole interval may have been there
        return end_ms - start_ms
    _key, _value, oldest_ms = record
    return max(0, min(oldest_ms + 1, end_ms) - start_ms)


def replace_interval(
    df: DataFrame,
    table_path: str,
    column: str,
    start_ms: int,
    end_ms: int,
    *,
    partition_by: Sequence[str] = (),
) -> int:
    """Write `df` as the whole content of `[start_ms, end_ms)` of the Delta table at
    `table_path`: one commit deletes the table's rows whose `column` (a Spark `timestamp`) is in
    the interval and appends `df`. Rows outside the interval stay as they were, so running it
    again, or for a neighbouring interval, never duplicates or loses rows. A missing table is
    created first (empty, `df`'s schema, `partition_by`). Every row of `df` must lie in the
    interval, else `IntervalMismatchError` and nothing is written. Returns the table version."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    from jobs.spark.delta.sql import is_delta_table, latest_version

    _check_interval(start_ms, end_ms)
    field = next((f for f in df.schema.fields if f.name == column), None)
    if field is None or not isinstance(field.dataType, TimestampType):
        found = "is missing" if field is None else f"is {field.dataType.simpleString()}"
        raise StreamcoreError(
            f"interval column {column!r} {found}; replace_interval needs a timestamp column "
            "(convert epoch milliseconds with F.timestamp_millis(col))"
        )
    quoted = "`" + column.replace("`", "``") + "`"
    since, until = f"timestamp_millis({int(start_ms)})", f"timestamp_millis({int(end_ms)})"
    condition = f"{quoted} >= {since} AND {quoted} < {until}"
    spark = df.sparkSession
    if not is_delta_table(spark, table_path):
        # Delta checks replaceWhere's condition only against an existing table: create it first.
        df.limit(0).write.format("delta").mode("append").partitionBy(*partition_by).save(table_path)
    metadata = {"interval": [int(start_ms), int(end_ms)], "column": column}
    try:
        (
            df.write.format("delta")
            .mode("overwrite")
            .option("replaceWhere", condition)
            .option("userMetadata", json.dumps(metadata, separators=(",", ":")))
            .save(table_path)
        )
    except Exception as exc:  # Delta's check (AnalysisException in Delta 4)
        if "DELTA_REPLACE_WHERE_MISMATCH" not in str(exc):
            raise
        outside = df.where(~F.coalesce(F.expr(condition), F.lit(False)))
        ms = F.unix_millis(F.col(column))
        count, lo, hi = outside.agg(F.count(F.lit(1)), F.min(ms), F.max(ms)).first()
        span = "" if lo is None else f", at {lo} to {hi} ms"
        raise IntervalMismatchError(
            f"{count} row(s) to write for [{start_ms}, {end_ms}) ms into {table_path} have "
            f"{column} outside the interval or null{span}; nothing was written. Keep the "
            f"interval's rows only (df.where({condition!r})), or write the others with the "
            "intervals they belong to"
        ) from exc
    return latest_version(spark, table_path)
