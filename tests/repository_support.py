"""Rows of the Delta table `repository` for the bulk action tests, written straight to the table
(no importer run): `document_row(i)` is document `i` (odd ones Notes), `write_repository` appends
rows to the table the catalog declares."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

CREATED = datetime(2026, 11, 1, 8, 30, tzinfo=UTC)


def document_id(i: int) -> str:
    """Ids in the order of `i` (a UUID shape, as the Document schema wants)."""
    return f"{i:08x}-0000-4000-8000-000000000000"


def document_row(i: int, **changes: Any) -> dict[str, Any]:
    row = {
        "id": document_id(i),
        "parentPath": "/ws",
        "type": "Note" if i % 2 else "File",
        "title": f"doc {i}",
        "description": None,
        "language": "en_US",
        "creator": "alice",
        "created": CREATED,
        "modified": CREATED,
        "properties": {"k": "v"},
        "blobName": None,
        "blobSize": None,
        "watermark": i,
        "source_partition": 0,
        "source_offset": i,
        "import_batch": 0,
        "imported_at": CREATED,
        "isTrashed": None,
        "lifecycleState": None,
    }
    row.update(changes)
    return row


def write_repository(spark: Any, catalog: Any, rows: list[dict[str, Any]]) -> str:
    """Append `rows` to `repository` (created by `catalog` if needed); returns its path."""
    from jobs.spark.delta.catalog import table_schema

    path = catalog.ensure("repository")
    schema = table_schema(catalog.spec("repository"))
    spark.createDataFrame(rows, schema).write.format("delta").mode("append").save(path)
    return path
