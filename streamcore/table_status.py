"""What a catalog table holds now (version, files, rows, bytes), read from its Delta log without
Spark.

The log is read by delta-rs (`deltalake`) rather than by replaying `_delta_log` here: a snapshot
is the JSON commits on top of the last checkpoint, which may be single- or multi-part, classic or
v2 with sidecars, and rows may be deleted by deletion vectors. delta-rs follows the protocol as
Delta evolves, where a home-grown replay would silently miscount on the first feature it lacks.
The import is lazy, so `import streamcore` does not pay for it.

Only local tables are read (plain paths and `file:` URIs): a remote warehouse (`s3a://…`) needs
credentials the CLI does not have, and delta-rs names object stores differently from Hadoop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamcore.errors import TableError
from streamcore.tables import TableSpec, local_path

__all__ = ["TableStatus", "table_status"]


@dataclass(frozen=True, slots=True)
class TableStatus:
    """The current snapshot of a table; `rows` is None when some file has no row statistics."""

    spec: TableSpec
    exists: bool
    version: int | None = None
    files: int | None = None
    rows: int | None = None
    bytes: int | None = None
    partition_by: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.spec.name,
            "location": self.spec.location,
            "exists": self.exists,
            "version": self.version,
            "files": self.files,
            "rows": self.rows,
            "bytes": self.bytes,
            "partition_by": list(self.partition_by if self.exists else self.spec.partition_by),
        }


def table_status(spec: TableSpec) -> TableStatus:
    """The status of the table at `spec.location` (which must be local)."""
    path = local_path(spec.location)
    if path is None:
        raise TableError(
            f"table {spec.name} is at {spec.location}, a remote location: reading its Delta log "
            "needs local access. Run this where the warehouse is a local folder, or ask Spark "
            f"(DESCRIBE DETAIL delta.`{spec.location}`)"
        )
    if not (path / "_delta_log").is_dir():
        return TableStatus(spec, exists=False)
    import pyarrow as pa
    from deltalake import DeltaTable

    table = DeltaTable(str(path))
    adds = pa.table(table.get_add_actions(flatten=True))
    records = adds.column("num_records").to_pylist() if adds.num_rows else []
    rows = None if None in records else sum(records) - _deleted_rows(table)
    return TableStatus(
        spec,
        exists=True,
        version=table.version(),
        files=adds.num_rows,
        rows=rows,
        bytes=sum(adds.column("size_bytes").to_pylist()) if adds.num_rows else 0,
        partition_by=tuple(table.metadata().partition_columns),
    )


def _deleted_rows(table: Any) -> int:
    """Rows that deletion vectors mark deleted (their files' statistics still count them)."""
    if "deletionVectors" not in (table.protocol().reader_features or []):
        return 0
    import pyarrow as pa

    masks = pa.table(table.deletion_vectors()).column("selection_vector").to_pylist()
    return sum(mask.count(False) for mask in masks)
