"""`tables`: the Delta tables of the catalog (streamcore.tables) and what they hold now, read from
their Delta logs without Spark (streamcore.table_status)."""

from __future__ import annotations

from typing import Any

from streamcore.cli.context import Context, global_options
from streamcore.table_status import table_status
from streamcore.tables import table_specs
from streamcore.text import TextColumn, human_bytes, render_table

__all__ = ["register"]


def run_tables(ctx: Context) -> int:
    statuses = [table_status(spec) for spec in table_specs(ctx.config).values()]
    if ctx.json:
        ctx.emit_json(
            {"warehouse": ctx.config.warehouse, "tables": [s.to_json() for s in statuses]}
        )
        return 0
    rows: list[list[Any]] = []
    for status in statuses:
        doc = status.to_json()
        rows.append(
            [
                status.spec.name,
                "yes" if status.exists else "no",
                status.version,
                status.files,
                status.rows,
                human_bytes(status.bytes) if status.exists else None,
                ", ".join(doc["partition_by"]) or "-",
                status.spec.location,
            ]
        )
    columns: list[str | TextColumn] = [
        "table",
        "exists",
        TextColumn("version", "right"),
        TextColumn("files", "right"),
        TextColumn("rows", "right"),
        TextColumn("size", "right"),
        "partitioned by",
        "location",
    ]
    ctx.out(render_table(columns, rows))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "tables",
        parents=[global_options()],
        help="the Delta tables of the warehouse: version, files, rows, size",
        description="Every table of the catalog (repository, quarantine, audit, bulk_status, "
        "archive) under the warehouse root (STREAMCORE_WAREHOUSE, default $STREAMCORE_HOME/delta): "
        "whether it exists, its Delta version, data files, rows (from file statistics), size and "
        "partition columns. Reads the Delta logs directly, without Spark; the warehouse must be "
        "local (a folder or file:// URI).",
    )
    p.set_defaults(func=run_tables)
