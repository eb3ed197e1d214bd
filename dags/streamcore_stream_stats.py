"""Stream statistics per day: `jobs/stream_stats.py` over the run's data interval.

validate → stats (spark-submit jobs/stream_stats.py) → summary, made by `job_tasks`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from _streamcore import default_args, interval_arguments, job_tasks, streamcore_home
from airflow.sdk import CronTriggerTimetable, Param, dag

DOC = """
# streamcore stream statistics

Counts, per partition, the records of a stream appended during the run's **data interval**
`[data_interval_start, data_interval_end)`: records, distinct keys, payload bytes and the offset
range (`spark-submit jobs/stream_stats.py --stream S --start ... --end ...`).

- **validate** checks the Spark set-up and the job's arguments with the job's own `check_args`
  (a bad `stream` fails here, without retries, before any Spark job). A day with no record
  skips the other tasks (the job's `empty_summary`, from the log's offsets): no spark-submit.
- **stats** runs the job; its JSON summary is the task's XCom. It only reads the stream.
- **summary** logs the counts and keeps the run record in
  `STREAMCORE_HOME/runs/stream_stats/<dag id>+<run id>.json`.

Schedule: daily at 00:00 UTC, for the day before (`[logical date - 1 day, logical date)`); no
catch-up. A past day: trigger with that logical date (the day after it), or
`airflow backfill create --dag-id streamcore_stream_stats --from-date A --to-date B`. A run
triggered without a logical date has no interval and fails in validate. `complete: false` in the
summary means part of the interval is older than the stream's retention (only in the archive).
"""

PARAMS = {
    "stream": Param(
        "import/docs",
        type="string",
        minLength=3,
        title="Stream",
        description="The log to count, e.g. import/docs (namespace/name).",
    ),
}


def stats_arguments(params: dict[str, Any], context: Any) -> dict[str, list[str]]:
    """The one step's arguments: the stream, the run's interval and STREAMCORE_HOME."""
    stream = ["--stream", params["stream"], *interval_arguments(context)]
    return {"stats": [*stream, "--home", str(streamcore_home())]}


@dag(
    dag_id="streamcore_stream_stats",
    schedule=CronTriggerTimetable("0 0 * * *", timezone="UTC", interval=timedelta(days=1)),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["streamcore", "stats"],
    params=PARAMS,
    doc_md=DOC,
    default_args=default_args(retries=1),
)
def streamcore_stream_stats() -> None:
    job_tasks("stream_stats", ["stats"], stats_arguments)


streamcore_stream_stats()
