"""A stream's history over a time interval: the records appended in `[start, end)`, from the
hot log while it holds them and from the Delta table `archive` for the rest, seamlessly.

    plan = locate_history(ctx, stream, start_ms, end_ms)   # offsets only, no Spark
    plan = prove_archive(ctx, plan)          # the archive's part, proven without a hole
    plan.records                             # 0: an empty interval, known before Spark
    frame, counts = history_records(ctx, plan)

Per partition, the offsets below `below[p]` come from `archive` (which the retention job fills
before it purges): the hot log's first offset where retention purged part of the interval, and
on a log LogConfig compacts, at least the archiver's position, because compaction removed older
versions there that the archive keeps. `prove_archive` proves that the archive holds every record
of the interval below those offsets (`jobs.spark.logs.coverage`: from both ends of each partition's
run, `ArchiveHoleError` otherwise) and counts them: with delta-rs, before any Spark session, where
the warehouse is local; on Spark (`spark=True`) where it is not. `frame` has `read_stream`'s
columns plus `_archived`; `counts` are `records` and `from_archive`. Used by `jobs/backfill.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from typing import Any

from jobs.spark.job import JobContext
from streamcore.names import Name

__all__ = ["HistoryPlan", "history_records", "locate_history", "prove_archive"]


@dataclass(frozen=True)
class HistoryPlan:
    """Where the records of `[start_ms, end_ms)` of `stream` are: `hot`, the offset range per
    partition the hot log serves; `below`, per partition that needs it, the offset under which
    `archive` serves the interval; `archived`, the archive's records of the interval per
    partition of `below` once proven complete (None: not proven yet)."""

    stream: Name
    start_ms: int
    end_ms: int
    hot: dict[int, tuple[int, int]]
    below: dict[int, int]
    archived: dict[int, int] | None

    @property
    def hot_records(self) -> int:
        """An upper bound of the hot log's records (a compacted Kafka topic has gaps)."""
        return sum(hi - lo for lo, hi in self.hot.values())

    @property
    def records(self) -> int | None:
        """The interval's records, at most (0 exactly when it has none); None until the
        archive's part is proven."""
        return None if self.archived is None else self.hot_records + sum(self.archived.values())


def locate_history(ctx: JobContext, source: Name, start_ms: int, end_ms: int) -> HistoryPlan:
    """The hot log's offset ranges of `[start_ms, end_ms)` and where `archive` must serve the
    rest (the module doc); the archive's part is not proven yet, unless none is needed."""
    from jobs.spark.logs.intervals import interval_ranges
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
    return HistoryPlan(source, start_ms, end_ms, hot, below, None if below else {})


def prove_archive(ctx: JobContext, plan: HistoryPlan, *, spark: bool = False) -> HistoryPlan:
    """`plan` with the archive's records counted once proven (`ArchiveHoleError`, a JobError,
    on a hole): read with delta-rs when it can, else on Spark if `spark`, else left unproven."""
    from jobs.spark.logs.coverage import ArrowArchive, SparkArchive, prove_coverage
    from streamcore.tables import table_spec

    if plan.archived is not None:
        return plan
    location = table_spec("archive", ctx.config).location
    incarnation = ctx.logs.incarnation(plan.stream)
    facts: Any = ArrowArchive.open(location, plan.stream, incarnation)
    if facts is None:
        if not spark:
            return plan
        facts = SparkArchive(ctx.spark, location, plan.stream, incarnation)
    archived = prove_coverage(facts, plan.stream, plan.below, plan.start_ms, plan.end_ms)
    return replace(plan, archived=archived)


def history_records(ctx: JobContext, plan: HistoryPlan) -> tuple[Any, dict[str, int]]:
    """The interval's records of a proven `plan`, as `read_stream` gives them plus `_archived`
    (which come from `archive`), and their counts (`records`, `from_archive`)."""
    from pyspark.sql import functions as F

    from jobs.spark.logs.coverage import archive_rows
    from jobs.spark.logs.streams import read_stream
    from streamcore.tables import table_spec

    if plan.archived is None:
        raise ValueError("history_records needs a plan whose archive part is proven")
    hot = read_stream(ctx.spark, ctx.logs, plan.stream, plan.hot)
    frame = hot.withColumn("_archived", F.lit(False))
    needed = {p: plan.below[p] for p, n in plan.archived.items() if n}
    if needed:
        location = table_spec("archive", ctx.config).location
        rows = archive_rows(ctx.spark, location, plan.stream, ctx.logs.incarnation(plan.stream))
        served = F.lit(False)
        for p, offset in needed.items():
            served = served | ((F.col("partition") == p) & (F.col("offset") < offset))
        start, end = (F.timestamp_millis(F.lit(ms)) for ms in (plan.start_ms, plan.end_ms))
        days = F.col("date").between(*(F.lit(_day(ms)) for ms in (plan.start_ms, plan.end_ms - 1)))
        archived = (
            rows.where(served & days & (F.col("timestamp") >= start) & (F.col("timestamp") < end))
            .select(
                *(c for c in hot.columns if c != "record_error"),
                # The archive keeps a value that was no Record as it was, without a watermark.
                F.when(
                    F.col("watermark").isNull(), F.lit("not a Record envelope (as archived)")
                ).alias("record_error"),
            )
            .withColumn("_archived", F.lit(True))
        )
        frame = archived.unionByName(frame)
    with ctx.phases("count"):
        row = frame.agg(
            F.count(F.lit(1)).alias("records"),
            F.count(F.when(F.col("_archived"), 1)).alias("from_archive"),
        ).first()
    return frame, {"records": row["records"], "from_archive": row["from_archive"]}


def _day(ms: int) -> date:
    """The UTC day of `ms`: the archive's `date` partition."""
    return datetime.fromtimestamp(ms / 1000, UTC).date()
