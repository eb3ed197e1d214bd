"""Run a bulk action over the documents of `repository` that match a query, from the Airflow UI
(docs/bulk.md): validate and submit → run (spark-submit jobs/bulk_action.py) → summary, made
by `job_tasks`. A run given a `command_id` runs that submitted command instead: how the
dispatcher (`streamcore_bulk_dispatch`) starts the commands of `streamcore bulk submit`.
"""

from __future__ import annotations

import logging
from typing import Any

import pendulum
from _assets import StepAssets, assets
from _streamcore import (
    default_args,
    job_tasks,
    streamcore_home,
    submit_bulk_command,
)
from airflow.sdk import Param, dag
from airflow.sdk.exceptions import AirflowFailException

from streamcore.bulk.dispatch import BULK_DAG_ID, DISPATCH_DAG_ID, runner
from streamcore.bulk.model import COMMAND_ID_PATTERN
from streamcore.bulk.registry import actions_for

# Airflow imports DAG files under a generated name: the logger is named for the file's path.
logger = logging.getLogger("dags.streamcore_bulk_action")

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

Given a `command_id`, a run runs that submitted command (`streamcore bulk submit`, the Python
API) and ignores the other Params: validate claims the command for this run (a command runs in
one run; another run's claim fails validate). The dispatcher DAG `{DISPATCH_DAG_ID}` starts
these runs (run id `bulk__<command id>`); a person may start one the same way.

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
    "command_id": Param(
        None,
        type=["null", "string"],
        pattern=COMMAND_ID_PATTERN,
        title="Command id",
        description="Run this submitted command (streamcore bulk list) instead of one from the "
        "Params above, which are then ignored; empty: submit one from them.",
    ),
}


def bulk_arguments(params: dict[str, Any], context: Any) -> dict[str, list[str]]:
    """Check and submit the command of this run, or claim the submitted `command_id` for it
    (see DOC); the run step's arguments."""
    if params.get("command_id"):
        return claim_command(context, params["command_id"])
    sizes = {k: params[k] for k in ("bucket_size", "batch_size", "query_limit")}
    return submit_bulk_command(
        context, params["action"], params["query"], params["params"], sizes=sizes
    )


def claim_command(context: Any, command_id: str) -> dict[str, list[str]]:
    """Claim the submitted command `command_id` for this run: a command runs in one run, so a
    claim by another run fails the task with the reason, before Spark."""
    from streamcore.bulk import BulkError, BulkService

    run = context["dag_run"]
    try:
        with BulkService() as service:
            service.claim(command_id, runner(run.dag_id, run.run_id))
            status = service.status(command_id)
    except BulkError as exc:
        raise AirflowFailException(str(exc)) from None
    logger.info("bulk command %s (%s) is %s", command_id, status.action, status.state.value)
    return {"run": ["--command-id", command_id, "--home", str(streamcore_home())]}


@dag(
    dag_id=BULK_DAG_ID,
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    # Unpaused from the start: the dispatcher's runs must start without a person (a DAG without
    # a schedule runs nothing by itself).
    is_paused_upon_creation=False,
    tags=["streamcore", "bulk"],
    params=PARAMS,
    doc_md=DOC,
    default_args=default_args(retries=1),
)
def streamcore_bulk_action() -> None:
    job_tasks(
        "bulk_action",
        ["run"],
        bulk_arguments,
        retries={"run": 2},
        assets={
            "run": StepAssets(
                assets(tables=["repository"]), assets(tables=["repository", "bulk_status"])
            )
        },
    )


streamcore_bulk_action()
