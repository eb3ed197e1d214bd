"""The `quarantine` Delta table: rows that failed their expectations (or could not be decoded),
with the failed expectations, the decoding error, and where they came from.

Writes are MERGEs that insert a row only if no row of the same (stream, partition, offset) is
there yet: a batch replayed after a crash quarantines each record once, whatever range the rerun
reads.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

__all__ = ["QUARANTINE_COLUMNS", "quarantine_rows", "write_quarantine"]

QUARANTINE_COLUMNS = (
    "stream",
    "partition",
    "offset",
    "timestamp",
    "key",
    "watermark",
    "data",
    "failed_expectations",
    "error",
    "job",
    "batch",
    "quarantined_at",
)


def quarantine_rows(bad: DataFrame, *, job: str, batch: int) -> DataFrame:
    """The quarantine rows of `bad` (which has the stream columns, `failed_expectations`,
    `record_error` and `payload_error`)."""
    return bad.select(
        "stream",
        "partition",
        "offset",
        "timestamp",
        "key",
        "watermark",
        "data",
        "failed_expectations",
        F.coalesce("record_error", "payload_error").alias("error"),
        F.lit(job).alias("job"),
        F.lit(batch).cast("long").alias("batch"),
        F.current_timestamp().alias("quarantined_at"),
    )


def write_quarantine(rows: DataFrame, path: str) -> None:
    """Insert `rows` into the quarantine table at `path` (created on first use), once per source
    position."""
    from delta.tables import DeltaTable

    spark = rows.sparkSession
    if not DeltaTable.isDeltaTable(spark, path):
        (
            DeltaTable.createIfNotExists(spark)
            .location(path)
            .addColumns(rows.schema)
            .partitionedBy("stream")
            .execute()
        )
    (
        DeltaTable.forPath(spark, path)
        .alias("q")
        .merge(
            rows.alias("r"),
            "q.stream = r.stream AND q.partition = r.partition AND q.offset = r.offset",
        )
        .whenNotMatchedInsertAll()
        .execute()
    )
