"""Replay a stream's history into another stream, a topology or a Delta table: `jobs/backfill.py`
over an interval, from the UI with explicit dates or under `airflow backfill create` over past
days.

validate → replay (spark-submit jobs/backfill.py) → summary, made by `job_tasks`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from _assets import StepAssets, assets
from _streamcore import (
    default_args,
    dry_run_for,
    dry_run_param,
    given_interval,
    interval_arguments,
    interval_params,
    job_tasks,
    logs_exist,
    streamcore_home,
)
from airflow.sdk import AssetAlias, CronTriggerTimetable, Param, dag
from airflow.sdk.exceptions import AirflowFailException

TARGET_KINDS = ("stream", "topology", "table")  # jobs/backfill.py's --target-kind choices

DOC = """
# streamcore backfill

Replays the records a stream received in an interval (`spark-submit jobs/backfill.py`,
docs/spark-jobs.md "The backfill job"): from the hot log while it holds them, from the Delta
table `archive` for what retention purged, in source order, into a target of `target_kind`:

- **stream** (default): appended to the stream `target`, with keys, data, watermarks and append
  times kept and each Record flagged `REPLAYED`.
- **topology**: appended to `target` as for a stream, then the topology `topology`
  (`module:factory`, as `streamcore run` takes it; it must read `target`) runs in drain mode on
  them, in the job's driver, until it has consumed everything.
- **table**: landed into the Delta table `target` through its live writer; only `repository`
  (Documents, through the importer's checks and MERGE, which never overwrites a newer version).

Steps:

- **validate** checks the Params before Spark with the job's own argument checks (the kind, a
  `topology` given for that kind only, from a module under `[backfill] topologies` in
  include/streamcore.toml, and reading `target`; a table that has a writer), then that `stream`
  exists and, for a stream or topology target, that `target` exists (create it first:
  `streamcore create -l NAME -p PARTITIONS`, as many partitions as the source to keep each
  record in its partition), `start` before `end`. An interval with no record (told from the
  log's offsets and the archive's rows, without Spark) skips the other tasks; one the archive
  holds with a hole fails here, naming the missing offset.
- **replay** runs the job. Each interval is replayed once: a rerun (a cleared task, the same
  dates again) appends nothing (a topology's drain then finds nothing left), a run that crashed
  in the middle resumes where it stopped, and a table rerun changes no row.
- **summary** logs what was replayed (records, from the archive, appended or landed, drained).

**Interval.** Give `start` and `end` (ISO 8601, UTC when no offset is given) to replay any
interval. Without them a run replays its data interval: `airflow backfill create --dag-id
streamcore_backfill --from-date A --to-date B` makes one run per day, each replaying its day
(the run at day D + 1 replays [D, D + 1)); unpaused, the DAG replays each day the day before.

**Dry run.** A run a person triggers is a dry run unless `dry_run` is switched off (it counts
what it would replay and writes nothing). Backfill and scheduled runs always run for real.
"""

PARAMS = {
    "stream": Param(
        "import/docs",
        type="string",
        minLength=3,
        title="Stream",
        description="The stream to replay, e.g. import/docs.",
    ),
    "target": Param(
        "replay/docs",
        type="string",
        minLength=3,
        title="Target",
        description="The existing stream to append the replayed records to (target kinds "
        "stream and topology), or the table to land them into (kind table: repository).",
    ),
    "target_kind": Param(
        "stream",
        type="string",
        enum=list(TARGET_KINDS),
        title="Target kind",
        description="stream: append to target; topology: append to target, then drain the "
        "topology on it; table: land into the table target through its live writer.",
    ),
    "topology": Param(
        None,
        type=["null", "string"],
        title="Topology",
        description="With target kind topology: module:factory returning the Topology (or "
        "(Topology, Settings)) to drain; it must read target. Importable by the job's driver, "
        "from a module under [backfill] topologies of include/streamcore.toml.",
    ),
    **interval_params("replay"),
    "dry_run": dry_run_param(
        "Runs triggered by a person: count what would be replayed, write nothing "
        "(switch off to replay). Backfill and scheduled runs ignore it."
    ),
}


def backfill_arguments(params: dict[str, Any], context: Any) -> dict[str, list[str]]:
    """The replay step's arguments: the interval (Params, else the run's data interval), the
    target and its kind (the logs checked to exist, before Spark), `--dry-run` for a person's run
    that asks for it."""
    given = given_interval(params)
    window = ["--start", given[0], "--end", given[1]] if given else interval_arguments(context)
    stream, target = params["stream"].strip(), params["target"].strip()
    kind, topology = params["target_kind"], (params["topology"] or "").strip()
    _check_exist(stream, None if kind == "table" else target)
    dry_run = dry_run_for(params, context)
    argv = ["--stream", stream, *window, "--target", target]
    argv += ["--target-kind", kind] if kind != "stream" else []  # the job's default
    argv += [*(["--topology", topology] if topology else []), "--home", str(streamcore_home())]
    return {"replay": [*argv, *(["--dry-run"] if dry_run else [])]}


def _check_exist(stream: str, target: str | None) -> None:
    """`stream` exists, and the stream `target` unless it is None (a table target)."""
    names = [stream] if target is None else [stream, target]
    found, _ = logs_exist(names)
    if not found[stream]:
        raise AirflowFailException(
            f"stream {stream} does not exist; list the logs with `streamcore logs`"
        )
    if target is not None and not found[target]:
        raise AirflowFailException(
            f"target {target} does not exist: create it first, e.g. `streamcore create -l "
            f"{target} -p <the partitions of {stream}>`"
        )


@dag(
    dag_id="streamcore_backfill",
    schedule=CronTriggerTimetable("0 0 * * *", timezone="UTC", interval=timedelta(days=1)),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # replays into one target must not interleave
    tags=["streamcore", "backfill"],
    params=PARAMS,
    doc_md=DOC,
    default_args=default_args(retries=1),
)
def streamcore_backfill() -> None:
    job_tasks(
        "backfill",
        ["replay"],
        backfill_arguments,
        retries={"replay": 2},
        # The stream and the target are Params: the target's event goes through an alias.
        assets={
            "replay": StepAssets(
                assets(tables=["archive"]), [AssetAlias("streamcore_backfill_target")]
            )
        },
    )


streamcore_backfill()
