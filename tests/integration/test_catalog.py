"""The table catalog on Spark: `ensure` creates every table as declared and is idempotent, refuses
a table of another shape; `optimize` and `vacuum` report what they did; `streamcore tables` counts
rows under deletion vectors."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
from spark_session import delta_version

from jobs.spark.delta.catalog import Catalog, spark_type, table_schema
from streamcore.config import load_config
from streamcore.errors import IncompatibleTableError, TableError
from streamcore.table_status import table_status
from streamcore.tables import TABLES, Column

pytestmark = pytest.mark.spark


@pytest.fixture
def catalog(spark, clean_env: pytest.MonkeyPatch, tmp_path: Path) -> Catalog:
    return Catalog(spark, load_config(home=tmp_path))


def test_ensure_creates_every_table_as_declared_and_is_idempotent(spark, catalog) -> None:
    from delta.tables import DeltaTable

    for table in TABLES:
        path = catalog.ensure(table)
        assert path == str(Path(catalog.config.warehouse) / table)
        spec = catalog.spec(table)
        delta = DeltaTable.forPath(spark, path)
        detail = delta.detail().first()
        assert tuple(detail["partitionColumns"]) == spec.partition_by
        fields = {f.name: f.dataType for f in delta.toDF().schema.fields}
        assert list(fields) == list(spec.column_names)
        for column in spec.columns:
            assert fields[column.name].simpleString() == spark_type(column.type).simpleString()
        properties = delta.detail().first()["properties"]
        assert properties["delta.deletedFileRetentionDuration"] == "interval 168 hours"
    versions = {t: delta_version(catalog.path(t)) for t in TABLES}
    again = Catalog(spark, catalog.config)  # a new catalog checks instead of trusting its cache
    for table in TABLES:
        again.ensure(table)
    assert (
        {t: delta_version(catalog.path(t)) for t in TABLES} == versions == dict.fromkeys(TABLES, 0)
    )


def test_ensure_refuses_a_table_of_another_shape(spark, catalog) -> None:
    path = catalog.path("audit")
    spark.range(3).selectExpr("cast(id as string) as event_id").write.format("delta").save(path)
    with pytest.raises(IncompatibleTableError, match=r"audit at .* event_type \(string\) is miss"):
        catalog.ensure("audit")
    with pytest.raises(IncompatibleTableError, match=r"partitioned by \[\], not \['event_day'\]"):
        catalog.ensure("audit")


def _old_repository(spark, catalog, columns) -> str:
    """`repository` as a job wrote it before its system columns existed, with one row."""
    from pyspark.sql.types import StructField, StructType

    spec = catalog.spec("repository")
    old = table_schema(dataclasses.replace(spec, columns=columns))
    schema = StructType([StructField(f.name, f.dataType) for f in old.fields])
    row = {"id": "d1", "title": "kept", "watermark": 7}
    spark.createDataFrame([row], schema).write.format("delta").save(spec.location)
    return spec.location


def test_ensure_adds_the_declared_nullable_columns_a_table_lacks(spark, catalog, caplog) -> None:
    from deltalake import DeltaTable

    spec = catalog.spec("repository")
    assert spec.column_names[-2:] == ("isTrashed", "lifecycleState")
    path = _old_repository(spark, catalog, spec.columns[:-2])
    before = delta_version(path)
    with caplog.at_level(logging.WARNING, logger="jobs.spark.delta.catalog"):
        assert catalog.ensure("repository") == path
    assert "added the nullable columns ['isTrashed', 'lifecycleState']" in caplog.text
    assert delta_version(path) == before + 1  # one metadata commit
    table = DeltaTable(path)
    assert table.schema().to_arrow().names == list(spec.column_names)
    rows = table.to_pyarrow_table().to_pylist()
    assert [(r["id"], r["title"], r["isTrashed"], r["lifecycleState"]) for r in rows] == [
        ("d1", "kept", None, None)
    ]
    Catalog(spark, catalog.config).ensure("repository")  # migrated: nothing more to do
    assert delta_version(path) == before + 1


def test_ensure_refuses_a_table_that_differs_beyond_missing_nullable_columns(
    spark, catalog
) -> None:
    spec = catalog.spec("repository")
    wrong = (*spec.columns[:-2], Column("lifecycleState", "int"))  # isTrashed missing too
    path = _old_repository(spark, catalog, wrong)
    before = delta_version(path)
    with pytest.raises(IncompatibleTableError, match=r"lifecycleState is int, not string"):
        catalog.ensure("repository")
    assert delta_version(path) == before  # isTrashed not added either


def test_optimize_and_vacuum_report_files(spark, catalog) -> None:
    path = catalog.ensure("bulk_status")
    for i in range(3):
        spark.createDataFrame(
            [(f"c{i}", "RUNNING")], "command_id string, state string"
        ).write.format("delta").mode("append").save(path)
    optimized = catalog.optimize("bulk_status")
    assert (optimized["files_before"], optimized["files_after"]) == (3, 1)
    with pytest.raises(TableError, match="below Delta's safety minimum of 168 h"):
        catalog.vacuum("bulk_status", retention_hours=0)
    kept = catalog.vacuum("bulk_status")  # the 3 compacted files are younger than 168 h
    assert kept["files_before"] == kept["files_after"]
    assert kept["bytes_removed"] == 0
    forced = catalog.vacuum("bulk_status", retention_hours=0, force=True)
    assert forced["files_after"] < forced["files_before"] == kept["files_after"]
    assert forced["bytes_removed"] > 0
    assert table_status(catalog.spec("bulk_status")).rows == 3
    # Delta's checks are back for everyone else.
    conf = spark.conf
    assert conf.get("spark.databricks.delta.retentionDurationCheck.enabled", None) is None
    assert conf.get("spark.databricks.delta.vacuum.retentionWindowIgnore.enabled", None) is None


def test_status_subtracts_rows_deleted_by_deletion_vectors(spark, catalog) -> None:
    path = catalog.ensure("bulk_status")
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors'=true)")
    rows = [(f"c{i}", "RUNNING") for i in range(5)]
    frame = spark.createDataFrame(rows, "command_id string, state string")
    frame.coalesce(1).write.format("delta").mode("append").save(path)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE command_id IN ('c1', 'c3')")
    status = table_status(catalog.spec("bulk_status"))
    assert (status.exists, status.files, status.rows) == (True, 1, 3)
