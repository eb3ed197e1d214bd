"""Run a bulk action over the documents of `repository` that match a query, from the Airflow UI
(docs/bulk.md): validate and submit → run (spark-submit jobs/bulk_action.py) → summary, made
by `job_tasks`.
"""

from __future__ import annotations

from typing import Any

import pendulum
from _streamcore import default_args, job_tasks, render_bulk_summary, submit_bulk_command
from airflow.sdk import Param, dag

from streamcore.bulk.registry import actions_for

ACTIONS = actions_for()

DOC = f"""
# streamcore bulk action

Runs an action over every document of the Delta table `repository` that matches a query
(docs/bulk.md): the documents are scrolled into buckets of ids, each bucket is processed by
batches (one Delta MERGE each), and the command's status moves SCHEDULED → SCROLLING_RUNNING →
RUNNING → COMPLETED (or ABORTED).

Steps:

- **validate** checks the Params before Spark: the action, its `params` against the action's
  JSON schema, the `query` (a Spark SQL boolean predicate over `repository` columns: anything
  else, such as a subquery, an unknown column or a function outside the allow-list, is refused
  with the reason), the sizes. It then submits the command; its id comes from this run, so a
  retried or cleared run never submits twice. An exclusive action already running on the
  repository fails here.
- **run** scrolls and processes the command; its log shows a progress line per bucket (done,
  rate, ETA). `streamcore bulk status <id>` shows the same from a shell, and
  `streamcore bulk abort <id>` stops it between buckets.
- **summary** logs the final status (state, total, processed, timings, result).

Actions: {", ".join(f"`{name}`" for name in ACTIONS.names())}. Query example:
`type = 'Note' AND modified < current_timestamp() - INTERVAL 30 DAYS`.
"""

PARAMS = {
    "action": Param(
        "setProperties",
        type="string",
        enum=ACTIONS.names(),
        title="Action",
        description="The registered action to run (docs/bulk.md, Actions).",
    ),
    "query": Param(
        "type = 'Note'",
        type="string",
        minLength=1,
        title="Query",
        description="A Spark SQL boolean predicate over repository columns, e.g. type = 'Note' "
        "AND modified < current_timestamp() - INTERVAL 30 DAYS.",
    ),
    "params": Param(
        {},
        type="object",
        title="Action params",
        description="The action's params, a JSON object checked against its schema, e.g. "
        '{"properties": {"reviewed": "yes"}} for setProperties.',
    ),
    "bucket_size": Param(
        None,
        type=["null", "integer"],
        minimum=1,
        title="Bucket size",
        description="Ids per bucket (the unit of progress and abort); empty: the action's default.",
    ),
    "batch_size": Param(
        None,
        type=["null", "integer"],
        minimum=1,
        title="Batch size",
        description="Documents per MERGE, at most the bucket size; empty: the action's default.",
    ),
    "query_limit": Param(
        None,
        type=["null", "integer"],
        minimum=0,
        title="Query limit",
        description="Process at most this many documents (0: no limit); empty: the action's "
        "default.",
    ),
}


def bulk_arguments(params: dict[str, Any], context: Any) -> dict[str, list[str]]:
    """Check and submit the command of this run (see DOC); the run step's arguments."""
    sizes = {k: params[k] for k in ("bucket_size", "batch_size", "query_limit")}
    return submit_bulk_command(
        context, params["action"], params["query"], params["params"], sizes=sizes
    )


@dag(
    dag_id="streamcore_bulk_action",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["streamcore", "bulk"],
    params=PARAMS,
    doc_md=DOC,
    default_args=default_args(retries=1),
)
def streamcore_bulk_action() -> None:
    job_tasks(
        "bulk_action", ["run"], bulk_arguments, retries={"run": 2}, render=render_bulk_summary
    )


streamcore_bulk_action()
