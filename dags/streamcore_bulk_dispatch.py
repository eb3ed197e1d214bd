"""Start every submitted bulk command (docs/bulk.md, "Dispatch"): every `[bulk]
dispatch_interval`, claim the commands no run has (`streamcore bulk submit`, the Python API) in
the command store, then trigger one `streamcore_bulk_action` run per command, with the command's
id as Param and `bulk__<id>` as run id.
"""

from __future__ import annotations

import logging
from typing import Any

import pendulum
from _streamcore import default_args
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import dag, task
from airflow.sdk.exceptions import AirflowSkipException

from streamcore.bulk.dispatch import (
    BULK_DAG_ID,
    DISPATCH_DAG_ID,
    dispatch_interval,
    dispatch_run_id,
    dispatched_runner,
)
from streamcore.text import render_rows

# Airflow imports DAG files under a generated name: the logger is named for the file's path.
logger = logging.getLogger("dags.streamcore_bulk_dispatch")

INTERVAL = dispatch_interval()

DOC = f"""
# streamcore bulk dispatch

Starts the bulk commands submitted outside Airflow (`streamcore bulk submit`,
`BulkService.submit` in a program), as Nuxeo's scroller consumes its command stream
(docs/bulk.md, "Dispatch"). Every {INTERVAL.total_seconds():g} s (`[bulk] dispatch_interval`,
`STREAMCORE_BULK_DISPATCH_INTERVAL`), one run at a time:

- **claim** takes, in the command store, every command that no DAG run has claimed (a
  compare-and-set: of two dispatchers, one gets each command) and logs them. Nothing to start:
  the run is skipped. A command claimed over 5 minutes ago that is still SCHEDULED (a dispatcher
  stopped between its claim and the trigger) is offered again.
- **start** triggers `{BULK_DAG_ID}` once per command with the Param `command_id` and the run
  id `bulk__<command id>`. Airflow creates a run id once: a command offered again whose run
  exists is skipped, so no command starts twice.

Commands the bulk DAG submits itself (its form, the scheduled actions) are claimed by their own
run and never dispatched. Exclusive actions need nothing here: a second exclusive command on a
repository is refused when it is submitted. A run that fails leaves its command as it was: clear
the failed task of that `{BULK_DAG_ID}` run, or abort the command (`streamcore bulk abort`).
This DAG and `{BULK_DAG_ID}` are unpaused when Airflow first sees them.
"""


@dag(
    dag_id=DISPATCH_DAG_ID,
    schedule=INTERVAL,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    is_paused_upon_creation=False,
    tags=["streamcore", "bulk"],
    doc_md=DOC,
    default_args=default_args(retries=1, retry_delay_s=5),
)
def streamcore_bulk_dispatch() -> None:
    @task(task_id="claim", retries=1)
    def claim() -> list[dict[str, Any]]:
        from streamcore.bulk import BulkService

        with BulkService() as service:
            started = service.dispatch(dispatched_runner)
            statuses = [service.status(command_id) for command_id, _ in started]
        if not started:
            raise AirflowSkipException("no bulk command waits for a run")
        rows = [
            (status.command_id, f"{status.action} ({status.state.value}) -> {runner}")
            for status, (_, runner) in zip(statuses, started, strict=True)
        ]
        logger.info("starting %d bulk command(s)\n%s", len(started), render_rows(rows))
        return [
            {"trigger_run_id": dispatch_run_id(command_id), "conf": {"command_id": command_id}}
            for command_id, _ in started
        ]

    TriggerDagRunOperator.partial(
        task_id="start",
        trigger_dag_id=BULK_DAG_ID,
        skip_when_already_exists=True,
        retries=2,
    ).expand_kwargs(claim())


streamcore_bulk_dispatch()
