"""A stream's history over a time interval: the records appended in `[start, end)`, from the
hot log while it holds them and from the Delta table `archive` for the rest, seamlessly.

    hot, below = history_ranges(ctx, stream, start_ms, end_ms)
    frame, archived, counts = history_records(ctx, stream, hot, below, start_ms, end_ms)
    if archived is not None:
        check_archive_covers(ctx, archived, below, stream)   # before writing anything

Per partition, the offsets below `below[p]` come from `archive` (which the retention job fills
before it purges): the hot log's first offset where retention purged part of the interval, and
on a log LogConfig compacts, at least the archiver's position, because compaction removed older
versions there that the archive keeps. `frame` has `read_stream`'s columns plus `_archived`;
`counts` are `records` and `from_archive`. Used by `jobs/backfill.py`.
"""

from __future__ import annotations

from typing import Any

from jobs.spark.job import JobContext, JobError
from streamcore.names import Name

__all__ = ["check_archive_covers", "history_ranges", "history_records"]


def history_ranges(
    ctx: JobContext, source: Name, start_ms: int, end_ms: int
) -> tuple[dict[int, tuple[int, int]], dict[int, int]]:
    """Per partition, the offset range in the hot log of the records appended in
    `[start_ms, end_ms)`, and (for the partitions that need it) the offset below which `archive`
    serves the interval: the hot log's first offset where retention purged part of it; on a log
    LogConfig compacts, at least the archiver's position, below which compaction may have
    removed versions the archive keeps."""
    from jobs.spark.intervals import interval_ranges
    from streamcore.log.config import ARCHIVER, LogConfig

    found = interval_ranges(ctx.logs, source, start_ms, end_ms)
    starts = ctx.logs.start_offsets(source)
    hot = dict(found.ranges)
    below = {p: starts[p] for p, ms in found.before_retention_ms.items() if ms}
    if LogConfig.from_settings(ctx.config).compacted(source):
        for p, archived in enumerate(ctx.logs.committed(source, ARCHIVER)):
            lo, hi = hot[p]
            if archived is not None and archived > lo:
                below[p] = max(below.get(p, 0), archived)
                hot[p] = (min(archived, hi), hi)
    return hot, below


def history_records(
    ctx: JobContext,
    source: Name,
    hot_ranges: dict[int, tuple[int, int]],
    below: dict[int, int],
    start_ms: int,
    end_ms: int,
) -> tuple[Any, Any, dict[str, int]]:
    """The interval's records, as `read_stream` gives them plus `_archived` (which come from
    `archive`: per partition, those below `below`); the archived part alone (None if none is
    needed); and their counts (`records`, `from_archive`)."""
    from pyspark.sql import functions as F

    from jobs.spark.catalog import Catalog
    from jobs.spark.streams import read_stream

    hot = read_stream(ctx.spark, ctx.logs, source, hot_ranges)
    if not below:
        frame, archived = hot.withColumn("_archived", F.lit(False)), None
    else:
        catalog = Catalog(ctx.spark, ctx.config)
        if not catalog.exists("archive"):
            raise JobError(
                f"[{start_ms}, {end_ms}) begins before the oldest record {source} still holds, "
                "and nothing was ever archived: run the retention job's archive step (before "
                "retention purges), or read a more recent interval"
            )
        served = F.lit(False)
        for p, offset in below.items():
            served = served | ((F.col("partition") == p) & (F.col("offset") < offset))
        start, end = (F.timestamp_millis(F.lit(ms)) for ms in (start_ms, end_ms))
        archived = (
            ctx.spark.read.format("delta")
            .load(catalog.path("archive"))
            .where((F.col("stream") == source.urn) & served)
            .where((F.col("timestamp") >= start) & (F.col("timestamp") < end))
            .select(
                *(c for c in hot.columns if c != "record_error"),
                # The archive keeps a value that was no Record as it was, without a watermark.
                F.when(
                    F.col("watermark").isNull(), F.lit("not a Record envelope (as archived)")
                ).alias("record_error"),
            )
        )
        frame = archived.withColumn("_archived", F.lit(True)).unionByName(
            hot.withColumn("_archived", F.lit(False))
        )
    with ctx.phases("count"):
        row = frame.agg(
            F.count(F.lit(1)).alias("records"),
            F.count(F.when(F.col("_archived"), 1)).alias("from_archive"),
        ).first()
    return frame, archived, {"records": row["records"], "from_archive": row["from_archive"]}


def check_archive_covers(
    ctx: JobContext, archived: Any, below: dict[int, int], source: Name
) -> None:
    """Refuse history with a hole (`JobError`): per partition, the archived offsets of the
    interval must run without a gap, and on to the offset the hot log serves from: either up to
    it, or the archive holds the next offset (a record after the interval)."""
    from pyspark.sql import functions as F

    from jobs.spark.catalog import Catalog

    spans = archived.groupBy("partition").agg(
        F.min("offset").alias("lo"), F.max("offset").alias("hi"), F.count("*").alias("n")
    )
    rows = spans.collect()
    short = [(r["partition"], r["hi"] + 1) for r in rows if r["hi"] + 1 < below[r["partition"]]]
    followed: set[tuple[int, int]] = set()
    if short:
        after = F.lit(False)
        for p, offset in short:
            after = after | ((F.col("partition") == p) & (F.col("offset") == offset))
        table = ctx.spark.read.format("delta").load(Catalog(ctx.spark, ctx.config).path("archive"))
        found = table.where((F.col("stream") == source.urn) & after).select("partition", "offset")
        followed = {(r["partition"], r["offset"]) for r in found.collect()}
    for row in rows:
        p = row["partition"]
        gap = row["n"] != row["hi"] - row["lo"] + 1
        if gap or (row["hi"] + 1 < below[p] and (p, row["hi"] + 1) not in followed):
            raise JobError(
                f"partition {p} of {source}: the archive does not hold every record below "
                f"offset {below[p]} that the replay needs (offsets {row['lo']}..{row['hi']}, "
                f"{row['n']} records), so the history read would have a hole. Nothing was written"
            )
