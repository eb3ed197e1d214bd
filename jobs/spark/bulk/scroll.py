"""The scroll of a bulk command (Nuxeo's scroller on Spark): the ids of the `repository` rows
matching the command's query, in id order, each with its bucket and batch number, written once as
Parquet.

    found = load_scroll(spark, out) or scroll(
        spark, table, "type = 'Note'", bucket_size=1000, batch_size=500, query_limit=0,
        out_path=out,
    )
    for bucket in range(found.buckets):
        for part in id_ranges(spark, out, bucket):           # its batches
            docs = bucket_docs(spark, out, table, part)

Bucket `b` holds the ids numbered `[b * bucket_size, (b + 1) * bucket_size)` in id order, and
batch `k` of it the next `batch_size` of those, so buckets and batches are consecutive id ranges
(`csv_export.finish_csv` relies on it to merge its parts cheaply). One task numbers the ids (a
window over the sorted ids): the scroll holds ids alone, about 40 bytes each, and Spark's sort
spills, so this stays within memory at any size; numbering them across tasks would need a second
pass over the query.

`bucket_docs` reads the table with the range's bounds as a filter, and the job gives the same
bounds to the MERGE (`apply.apply_update(within=)`): Delta then skips the files whose id
statistics lie outside the range. Ids are random UUIDs, so that only pays on a table clustered
by id, which the retention DAG's maintenance leaves (`repository` is z-ordered by id); on an
unclustered table every file spans almost every id and each batch reads the whole table.

A scroll folder is complete when its facts (`_scroll/`, a one-row JSON: total, buckets,
limit_reached) exist: they are written after the ids, and rewriting the ids deletes the folder
first, facts included. So a rerun after a crash either reuses a complete scroll (`load_scroll`)
or scrolls again into the same folder; Parquet readers skip the `_scroll` folder (names starting
with `_` are hidden from them).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, Observation, SparkSession, Window
from pyspark.sql import functions as F

__all__ = [
    "IdRange",
    "Scroll",
    "bucket_docs",
    "id_ranges",
    "load_scroll",
    "scroll",
    "whole_bucket",
]

logger = logging.getLogger(__name__)
_FACTS = "_scroll"
_FACTS_SCHEMA = "total long, buckets long, limit_reached boolean"


@dataclass(frozen=True)
class Scroll:
    """What a scroll found: `total` ids (at most the query limit) in `buckets` buckets;
    `limit_reached` when the query matched more documents than the limit."""

    total: int
    buckets: int
    limit_reached: bool


@dataclass(frozen=True)
class IdRange:
    """The scroll's ids of one batch of a bucket (`batch` None: the whole bucket), which lie in
    `[first, last]`."""

    bucket: int
    batch: int | None
    first: str
    last: str


def scroll(
    spark: SparkSession,
    table_path: str,
    predicate_sql: str,
    *,
    bucket_size: int,
    batch_size: int | None = None,
    query_limit: int,
    out_path: str,
) -> Scroll:
    """Write the ids of the rows of the Delta table at `table_path` matching `predicate_sql` (a
    Spark SQL boolean expression the caller has checked), in id order, at most `query_limit` of
    them (0 = all), with their bucket (`row // bucket_size`) and their batch in it
    (`row % bucket_size // batch_size`; one batch per bucket by default), as Parquet at
    `out_path` (replacing what is there). Returns the counts, also stored for `load_scroll`."""
    batch_size = bucket_size if batch_size is None else batch_size
    if not 0 < batch_size <= bucket_size:
        raise ValueError(
            f"bucket_size {bucket_size} and batch_size {batch_size}: need bucket_size >= "
            "batch_size >= 1"
        )
    if query_limit < 0:
        raise ValueError(f"query_limit must be >= 0 (0 = no limit), got {query_limit}")
    ids = spark.read.format("delta").load(table_path).where(F.expr(predicate_sql)).select("id")
    if query_limit:
        # One id more than the limit tells whether the query matched more than it.
        ids = ids.orderBy("id").limit(query_limit + 1)
    numbered = ids.withColumn("_row", F.row_number().over(Window.orderBy("id")) - 1)
    seen = Observation()
    rows = numbered.observe(seen, F.count(F.lit(1)).alias("rows"))
    if query_limit:
        rows = rows.where(F.col("_row") < query_limit)
    bucket = F.floor(F.col("_row") / bucket_size).cast("int").alias("bucket")
    batch = F.floor(F.col("_row") % bucket_size / batch_size).cast("int").alias("batch")
    rows.select("id", bucket, batch).write.mode("overwrite").parquet(out_path)
    matched = int(seen.get["rows"])
    total = min(matched, query_limit) if query_limit else matched
    buckets = (total + bucket_size - 1) // bucket_size
    found = Scroll(total, buckets, bool(query_limit) and matched > query_limit)
    facts = [(found.total, found.buckets, found.limit_reached)]
    spark.createDataFrame(facts, _FACTS_SCHEMA).coalesce(1).write.mode("overwrite").json(
        f"{out_path}/{_FACTS}"
    )
    logger.info(
        "scrolled %d ids into %d buckets of %d at %s%s",
        found.total,
        found.buckets,
        bucket_size,
        out_path,
        " (query limit reached)" if found.limit_reached else "",
    )
    return found


def load_scroll(spark: SparkSession, out_path: str) -> Scroll | None:
    """The scroll written at `out_path`, or None if there is none or it is incomplete (its run
    stopped before the end): then scroll again."""
    try:
        row = spark.read.schema(_FACTS_SCHEMA).json(f"{out_path}/{_FACTS}").first()
    except AnalysisException as exc:
        if exc.getCondition() == "PATH_NOT_FOUND":
            return None
        raise
    if row is None:
        return None
    return Scroll(int(row["total"]), int(row["buckets"]), bool(row["limit_reached"]))


def id_ranges(spark: SparkSession, scroll_path: str, bucket: int) -> list[IdRange]:
    """The batches of bucket `bucket` of the scroll at `scroll_path`, in order (none past the
    last bucket)."""
    rows = (
        spark.read.parquet(scroll_path)
        .where(F.col("bucket") == bucket)
        .groupBy("batch")
        .agg(F.min("id").alias("first"), F.max("id").alias("last"))
        .orderBy("batch")
        .collect()
    )
    return [IdRange(bucket, int(r["batch"]), r["first"], r["last"]) for r in rows]


def whole_bucket(parts: list[IdRange]) -> IdRange:
    """The range of a whole bucket from the ranges of its batches (`id_ranges`)."""
    return IdRange(parts[0].bucket, None, parts[0].first, parts[-1].last)


def bucket_docs(spark: SparkSession, scroll_path: str, table_path: str, part: IdRange) -> DataFrame:
    """The current rows of the Delta table at `table_path` whose ids are in `part` (a batch or a
    whole bucket of the scroll at `scroll_path`; a document deleted since the scroll is absent).
    The range's ids are broadcast, and the table is read within the range's bounds, which lets
    Delta skip the files outside them (see the module's doc)."""
    ids = spark.read.parquet(scroll_path).where(F.col("bucket") == part.bucket)
    if part.batch is not None:
        ids = ids.where(F.col("batch") == part.batch)
    table = spark.read.format("delta").load(table_path)
    table = table.where(F.col("id").between(F.lit(part.first), F.lit(part.last)))
    return table.join(F.broadcast(ids.select("id")), "id", "left_semi")
