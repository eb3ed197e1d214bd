"""The scroll of a bulk command (Nuxeo's scroller on Spark): the ids of the `repository` rows
matching the command's query, in id order, each with its bucket number, written once as Parquet.

    found = load_scroll(spark, out) or scroll(
        spark, table, "type = 'Note'", bucket_size=1000, query_limit=0, out_path=out
    )
    for bucket in range(found.buckets):
        docs = bucket_docs(spark, out, table, bucket)

Bucket `b` holds the ids numbered `[b * bucket_size, (b + 1) * bucket_size)` in id order, so the
buckets are consecutive id ranges (`csv_export.finish_csv` relies on it to merge its parts
cheaply). One task numbers the ids (a window over the sorted ids): the scroll holds ids alone,
about 40 bytes each, and Spark's sort spills, so this stays within memory at any size; numbering
them across tasks would need a second pass over the query.

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

__all__ = ["Scroll", "bucket_docs", "load_scroll", "scroll"]

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


def scroll(
    spark: SparkSession,
    table_path: str,
    predicate_sql: str,
    *,
    bucket_size: int,
    query_limit: int,
    out_path: str,
) -> Scroll:
    """Write the ids of the rows of the Delta table at `table_path` matching `predicate_sql` (a
    Spark SQL boolean expression the caller has checked), in id order, at most `query_limit` of
    them (0 = all), with their bucket number (`row // bucket_size`), as Parquet at `out_path`
    (replacing what is there). Returns the counts, also stored for `load_scroll`."""
    if bucket_size < 1:
        raise ValueError(f"bucket_size must be at least 1, got {bucket_size}")
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
    rows.select("id", bucket).write.mode("overwrite").parquet(out_path)
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


def bucket_docs(spark: SparkSession, scroll_path: str, table_path: str, bucket: int) -> DataFrame:
    """The current rows of the Delta table at `table_path` whose ids are in bucket `bucket` of
    the scroll at `scroll_path` (a document deleted since the scroll is absent). The bucket's ids
    are broadcast; the table is scanned whole, its ids being random UUIDs that no file clusters,
    so Spark jobs want buckets of thousands of ids, not Nuxeo's hundred."""
    ids = spark.read.parquet(scroll_path).where(F.col("bucket") == bucket).select("id")
    table = spark.read.format("delta").load(table_path)
    return table.join(F.broadcast(ids), "id", "left_semi")
