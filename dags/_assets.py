"""The streams and Delta tables of the DAGs as Airflow assets: what each job step reads (inlets)
and writes (outlets), and the `extra` of the asset event a step's success emits.

Names and URIs come from `streamcore.datasets` (docs/airflow.md, "Assets and event-driven
runs"), so the DAG files, the jobs and the lineage events name a stream or table alike. Imported
by DAG files at parse time: Airflow's asset classes and the configuration only, no Spark.

    consume = StepAssets(assets(streams=["import/docs"]), assets(tables=["repository"]))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from airflow.sdk import Asset, AssetAlias

from streamcore.arrivals import RunsOn, runs_on
from streamcore.config import load_config
from streamcore.datasets import CATALOG_STREAMS, Dataset, stream_dataset, table_dataset
from streamcore.log.config import LogConfig

# Summary keys that count the rows a step landed, by job (importer and backfill: "imported",
# audit: "landed", retention's archive: "archived", bulk: "processed", stream replays:
# "appended"); the first one present is the event's `rows`.
ROW_KEYS = ("imported", "landed", "archived", "processed", "appended")
# Summary keys copied as they are into the event's `extra`.
COPIED = ("batch", "delta_version", "quarantined", "read", "dry_run", "state", "command_id")


# The DAGs that can run on records (docs/airflow.md, "Assets and event-driven runs"): their
# configuration section and default mode, the stream they watch and the group that lands it.
RECORDS_DAGS = {
    "streamcore_audit": ("audit", "schedule", "audit/entries", "audit/delta"),
    "streamcore_importer": ("importer", "manual", "import/docs", "import/repository"),
}


@cache
def _routing() -> tuple[Any, LogConfig]:
    # One configuration per parse: every asset of the DAG files names its stream alike.
    config = load_config()
    return config, LogConfig.from_settings(config)


def dataset_asset(dataset: Dataset, **kwargs: Any) -> Asset:
    """The Airflow asset of a stream or table (`group`: "stream" or "table")."""
    return Asset(name=dataset.name, uri=dataset.uri, group=dataset.kind, **kwargs)


def runs_on_records(dag_id: str) -> RunsOn:
    """What starts the runs of `dag_id`, one of `RECORDS_DAGS` (its `[section] runs_on`)."""
    section, default, _stream, _group = RECORDS_DAGS[dag_id]
    return runs_on(_routing()[0], section, default)


def _watchers(stream: str) -> list[Any]:
    """The asset watcher of `stream` when a DAG runs on its records, else none. Every reference
    to the stream's asset carries it (schedules, inlets, outlets of every DAG file): Airflow
    keeps the watchers of the reference it collects last, and drops the trigger of an asset
    whose reference in some file has none."""
    for dag_id, (_section, _default, watched, group) in RECORDS_DAGS.items():
        runs = runs_on_records(dag_id)
        if watched == stream and runs.records:
            from airflow.sdk import AssetWatcher
            from streamcore_triggers import StreamRecordsTrigger

            trigger = StreamRecordsTrigger(
                stream=stream,
                group=group,
                poll_interval=runs.watch_interval_s,
                home=str(_routing()[0].home),
            )
            return [AssetWatcher(name=f"{dag_id}_records", trigger=trigger)]
    return []


def stream_asset(name: str) -> Asset:
    """The asset of stream `name`, where its name routes, with its watcher when a DAG runs on
    its records (`RECORDS_DAGS`)."""
    config, routing = _routing()
    return dataset_asset(stream_dataset(name, config, routing), watchers=_watchers(name))


def table_asset(name: str) -> Asset:
    """The asset of the Delta table `name` under the warehouse."""
    return dataset_asset(table_dataset(name, _routing()[0]))


def archived_streams() -> list[str]:
    """The catalog's streams that retention archives (`LogConfig.archived`): the archive step's
    inlets when its `streams` Param is empty, which is what scheduled runs do."""
    return [name for name in CATALOG_STREAMS if _routing()[1].archived(name)]


def assets(*, streams: Iterable[str] = (), tables: Iterable[str] = ()) -> list[Asset]:
    """The assets of `streams` then `tables`, as one list (an inlet or outlet list)."""
    return [*map(stream_asset, streams), *map(table_asset, tables)]


@dataclass(frozen=True)
class StepAssets:
    """What one job step reads and writes, as its operator's `inlets` and `outlets`. An
    `AssetAlias` outlet stands for a target the run's Params choose (the backfill's): the
    step's summary names it (`target`, `target_kind`) and `record_asset_events` adds it."""

    inlets: list[Any] = field(default_factory=list)
    outlets: list[Any] = field(default_factory=list)


def batch_extra(summary: Mapping[str, Any]) -> dict[str, Any]:
    """What a step's job summary says about its batch, for the asset event: the batch number,
    the offset range of each partition (`{"0": [start, end]}`), the rows landed, the rows
    quarantined and the Delta version (keys the job does not report are left out). A
    multi-stream summary (retention's archive) has one such entry per stream in `streams`."""
    extra = {key: summary[key] for key in COPIED if key in summary}
    offsets = summary.get("offsets", summary.get("hot_offsets"))
    if isinstance(offsets, Mapping):
        extra["offsets"] = {str(p): list(r) for p, r in offsets.items()}
    rows = next((summary[key] for key in ROW_KEYS if isinstance(summary.get(key), int)), None)
    if rows is not None:
        extra["rows"] = rows
    streams = summary.get("streams")
    if isinstance(streams, Mapping):
        extra["streams"] = {
            str(name): batch_extra(part)
            for name, part in streams.items()
            if isinstance(part, Mapping)
        }
    return extra


def record_asset_events(
    context: Mapping[str, Any], outlets: Sequence[Any], summary: Mapping[str, Any]
) -> None:
    """Sets the `extra` of the events the step's success emits on its outlets from its job
    summary (`batch_extra`); an alias outlet gets the target the summary names (`target`: a
    table when `target_kind` is "table", else a stream)."""
    extra = {"job": summary.get("job"), "step": summary.get("step"), **batch_extra(summary)}
    events = context["outlet_events"]
    for outlet in outlets:
        if isinstance(outlet, AssetAlias):
            target = summary.get("target")
            if target:
                table = summary.get("target_kind") == "table"
                events[outlet].add(
                    table_asset(target) if table else stream_asset(target), extra=extra
                )
        elif isinstance(outlet, Asset):
            events[outlet].extra = extra
