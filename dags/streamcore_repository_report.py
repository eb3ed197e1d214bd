"""A report on the Delta table `repository` each time documents land in it: data-aware
scheduling on the table's asset (docs/airflow.md, "Assets and event-driven runs").

report (one task, no Spark) → the run record under STREAMCORE_HOME/runs/repository_report/.
"""

from __future__ import annotations

import logging
from typing import Any

import pendulum
from _assets import table_asset
from _streamcore import default_args, write_run_record
from airflow.sdk import dag, get_current_context, task

# Airflow imports DAG files under a generated name: the logger is named for the file's path.
logger = logging.getLogger("dags.streamcore_repository_report")

REPOSITORY = table_asset("repository")

DOC = """
# streamcore repository report

Runs whenever the Delta table **`repository`** has changed: its schedule is the table's Airflow
asset, so each successful importer `consume`, bulk action or repository backfill queues a run
(several events before the run starts make one run). Nothing runs on a clock, and an idle
repository starts nothing.

- **report** reads the table's current snapshot from its Delta log without Spark (version,
  files, rows, bytes: `streamcore tables` shows the same) and lists the asset events that
  started the run: for each, the DAG run that emitted it and its batch (number, offset ranges
  per partition, rows landed and quarantined, Delta version). It keeps both in
  `STREAMCORE_HOME/runs/repository_report/<dag id>+<run id>.json` and logs a table.

An example of data-aware scheduling: copy it for a DAG of your own that should follow the
table (an export, a search index refresh), with `schedule=[table_asset("repository")]`.
"""


def event_summary(event: Any) -> dict[str, Any]:
    """One triggering asset event as JSON: its source run and its extra (the batch)."""
    return {
        "asset": event.asset.name,
        "timestamp": event.timestamp.isoformat() if event.timestamp else None,
        "source_dag_id": event.source_dag_id,
        "source_run_id": event.source_run_id,
        "source_task_id": event.source_task_id,
        "extra": dict(event.extra or {}),
    }


@dag(
    dag_id="streamcore_repository_report",
    schedule=[REPOSITORY],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["streamcore", "report"],
    doc_md=DOC,
    default_args=default_args(retries=1),
)
def streamcore_repository_report() -> None:
    @task(task_id="report", retries=1, inlets=[REPOSITORY])
    def report() -> dict[str, Any]:
        from streamcore.config import load_config
        from streamcore.table_status import table_status
        from streamcore.tables import table_spec
        from streamcore.text import render_rows

        context = get_current_context()
        events = [
            event_summary(event)
            for found in context["triggering_asset_events"].values()
            for event in found
        ]
        status = table_status(table_spec("repository", load_config())).to_json()
        dag_id, run_id = context["dag"].dag_id, context["dag_run"].run_id
        record = {"dag_id": dag_id, "run_id": run_id, "table": status, "events": events}
        path = write_run_record("repository_report", dag_id, run_id, record)
        rows = [(key, str(status[key])) for key in ("version", "files", "rows", "bytes")]
        rows += [
            (f"event {e['source_dag_id']}/{e['source_task_id']}", _batch(e["extra"]))
            for e in events
        ]
        logger.info(
            "repository after %d event(s)\n%s\nrun record: %s", len(events), render_rows(rows), path
        )
        return record

    report()


def _batch(extra: dict[str, Any]) -> str:
    """An event's batch in a few words: batch number, rows landed and quarantined, version."""
    return (
        f"batch {extra.get('batch', '-')}, {extra.get('rows', 0):,} rows, "
        f"{extra.get('quarantined', 0):,} quarantined, version {extra.get('delta_version', '-')}"
    )


streamcore_repository_report()
