"""Audit entries from `audit/entries` into the Delta table `audit`: `jobs/audit.py` on a schedule
(batch mode) and over past data intervals (interval mode, what backfills run).

validate → land (spark-submit jobs/audit.py batch | interval) → summary, made by `job_tasks`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pendulum
from _assets import StepAssets, assets, runs_on_records, stream_asset
from _streamcore import (
    default_args,
    given_interval,
    interval_arguments,
    interval_params,
    job_tasks,
    streamcore_home,
)
from airflow.sdk import CronTriggerTimetable, Param, dag
from airflow.sdk.exceptions import AirflowFailException

from streamcore.config import load_config

# From include/streamcore.toml `[audit] schedule` (or STREAMCORE_AUDIT_SCHEDULE), read when the
# file is parsed: an operator changes the schedule there, and a bad one is this file's import
# error with the ConfigError's fix.
# Airflow imports DAG files under a generated name: the logger is named for the file's path.
logger = logging.getLogger("dags.streamcore_audit")

SCHEDULE = load_config().audit_schedule
# `[audit] runs_on = "records"` (STREAMCORE_AUDIT_RUNS_ON): a run starts when entries arrive.
RUNS_ON = runs_on_records("streamcore_audit")
STREAM, GROUP = "audit/entries", "audit/delta"  # jobs/audit.py's, not imported at parse time
PERIOD = f"{SCHEDULE.period.total_seconds() / 60:g} minutes"
BACKFILL = "backfill"  # DagRun.run_type of the runs `airflow backfill create` makes

DOC = f"""
# streamcore audit

Lands the audit entries of the stream `audit/entries` (published by `streamcore.audit` in the
application's transactions) in the Delta table **`audit`**, one row per event id, partitioned by
event day: `spark-submit jobs/audit.py batch | interval`.

- **validate** checks the Spark set-up, picks the mode (below) and checks the job's arguments
  with the job's own `check_args`. A bad run stops here, without retries, before Spark. A run
  with nothing to land ends here too: a batch run when the group has landed every entry (or
  nothing was ever published), an interval run when nothing was appended since its start;
  validate and the other tasks are *skipped*, the run succeeds, and no Spark job starts.
- **land** runs the job. Entries failing their expectations (unknown event type, event date in
  the future, ...) go to `quarantine`; more than `failure_threshold` of them fails the run and
  lands nothing.
- **summary** logs a table (entries landed, duplicates, quarantined, by event type, lag left,
  Delta version) and keeps it in `STREAMCORE_HOME/runs/audit/<dag id>+<run id>.json`.

**Schedule**: `{SCHEDULE.cron}` (UTC), from `[audit] schedule` in `include/streamcore.toml`
(or `STREAMCORE_AUDIT_SCHEDULE`). Each run's data interval is the {PERIOD} before it.
No catch-up; one run at a time.

**Runs on records** instead, with `[audit] runs_on = "records"` (or
`STREAMCORE_AUDIT_RUNS_ON=records`): no cron; the asset `audit/entries` is watched by a trigger
in Airflow's triggerer, which looks at the stream's end offsets every `[audit] watch_interval`
(default 2s) and starts a run (batch mode) when entries arrive past what group `audit/delta` has
landed. An idle stream starts no run. This DAG now runs: **{RUNS_ON.mode}**.

**Modes** (`mode`, default `auto`):
- **batch**: the entries group `audit/delta` has not landed yet (at most `batch_limit`), MERGEd
  on the event id exactly once, then the group's positions move. `auto` picks it for scheduled
  runs and manual runs without `start`/`end`.
- **interval**: the entries whose event date is in the run's data interval, or in
  [`start`, `end`) when given, that the table lacks are added (a MERGE on the event id that
  deletes nothing), so a rerun adds nothing, and no position moves. It finds them whatever their
  append time (it reads everything appended since the interval's start), so to rebuild a long
  range trigger one run with `start`/`end` over all of it. `auto` picks it for backfill runs and
  for runs given `start`/`end`.

**Backfill** past intervals (CLI, REST `POST /api/v2/backfills`, or the UI's *Backfill*): the
dates bound the runs' scheduled times, which end their intervals, so to replay [A, B) give
`--from-date` A + {PERIOD} and `--to-date` B, with `--reprocess-behavior completed`
(slots that had a scheduled run are rerun too) and `--max-active-runs 1`. Any interval: *Trigger*
with `start` and `end`.
"""

PARAMS = {
    "mode": Param(
        "auto",
        enum=["auto", "batch", "interval"],
        title="Mode",
        description="auto: batch for scheduled and manual runs, interval for backfill runs and "
        "runs given start/end. batch: land what group audit/delta has not landed yet. interval: "
        "add the entries dated in the data interval (or [start, end)) that the table lacks.",
    ),
    "failure_threshold": Param(
        0.0,
        type="number",
        minimum=0,
        maximum=1,
        title="Failure threshold",
        description="Largest share of entries failing expectations that still lets the run land "
        "the others (the failing ones go to quarantine). 0: a bad entry stops the run, and "
        "nothing lands until it is fixed or a run with a higher threshold quarantines it.",
    ),
    "batch_limit": Param(
        0,
        type="integer",
        minimum=0,
        title="Batch limit",
        description="batch mode: most entries this run lands (0 = all not landed yet); the rest "
        "waits for the next run.",
    ),
    **interval_params("land in interval mode"),
}


def audit_arguments(params: dict[str, Any], context: Any) -> dict[str, list[str]]:
    """The `land` step's arguments for the run's Params and type: batch or interval mode (see
    DOC). Parameters that do not go together raise AirflowFailException with the fix; the job's
    own `check_args` checks the rest in validate."""
    given = given_interval(params)
    start = given[0] if given else None
    backfill = context["dag_run"].run_type == BACKFILL
    mode = params["mode"]
    if mode == "auto":
        mode = "interval" if start or backfill else "batch"
    elif mode == "batch" and (start or backfill):
        raise AirflowFailException(
            "mode=batch lands the group's new entries, whatever the interval; a backfill run or "
            "start/end ask for an interval: set mode to auto or interval (or clear start/end)"
        )
    common = ["--failure-threshold", str(params["failure_threshold"])]
    common += ["--home", str(streamcore_home())]
    if mode == "batch":
        return {"land": ["batch", "--batch-size", str(params["batch_limit"]), *common]}
    if params["batch_limit"]:
        raise AirflowFailException(
            f"batch_limit={params['batch_limit']} only applies to batch mode, and this run lands "
            "an interval (all its entries): clear batch_limit, or set mode to batch"
        )
    window = ["--start", given[0], "--end", given[1]] if given else interval_arguments(context)
    return {"land": ["interval", *window, *common]}


def nothing_to_land(argvs: Mapping[str, list[str]]) -> str | None:
    """Why a batch run has nothing to land (its stream does not exist yet, or its group has
    landed every entry), or None. Asked by validate, without Spark: on a schedule of minutes most
    runs of a quiet system find nothing, and a spark-submit costs a minute of CPU. Interval runs
    are the job's to judge (`jobs.audit.empty_summary`, which validate asks next)."""
    if argvs["land"][0] != "batch":
        return None
    from streamcore.log import open_log_manager

    try:
        manager = open_log_manager(load_config(home=streamcore_home()))
        try:
            if not manager.exists(STREAM):
                return f"nothing to land: {STREAM} does not exist yet (nothing was published)"
            lag = manager.lag(STREAM, GROUP).lag
        finally:
            manager.close()
    except Exception as exc:  # a broker down, say: the job fails on it with its own message
        logger.warning(
            "cannot tell whether %s has entries to land (%s): running the job", STREAM, exc
        )
        return None
    return f"nothing to land: group {GROUP} has landed every entry of {STREAM}" if not lag else None


@dag(
    dag_id="streamcore_audit",
    # `interval`: each run's data interval is the period before it. Without it, Airflow 3 gives
    # cron schedules an empty data interval, which a backfill run could not replay.
    schedule=(
        [stream_asset(STREAM)]  # with its watcher
        if RUNS_ON.records
        else CronTriggerTimetable(SCHEDULE.cron, timezone="UTC", interval=SCHEDULE.period)
    ),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # batch runs share the group's positions: one at a time
    tags=["streamcore", "audit"],
    params=PARAMS,
    doc_md=DOC,
    default_args=default_args(retries=1),
)
def streamcore_audit() -> None:
    job_tasks(
        "audit",
        ["land"],
        audit_arguments,
        retries={"land": 2},  # both modes are crash-safe and idempotent
        skip=nothing_to_land,
        assets={
            "land": StepAssets(assets(streams=[STREAM]), assets(tables=["audit", "quarantine"]))
        },
    )


streamcore_audit()
