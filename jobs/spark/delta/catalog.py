"""The table catalog, Spark side: create, OPTIMIZE and VACUUM the Delta tables that
`streamcore.tables` declares, at their places under the warehouse root.

    catalog = Catalog(spark, load_config())
    path = catalog.ensure("quarantine")       # created if missing, else checked
    catalog.optimize("archive")               # bin-packing, z-order by the declared columns
    catalog.vacuum("archive")                 # the declared retention (168 h by default)

`ensure` is idempotent and cheap after the first call of a `Catalog`; it refuses a table whose
columns, types or partitioning are not the declared ones (`IncompatibleTableError`), so a job never
writes into a table of another shape. Columns the table has beyond the declared ones are allowed:
writers leave them null. Nullability is not compared: Delta may store columns as nullable that
the catalog declares NOT NULL (tables made by a DataFrame write), which readers do not mind.

One difference is migrated instead of refused: declared **nullable** columns the table lacks (a
table created before they were declared, e.g. `repository` before its system columns). `ensure`
adds them (`ALTER TABLE ... ADD COLUMNS`: a metadata-only commit, existing rows read them as
null) and logs it, but only when they are the table's only difference from the spec.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import Row, SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from jobs.spark.delta import sql as delta_sql
from jobs.spark.delta.sql import quoted, sql_string
from streamcore.config import StreamcoreConfig
from streamcore.errors import IncompatibleTableError, TableError
from streamcore.tables import (
    DELTA_MIN_RETENTION_HOURS,
    Column,
    TableSpec,
    local_path,
    table_spec,
)

__all__ = ["Catalog", "spark_type", "table_schema"]

logger = logging.getLogger(__name__)

_RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
# Delta 4 ignores VACUUM's retention argument (other than 0) unless this is off, and uses the
# table's delta.deletedFileRetentionDuration instead.
_RETENTION_WINDOW_IGNORE = "spark.databricks.delta.vacuum.retentionWindowIgnore.enabled"
_DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"
_PRIMITIVES: dict[str, DataType] = {
    "string": StringType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "boolean": BooleanType(),
    "binary": BinaryType(),
    "date": DateType(),
    "timestamp": TimestampType(),
}


def spark_type(type_: str) -> DataType:
    """The Spark type of a catalog column type (`long`, `array<string>`, `map<string,long>`)."""
    if type_ in _PRIMITIVES:
        return _PRIMITIVES[type_]
    if type_.startswith("array<") and type_.endswith(">"):
        return ArrayType(spark_type(type_[len("array<") : -1]))
    if type_.startswith("map<string,") and type_.endswith(">"):
        return MapType(StringType(), spark_type(type_[len("map<string,") : -1]))
    raise TableError(f"column type {type_!r} has no Spark type; see streamcore.tables")


def table_schema(spec: TableSpec) -> StructType:
    """The Spark schema of a table spec, in declared column order."""
    return StructType(
        [
            StructField(c.name, spark_type(c.type), c.nullable, {"comment": c.doc} if c.doc else {})
            for c in spec.columns
        ]
    )


def _properties(spec: TableSpec) -> dict[str, str]:
    """The table properties to create `spec` with: the declared ones, plus its VACUUM retention
    as Delta's deleted-file retention (which also bounds time travel)."""
    hours = spec.vacuum_retention_hours
    return {_DELETED_FILE_RETENTION: f"interval {hours} hours", **spec.properties}


def _create_statement(spec: TableSpec) -> str:
    """CREATE TABLE IF NOT EXISTS of `spec` at its location: columns (types, NOT NULL,
    comments), partitioning, description and properties."""
    columns = ", ".join(
        f"{quoted(f.name)} {f.dataType.simpleString()}"
        + ("" if f.nullable else " NOT NULL")
        + (f" COMMENT {sql_string(f.metadata['comment'])}" if f.metadata.get("comment") else "")
        for f in table_schema(spec).fields
    )
    partitioned = (
        f" PARTITIONED BY ({', '.join(quoted(c) for c in spec.partition_by)})"
        if spec.partition_by
        else ""
    )
    comment = f" COMMENT {sql_string(spec.description)}" if spec.description else ""
    properties = ", ".join(
        f"{sql_string(k)} = {sql_string(v)}" for k, v in _properties(spec).items()
    )
    return (
        f"CREATE TABLE IF NOT EXISTS {delta_sql.table_ref(spec.location)} ({columns}) USING delta"
        f"{partitioned}{comment} TBLPROPERTIES ({properties})"
    )


def _local_stored_size(location: str) -> tuple[int, int]:
    """`Catalog._stored_size` by walking the table's local folder."""
    root = local_path(location)
    if root is None:
        raise TableError(
            f"the Delta table at {location} is remote: over Spark Connect the client measures "
            "the files stored under a table's folder itself (Hadoop's file system is in the "
            "server's JVM), which needs a local folder; run compaction or retention with "
            "spark-submit (a local[*] or spark:// master) for remote tables"
        )
    files = [
        p for p in root.rglob("*") if p.is_file() and p.relative_to(root).parts[0] != "_delta_log"
    ]
    return len(files), sum(p.stat().st_size for p in files)


class Catalog:
    """The catalog's tables for one Spark session and configuration (its warehouse root)."""

    def __init__(self, spark: SparkSession, config: StreamcoreConfig) -> None:
        self.spark = spark
        self.config = config
        self._specs: dict[str, TableSpec] = {}
        self._ensured: set[str] = set()

    def spec(self, table: str) -> TableSpec:
        """The declared facts of `table` (a name outside the catalog is repository-shaped)."""
        if table not in self._specs:
            self._specs[table] = table_spec(table, self.config)
        return self._specs[table]

    def path(self, table: str) -> str:
        """The table's location under the warehouse root (a path or URI, for Spark)."""
        return self.spec(table).location

    def exists(self, table: str) -> bool:
        return delta_sql.is_delta_table(self.spark, self.path(table))

    def ensure(self, table: str) -> str:
        """Create `table` if missing (columns, partitioning, properties); check it otherwise.
        Returns its location. Raises IncompatibleTableError if it exists with another shape."""
        spec = self.spec(table)
        if table in self._ensured:
            return spec.location
        if self.check_existing(table) is None:
            self.spark.sql(_create_statement(spec))
            logger.info("created Delta table %s at %s", table, spec.location)
            # Checked after creating too: another job may have created it first, in its shape.
            self._checked(spec, delta_sql.detail(self.spark, spec.location))
        return spec.location

    def check_existing(self, table: str) -> Row | None:
        """`ensure` without the creation: if `table` exists, check (and migrate) it and return
        its DESCRIBE DETAIL as read before the check; None, creating nothing, if it is missing.
        What a job reads of its table beside other work before it knows it will write."""
        spec = self.spec(table)
        found = delta_sql.detail_or_none(self.spark, spec.location)
        if found is not None:
            self._checked(spec, found)
        return found

    def _checked(self, spec: TableSpec, found: Row) -> None:
        missing = self._check(spec, tuple(found["partitionColumns"]))
        if missing:
            self._add_columns(spec, missing)
        self._ensured.add(spec.name)

    def _check(self, spec: TableSpec, partitions: tuple[str, ...]) -> list[Column]:
        """The declared nullable columns the table lacks (to add), if that is its only
        difference from `spec` (the table is partitioned by `partitions`); raises
        IncompatibleTableError on any other."""
        table = self.spark.read.format("delta").load(spec.location)
        found = {f.name: f.dataType for f in table.schema.fields}
        problems, missing = [], []
        for column in spec.columns:
            want = spark_type(column.type).simpleString()
            have = found.get(column.name)
            if have is None:
                problems.append(f"column {column.name} ({want}) is missing")
                if column.nullable:
                    missing.append(column)
            elif have.simpleString() != want:
                problems.append(f"column {column.name} is {have.simpleString()}, not {want}")
        if partitions != spec.partition_by:
            problems.append(f"partitioned by {list(partitions)}, not {list(spec.partition_by)}")
        if len(problems) > len(missing):
            raise IncompatibleTableError(
                f"Delta table {spec.name} at {spec.location} does not match the catalog: "
                f"{'; '.join(problems)}. Nothing was written; move that table away (or migrate "
                "it to the declared schema, see streamcore/tables.py) and run again"
            )
        return missing

    def _add_columns(self, spec: TableSpec, columns: list[Column]) -> None:
        """Migrate the table: add the declared nullable `columns` it lacks (existing rows read
        them as null). Delta appends them after the table's columns."""
        definitions = ", ".join(
            f"{quoted(c.name)} {spark_type(c.type).simpleString()}"
            + (f" COMMENT {sql_string(c.doc)}" if c.doc else "")
            for c in columns
        )
        names = [c.name for c in columns]
        try:
            self.spark.sql(
                f"ALTER TABLE {delta_sql.table_ref(spec.location)} ADD COLUMNS ({definitions})"
            )
        except Exception:
            # Another job may have migrated the table meanwhile (Delta then refuses to add a
            # column twice): fine if the table now has them, the original error otherwise.
            partitions = tuple(delta_sql.detail(self.spark, spec.location)["partitionColumns"])
            if self._check(spec, partitions):
                raise
            logger.info(
                "Delta table %s at %s: columns %s added meanwhile", spec.name, spec.location, names
            )
            return
        logger.warning(
            "migrated Delta table %s at %s: added the nullable columns %s (null in existing rows)",
            spec.name,
            spec.location,
            names,
        )

    def optimize(self, table: str) -> dict[str, Any]:
        """Compact small files (z-ordered by the declared columns, if any). Returns the files and
        bytes of the table's snapshot before and after."""
        spec = self.spec(table)
        self._require(spec)
        before = self._snapshot_size(spec.location)
        zorder = ", ".join(quoted(c) for c in spec.zorder_by)
        self.spark.sql(
            f"OPTIMIZE {delta_sql.table_ref(spec.location)}"
            + (f" ZORDER BY ({zorder})" if zorder else "")
        )
        after = self._snapshot_size(spec.location)
        return {
            "table": table,
            "zorder_by": list(spec.zorder_by),
            "files_before": before[0],
            "files_after": after[0],
            "bytes_before": before[1],
            "bytes_after": after[1],
        }

    def vacuum(
        self, table: str, retention_hours: float | None = None, *, force: bool = False
    ) -> dict[str, Any]:
        """Delete the files the table no longer references and that are older than the retention
        (default: the declared one). A retention below Delta's 168 h safety minimum is refused
        unless `force`, which lifts Delta's check for this call only. Returns the data files and
        bytes under the table's folder (the Delta log excluded) before and after."""
        spec = self.spec(table)
        self._require(spec)
        hours = spec.vacuum_retention_hours if retention_hours is None else retention_hours
        if hours < 0:
            raise TableError(f"vacuum {table}: retention_hours must be >= 0, got {hours}")
        if hours < DELTA_MIN_RETENTION_HOURS and not force:
            raise TableError(
                f"vacuum {table}: a retention of {hours} h is below Delta's safety minimum of "
                f"{DELTA_MIN_RETENTION_HOURS} h; readers or writers running longer than that could "
                "lose files they still need. Use at least that, or force=True if no job reads or "
                "writes the table meanwhile"
            )
        before = self._stored_size(spec.location)
        confs = {_RETENTION_WINDOW_IGNORE: "false"}
        if force:
            confs[_RETENTION_CHECK] = "false"
        with delta_sql.session_confs(self.spark, confs):
            self.spark.sql(
                f"VACUUM {delta_sql.table_ref(spec.location)} RETAIN {float(hours):.6f} HOURS"
            )
        after = self._stored_size(spec.location)
        return {
            "table": table,
            "retention_hours": hours,
            "files_before": before[0],
            "files_after": after[0],
            "bytes_removed": before[1] - after[1],
        }

    def sizes(self, table: str) -> dict[str, Any]:
        """Files and bytes of the table's snapshot and stored under its folder (referenced or
        not, the Delta log excluded): what OPTIMIZE and VACUUM would work on."""
        spec = self.spec(table)
        self._require(spec)
        snapshot, stored = self._snapshot_size(spec.location), self._stored_size(spec.location)
        return {
            "snapshot_files": snapshot[0],
            "snapshot_bytes": snapshot[1],
            "stored_files": stored[0],
            "stored_bytes": stored[1],
        }

    def _require(self, spec: TableSpec) -> None:
        if not self.exists(spec.name):
            raise TableError(
                f"Delta table {spec.name} does not exist at {spec.location}; a job creates it "
                "on its first write (or call Catalog.ensure)"
            )

    def _snapshot_size(self, location: str) -> tuple[int, int]:
        """(files, bytes) of the current snapshot."""
        row = delta_sql.detail(self.spark, location)
        return int(row["numFiles"]), int(row["sizeInBytes"])

    def _stored_size(self, location: str) -> tuple[int, int]:
        """(files, bytes) stored under the table's folder outside `_delta_log`, through Hadoop's
        file system (so any URI Spark reads works), referenced or not. A Connect client has no
        JVM: it walks the folder itself, which must then be local."""
        if delta_sql.is_connect(self.spark):
            return _local_stored_size(location)
        jvm = self.spark._jvm
        conf = self.spark._jsc.hadoopConfiguration()  # type: ignore[union-attr]
        root = jvm.org.apache.hadoop.fs.Path(location)  # type: ignore[union-attr]
        fs = root.getFileSystem(conf)
        log = jvm.org.apache.hadoop.fs.Path(root, "_delta_log")  # type: ignore[union-attr]
        total, meta = fs.getContentSummary(root), fs.getContentSummary(log)
        return (
            int(total.getFileCount()) - int(meta.getFileCount()),
            int(total.getLength()) - int(meta.getLength()),
        )
