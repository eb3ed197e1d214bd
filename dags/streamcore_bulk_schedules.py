"""Scheduled bulk actions: one DAG per `[bulk.schedules.<name>]` table of the configuration
(`streamcore.bulk.schedules`), so an operator adds a schedule without Python. Each DAG is
validate and submit → run (spark-submit jobs/bulk_action.py) → summary, made by `job_tasks`,
with the schedule's values as Params.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from _streamcore import default_args, job_tasks, submit_bulk_command
from airflow.sdk import CronTriggerTimetable, Param, dag

from streamcore.bulk.schedules import Schedule, schedules_for

_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}


def _doc(schedule: Schedule) -> str:
    values = "".join(f"- `{k}` = `{v!r}`\n" for k, v in schedule.values.items()) or "none\n"
    return f"""
# streamcore bulk schedule `{schedule.name}`

{schedule.doc or "A bulk action on a schedule."}

A scheduled bulk action (docs/bulk.md, "Schedules"), declared in the configuration as
`[bulk.schedules.{schedule.name}]`: every run submits the command below and runs it
(`jobs/bulk_action.py`), as the `streamcore_bulk_action` DAG does for a person.

- **schedule**: `{schedule.schedule.cron}` (UTC), no catch-up, one run at a time
- **action**: `{schedule.action}`, params `{schedule.params}`
- **query**: `{schedule.query}`

Values (the query's `:placeholders`; the Params of this DAG: a scheduled run takes them as
written, a person may trigger a run with others):

{values}
validate binds them into the query as literals and checks the command before Spark.
"""


def _params(schedule: Schedule) -> dict[str, Any]:
    return {
        name: Param(
            value,
            type=_JSON_TYPES[type(value)],
            title=name,
            description=f"Bound to :{name} in the query `{schedule.query}`.",
        )
        for name, value in schedule.values.items()
    }


def scheduled_dag(schedule: Schedule) -> Any:
    """The DAG of `schedule`."""

    def arguments(params: dict[str, Any], context: Any) -> dict[str, list[str]]:
        sizes = {
            "bucket_size": schedule.bucket_size,
            "batch_size": schedule.batch_size,
            "query_limit": schedule.query_limit,
        }
        values = {name: params[name] for name in schedule.values}
        return submit_bulk_command(
            context, schedule.action, schedule.query, schedule.params, values=values, sizes=sizes
        )

    @dag(
        dag_id=schedule.dag_id,
        schedule=CronTriggerTimetable(
            schedule.schedule.cron, timezone="UTC", interval=schedule.schedule.period
        ),
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        max_active_runs=1,
        dagrun_timeout=timedelta(hours=12),
        tags=["streamcore", "bulk", "schedule"],
        params=_params(schedule),
        doc_md=_doc(schedule),
        default_args=default_args(retries=1),
    )
    def scheduled() -> None:
        job_tasks("bulk_action", ["run"], arguments, retries={"run": 2})

    return scheduled()


for _schedule in schedules_for():
    globals()[_schedule.dag_id] = scheduled_dag(_schedule)
