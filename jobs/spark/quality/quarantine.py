"""The `quarantine` Delta table: rows that failed their expectations (or could not be decoded),
with the failed expectations, the decoding error, and where they came from. Its shape is declared
in streamcore.tables; the catalog (jobs.spark.delta.catalog) creates it.

Writes are MERGEs that insert a row only if no row of the same (stream, partition, offset) is
there yet: a batch replayed after a crash quarantines each record once, whatever range the rerun
reads.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.spark.delta import sql as delta_sql
from jobs.spark.delta.catalog import Catalog

__all__ = ["quarantine_rows", "write_quarantine"]


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


def write_quarantine(rows: DataFrame, catalog: Catalog) -> None:
    """Insert `rows` into the catalog's quarantine table (created on first use), once per source
    position."""
    path = catalog.ensure("quarantine")
    delta_sql.merge_into(
        rows.sparkSession,
        path,
        rows,
        "t.stream = s.stream AND t.partition = s.partition AND t.offset = s.offset",
        "WHEN NOT MATCHED THEN INSERT *",
    )
