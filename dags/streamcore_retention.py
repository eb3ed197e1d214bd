"""Retention compaction, daily: `jobs/retention.py` archive → purge → compact → maintain.

validate → archive → purge → compact → maintain (four spark-submits of jobs/retention.py) →
summary, made by `job_tasks`, → archive_failures, which fails the run if a stream could not be
archived (the archive step reports it and lets the later steps run).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pendulum
from _assets import StepAssets, archived_streams, assets
from _streamcore import (
    default_args,
    dry_run_for,
    dry_run_param,
    job_tasks,
    logs_exist,
    streamcore_home,
)
from airflow.sdk import CronTriggerTimetable, Param, dag, task
from airflow.sdk.exceptions import AirflowFailException

DOC = """
# streamcore retention

Keeps the hot logs bounded and their history durable (`jobs/retention.py`, docs/spark-jobs.md
"The retention job"):

- **archive**: the records appended before now minus `horizon` that the archiver (consumer group
  `retention/archiver`) has not archived yet land in the Delta table **`archive`**, exactly once,
  for every stream the configuration archives (`archive = true` on its `[[log.match]]` rule, the
  default), or the `streams` given. Each row carries its log's incarnation: a stream deleted and
  created again is archived from its new offset 0 on, beside the old rows. Each stream is
  archived on its own: one that fails is reported (summary, and the **archive_failures** task
  fails the run with its error) while the others are archived, purged, compacted.
- **purge**: expired segments of the local logs (newest record older than the log's retention)
  are deleted once every consumer group and the archiver have read past them. The others stay,
  and the summary says which groups keep how many records; `force` purges them anyway (the groups
  lose those records, and the loss is recorded). Kafka applies its own retention.
- **compact**: the logs the configuration compacts (`compact = true` on their rule) keep only the
  latest record per key in their sealed segments, up to what the archiver has archived; a
  tombstone (empty data) deletes its key and goes itself after a day. Kafka topics are compacted
  by their broker (`cleanup.policy=compact`) and only reported.
- **maintain**: Delta `OPTIMIZE` (z-ordered by the catalog's columns) and `VACUUM` (each table's
  declared retention, 7 days) on every catalog table that exists.
- **summary** logs a table per stream (records and bytes archived, keys compacted, segments and
  bytes purged, records kept for groups behind) and per table (files before/after OPTIMIZE,
  bytes vacuumed), and keeps it in `STREAMCORE_HOME/runs/retention/<dag id>+<run id>.json`.

**Dry run.** A run triggered by a person (UI *Trigger*, `airflow dags trigger`, REST) is a dry
run unless `dry_run` is switched off: every step says what it would do and changes nothing, so
clicking *Trigger* alone is safe. Scheduled runs always run for real.

**Schedule**: daily at 03:00 UTC, no catch-up, one run at a time (the archiver's batches and the
purges must not overlap). The steps look at the logs *now*, not at a data interval: clearing or
rerunning a run simply applies retention again (each step is idempotent).
"""

PARAMS = {
    "dry_run": dry_run_param(
        "Manual runs: say what each step would do and change nothing (switch off to "
        "archive, purge and maintain for real). Scheduled runs ignore it: they run for real."
    ),
    "streams": Param(
        [],
        type="array",
        items={"type": "string", "minLength": 3},
        title="Streams",
        description="Streams to archive, purge and compact, e.g. import/docs (empty: archive "
        "every stream the configuration archives, purge every local log, compact those the "
        "configuration compacts).",
    ),
    "horizon": Param(
        "1d",
        type="string",
        pattern=r"^\s*\d+(\.\d+)?\s*(ms|s|m|h|d)?\s*$",
        title="Archive horizon",
        description='Archive the records appended before now minus this: "1d", "12h", "0" '
        "(everything up to now).",
    ),
    "force": Param(
        False,
        type="boolean",
        title="Force purge",
        description="Purge expired segments even where consumer groups have not read them: those "
        "groups lose the records (recorded in the log's purges.jsonl and in their lag).",
    ),
}


def retention_arguments(params: dict[str, Any], context: Any) -> dict[str, list[str]]:
    """Each step's arguments: the streams, the horizon, `--force`, and `--dry-run` for manual
    runs that ask for it (see DOC). A named stream that does not exist fails here, before
    Spark, with the streams that do."""
    dry_run = dry_run_for(params, context)
    streams = [s.strip() for s in params["streams"] if s.strip()]
    if streams:
        _check_streams_exist(streams)
    common = ["--home", str(streamcore_home()), *(["--dry-run"] if dry_run else [])]
    chosen = ["--streams", ",".join(streams)] if streams else []
    return {
        # --partial-ok: a stream that fails must not stop purge, compact and maintain for the
        # others; archive_failures fails the run once they ran.
        "archive": [
            "archive",
            "--horizon",
            params["horizon"].strip(),
            "--partial-ok",
            *chosen,
            *common,
        ],
        "purge": ["purge", *chosen, *(["--force"] if params["force"] else []), *common],
        "compact": ["compact", *chosen, *common],
        "maintain": ["maintain", *common],
    }


def _check_streams_exist(streams: list[str]) -> None:
    found, known = logs_exist(streams)
    missing = [s for s, exists in found.items() if not exists]
    if missing:
        raise AirflowFailException(
            f"streams: {', '.join(missing)} do(es) not exist; the logs are "
            f"{', '.join(known) or 'none yet'} (leave streams empty for all)"
        )


def check_archive_failures(record: Mapping[str, Any]) -> None:
    """Fail (AirflowFailException) if the run's archive step could not archive some stream:
    once the summary is kept and the other streams are purged, compacted and maintained."""
    archive = record.get("archive") or {}
    failed = archive.get("failed_streams") or []
    if failed:
        errors = "; ".join(f"{s}: {archive['streams'][s]['error']}" for s in failed)
        raise AirflowFailException(
            f"the archive step failed for {', '.join(failed)} (the other streams were archived, "
            f"purged and compacted; see the summary): {errors}"
        )


@dag(
    dag_id="streamcore_retention",
    schedule=CronTriggerTimetable("0 3 * * *", timezone="UTC", interval=timedelta(days=1)),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["streamcore", "retention"],
    params=PARAMS,
    doc_md=DOC,
    default_args=default_args(retries=1),
)
def streamcore_retention() -> None:
    report = job_tasks(
        "retention",
        ["archive", "purge", "compact", "maintain"],
        retention_arguments,
        retries={"archive": 2, "purge": 1, "compact": 1, "maintain": 1},  # each is idempotent
        assets={
            "archive": StepAssets(assets(streams=archived_streams()), assets(tables=["archive"]))
        },
    )
    task(task_id="archive_failures", retries=0)(check_archive_failures)(report)


streamcore_retention()
