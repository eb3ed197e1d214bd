"""A bulk action's batch on `repository`: one Delta MERGE, exactly once.

    version = apply_update(spark, path, rows, app_id=f"bulk/{command_id}", version=batch)

`rows` is what the action's `apply` returned: `id` plus the columns to set (`apply_update`), or
the ids to delete (`apply_delete`). The MERGE only touches rows the table has (never an insert:
a document deleted since the scroll stays deleted) and its commit carries Delta's
`txnAppId = app_id` / `txnVersion = version`, the mechanism of the exactly-once sink
(`jobs.spark.delta.sink`). Delta skips a write whose version is not above the newest one it
recorded for the app id, so the versions of one app id must increase from batch to batch (the
job numbers its batches across buckets): a rerun of a batch that landed is then skipped, and
returns None, whatever happened to the job in between.

`within=(first, last)`, the batch's id range (`scroll.IdRange`), joins the MERGE condition as a
condition on the target alone, which Delta uses to skip the files whose id statistics lie outside
it: on a table clustered by id a batch then reads and rewrites its own files only.

Like every writer, the caller has the table ensured (`Catalog.ensure`) before: a creation or
migration commit carrying the batch's txn id would make Delta skip the batch.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession

from jobs.spark.delta import sql as delta_sql
from jobs.spark.delta.sink import DeltaBatchSink
from streamcore.errors import TableError

__all__ = ["apply_delete", "apply_update"]

logger = logging.getLogger(__name__)


def apply_update(
    spark: SparkSession,
    table_path: str,
    rows: DataFrame,
    *,
    app_id: str,
    version: int,
    within: tuple[str, str] | None = None,
) -> int | None:
    """Set, in the rows of the Delta table at `table_path` whose ids `rows` has, the other
    columns of `rows` (map, boolean and string columns alike; `rows` holds each id once); with
    `within`, only rows whose ids lie in that inclusive range. Returns the new table version, or
    None when batch `version` of `app_id` had landed already."""
    table_columns = spark.read.format("delta").load(table_path).columns
    columns = _columns_to_set(table_path, rows, table_columns)
    update = f"WHEN MATCHED THEN UPDATE SET {delta_sql.set_columns(columns)}"

    def merge() -> None:
        delta_sql.merge_into(spark, table_path, rows, _on_id(within), update)

    return _exactly_once(spark, table_path, app_id, version, "update", merge)


def apply_delete(
    spark: SparkSession,
    table_path: str,
    rows: DataFrame,
    *,
    app_id: str,
    version: int,
    within: tuple[str, str] | None = None,
) -> int | None:
    """Delete the rows of the Delta table at `table_path` whose ids `rows` has (its other
    columns are ignored); with `within`, only rows whose ids lie in that inclusive range.
    Returns the new table version, or None when batch `version` of `app_id` had landed
    already."""
    if "id" not in rows.columns:
        raise TableError(
            f"bulk delete on {table_path}: the rows have no id column ({rows.columns}); the "
            "action must return the ids to delete"
        )

    def merge() -> None:
        ids = rows.select("id")
        delta_sql.merge_into(spark, table_path, ids, _on_id(within), "WHEN MATCHED THEN DELETE")

    return _exactly_once(spark, table_path, app_id, version, "delete", merge)


def _on_id(within: tuple[str, str] | None) -> str:
    """The MERGE condition: the same id, and the target's id within the range if given."""
    on = "t.id = s.id"
    if within is not None:
        first, last = (delta_sql.sql_string(bound) for bound in within)
        on += f" AND t.id BETWEEN {first} AND {last}"
    return on


def _columns_to_set(table_path: str, rows: DataFrame, table_columns: list[str]) -> list[str]:
    """The columns `rows` sets, checked against the table's."""
    if "id" not in rows.columns:
        raise TableError(
            f"bulk update on {table_path}: the rows have no id column ({rows.columns}); the "
            "action must return id and the columns to set"
        )
    columns = [c for c in rows.columns if c != "id"]
    if not columns:
        raise TableError(
            f"bulk update on {table_path}: the rows set no column besides id; the action must "
            "return id and the columns to set"
        )
    unknown = [c for c in columns if c not in table_columns]
    if unknown:
        raise TableError(
            f"bulk update on {table_path}: the rows set columns the table does not have: "
            f"{unknown} (it has {table_columns}); fix the action's apply"
        )
    return columns


def _exactly_once(
    spark: SparkSession,
    table_path: str,
    app_id: str,
    version: int,
    kind: str,
    merge: Callable[[], None],
) -> int | None:
    """Run `merge` as batch `version` of `app_id` (Delta's txn id on its commit). Returns the
    new table version, or None if Delta has that batch (or a later one) of the app id."""
    sink = DeltaBatchSink(spark, table_path, app_id)
    landed = sink.txn_version()
    # Known before the MERGE is computed; Delta checks it again at the commit (a concurrent run).
    if landed is not None and landed >= version:
        logger.info("%s: batch %d of %s had landed already, skipped", table_path, version, app_id)
        return None
    metadata = json.dumps({"app": app_id, "batch": version, "bulk": kind})
    return sink.write_batch(version, metadata, merge)
