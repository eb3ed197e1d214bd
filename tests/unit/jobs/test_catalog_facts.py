"""The table catalog without Spark: the declared facts, the warehouse root and table locations,
and `streamcore tables` on a warehouse holding a table written by delta-rs."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from streamcore.cli.main import main
from streamcore.codecs import SchemaStore
from streamcore.config import load_config
from streamcore.errors import ConfigError, TableError
from streamcore.table_status import table_status
from streamcore.tables import (
    DOCUMENT_SCHEMA,
    TABLES,
    Column,
    TableSpec,
    avro_columns,
    local_path,
    table_location,
    table_spec,
    table_specs,
)


@pytest.fixture
def config(clean_env: pytest.MonkeyPatch, tmp_path: Path):
    return load_config(home=tmp_path / "home")


# -- facts ----------------------------------------------------------------------------------------
def test_every_table_of_design_section_6_is_declared(config) -> None:
    specs = table_specs(config)
    assert tuple(specs) == TABLES == ("repository", "quarantine", "audit", "bulk_status", "archive")
    for spec in specs.values():
        assert spec.key, f"{spec.name} has no natural key"
        assert spec.vacuum_retention_hours == 168
        assert json.dumps(spec.to_json())  # the facts are plain data


def test_partitioning_and_keys(config) -> None:
    specs = table_specs(config)
    assert specs["audit"].partition_by == ("event_day",)
    assert specs["audit"].key == ("event_id",)
    assert specs["archive"].partition_by == ("stream", "date")
    assert specs["archive"].key == ("stream", "incarnation", "partition", "offset")
    assert specs["quarantine"].partition_by == ("stream",)
    assert specs["quarantine"].key == ("stream", "partition", "offset")
    assert specs["repository"].partition_by == ()
    assert specs["repository"].key == ("id",)
    assert specs["bulk_status"].key == ("command_id",)


def test_repository_columns_come_from_the_document_schema(config) -> None:
    document = SchemaStore(config.schemas_dir).by_name(DOCUMENT_SCHEMA).raw
    spec = table_spec("repository", config)
    fields = [f["name"] for f in document["fields"]]
    assert spec.column_names == (
        *fields,
        "watermark",
        "source_partition",
        "source_offset",
        "import_batch",
        "imported_at",
        "isTrashed",
        "lifecycleState",
    )
    types = {c.name: (c.type, c.nullable) for c in spec.columns}
    # The system columns bulk actions set; null until one does (docs/bulk.md).
    assert (types["isTrashed"], types["lifecycleState"]) == (("boolean", True), ("string", True))
    # As spark-avro maps them: enums are strings, timestamp-millis a timestamp, unions nullable.
    assert types["type"] == ("string", False)
    assert types["created"] == ("timestamp", False)
    assert types["properties"] == ("map<string,string>", False)
    assert types["blobSize"] == ("long", True)


def test_a_custom_table_name_is_repository_shaped(config) -> None:
    custom = table_spec("docs_v2", config)
    assert custom.name == "docs_v2"
    assert custom.columns == table_spec("repository", config).columns
    assert custom.location.endswith("/delta/docs_v2")


def test_avro_mapping() -> None:
    schema = {
        "type": "record",
        "name": "T",
        "fields": [
            {"name": "b", "type": "bytes"},
            {"name": "d", "type": {"type": "int", "logicalType": "date"}},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "n", "type": ["null", {"type": "map", "values": "long"}]},
        ],
    }
    assert [c.to_json() for c in avro_columns(schema)] == [
        {"name": "b", "type": "binary", "nullable": False},
        {"name": "d", "type": "date", "nullable": False},
        {"name": "tags", "type": "array<string>", "nullable": False},
        {"name": "n", "type": "map<string,long>", "nullable": True},
    ]
    nested = {"type": "record", "name": "T", "fields": [{"name": "r", "type": schema}]}
    with pytest.raises(ConfigError, match=r"T\.r: Avro type .* explicit columns"):
        avro_columns(nested)


def test_bad_facts_are_refused() -> None:
    with pytest.raises(ConfigError, match="vocabulary"):
        Column("x", "varchar")
    cols = (Column("a", "string"), Column("b", "long"))
    with pytest.raises(ConfigError, match=r"partition_by names unknown columns \['c'\]"):
        TableSpec("t", "", cols, partition_by=("c",))
    with pytest.raises(ConfigError, match="zorder_by must not repeat partition columns"):
        TableSpec("t", "", cols, partition_by=("a",), zorder_by=("a",))
    with pytest.raises(ConfigError, match="plain identifier"):
        TableSpec("bad-name", "", cols)


# -- warehouse and locations ----------------------------------------------------------------------
def test_warehouse_defaults_to_home_delta(config, tmp_path: Path) -> None:
    assert config.warehouse == str(tmp_path / "home" / "delta")
    assert table_spec("audit", config).location == str(tmp_path / "home" / "delta" / "audit")


@pytest.mark.parametrize(
    ("warehouse", "expected"),
    [
        ("s3a://lake/wh/", "s3a://lake/wh"),
        ("s3a://lake", "s3a://lake"),
        ("file:///srv/wh", "file:///srv/wh"),
        ("file:///", "file:///"),
    ],
)
def test_warehouse_uris_are_kept_as_uris(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, warehouse: str, expected: str
) -> None:
    clean_env.setenv("STREAMCORE_WAREHOUSE", warehouse)
    assert load_config(home=tmp_path).warehouse == expected


def test_relative_warehouse_resolves_against_working_directory(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.chdir(tmp_path)
    clean_env.setenv("STREAMCORE_WAREHOUSE", "tables")
    assert load_config(home=tmp_path / "home").warehouse == str(tmp_path / "tables")


def test_warehouse_from_the_config_file(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    file = tmp_path / "streamcore.toml"
    file.write_text('warehouse = "s3a://lake/streamcore"\n')
    config = load_config(file, home=tmp_path)
    assert table_spec("archive", config).location == "s3a://lake/streamcore/archive"


def test_table_location_joins_strings() -> None:
    assert table_location("s3a://lake/wh", "audit") == "s3a://lake/wh/audit"
    assert table_location("file:///", "audit") == "file:///audit"
    assert table_location("/srv/wh/", "audit") == "/srv/wh/audit"
    with pytest.raises(ConfigError, match="plain identifier"):
        table_location("/srv/wh", "../etc")


def test_local_path() -> None:
    assert local_path("/srv/wh/audit") == Path("/srv/wh/audit")
    assert local_path("file:///srv/my%20wh/audit") == Path("/srv/my wh/audit")
    assert local_path("s3a://lake/wh/audit") is None


# -- status and `streamcore tables` ---------------------------------------------------------------
def test_status_of_a_remote_table_says_it_needs_local_access(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("STREAMCORE_WAREHOUSE", "s3a://lake/wh")
    spec = table_spec("audit", load_config(home=tmp_path))
    with pytest.raises(TableError, match="remote location: reading its Delta log needs local"):
        table_status(spec)


def test_cli_tables_lists_version_files_rows(
    config, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from deltalake import write_deltalake

    location = table_spec("quarantine", config).location
    rows = pa.table({"stream": ["a/b", "a/b", "c/d"], "offset": [1, 2, 3]})
    write_deltalake(location, rows, partition_by=["stream"])
    write_deltalake(location, rows.slice(0, 1), partition_by=["stream"], mode="append")

    home = ["--home", str(tmp_path / "home")]
    assert main([*home, "tables", "--json"]) == 0
    listed = {t["table"]: t for t in json.loads(capsys.readouterr().out)["tables"]}
    assert list(listed) == list(TABLES)
    quarantine = listed["quarantine"]
    assert quarantine["exists"] is True
    assert (quarantine["version"], quarantine["files"], quarantine["rows"]) == (1, 3, 4)
    assert quarantine["bytes"] > 0
    assert quarantine["partition_by"] == ["stream"]
    assert listed["audit"]["exists"] is False
    assert listed["audit"]["partition_by"] == ["event_day"]

    assert main([*home, "tables"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].split()[:6] == ["table", "exists", "version", "files", "rows", "size"]
    assert text[3].split()[:5] == ["quarantine", "yes", "1", "3", "4"]


def test_cli_tables_on_a_remote_warehouse_is_a_clear_error(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clean_env.setenv("STREAMCORE_WAREHOUSE", "s3a://lake/wh")
    assert main(["--home", str(tmp_path), "tables"]) == 1
    assert "needs local access" in capsys.readouterr().err
