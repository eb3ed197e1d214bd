"""The `repository` Delta table: one row per document id, upserted by the importer. Its shape is
declared in streamcore.tables (the Document schema's fields first); the catalog creates it.

Rows carry the Document fields plus where their latest version came from (`watermark`,
`source_partition`, `source_offset`, `import_batch`: the importer's batch number, or the
interval's start in epoch ms when a backfill landed it, `imported_at`). A batch may hold several
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

Two writers share `merge_documents`, both through `DocumentLanding` (the checked landing of
Document records): the importer's offset batches (written by `run_offset_batch` as batch
`plan.batch` of its app id) and the backfill's interval landings (`jobs/backfill.py --target-kind
table`, a plain MERGE without txn id: an interval is not an offset batch). The importer reads
the log in order up to its end, so its last write of an id is the newest version and its update
needs no condition. A replayed interval is a slice of the past: its MERGE is `newer_only`, it
updates a row only when its version is newer by (watermark, partition, offset), the order
`latest_per_id` picks by, so it never puts back a version the table had moved past, and landing
the same versions again changes nothing.

The MERGE writes exactly the Document fields and the source columns, never `*`: the table's
system columns (`isTrashed`, `lifecycleState`, set by bulk actions) are not in the batch, so an
update leaves them as they are (a re-imported trashed document stays trashed) and an insert
leaves them null.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.spark.batch_positions import BatchPlan
from jobs.spark.batches import BatchWrite
from jobs.spark.delta import sql as delta_sql
from jobs.spark.delta.catalog import Catalog
from jobs.spark.delta.keys import keys_unique, read_unique_keys, unique_key_aggregates
from jobs.spark.delta.sink import commit_metrics
from jobs.spark.job import JobContext
from jobs.spark.quality.checked import Checked, CheckedBatch, CheckedLanding
from streamcore.tables import DOCUMENT_SCHEMA

__all__ = ["DocumentLanding", "latest_per_id", "meets_table", "merge_documents"]

logger = logging.getLogger(__name__)
_SOURCE_COLUMNS = ("watermark", "source_partition", "source_offset", "import_batch", "imported_at")
# The source row's version is newer than the table's: latest_per_id's order, as SQL.
_NEWER = (
    "s.watermark > t.watermark OR (s.watermark = t.watermark AND "
    "(s.source_partition > t.source_partition OR (s.source_partition = t.source_partition "
    "AND s.source_offset > t.source_offset)))"
)


def latest_per_id(
    df: DataFrame, fields: list[str], batch: int, *, unique: bool | None = None
) -> DataFrame:
    """One row per `id`: the newest version in `df` (stream columns + decoded `fields`).

    A batch usually holds each id once; then the rows go as they are. `unique`: what
    `jobs.spark.delta.keys` said of `df`'s ids, if a pass over the batch asked already, else it is
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


def merge_documents(
    catalog: Catalog,
    table: str,
    good: DataFrame,
    fields: list[str],
    batch: int,
    *,
    unique_ids: bool | None = None,
    newer_only: bool = False,
    has_rows: bool | None = None,
) -> delta_sql.Merge:
    """The MERGE (not executed) of the valid documents `good` into the
    repository-shaped `table`, their rows stamped `import_batch = batch`: the newest version of
    each id updates the Document fields and source columns of the row of that id (only if it is
    newer than the row's, with `newer_only`) or is inserted (other columns null). Insert only
    when the table has none of the ids. `unique_ids` as in `latest_per_id`; `has_rows`, whether
    the table (checked already) has files, if read beforehand, else it is read here."""
    # Created before the batch's write, outside its transaction: a creation commit carrying the
    # batch's txn id would make Delta skip the MERGE as already landed.
    path = catalog.ensure(table)
    rows = latest_per_id(good, fields, batch, unique=unique_ids)
    spark = good.sparkSession
    written = (*fields, *_SOURCE_COLUMNS)
    clauses = f"WHEN NOT MATCHED THEN INSERT {delta_sql.insert_columns(written)}"
    if has_rows is None:
        has_rows = delta_sql.detail(spark, path)["numFiles"] > 0
    if has_rows and meets_table(good, spark.read.format("delta").load(path)):
        matched = f" AND ({_NEWER})" if newer_only else ""
        update = f"WHEN MATCHED{matched} THEN UPDATE SET {delta_sql.set_columns(written)}"
        clauses = f"{update} {clauses}"
    else:
        logger.info("batch %d brings no id %s has: insert-only MERGE", batch, table)
    return delta_sql.Merge(spark, path, rows, "t.id = s.id", clauses)


def meets_table(batch: DataFrame, table: DataFrame) -> bool:
    """Whether an `id` of `batch` is in `table` (one Spark job on the ids alone)."""
    return not batch.select("id").join(table.select("id"), "id", "left_semi").isEmpty()


class DocumentLanding(CheckedLanding):
    """The checked landing of Document records (decode, the Document suite, quarantine, the
    failure threshold) whose good documents are MERGEd into the repository-shaped `table`. As
    the importer's `land` (an offset batch, exactly once by its txn id) its summary adds the
    documents the MERGE inserted and updated; `land` alone serves the backfill's table target
    (`newer_only`: the MERGE updates older versions only), which runs the MERGE itself."""

    job = "importer"

    def __init__(
        self,
        ctx: JobContext,
        catalog: Catalog,
        *,
        table: str,
        failure_threshold: float,
        result_format: str,
        newer_only: bool = False,
    ) -> None:
        from jobs.spark.quality.expectations import load_suite

        super().__init__(
            ctx, catalog, failure_threshold=failure_threshold, result_format=result_format
        )
        self.table, self.newer_only = table, newer_only
        self.schema = ctx.schemas.by_name(DOCUMENT_SCHEMA)
        self.suite = load_suite(self.schema)
        self.fields: list[str] = [f["name"] for f in self.schema.raw["fields"]]

    def __call__(self, records: DataFrame, plan: BatchPlan) -> BatchWrite:
        landed = super().__call__(records, plan)
        return dataclasses.replace(
            landed, then=lambda version: {**landed.finish(version), **self.merge_counts(version)}
        )

    def aggregates(self, keep: Column, batch: CheckedBatch) -> list[Column]:
        # Whether the good ids are unique rides the first pass (the MERGE needs to know).
        return unique_key_aggregates("id", keep, rows=batch.records)

    def prepare(self) -> bool | None:
        """Whether the table has rows (None: it does not exist yet), checked beside the first
        pass."""
        found = self.catalog.check_existing(self.table)
        return None if found is None else found["numFiles"] > 0

    def write(self, checked: Checked, batch: CheckedBatch) -> BatchWrite:
        """The MERGE of the good documents, their rows stamped `import_batch = batch.batch`."""
        with self.ctx.phases("merge"):
            merge = merge_documents(
                self.catalog,
                self.table,
                checked.good,
                self.fields,
                batch.batch,
                unique_ids=read_unique_keys(checked.row, "id"),
                newer_only=self.newer_only,
                # Rows seen beside the first pass are still there; no rows seen is read again
                # (another run may have written meanwhile), as before.
                has_rows=True if checked.prepared else None,
            )
        return BatchWrite(merge, phase="merge")

    def finish(self, summary: dict[str, Any], version: int | None) -> dict[str, Any]:
        summary["imported"] = summary.pop("written")
        return summary

    def merge_counts(self, version: int | None) -> dict[str, int]:
        """The documents the batch's MERGE (commit `version`) inserted and updated, from Delta's
        operationMetrics: `imported` counts the valid rows merged, which is more when an id
        comes twice in the batch (its newest version is merged once). 0 and 0 when Delta skipped
        the write because another run had landed this batch."""
        if version is None:
            return {"inserted": 0, "updated": 0}
        with self.ctx.phases("merge_metrics"):
            path = self.catalog.path(self.table)
            metrics = commit_metrics(self.ctx.spark, path, version)
        return {
            "inserted": int(metrics.get("numTargetRowsInserted", 0)),
            "updated": int(metrics.get("numTargetRowsUpdated", 0)),
        }
