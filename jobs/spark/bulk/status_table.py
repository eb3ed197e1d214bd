"""The Delta table `bulk_status`: the full status of every bulk command, MERGEd on its id.

    record_status(spark, catalog, status)

The command store (`streamcore.bulk`) is the truth of a command's state; this table keeps each
command's latest full status for SQL over history (what ran, when, how much, with which result).
The bulk job records a status when its run ends (a run that finds the command finished or aborted
already records it too), and when its scroll ends if the command has more than one bucket (a
one-bucket command ends seconds later), so a row may lag the store by the progress of the
buckets, and a one-bucket command appears when it ends. A command aborted before any run of its
job has no row until a run (a DAG run's job task, `spark-submit jobs/bulk_action.py`) records it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from jobs.spark.delta import sql as delta_sql
from jobs.spark.delta.catalog import Catalog, table_schema

__all__ = ["record_status"]

TABLE = "bulk_status"


def record_status(spark: Any, catalog: Catalog, status: Any) -> None:
    """Upsert the row of `status` (a full `streamcore.bulk.BulkStatus`) into `bulk_status`."""
    path = catalog.ensure(TABLE)
    row = spark.createDataFrame([_row(status)], table_schema(catalog.spec(TABLE)))
    delta_sql.merge_into(
        spark,
        path,
        row,
        "t.command_id = s.command_id",
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
    )


def _row(status: Any) -> dict[str, Any]:
    def instant(ms: int | None) -> datetime | None:
        return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)

    return {
        "command_id": status.command_id,
        "action": status.action,
        "username": status.username,
        "state": status.state.value,
        "total": status.total,
        "processed": status.processed,
        "skipped": status.skipped,
        "errors": status.error_count,
        "error_message": status.error_message,
        "error_code": status.error_code,
        "submit_time": instant(status.submit_ms),
        "scroll_start_time": instant(status.scroll_start_ms),
        "scroll_end_time": instant(status.scroll_end_ms),
        "processing_start_time": instant(status.processing_start_ms),
        "processing_end_time": instant(status.processing_end_ms),
        "completed_time": instant(status.completed_ms),
        "result": status.result,
        "query_limit_reached": status.query_limit_reached,
    }
