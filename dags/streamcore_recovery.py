"""Repair what failed, from the Airflow UI (docs/recovery.md): list and redrive dead letters, skip a
poison record, reset a group's positions, retry or purge outbox jobs, with a dry run by default
and an audit entry for every change.

validate → route → in_task (in the worker, through `streamcore.recovery`) or spark
(spark-submit jobs/recovery.py) → summary.
"""

from __future__ import annotations

import logging
from typing import Any

import pendulum
from _streamcore import (
    StreamcoreSparkSubmitOperator,
    check_job_arguments,
    check_spark_ready,
    default_args,
    dry_run_param,
    streamcore_home,
    write_run_record,
)
from airflow.sdk import Param, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from streamcore.recovery import DEAD_LETTER_ACTIONS, RECOVERY_ACTIONS, RESET_TO, field_text
from streamcore.runs import record_stem

# Airflow imports DAG files under a generated name: the logger is named for the file's path.
logger = logging.getLogger("dags.streamcore_recovery")

JOB = "recovery"  # jobs/recovery.py runs the DEAD_LETTER_ACTIONS, the ones that scale
SPARK_THRESHOLD = 1_000_000

DOC = f"""
# streamcore recovery

One place to see what failed and repair it (docs/recovery.md). Choose an **action**, fill the
Params it uses, give a **reason** (kept in the audit entry), and switch **dry run** off to change
something: a run is a dry run by default, which shows what would change and changes nothing.

Actions, each with an example of the Params it uses:

- **list**: dead letters of every `*/dlq-*` stream (or `stream`), counts per error class and per
  computation, the first 20, and the whole listing as Parquet under
  STREAMCORE_HOME/recovery/listings/. Example: `computation` enrich, `error` TimeoutError,
  `since` 2026-11-24T00:00:00Z.
- **redrive**: sends the selected dead letters back to the stream they failed on (or `to`),
  once: a rerun skips them. Example: `stream` app/dlq-enrich, `offsets` 0:12,0:15, `reason`
  price feed fixed, `dry_run` off.
- **skip**: moves `group` past the poison record at `offsets` (one `P:O`, where the group
  stands); restart its computation after. Example: `stream` app/orders, `group` enrich,
  `offsets` 0:42, `reason` order 42 is corrupt.
- **reset**: moves `group` on `stream` to the `end`, the `start`, an `offset` (`reset_value`
  P:O), a `date` (`reset_value` ISO 8601) or a `watermark` (`reset_value` an integer); the
  summary shows per partition what is re-read or skipped. Example: `stream` app/orders, `group`
  enrich, `reset_to` date, `reset_value` 2026-11-24T08:00:00Z.
- **outbox-errors**: the outbox jobs of `queue` in error, oldest first. Example: `queue`
  audit/entries.
- **outbox-retry**: sends the jobs of `queue` in error (or the one `job_id`) back to the
  workers. Example: `queue` audit/entries, `reason` relay fixed.
- **outbox-purge**: deletes done jobs finished over `older_than_s` seconds ago (of `queue`, or
  all). Example: `older_than_s` 604800, `reason` weekly clean-up.

A redrive selects explicitly: `offsets`, a filter (`computation`, `error`, `since`, `until`), or
`redrive_all`. `skip` and `reset` refuse while the group has live members (a running consumer
would commit over the move) unless `force` is on.

Steps:

- **validate** checks the Params and the selection against the logs (unknown streams and groups,
  offsets a stream does not hold, a reset into purged data: refused here, before Spark and before
  anything changes). For `skip` and `reset` it computes the move's preview.
- **route** runs `list` and `redrive` with Spark (`spark-submit jobs/recovery.py`) when the
  selection reads more than `spark_threshold` records (default {SPARK_THRESHOLD:,}), and every
  other run **in_task**, in the worker through `streamcore.recovery`. The threshold bounds the
  worker's memory: in process, every selected dead letter is held there (about 2.6 KB each, 2.6
  GB per million), while the Spark job brings only positions to its driver. Speed does not
  decide it: for a million dead letters the two engines take about the same time on two cores
  (a minute to redrive), and Spark spreads the work on a cluster. `skip`, `reset` and the
  outbox actions touch positions and rows, not records, and always run in the task.
- **summary** logs the before / after table (positions per partition, counts per target or error
  class) and keeps the run record under STREAMCORE_HOME/runs/recovery/.
"""


def _optional_text(title: str, description: str, *, date_time: bool = False) -> Any:
    """A Param a run may leave empty (None), shown as a text field."""
    schema = {"format": "date-time"} if date_time else {}
    return Param(None, type=["null", "string"], title=title, description=description, **schema)


PARAMS = {
    "action": Param(
        "list",
        type="string",
        enum=list(RECOVERY_ACTIONS),
        title="Action",
        description="What to do (each action, with an example, in the DAG's documentation).",
    ),
    "stream": _optional_text(
        "Stream",
        "list / redrive: a dead-letter stream (empty: all); skip / reset: the "
        "input stream of the group.",
    ),
    "group": _optional_text(
        "Group",
        "skip / reset: the consumer group (a computation's name).",
    ),
    "offsets": _optional_text(
        "Offsets",
        "list / redrive: PARTITION:OFFSET pairs of the one stream, comma-separated "
        "(0:12,0:15); skip: the one record to skip (0:42).",
    ),
    "computation": _optional_text(
        "Computation",
        "list / redrive: only dead letters of this computation.",
    ),
    "error": _optional_text(
        "Error",
        "list / redrive: the error class (ValueError), or text of the message.",
    ),
    "since": _optional_text(
        "Since",
        "list / redrive: last failure at or after this time (ISO 8601).",
        date_time=True,
    ),
    "until": _optional_text(
        "Until",
        "list / redrive: last failure before this time (ISO 8601).",
        date_time=True,
    ),
    "redrive_all": Param(
        False,
        type="boolean",
        title="Redrive all",
        description="redrive: every dead letter of the streams (no offsets or filter needed).",
    ),
    "to": _optional_text(
        "Redrive to",
        "redrive: append to this existing stream instead of the one each record failed on.",
    ),
    "reset_to": Param(
        "end",
        type="string",
        enum=list(RESET_TO),
        title="Reset to",
        description="reset: end, start, offset (reset_value P:O), date (reset_value ISO 8601) "
        "or watermark (reset_value an integer).",
    ),
    "reset_value": _optional_text(
        "Reset value",
        "reset: the offset (P:O), date or watermark that reset_to names.",
    ),
    "partition": Param(
        None,
        type=["null", "integer"],
        minimum=0,
        title="Partition",
        description="reset: only this partition (default: all).",
    ),
    "queue": _optional_text(
        "Queue",
        "outbox actions: the queue, e.g. audit/entries (purge: empty for all).",
    ),
    "job_id": _optional_text(
        "Job id",
        "outbox-retry: only this job.",
    ),
    "older_than_s": Param(
        604800,
        type="number",
        minimum=0,
        title="Older than (s)",
        description="outbox-purge: done jobs finished more than this many seconds ago.",
    ),
    "reason": Param(
        "",
        type="string",
        title="Reason",
        description="Why (kept in the audit entry); required unless dry run.",
    ),
    "force": Param(
        False,
        type="boolean",
        title="Force",
        description="skip / reset: even while the group has live members (they then overwrite "
        "the move at their next commit).",
    ),
    "dry_run": dry_run_param("Show what would change, change nothing (switch off to repair)."),
    "spark_threshold": Param(
        SPARK_THRESHOLD,
        type="integer",
        minimum=0,
        title="Spark threshold",
        description="list / redrive: selections reading more records than this run with Spark.",
    ),
}


def job_arguments(params: dict[str, Any], run_id: str) -> list[str]:
    """jobs/recovery.py's arguments for a `list` or `redrive` run (without `--engine`); a list
    writes its Parquet listing under STREAMCORE_HOME/recovery/listings/<run id>."""
    argv = ["--action", params["action"]]
    options = {
        "--stream": field_text(params, "stream"),
        "--computation": field_text(params, "computation"),
        "--error": field_text(params, "error"),
        "--since": field_text(params, "since"),
        "--until": field_text(params, "until"),
        "--offsets": field_text(params, "offsets"),
    }
    if params["action"] == "redrive":
        options |= {"--to": field_text(params, "to"), "--reason": field_text(params, "reason")}
        argv += ["--all"] if params.get("redrive_all") else []
        argv += ["--dry-run"] if params["dry_run"] else []
    else:
        listing = record_stem(run_id)
        options["--output"] = str(streamcore_home() / "recovery" / "listings" / listing)
    for option, value in options.items():
        if value is not None:
            argv += [option, str(value)]
    return [*argv, "--home", str(streamcore_home())]


def plan(params: dict[str, Any], run_id: str, user: str) -> dict[str, Any]:
    """Check a run's Params before anything runs and choose where it runs: {"engine": "spark" |
    "process" | "task", "argv": jobs/recovery.py's arguments or [], "records": what a dead-letter
    selection reads, "preview": a skip's or reset's dry run}. AirflowFailException names what is
    wrong and how to fix it."""
    from streamcore.recovery import RecoveryError, check_request, move_group

    action = params["action"]
    try:
        check_request(params)
        if action in DEAD_LETTER_ACTIONS:
            return _plan_dead_letters(params, run_id)
        if action in ("skip", "reset"):
            with _recovery(user) as recovery:
                outcome = move_group(recovery, params, dry_run=True)
            return {"engine": "task", "argv": [], "records": 0, "preview": outcome.to_dict()}
    except RecoveryError as exc:
        raise AirflowFailException(str(exc)) from None
    return {"engine": "task", "argv": [], "records": 0}


def _plan_dead_letters(params: dict[str, Any], run_id: str) -> dict[str, Any]:
    from jobs import recovery as job
    from streamcore.config import load_config
    from streamcore.log import open_log_manager

    argv = job_arguments(params, run_id)
    check_job_arguments(JOB, argv)
    args = job.build_parser().parse_args(argv)
    manager = open_log_manager(load_config(home=streamcore_home()))
    try:
        records = job.selected_records(args, manager)
    finally:
        manager.close()
    engine = "spark" if records > params["spark_threshold"] else "process"
    return {"engine": engine, "argv": argv, "records": records}


def _recovery(user: str) -> Any:
    from streamcore.config import load_config
    from streamcore.recovery import Recovery

    return Recovery(load_config(home=streamcore_home()), principal=user)


def run_in_task(params: dict[str, Any], planned: dict[str, Any], user: str) -> dict[str, Any]:
    """The run, in this worker: a small dead-letter selection through jobs/recovery.py's
    in-process engine, any other action through `streamcore.recovery`."""
    from streamcore.recovery import RecoveryError, run_action

    if params["action"] in DEAD_LETTER_ACTIONS:
        from jobs import recovery as job
        from jobs.spark.job import execute_job

        summary, code = execute_job(job, [*planned["argv"], "--engine", "process"])
        if code != 0:
            raise AirflowFailException(f"jobs/recovery.py failed: {summary.get('error')}")
        return summary
    try:
        with _recovery(user) as recovery:
            return run_action(recovery, params)
    except RecoveryError as exc:
        raise AirflowFailException(str(exc)) from None


def render_summary(params: dict[str, Any], planned: dict[str, Any], out: dict[str, Any]) -> str:
    """The before / after table of a run, for the summary task's log."""
    from streamcore.recovery import render_report

    return render_report(params, planned["engine"], out)


def _user(context: Any) -> str:
    """Who triggered the run (the audit entry's principal)."""
    return getattr(context["dag_run"], "triggering_user_name", None) or "airflow"


@dag(
    dag_id="streamcore_recovery",
    schedule=None,  # an operator's tool: every run is triggered by a person
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # two repairs of the same group or stream must not interleave
    tags=["streamcore", "recovery"],
    params=PARAMS,
    doc_md=DOC,
    default_args=default_args(retries=0),  # a repair is not retried blindly
)
def streamcore_recovery() -> None:
    # multiple_outputs: spark-submit pulls its arguments alone (`planned["argv"]`).
    @task(task_id="validate", retries=0, multiple_outputs=True)
    def validate() -> dict[str, Any]:
        context = get_current_context()
        planned = plan(dict(context["params"]), context["dag_run"].run_id, _user(context))
        if planned["engine"] == "spark":
            check_spark_ready()
        logger.info("recovery plan: %s", planned)
        return planned

    @task.branch(task_id="route", retries=0)
    def route(planned: dict[str, Any]) -> str:
        return "spark" if planned["engine"] == "spark" else "in_task"

    @task(task_id="in_task", retries=0)
    def in_task(planned: dict[str, Any]) -> dict[str, Any]:
        context = get_current_context()
        return run_in_task(dict(context["params"]), planned, _user(context))

    planned = validate()
    spark = StreamcoreSparkSubmitOperator(
        task_id="spark", job=JOB, application_args=planned["argv"], retries=0
    )
    local = in_task(planned)
    route(planned) >> [local, spark]

    @task(task_id="summary", retries=0, trigger_rule="none_failed_min_one_success")
    def summary(planned: dict[str, Any]) -> dict[str, Any]:
        context = get_current_context()
        params, ti = dict(context["params"]), context["ti"]
        out = ti.xcom_pull(task_ids="spark") or ti.xcom_pull(task_ids="in_task")
        report = render_summary(params, planned, out)
        run_id = context["dag_run"].run_id
        record = {
            "dag_id": context["dag"].dag_id,
            "run_id": run_id,
            "params": params,
            "plan": planned,
            "result": out,
            "report": report,
        }
        path = write_run_record(JOB, record["dag_id"], run_id, record)
        logger.info("recovery run %s\n%s\nrun record: %s", run_id, report, path)
        return record

    [local, spark] >> summary(planned)


streamcore_recovery()
