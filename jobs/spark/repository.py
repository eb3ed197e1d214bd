"""The `repository` Delta table: one row per document id, upserted by the importer. Its shape is
declared in streamcore.tables (the Document schema's fields first); the catalog creates it.

Rows carry the Document fields plus where their latest version came from (`watermark`,
`source_partition`, `source_offset`, `import_batch`, `imported_at`). A batch may hold several
versions of one id (a document imported twice): the latest by (watermark, partition, offset)
wins before the MERGE, which must see one source row per target row.

Most batches only bring new ids. Delta runs a MERGE without WHEN MATCHED clause as one pass that
writes the rows the table does not have, where an upsert first copies the whole batch aside (its
source is not a Delta table) and joins it with the table before writing. So the MERGE leaves out
its update clause when the table is empty or a semi-join of the ids finds none of the batch's in
it: same result, and still a MERGE, so Delta checks it against concurrent writers as before (a
plain append would not be, and could duplicate an id another run inserts meanwhile). An id that
another run inserts between the semi-join and the MERGE is left as that run wrote it, as if it
had run after this one.
"""

from __future__ import annotations

import logging

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.spark.catalog import Catalog
from jobs.spark.delta_sink import BatchPlan, DeltaBatchSink
from jobs.spark.keys import keys_unique

__all__ = ["latest_per_id", "meets_table", "upsert_documents"]

logger = logging.getLogger(__name__)
_SOURCE_COLUMNS = ("watermark", "source_partition", "source_offset", "import_batch", "imported_at")


def latest_per_id(
    df: DataFrame, fields: list[str], batch: int, *, unique: bool | None = None
) -> DataFrame:
    """One row per `id`: the newest version in `df` (stream columns + decoded `fields`).

    A batch usually holds each id once; then the rows go as they are. `unique`: what
    `jobs.spark.keys` said of `df`'s ids, if a pass over the batch asked already, else it is
    asked here: one job on the ids, where picking the newest version shuffles whole documents."""
    stamp = (
        F.lit(batch).cast("long").alias("import_batch"),
        F.current_timestamp().alias("imported_at"),
    )
    if keys_unique(df, "id") if unique is None else unique:
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
    *,
    unique_ids: bool | None = None,
) -> int | None:
    """MERGE the batch's valid documents into the repository-shaped `table` as batch `plan.batch`
    (exactly once): update the ids it has, insert the others (insert only when it has none of
    them). `unique_ids`: whether `good`'s ids are unique (`jobs.spark.keys`), if a pass over the
    batch asked already. Returns the new table version (None if already landed)."""
    from delta.tables import DeltaTable

    # Created before the batch's write, outside its transaction: a creation commit carrying the
    # batch's txn id would make Delta skip the MERGE as already landed.
    catalog.ensure(table)
    rows = latest_per_id(good, fields, plan.batch, unique=unique_ids)
    target = DeltaTable.forPath(good.sparkSession, sink.path)
    merge = target.alias("t").merge(rows.alias("s"), "t.id = s.id")
    if not sink.is_empty() and meets_table(good, target.toDF()):
        merge = merge.whenMatchedUpdateAll()
    else:
        logger.info("batch %d brings no id %s has: insert-only MERGE", plan.batch, table)
    return sink.write(plan, merge.whenNotMatchedInsertAll().execute)


def meets_table(batch: DataFrame, table: DataFrame) -> bool:
    """Whether an `id` of `batch` is in `table` (one Spark job on the ids alone)."""
    return not batch.select("id").join(table.select("id"), "id", "left_semi").isEmpty()
