"""Whether the Delta table `archive` holds every record of a time interval that a stream's hot
log no longer serves, proven per partition from both ends before anything is read or written.

    counts = prove_coverage(ArrowArchive.open(path, stream, incarnation), stream, below, start, end)
    counts = prove_coverage(SparkArchive(spark, path, stream, incarnation), ...)   # any URI

`below[p]` is the offset from which the hot log serves partition `p`; the archive must serve the
interval's records under it. Append times never decrease within a partition, so those records
are one run of offsets, and the archive holds them all when, per partition:

- its records of the interval run without a gap from `lo` to `hi`;
- the run's start is proven: `lo` is 0, or the archive holds `lo - 1` (a record before the
  interval, as its time is below `lo`'s and outside the interval);
- the run's end is proven: `hi + 1` is `below[p]`, or the archive holds `hi + 1` (a record after
  the interval).

With no archived record in the interval, the archive must show where the interval falls: it
holds `below[p] - 1`, either before the interval (then nothing of it lies under `below[p]`), or
after it, and then the record before its first one at or after the interval's end (or that one
is offset 0). Anything else is a hole (`ArchiveHoleError`): records purged before the retention
job archived them (a stream LogConfig does not archive, a forced purge), or a missing archive
table, which holds nothing.

The facts are a few aggregates and point lookups, read by `ArrowArchive` with delta-rs in the
job's process (no Spark: a local warehouse) or by `SparkArchive` (any warehouse URI). Archive rows
with an `incarnation` column (the log's incarnation that archived them) count only for the log's
current one; rows without one, and a log whose incarnation is unknown, count as they are.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any, Protocol

from jobs.spark.job import JobError
from streamcore.names import Name
from streamcore.tables import local_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "ArchiveFacts",
    "ArchiveHoleError",
    "ArrowArchive",
    "SparkArchive",
    "archive_rows",
    "prove_coverage",
]

Span = tuple[int, int, int]  # records, first offset, last offset


class ArchiveHoleError(JobError):
    """The archive misses records of the interval below the hot log: a replay would skip them."""


class ArchiveFacts(Protocol):
    """What the proof asks of a stream's archived rows (partition, offset, time in ms)."""

    def spans(self, below: dict[int, int], start_ms: int, end_ms: int) -> dict[int, Span]:
        """Per partition, the archived records under `below[p]` appended in `[start_ms, end_ms)`:
        (count, lowest offset, highest offset); partitions with none are left out."""
        ...

    def held(self, offsets: dict[int, list[int]]) -> dict[tuple[int, int], int]:
        """{(partition, offset): append time ms} of those of `offsets` the archive holds."""
        ...

    def firsts_from(self, below: dict[int, int], at_ms: int) -> dict[int, int]:
        """Per partition, the lowest archived offset under `below[p]` appended at or after
        `at_ms`; partitions with none are left out."""
        ...


def prove_coverage(
    facts: ArchiveFacts, stream: Name, below: dict[int, int], start_ms: int, end_ms: int
) -> dict[int, int]:
    """The archived records of `[start_ms, end_ms)` per partition of `below`, once proven
    complete (module doc); `ArchiveHoleError` naming what is missing otherwise."""
    spans = facts.spans(below, start_ms, end_ms)
    wanted: dict[int, list[int]] = {}
    for p, b in below.items():
        n, lo, hi = spans.get(p, (0, 0, 0))
        wanted[p] = [o for o in ((lo - 1, hi + 1) if n else (b - 1,)) if 0 <= o < b]
    held = facts.held(wanted)
    counts: dict[int, int] = {}
    after: dict[int, int] = {}  # partitions whose archive goes on past the interval's end
    for p, b in sorted(below.items()):
        n, lo, hi = spans.get(p, (0, 0, 0))
        hole = ""
        if not n:
            last = held.get((p, b - 1))
            if last is None:
                hole = f"offset {b - 1}, the last one before the log's first"
            elif last < start_ms:
                counts[p] = 0
            else:
                after[p] = b
        elif lo > 0 and (p, lo - 1) not in held:
            hole = f"offset {lo - 1}, the one before {lo}, the first of the interval it holds"
        elif n != hi - lo + 1:
            hole = f"{hi - lo + 1 - n} of the offsets {lo}..{hi} it holds of the interval"
        elif hi + 1 < b and (p, hi + 1) not in held:
            hole = f"offset {hi + 1}, the one after {hi}, the last of the interval it holds"
        else:
            counts[p] = n
        if hole:
            _refuse(stream, p, below[p], hole, start_ms)
    if after:
        firsts = facts.firsts_from(after, end_ms)
        before = facts.held({p: [a - 1] for p, a in firsts.items() if a > 0})
        for p, a in sorted(firsts.items()):
            if a > 0 and (p, a - 1) not in before:
                hole = f"offset {a - 1}, the one before {a}, its first after the interval"
                _refuse(stream, p, below[p], hole, start_ms)
            counts[p] = 0
    return counts


def _refuse(stream: Name, partition: int, below: int, hole: str, start_ms: int) -> None:
    start = datetime.fromtimestamp(start_ms / 1000, UTC).isoformat()
    raise ArchiveHoleError(
        f"partition {partition} of {stream}: the archive does not hold {hole}, so the records "
        f"of the interval from {start} that the log no longer holds (below offset {below}) "
        "cannot all be read: they were purged before the retention job archived them (a "
        "stream whose log rule says `archive = false`, or a forced purge, which the log's "
        "purges.jsonl records). Nothing was written. Replay an interval that starts after "
        "the missing records, and keep `archive = true` on the streams you may replay"
    )


class ArrowArchive:
    """The facts read from a local archive table with delta-rs (pyarrow), without Spark."""

    def __init__(self, dataset: Any, keep: Any) -> None:
        self._dataset = dataset
        self._keep = keep

    @classmethod
    def open(cls, location: str, stream: Name, incarnation: str | None) -> ArrowArchive | None:
        """The archive at `location` for `stream`; None when delta-rs cannot read it here (a
        remote warehouse, a table feature it lacks): ask `SparkArchive` then. A missing table
        is an archive holding nothing."""
        import pyarrow.compute as pc

        folder = local_path(location)
        if folder is None:
            return None
        if not (folder / "_delta_log").is_dir():
            return cls(None, None)
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError

        try:
            dataset = DeltaTable(str(folder)).to_pyarrow_dataset()
        except DeltaError:  # a table feature its pyarrow reader refuses (deletion vectors)
            return None
        keep = pc.field("stream") == stream.urn
        if incarnation is not None and "incarnation" in dataset.schema.names:
            found = pc.field("incarnation")
            keep = keep & (found.is_null() | (found == incarnation))
        return cls(dataset, keep)

    def _rows(self, where: Any) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        if self._dataset is None:
            return None
        table = self._dataset.to_table(
            filter=self._keep & where, columns=["partition", "offset", "timestamp"]
        )
        ms = pc.cast(pc.cast(table["timestamp"], pa.timestamp("ms", tz="UTC")), pa.int64())
        return table.set_column(2, "ms", ms)

    def spans(self, below: dict[int, int], start_ms: int, end_ms: int) -> dict[int, Span]:
        import pyarrow.compute as pc

        first, last = _day(start_ms), _day(end_ms - 1)
        days = (pc.field("date") >= first) & (pc.field("date") <= last)
        times = (pc.field("timestamp") >= _instant(start_ms)) & (
            pc.field("timestamp") < _instant(end_ms)
        )
        rows = self._rows(days & times & _under(below))
        if rows is None or not rows.num_rows:
            return {}
        found = rows.group_by("partition").aggregate(
            [("offset", "count"), ("offset", "min"), ("offset", "max")]
        )
        return {
            r["partition"]: (r["offset_count"], r["offset_min"], r["offset_max"])
            for r in found.to_pylist()
        }

    def held(self, offsets: dict[int, list[int]]) -> dict[tuple[int, int], int]:
        import pyarrow.compute as pc

        where = None
        for p, wanted in offsets.items():
            if wanted:
                one = (pc.field("partition") == p) & pc.field("offset").isin(wanted)
                where = one if where is None else where | one
        rows = None if where is None else self._rows(where)
        if rows is None:
            return {}
        return {(r["partition"], r["offset"]): r["ms"] for r in rows.to_pylist()}

    def firsts_from(self, below: dict[int, int], at_ms: int) -> dict[int, int]:
        import pyarrow.compute as pc

        where = (pc.field("date") >= _day(at_ms)) & (pc.field("timestamp") >= _instant(at_ms))
        rows = self._rows(where & _under(below))
        if rows is None or not rows.num_rows:
            return {}
        found = rows.group_by("partition").aggregate([("offset", "min")])
        return {r["partition"]: r["offset_min"] for r in found.to_pylist()}


def _under(below: dict[int, int]) -> Any:
    import pyarrow.compute as pc

    where = None
    for p, b in below.items():
        one = (pc.field("partition") == p) & (pc.field("offset") < b)
        where = one if where is None else where | one
    return where if where is not None else pc.scalar(False)


def _day(ms: int) -> date:
    return datetime.fromtimestamp(ms / 1000, UTC).date()


def _instant(ms: int) -> Any:
    import pyarrow as pa

    return pa.scalar(ms * 1000, pa.timestamp("us", tz="UTC"))


def archive_rows(
    spark: SparkSession, location: str, stream: Name, incarnation: str | None
) -> Any | None:
    """The archived rows of `stream` (of its incarnation, see the module doc) as a DataFrame,
    None when there is no archive table."""
    from pyspark.sql import functions as F

    from jobs.spark.delta.sql import is_delta_table

    if not is_delta_table(spark, location):
        return None
    table = spark.read.format("delta").load(location)
    keep = F.col("stream") == stream.urn
    if incarnation is not None and "incarnation" in table.columns:
        found = F.col("incarnation")
        keep = keep & (found.isNull() | (found == incarnation))
    return table.where(keep)


class SparkArchive:
    """The same facts read by Spark, for a warehouse delta-rs cannot read here."""

    def __init__(
        self, spark: SparkSession, location: str, stream: Name, incarnation: str | None
    ) -> None:
        from pyspark.sql import functions as F

        rows = archive_rows(spark, location, stream, incarnation)
        self._rows = (
            None
            if rows is None
            else rows.select("partition", "offset", "date", F.unix_millis("timestamp").alias("ms"))
        )

    def spans(self, below: dict[int, int], start_ms: int, end_ms: int) -> dict[int, Span]:
        from pyspark.sql import functions as F

        if self._rows is None:
            return {}
        days = F.col("date").between(F.lit(_day(start_ms)), F.lit(_day(end_ms - 1)))
        times = (F.col("ms") >= start_ms) & (F.col("ms") < end_ms)
        found = (
            self._rows.where(days & times & _spark_under(below))
            .groupBy("partition")
            .agg(F.count("*").alias("n"), F.min("offset").alias("lo"), F.max("offset").alias("hi"))
            .collect()
        )
        return {r["partition"]: (r["n"], r["lo"], r["hi"]) for r in found}

    def held(self, offsets: dict[int, list[int]]) -> dict[tuple[int, int], int]:
        from pyspark.sql import functions as F

        where = F.lit(False)
        for p, wanted in offsets.items():
            if wanted:
                where = where | ((F.col("partition") == p) & F.col("offset").isin(wanted))
        if self._rows is None or not any(offsets.values()):
            return {}
        found = self._rows.where(where).select("partition", "offset", "ms").collect()
        return {(r["partition"], r["offset"]): r["ms"] for r in found}

    def firsts_from(self, below: dict[int, int], at_ms: int) -> dict[int, int]:
        from pyspark.sql import functions as F

        if self._rows is None:
            return {}
        where = (F.col("date") >= F.lit(_day(at_ms))) & (F.col("ms") >= at_ms)
        found = (
            self._rows.where(where & _spark_under(below))
            .groupBy("partition")
            .agg(F.min("offset").alias("first"))
            .collect()
        )
        return {r["partition"]: r["first"] for r in found}


def _spark_under(below: dict[int, int]) -> Any:
    from pyspark.sql import functions as F

    where = F.lit(False)
    for p, b in below.items():
        where = where | ((F.col("partition") == p) & (F.col("offset") < b))
    return where
