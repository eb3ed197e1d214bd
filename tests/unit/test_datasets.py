"""streamcore.datasets: each stream and table's Airflow asset URI and OpenLineage dataset."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from streamcore.config import load_config
from streamcore.datasets import CATALOG_STREAMS, catalog_datasets, stream_dataset, table_dataset
from streamcore.errors import ConfigError
from streamcore.log.config import LogConfig
from streamcore.tables import TABLES

ROUTING = """
[log.configs.kafka]
type = "kafka"
bootstrap_servers = "broker-1:9092,broker-2:9092"
topic_prefix = "sc-"

[log.configs.scratch]
type = "memory"

[log.configs.archive]
type = "local"
root = "/mnt/logs"

[[log.match]]
namespace = "bulk"
config = "kafka"

[[log.match]]
namespace = "tmp"
config = "scratch"

[[log.match]]
namespace = "old"
config = "archive"
"""


@pytest.fixture
def routing() -> LogConfig:
    return LogConfig.parse(tomllib.loads(ROUTING), environ={})


def test_local_stream_is_a_file_uri_of_its_folder(tmp_path: Path, routing: LogConfig) -> None:
    config = load_config(home=tmp_path)
    found = stream_dataset("import/docs", config, routing)
    folder = (tmp_path / "log" / "import-docs").as_posix()
    assert (found.name, found.kind) == ("import/docs", "stream")
    assert found.uri == "file://" + folder
    assert found.openlineage == ("file", folder)
    other = stream_dataset("old/entries", config, routing)
    assert other.uri == "file:///mnt/logs/old-entries"


def test_kafka_stream_names_the_first_bootstrap_server_and_the_topic(
    tmp_path: Path, routing: LogConfig
) -> None:
    found = stream_dataset("bulk/command", load_config(home=tmp_path), routing)
    assert found.uri == "kafka://broker-1:9092/sc-bulk-command"
    assert found.openlineage == ("kafka://broker-1:9092", "sc-bulk-command")


def test_memory_stream_is_named_by_its_type(tmp_path: Path, routing: LogConfig) -> None:
    found = stream_dataset("tmp/x", load_config(home=tmp_path), routing)
    assert (found.uri, found.namespace, found.ol_name) == ("memory:///tmp-x", "memory", "tmp-x")


def test_local_warehouse_tables_are_file_uris(tmp_path: Path) -> None:
    found = table_dataset("repository", load_config(home=tmp_path))
    folder = (tmp_path / "delta" / "repository").as_posix()
    assert (found.name, found.kind, found.uri) == ("repository", "table", "file://" + folder)
    assert found.openlineage == ("file", folder)


@pytest.mark.parametrize(
    ("warehouse", "uri", "namespace", "name"),
    [
        ("s3a://lake/wh/", "s3://lake/wh/audit", "s3://lake", "wh/audit"),
        ("gs://lake/wh", "gs://lake/wh/audit", "gs://lake", "wh/audit"),
        ("hdfs://nn:8020/wh", "hdfs://nn:8020/wh/audit", "hdfs://nn:8020", "/wh/audit"),
    ],
)
def test_remote_warehouse_tables(
    tmp_path: Path, warehouse: str, uri: str, namespace: str, name: str
) -> None:
    found = table_dataset("audit", load_config(home=tmp_path, warehouse=warehouse))
    assert found.uri == uri
    assert found.openlineage == (namespace, name)


def test_a_file_warehouse_uri_names_the_same_folder_as_a_path(tmp_path: Path) -> None:
    as_uri = table_dataset("audit", load_config(home=tmp_path, warehouse=tmp_path.as_uri()))
    as_path = table_dataset("audit", load_config(home=tmp_path, warehouse=str(tmp_path)))
    assert as_uri == as_path


def test_the_catalog_has_every_stream_and_table(tmp_path: Path, routing: LogConfig) -> None:
    found = catalog_datasets(load_config(home=tmp_path), routing)
    assert set(found) == set(CATALOG_STREAMS) | set(TABLES)
    assert len({d.uri for d in found.values()}) == len(found)
    # The same configuration names every dataset alike (DAG files, jobs and triggerer agree).
    assert catalog_datasets(load_config(home=tmp_path), routing) == found


def test_a_stream_named_like_a_table_is_refused(tmp_path: Path, routing: LogConfig) -> None:
    with pytest.raises(ConfigError, match="namespace"):
        stream_dataset("repository", load_config(home=tmp_path), routing)


def test_uris_are_what_airflow_keeps(tmp_path: Path, routing: LogConfig) -> None:
    """Airflow's sanitizer leaves every URI as it is (it would rewrite a non-canonical one)."""
    from airflow.sdk.definitions import asset

    for dataset in catalog_datasets(load_config(home=tmp_path), routing).values():
        assert asset._sanitize_uri(dataset.uri) == dataset.uri
