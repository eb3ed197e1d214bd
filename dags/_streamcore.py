"""What every streamcore DAG shares: where the project and its jobs are, a SparkSubmitOperator that
returns the job's JSON summary, and the checks a run does before any Spark job starts.

Imported by DAG files at parse time, so it imports no pyspark, no great_expectations and nothing
of `jobs.spark` at module level (DAG files must parse in well under a second).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import logging
import os
import re
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowFailException

logger = logging.getLogger("streamcore.dags")

PROJECT_ROOT = Path(__file__).resolve().parent.parent
JOBS_DIR = PROJECT_ROOT / "jobs"
SPARK_CONN_ID = "spark_default"
_MASTER = re.compile(r"^(local(\[(\*|\d+)(,\d+)?\])?|spark://\S+|yarn|k8s://\S+)$")


def default_args(retries: int = 1, retry_delay_s: int = 30) -> dict[str, Any]:
    """Retries are explicit on every streamcore task (DESIGN.md section 5)."""
    from datetime import timedelta

    return {
        "owner": "streamcore",
        "retries": retries,
        "retry_delay": timedelta(seconds=retry_delay_s),
    }


def streamcore_home() -> Path:
    """STREAMCORE_HOME as the jobs resolve it (environment, else ./data under the project)."""
    return Path(os.environ.get("STREAMCORE_HOME") or PROJECT_ROOT / "data").resolve()


def summary_line(line: str) -> dict[str, Any] | None:
    """The job summary a line carries: a JSON object with a `job` key, else None."""
    text = line.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) and "job" in value else None


class _SummaryHook(SparkSubmitHook):
    """Watches spark-submit's output for the job's one-line JSON summary. Spark's shutdown logs
    may follow it on the merged stream, so the last summary line wins, not the last line."""

    summary: dict[str, Any] | None = None

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        def watched() -> Iterator[Any]:
            for line in itr:
                found = summary_line(line)
                if found is not None:
                    self.summary = found
                yield line

        super()._process_spark_submit_log(watched())


class StreamcoreSparkSubmitOperator(SparkSubmitOperator):
    """spark-submit of a `jobs/` application with the jars, confs and environment of
    `jobs.spark.submit.submit_config()` (resolved when the task runs, not at parse time), and the
    job's JSON summary as return value (XCom). A job that exits 0 without a summary fails the
    task: its contract is to print one."""

    def __init__(self, *, job: str, **kwargs: Any) -> None:
        kwargs.setdefault("application", str(JOBS_DIR / f"{job}.py"))
        kwargs.setdefault("conn_id", SPARK_CONN_ID)
        kwargs.setdefault("name", f"streamcore-{job}")
        super().__init__(**kwargs)
        self.job = job

    def execute(self, context: Any) -> dict[str, Any]:
        from jobs.spark.submit import submit_config
        from streamcore.errors import StreamcoreError

        try:
            config = submit_config()
        except StreamcoreError as exc:
            raise AirflowFailException(str(exc)) from exc
        self.jars = ",".join(j for j in (config["jars"], self.jars) if j)
        self.conf = {
            **config["conf"],
            "spark.ui.showConsoleProgress": "false",  # progress bars would flood the task log
            **(self.conf or {}),
        }
        self.env_vars = {**config["env_vars"], **(self.env_vars or {})}
        super().execute(context)
        hook = self._hook
        summary = getattr(hook, "summary", None)
        if summary is None:
            raise AirflowFailException(
                f"{self.application} exited 0 but printed no JSON summary line; check the job's "
                "output above (its last stdout line must be the summary)"
            )
        self.log.info("%s summary: %s", self.job, json.dumps(summary, sort_keys=True))
        return summary

    def _get_hook(self) -> SparkSubmitHook:
        hook = super()._get_hook()
        hook.__class__ = _SummaryHook  # same state, plus the summary watcher of its log reader
        return hook


def check_spark_ready(conn_id: str = SPARK_CONN_ID) -> str:
    """The Spark master of `conn_id`, after checking that a job can be submitted at all:
    the connection exists with a master URL we know, spark-submit is on PATH, the jars exist.
    Raises AirflowFailException naming the problem and the fix."""
    from airflow.sdk import BaseHook

    from jobs.spark.submit import submit_config
    from streamcore.errors import StreamcoreError

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as exc:
        raise AirflowFailException(
            f"Airflow connection {conn_id!r} is missing ({exc}); run `scripts/airflow.sh init` "
            "(or add a connection of type spark with the master URL as host)"
        ) from exc
    master = conn.host or ""
    if not _MASTER.match(master):
        raise AirflowFailException(
            f"connection {conn_id!r} has master {master!r}; set its host to local[*] or "
            "spark://HOST:7077 (STREAMCORE_SPARK_MASTER=... scripts/airflow.sh init)"
        )
    if shutil.which("spark-submit") is None:
        raise AirflowFailException(
            "spark-submit is not on PATH of the Airflow worker; put the project's .venv/bin first "
            "on PATH (scripts/airflow.sh does) or install Spark"
        )
    try:
        submit_config()
    except StreamcoreError as exc:
        raise AirflowFailException(str(exc)) from exc
    return master


def check_job_arguments(job: str, argv: list[str]) -> None:
    """Runs the argument checks of `jobs/<job>.py` (its `build_parser()` and `check_args()`,
    which import no pyspark) on `argv`, so the DAG and the job cannot disagree about what is
    valid and a bad run stops before spark-submit. Raises AirflowFailException with the job's
    own message."""
    module = importlib.import_module(f"jobs.{job}")
    parser = module.build_parser()
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            module.check_args(parser, parser.parse_args(argv))
    except SystemExit as exc:
        if exc.code:
            message = errors.getvalue().strip().splitlines()
            raise AirflowFailException(
                f"jobs/{job}.py rejects `{' '.join(argv)}`: {message[-1] if message else exc}"
            ) from None


def run_record_path(job: str, run_id: str) -> Path:
    """Where a run's summary is kept: STREAMCORE_HOME/runs/<job>/<run id>.json."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).strip("_")
    return streamcore_home() / "runs" / job / f"{safe}.json"


def write_run_record(job: str, run_id: str, record: Mapping[str, Any]) -> Path:
    path = run_record_path(job, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(path)
    return path
