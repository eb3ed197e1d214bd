"""The `repository` Delta table: one row per document id, upserted by the importer. Its shape is
declared in streamcore.tables (the Document schema's fields first); the catalog creates it.

Rows carry the Document fields plus where their latest version came from (`watermark`,
`source_partition`, `source_offset`, `import_batch`, `imported_at`). A batch may hold several
versions of one id (a document imported twice): the latest by (watermark, partition, offset)
wins before the MERGE, which must see one source row per target row.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.spark.catalog import Catalog
from jobs.spark.delta_sink import BatchPlan, DeltaBatchSink

__all__ = ["latest_per_id", "upsert_documents"]

_SOURCE_COLUMNS = ("watermark", "source_partition", "source_offset", "import_batch", "imported_at")


def latest_per_id(df: DataFrame, fields: list[str], batch: int) -> DataFrame:
    """One row per `id`: the newest version in `df` (stream columns + decoded `fields`).

    A batch usually holds each id once; then the rows go as they are. Proving it costs one job
    that shuffles the ids alone (count vs count of distinct ids), where picking the newest version
    shuffles whole documents, so the check pays for itself (`df` is cached by the importer)."""
    stamp = (
        F.lit(batch).cast("long").alias("import_batch"),
        F.current_timestamp().alias("imported_at"),
    )
    totals = df.agg(F.count(F.lit(1)).alias("rows"), F.count_distinct("id").alias("ids")).first()
    if totals is not None and totals["rows"] == totals["ids"]:
        return df.select(
            *fields,
            F.col("watermark"),
            F.col("partition").alias("source_partition"),
            F.col("offset").alias("source_offset"),
            *stamp,
        )
    order = F.struct("watermark", "partition", "offset")
    row = F.struct(
        *(F.col(f) for f in fields if f != "id"),
        F.col("watermark"),
        F.col("partition").alias("source_partition"),
        F.col("offset").alias("source_offset"),
    )
    latest = df.groupBy("id").agg(F.max_by(row, order).alias("_doc"))
    return latest.select(
        "id",
        *(F.col(f"_doc.{f}").alias(f) for f in fields if f != "id"),
        F.col("_doc.watermark").alias("watermark"),
        F.col("_doc.source_partition").alias("source_partition"),
        F.col("_doc.source_offset").alias("source_offset"),
        *stamp,
    ).select(*fields, *_SOURCE_COLUMNS)


def upsert_documents(
    catalog: Catalog,
    table: str,
    sink: DeltaBatchSink,
    plan: BatchPlan,
    good: DataFrame,
    fields: list[str],
) -> int | None:
    """MERGE the batch's valid documents into the repository-shaped `table` as batch `plan.batch`
    (exactly once). Returns the new table version (None if already landed)."""
    from delta.tables import DeltaTable

    # Created before the batch's write, outside its transaction: a creation commit carrying the
    # batch's txn id would make Delta skip the MERGE as already landed.
    catalog.ensure(table)
    rows = latest_per_id(good, fields, plan.batch)

    def write() -> None:
        (
            DeltaTable.forPath(good.sparkSession, sink.path)
            .alias("t")
            .merge(rows.alias("s"), "t.id = s.id")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute()
        )

    return sink.write(plan, write)
