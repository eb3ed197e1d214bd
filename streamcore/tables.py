"""The table catalog: every Delta table of the warehouse, as data (docs/design.md, "The catalog").

Each table is a `TableSpec`: its columns (in a small portable type vocabulary), partition columns,
natural key, Delta properties, OPTIMIZE z-order columns and VACUUM retention. Spark jobs create
and maintain the tables from these facts (`jobs.spark.delta.catalog.Catalog`); the CLI lists them
(`streamcore tables`) without Spark. Where an Avro schema describes the rows (`repository` holds
Documents), the columns come from the schema, mapped as spark-avro maps them.

Tables live under the warehouse root (`StreamcoreConfig.warehouse`): a local folder or any URI
Spark understands (`file:///…`, `s3a://bucket/…`), so locations are joined as strings, never as
`Path`s.

    >>> spec = table_spec("audit", load_config())
    >>> spec.partition_by, spec.key
    (('event_day',), ('event_id',))
    >>> table_location("s3a://lake/wh", "audit")
    's3a://lake/wh/audit'
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import unquote, urlsplit

from streamcore.config import StreamcoreConfig
from streamcore.errors import ConfigError

__all__ = [
    "DELTA_MIN_RETENTION_HOURS",
    "DOCUMENT_SCHEMA",
    "PRIMITIVE_TYPES",
    "TABLES",
    "Column",
    "TableSpec",
    "avro_columns",
    "local_path",
    "table_location",
    "table_spec",
    "table_specs",
]

# Delta refuses to VACUUM with a shorter retention unless its safety check is disabled: readers
# and writers older than this could still need the files.
DELTA_MIN_RETENTION_HOURS = 168
DOCUMENT_SCHEMA = "org.streamcore.importer.Document"
TABLES = ("repository", "quarantine", "audit", "bulk_status", "archive")
# Column types: these, `array<T>` and `map<string,T>`. Spark's DDL reads every one of them.
PRIMITIVE_TYPES = (
    "string",
    "int",
    "long",
    "float",
    "double",
    "boolean",
    "binary",
    "date",
    "timestamp",
)
_TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_COMPOSITE = re.compile(r"^(array)<(.+)>$|^(map)<string,(.+)>$")
_AVRO_PRIMITIVES = {
    "string": "string",
    "bytes": "binary",
    "int": "int",
    "long": "long",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
}
# Avro logical types spark-avro reads as Spark date/timestamp types.
_AVRO_LOGICAL = {"date": "date", "timestamp-millis": "timestamp", "timestamp-micros": "timestamp"}


def _check_type(type_: str) -> None:
    if type_ in PRIMITIVE_TYPES:
        return
    match = _COMPOSITE.match(type_)
    if match is None:
        raise ConfigError(
            f"column type {type_!r} is not in the catalog's vocabulary; use one of "
            f"{', '.join(PRIMITIVE_TYPES)}, array<T> or map<string,T>"
        )
    _check_type(match.group(2) or match.group(4))


@dataclass(frozen=True, slots=True)
class Column:
    """One column: `type` is a portable type name (`PRIMITIVE_TYPES`, `array<T>`,
    `map<string,T>`)."""

    name: str
    type: str
    nullable: bool = True
    doc: str = ""

    def __post_init__(self) -> None:
        _check_type(self.type)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "nullable": self.nullable}


@dataclass(frozen=True)
class TableSpec:
    """The facts about one Delta table; `location` is set by `table_spec` from the warehouse."""

    name: str
    description: str
    columns: tuple[Column, ...]
    partition_by: tuple[str, ...] = ()
    key: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    zorder_by: tuple[str, ...] = ()
    vacuum_retention_hours: int = DELTA_MIN_RETENTION_HOURS
    location: str = ""

    def __post_init__(self) -> None:
        if not _TABLE_NAME.match(self.name):
            raise ConfigError(f"table name {self.name!r} must be a plain identifier (a-z, 0-9, _)")
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise ConfigError(f"table {self.name} declares a column twice: {names}")
        for what, cols in (
            ("partition_by", self.partition_by),
            ("key", self.key),
            ("zorder_by", self.zorder_by),
        ):
            unknown = [c for c in cols if c not in names]
            if unknown:
                raise ConfigError(f"table {self.name}: {what} names unknown columns {unknown}")
        # Delta cannot z-order by partition columns: every file holds one value of them.
        if set(self.zorder_by) & set(self.partition_by):
            raise ConfigError(f"table {self.name}: zorder_by must not repeat partition columns")
        if self.vacuum_retention_hours < 0:
            raise ConfigError(f"table {self.name}: vacuum_retention_hours must be >= 0")
        object.__setattr__(self, "properties", MappingProxyType(dict(self.properties)))

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "location": self.location,
            "columns": [c.to_json() for c in self.columns],
            "partition_by": list(self.partition_by),
            "key": list(self.key),
            "properties": dict(self.properties),
            "zorder_by": list(self.zorder_by),
            "vacuum_retention_hours": self.vacuum_retention_hours,
        }


# -- Avro → columns -------------------------------------------------------------------------------
def _avro_type(schema: Any, where: str) -> tuple[str, bool]:
    """(portable type, nullable) of an Avro type, as spark-avro maps it."""
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        if len(branches) != 1:
            raise ConfigError(
                f'{where}: union {schema} has no column type; only ["null", T] maps to a column'
            )
        return _avro_type(branches[0], where)[0], len(branches) < len(schema)
    if isinstance(schema, dict):
        kind = schema["type"]
        logical = _AVRO_LOGICAL.get(schema.get("logicalType", ""))
        if logical is not None:
            return logical, False
        if kind == "enum":
            return "string", False
        if kind == "fixed":
            return "binary", False
        if kind == "array":
            return f"array<{_avro_type(schema['items'], where)[0]}>", False
        if kind == "map":
            return f"map<string,{_avro_type(schema['values'], where)[0]}>", False
        if kind in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[kind], False
    elif schema in _AVRO_PRIMITIVES:
        return _AVRO_PRIMITIVES[schema], False
    raise ConfigError(
        f"{where}: Avro type {schema!r} has no column type in the catalog (records and named "
        "references are not flattened); give the table explicit columns"
    )


def avro_columns(schema: Mapping[str, Any]) -> tuple[Column, ...]:
    """The columns of an Avro record schema (its parsed JSON), one per field."""
    name = schema.get("name", "?")
    return tuple(
        Column(f["name"], *_avro_type(f["type"], f"{name}.{f['name']}"), doc=f.get("doc", ""))
        for f in schema["fields"]
    )


# -- the tables -----------------------------------------------------------------------------------
def _repository(name: str, document: Mapping[str, Any]) -> TableSpec:
    return TableSpec(
        name=name,
        description="documents, upserted by id (importer MERGE, bulk actions)",
        columns=(
            *avro_columns(document),
            Column("watermark", "long", False, "watermark of the Record the version came from"),
            Column("source_partition", "int", False, "log partition of that Record"),
            Column("source_offset", "long", False, "log offset of that Record"),
            Column("import_batch", "long", False, "importer batch that wrote the version"),
            Column("imported_at", "timestamp", False),
            # System columns: bulk actions set them (trash, untrash, setSystemProperties), the
            # importer never writes them. Last, and nullable, because Catalog.ensure migrates an
            # older table by adding them, and Delta adds columns at the end.
            Column("isTrashed", "boolean", doc="null or false: not in the trash"),
            Column("lifecycleState", "string", doc="null: no lifecycle state set"),
        ),
        key=("id",),
        # Bulk actions read and MERGE by id ranges (a scroll's batches), which Delta can skip
        # files for only when files hold narrow id ranges: ids are random UUIDs, so OPTIMIZE
        # z-orders by id (with one column, a sort). The importer's batches hold random ids and
        # touch every file either way.
        zorder_by=("id",),
    )


def _quarantine() -> TableSpec:
    return TableSpec(
        name="quarantine",
        description="rows that failed their expectations or did not decode, once per position",
        columns=(
            Column("stream", "string", False),
            Column("partition", "int", False),
            Column("offset", "long", False),
            Column("timestamp", "timestamp"),
            Column("key", "string"),
            Column("watermark", "long"),
            Column("data", "binary"),
            Column("failed_expectations", "array<string>"),
            Column("error", "string"),
            Column("job", "string", False),
            Column("batch", "long", False),
            Column("quarantined_at", "timestamp", False),
        ),
        partition_by=("stream",),
        key=("stream", "partition", "offset"),
        zorder_by=("partition", "offset"),
    )


def _audit() -> TableSpec:
    return TableSpec(
        name="audit",
        description="audit entries (AuditEntry), one per event id",
        columns=(
            Column("event_id", "string", False, "unique id of the event"),
            Column("event_type", "string", False),
            Column("category", "string"),
            Column("doc_id", "string"),
            Column("doc_path", "string"),
            Column("doc_type", "string"),
            Column("principal", "string"),
            Column("event_date", "timestamp", False),
            Column("comment", "string"),
            Column("lifecycle_state", "string"),
            Column("repository", "string"),
            Column("extended", "map<string,string>"),
            Column("event_day", "date", False, "UTC day of event_date (the partition)"),
        ),
        partition_by=("event_day",),
        key=("event_id",),
        # The usual question is the history of one document within a few days.
        zorder_by=("doc_id",),
    )


def _bulk_status() -> TableSpec:
    return TableSpec(
        name="bulk_status",
        description="latest status of each bulk command (BulkStatus), upserted by command id",
        columns=(
            Column("command_id", "string", False),
            Column("action", "string"),
            Column("username", "string"),
            Column("state", "string", False),
            Column("total", "long"),
            Column("processed", "long"),
            Column("skipped", "long"),
            Column("errors", "long"),
            Column("error_message", "string"),
            Column("error_code", "int"),
            Column("submit_time", "timestamp"),
            Column("scroll_start_time", "timestamp"),
            Column("scroll_end_time", "timestamp"),
            Column("processing_start_time", "timestamp"),
            Column("processing_end_time", "timestamp"),
            Column("completed_time", "timestamp"),
            Column("result", "map<string,string>"),
            Column("query_limit_reached", "boolean", doc="the scroll stopped at the query limit"),
        ),
        key=("command_id",),
    )


def _archive() -> TableSpec:
    return TableSpec(
        name="archive",
        description="every record of the archived streams, as it was in the log",
        columns=(
            Column("stream", "string", False),
            Column("partition", "int", False),
            Column("offset", "long", False),
            Column("timestamp", "timestamp", False, "append time in the log"),
            Column("key", "string"),
            Column("watermark", "long"),
            Column("flags", "int", doc="Record flagsAsByte"),
            Column("data", "binary"),
            Column(
                "schema_fingerprint",
                "string",
                doc="hex of the 8 fingerprint bytes of a single-object payload, else null",
            ),
            Column("date", "date", False, "UTC day of timestamp (the partition)"),
            # Last and nullable: Catalog.ensure adds it to a table made before it (Delta adds
            # columns at the end), whose rows read it as null.
            Column(
                "incarnation",
                "string",
                doc="LogManager.incarnation of the log the record was read from (offsets restart "
                "when a stream is deleted and created again); null: unknown (archived before "
                "this column, or a local log created before it kept one)",
            ),
        ),
        partition_by=("stream", "date"),
        key=("stream", "incarnation", "partition", "offset"),
        # Backfills replay offset ranges of one partition.
        zorder_by=("partition", "offset"),
    )


def _document_schema(config: StreamcoreConfig) -> Mapping[str, Any]:
    from streamcore.codecs import SchemaStore

    schema: Mapping[str, Any] = SchemaStore(config.schemas_dir).by_name(DOCUMENT_SCHEMA).raw
    return schema


def table_spec(name: str, config: StreamcoreConfig) -> TableSpec:
    """The spec of table `name`, located under `config.warehouse`. A name that is not one of
    `TABLES` is a repository-shaped table of that name (the importer's `--table`)."""
    if name == "quarantine":
        spec = _quarantine()
    elif name == "audit":
        spec = _audit()
    elif name == "bulk_status":
        spec = _bulk_status()
    elif name == "archive":
        spec = _archive()
    else:
        spec = _repository(name, _document_schema(config))
    return _located(spec, config.warehouse)


def table_specs(config: StreamcoreConfig) -> dict[str, TableSpec]:
    """Every table of the catalog (`TABLES`), by name."""
    return {name: table_spec(name, config) for name in TABLES}


def _located(spec: TableSpec, warehouse: str) -> TableSpec:
    return replace(spec, location=table_location(warehouse, spec.name))


# -- locations ------------------------------------------------------------------------------------
def table_location(warehouse: str, name: str) -> str:
    """Where table `name` lives under `warehouse` (a folder or a URI), joined as a string."""
    if not _TABLE_NAME.match(name):
        raise ConfigError(f"table name {name!r} must be a plain identifier (a-z, 0-9, _)")
    return (warehouse if warehouse.endswith("/") else warehouse + "/") + name


def local_path(location: str) -> Path | None:
    """The local folder of a location (a plain path or a `file:` URI), None for remote URIs."""
    parts = urlsplit(location)
    # One letter is a Windows drive, not a scheme.
    if len(parts.scheme) <= 1:
        return Path(location)
    if parts.scheme == "file" and parts.netloc in ("", "localhost"):
        return Path(unquote(parts.path))
    return None
