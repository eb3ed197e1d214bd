"""Datasets: the stable identity of each stream and Delta table, for Airflow assets and lineage.

One `Dataset` per stream or table holds the three names other systems know it by:

- `name`: the Airflow asset name, the stream's URN (`import/docs`) or the table's name
  (`repository`); `kind` ("stream" or "table") is the asset's group;
- `uri`: the Airflow asset URI (Airflow's asset URI rules: a lower-case scheme, no password, no
  trailing slash, no fragment; `file` is normalized by Airflow itself);
- `namespace`, `ol_name`: the OpenLineage dataset (its naming spec: the namespace is the data
  source `scheme:[//authority]`, the name the dataset inside it).

| what | asset URI | OpenLineage namespace, name |
|---|---|---|
| stream on Kafka | `kafka://<first bootstrap server>/<topic>` | `kafka://<host:port>`, `<topic>` |
| stream on the local log | `file://<log root>/<log id>` | `file`, `<log root>/<log id>` |
| stream of another backend (memory) | `<type>:///<log id>` | `<type>`, `<log id>` |
| table under a local warehouse | `file://<warehouse>/<table>` | `file`, `<warehouse>/<table>` |
| table under `s3a://bucket/wh` | `s3://bucket/wh/<table>` | `s3://bucket`, `wh/<table>` |
| table under another URI | the location | `<scheme>://<authority>`, `<path>` |

A stream is named after where its name routes (`LogConfig.route`), so every process that shares
the configuration (the DAG files, the jobs, the triggerer) names it alike. This module imports
neither Airflow nor OpenLineage: the DAGs build `Asset(name, uri, group=kind)` from it and the
lineage events build their datasets from it; both `dags/` and `jobs/` may import `streamcore`.

    >>> config = load_config(home="/srv/sc", warehouse="s3a://lake/wh")
    >>> table_dataset("repository", config).uri
    's3://lake/wh/repository'
    >>> stream_dataset("import/docs", config).uri
    'file:///srv/sc/log/import-docs'
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

from streamcore.config import StreamcoreConfig
from streamcore.errors import ConfigError
from streamcore.log.config import LogConfig
from streamcore.log.registry import backend_type
from streamcore.names import NO_NAMESPACE, Name
from streamcore.tables import TABLES, local_path, table_location

__all__ = [
    "CATALOG_STREAMS",
    "Dataset",
    "catalog_datasets",
    "stream_dataset",
    "table_dataset",
]

# The streams of the catalog (docs/design.md, "The catalog"); bulk/<action> and dead-letter
# streams are named per deployment and get a dataset from `stream_dataset` when a job names them.
CATALOG_STREAMS = ("import/docs", "audit/entries", "bulk/command", "bulk/status", "bulk/done")
# Spark's Hadoop schemes for S3, and the object stores whose OpenLineage name is the key (no
# leading slash); other schemes (hdfs, abfss, file) keep the path as it is.
_S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
_KEY_NAMED = frozenset({"s3", "gs"})


@dataclass(frozen=True, slots=True)
class Dataset:
    """One stream or table: its Airflow asset name, URI and group (`kind`), and its OpenLineage
    dataset (`namespace`, `ol_name`)."""

    name: str
    kind: str
    uri: str
    namespace: str
    ol_name: str

    @property
    def openlineage(self) -> tuple[str, str]:
        """The OpenLineage (namespace, name) pair."""
        return self.namespace, self.ol_name


def _file(kind: str, name: str, path: Path) -> Dataset:
    absolute = path.expanduser().absolute().as_posix().rstrip("/")
    return Dataset(name, kind, "file://" + quote(absolute), "file", absolute)


def stream_dataset(
    name: str | Name, config: StreamcoreConfig, log_config: LogConfig | None = None
) -> Dataset:
    """The dataset of stream `name` where its name routes under `config` (and `log_config`,
    default: the routing of `config` with the environment)."""
    log_name = Name.of(name)
    if log_name.namespace == NO_NAMESPACE and log_name.name in TABLES:
        # Asset names are unique across groups in Airflow: a stream would take the table's.
        raise ConfigError(
            f"stream {log_name.urn!r} has the name of the Delta table {log_name.name!r}, so "
            "their Airflow assets would collide; give the stream a namespace (ns/name)"
        )
    routing = log_config if log_config is not None else LogConfig.from_settings(config)
    backend = routing.config_for(log_name)
    if backend.type == "kafka":
        server = str(backend.options["bootstrap_servers"]).split(",")[0].strip()
        topic = f"{backend.options['topic_prefix']}{log_name.id}"
        return Dataset(
            log_name.urn, "stream", f"kafka://{server}/{quote(topic)}", f"kafka://{server}", topic
        )
    folder = backend_type(backend.type).folder(backend, config.home)
    if folder is not None:
        return _file("stream", log_name.urn, folder / log_name.id)
    return Dataset(
        log_name.urn, "stream", f"{backend.type}:///{log_name.id}", backend.type, log_name.id
    )


def table_dataset(name: str, config: StreamcoreConfig) -> Dataset:
    """The dataset of Delta table `name` under `config.warehouse` (a name outside `TABLES` is
    a repository-shaped table, the importer's `--table`)."""
    location = table_location(config.warehouse, name)
    folder = local_path(location)
    if folder is not None:
        return _file("table", name, folder)
    parts = urlsplit(location)
    scheme = "s3" if parts.scheme.lower() in _S3_SCHEMES else parts.scheme.lower()
    path = parts.path.rstrip("/")
    ol_name = path.lstrip("/") if scheme in _KEY_NAMED else path
    return Dataset(
        name, "table", f"{scheme}://{parts.netloc}{path}", f"{scheme}://{parts.netloc}", ol_name
    )


def catalog_datasets(
    config: StreamcoreConfig, log_config: LogConfig | None = None
) -> dict[str, Dataset]:
    """Every stream (`CATALOG_STREAMS`) and table (`TABLES`) of the catalog, by asset name."""
    routing = log_config if log_config is not None else LogConfig.from_settings(config)
    found = {s: stream_dataset(s, config, routing) for s in CATALOG_STREAMS}
    found.update({t: table_dataset(t, config) for t in TABLES})
    return found
