"""What every streamcore DAG shares: where the project and its jobs are, the job task (in the shape
of an Airflow provider: `StreamcoreJobHook` owns the job's process, the thin
`StreamcoreSparkSubmitOperator` delegates to it and returns the job's JSON summary), the checks a
run does before any Spark job starts, and `job_tasks`, the validate → steps → summary factory.

When the connection `spark_default` names a Spark Connect server (host `sc://HOST:PORT`, started
by `make spark-connect`), the job tasks run their job in the task's own process as a thin client
of that server instead of spark-submit: no JVM start per task (docs/spark-connect.md).

Imported by DAG files at parse time, so it imports no pyspark, no great_expectations and nothing
of `jobs.spark` at module level (DAG files must parse in well under a second).

Kept whole (over 600 lines): it is the one contract between the DAG files and the jobs. The job
task (hook and operator), the checks a run makes before Spark and `job_tasks`, which wires them
into validate → steps → summary, change together whenever a job's interface does.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
import shutil
import socket
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import BaseHook, BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from streamcore.config import project_root, streamcore_home
from streamcore.runs import record_path

# Airflow imports DAG files under a generated name: the logger is named for the file's path.
logger = logging.getLogger("dags._streamcore")

JOBS_DIR = project_root() / "jobs"
SPARK_CONN_ID = "spark_default"
_MASTER = re.compile(r"^(local(\[(\*|\d+)(,\d+)?\])?|spark://\S+|yarn|k8s://\S+|sc://\S+)$")
CONNECT_PORT = 15002  # Spark Connect's default port, when the connection gives none


def default_args(retries: int = 1, retry_delay_s: int = 30) -> dict[str, Any]:
    """Retries are explicit on every streamcore task (docs/design.md, "Conventions")."""
    from datetime import timedelta

    return {
        "owner": "streamcore",
        "retries": retries,
        "retry_delay": timedelta(seconds=retry_delay_s),
    }


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


class _SummaryWatch:
    """The hook's logger, watching each message for the job's one-line JSON summary."""

    def __init__(self, logger: Any, hook: StreamcoreSparkSubmitHook) -> None:
        self._logger, self._hook = logger, hook

    def info(self, msg: Any, *args: Any, **kwargs: Any) -> Any:
        if not args and isinstance(msg, str):
            found = summary_line(msg)
            if found is not None:
                self._hook.summary = found
        return self._logger.info(msg, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger, name)


class StreamcoreSparkSubmitHook(SparkSubmitHook):
    """The provider's spark-submit hook (connection, command, process, kill) that also keeps the
    job's one-line JSON summary in `summary`. The hook logs every line of spark-submit's output
    through its public `log`, so the summary is read there: no private method of the provider is
    overridden. Spark's shutdown logs may follow the summary on the merged stream, so the last
    summary line wins, not the last line."""

    summary: dict[str, Any] | None = None

    @property
    def log(self) -> Any:
        return _SummaryWatch(super().log, self)


class StreamcoreJobHook(BaseHook):
    """Runs `jobs/<job>.py` and returns its JSON summary; owns the job's process.

    When the connection `conn_id` names a Spark Connect server (`sc://`), the job runs in this
    process as a thin client of it (`jobs.spark.job.execute_job`: the same job code, summary and
    exit codes as under spark-submit). Otherwise `StreamcoreSparkSubmitHook` spark-submits it
    with the jars, confs and environment of `jobs.spark.submit.submit_config()` (resolved when
    the task runs, not at parse time) ahead of `jars`, `conf` and `env_vars`.

    :raises AirflowFailException: the set-up is wrong, the job refuses its arguments, or it exits
        0 without a summary (its contract is to print one): a retry cannot help.
    :raises AirflowException: the job failed (retried as a failed spark-submit is).
    """

    def __init__(
        self,
        *,
        job: str,
        application: str,
        application_args: Sequence[Any] | None = None,
        conn_id: str = SPARK_CONN_ID,
        name: str | None = None,
        conf: Mapping[str, Any] | None = None,
        jars: str | None = None,
        env_vars: Mapping[str, Any] | None = None,
        driver_memory: str | None = None,
    ) -> None:
        super().__init__()
        self.job, self.application, self.conn_id = job, application, conn_id
        self.application_args = [str(a) for a in application_args or []]
        self.name = name or f"streamcore-{job}"
        self.conf, self.jars, self.env_vars = dict(conf or {}), jars, dict(env_vars or {})
        self.driver_memory = driver_memory
        self.submit_hook: StreamcoreSparkSubmitHook | None = None
        # The job's last summary, kept when it failed too: the task's lineage events carry it.
        self.summary: dict[str, Any] | None = None

    def get_conn(self) -> str:
        """The master URL of the connection (see `connection_master`)."""
        return connection_master(self.conn_id)

    def run(self) -> dict[str, Any]:
        """Run the job; its summary."""
        remote = connect_url(self.conn_id)
        if remote is not None:
            return self.run_on_connect(remote)
        return self.run_spark_submit()

    def run_spark_submit(self) -> dict[str, Any]:
        """spark-submit of the job (client mode: the driver's stdout is spark-submit's)."""
        from jobs.spark.submit import submit_config
        from streamcore.errors import StreamcoreError

        try:
            config = submit_config()
        except StreamcoreError as exc:
            raise AirflowFailException(str(exc)) from exc
        self.submit_hook = StreamcoreSparkSubmitHook(
            conf={
                **config["conf"],
                "spark.ui.showConsoleProgress": "false",  # progress bars would flood the task log
                **self.conf,
            },
            conn_id=self.conn_id,
            jars=",".join(j for j in (config["jars"], self.jars) if j),
            name=self.name,
            application_args=self.application_args,
            env_vars={**config["env_vars"], **self.env_vars},
            driver_memory=self.driver_memory,
        )
        try:
            self.submit_hook.submit(self.application)
        finally:
            self.summary = self.submit_hook.summary
        summary = self.summary
        if summary is None:
            raise AirflowFailException(
                f"{self.application} exited 0 but printed no JSON summary line; check the job's "
                "output above (its last stdout line must be the summary)"
            )
        return summary

    def run_on_connect(self, url: str) -> dict[str, Any]:
        """The job in this process, on a Spark Connect session of `url`. A failed job raises
        AirflowException with its error; refused arguments AirflowFailException."""
        from jobs.spark.job import execute_job
        from jobs.spark.session import REMOTE_ENV

        module = importlib.import_module(f"jobs.{self.job}")
        argv = self.application_args
        self.log.info("running jobs/%s.py %s on Spark Connect %s", self.job, " ".join(argv), url)
        saved = {k: os.environ.get(k) for k in (REMOTE_ENV, *self.env_vars)}
        os.environ.update({**self.env_vars, REMOTE_ENV: url})
        try:
            summary, code = execute_job(module, argv)
            summary["spark_connect"] = url  # where it ran, in the run record
            self.summary = summary
        except SystemExit as exc:  # argparse refused the arguments (its message is logged)
            raise AirflowFailException(
                f"jobs/{self.job}.py rejects `{' '.join(argv)}` (exit {exc.code}); see above"
            ) from None
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        if code != 0:
            self.log.info(
                "%s summary: %s", self.job, json.dumps(summary, sort_keys=True, default=str)
            )
            raise AirflowException(f"jobs/{self.job}.py failed on {url}: {summary.get('error')}")
        return summary

    def on_kill(self) -> None:
        """Stop spark-submit if it runs (a job on Spark Connect stops with the task's process)."""
        if self.submit_hook is not None:
            self.submit_hook.on_kill()


class StreamcoreSparkSubmitOperator(BaseOperator):
    """Runs `jobs/<job>.py` (`StreamcoreJobHook`: spark-submit, or Spark Connect when the
    connection names a server) and returns the job's JSON summary (XCom).

    :param job: the job module's name under `jobs/` (`importer`, `audit`...)
    :param application_args: the job's arguments (templated)
    :param application: the application spark-submit runs (default `jobs/<job>.py`; templated)
    :param conn_id: the Spark connection (default `spark_default`)
    :param name: the Spark application's name (default `streamcore-<job>`; templated)
    :param conf: Spark confs, after the project's (templated)
    :param jars: jars, after the project's (templated)
    :param env_vars: environment of the job, after the project's (templated)
    :param driver_memory: the driver's memory under spark-submit, e.g. `2g` (default: Spark's)
    """

    template_fields: Sequence[str] = (
        "application",
        "application_args",
        "conf",
        "jars",
        "env_vars",
        "name",
    )

    def __init__(
        self,
        *,
        job: str,
        application_args: Sequence[Any] | None = None,
        application: str | None = None,
        conn_id: str = SPARK_CONN_ID,
        name: str | None = None,
        conf: Mapping[str, Any] | None = None,
        jars: str | None = None,
        env_vars: Mapping[str, Any] | None = None,
        driver_memory: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.application_args = application_args
        self.application = application or str(JOBS_DIR / f"{job}.py")
        self.conn_id = conn_id
        self.name = name or f"streamcore-{job}"
        self.conf, self.jars, self.env_vars = conf, jars, env_vars
        self.driver_memory = driver_memory
        self.hook: StreamcoreJobHook | None = None

    def execute(self, context: Any) -> dict[str, Any]:
        self.hook = StreamcoreJobHook(
            job=self.job,
            application=self.application,
            application_args=self.application_args,
            conn_id=self.conn_id,
            name=self.name,
            conf=_with_openlineage_parent(self.conf, context),
            jars=self.jars,
            env_vars=self.env_vars,
            driver_memory=self.driver_memory,
        )
        summary = self.hook.run()
        self.log.info("%s summary: %s", self.job, json.dumps(summary, sort_keys=True, default=str))
        if self.outlets:
            from _assets import record_asset_events

            record_asset_events(context, self.outlets, summary)
        return summary

    def on_kill(self) -> None:
        if self.hook is not None:
            self.hook.on_kill()

    # OpenLineage (the provider calls these when it is enabled; dags/_lineage.py): the task's
    # inlets and outlets as datasets, and once the job has printed its summary, its facets.
    # The provider asks on_complete for a failed task too (no on_failure): a failed job's
    # summary carries what it got to, the validation that refused the batch included.
    def get_openlineage_facets_on_start(self) -> Any:
        from _lineage import job_lineage

        return job_lineage(self.job, self.inlets, self.outlets)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        from _lineage import job_lineage

        summary = self.hook.summary if self.hook is not None else None
        return job_lineage(self.job, self.inlets, self.outlets, summary)


def _with_openlineage_parent(conf: Mapping[str, Any] | None, context: Any) -> dict[str, Any]:
    """`conf` with the OpenLineage parent of the Spark application (`spark.openlineage.parent*`:
    this task's job and run) when `[openlineage] spark_inject_parent_job_info` is on, as the
    provider's own SparkSubmitOperator does: openlineage-spark's events then name this task's
    run as their parent (docs/airflow.md, "Lineage"). The confs are inert without the listener."""
    from airflow.providers.common.compat.sdk import conf as airflow_conf

    found = dict(conf or {})
    if not airflow_conf.getboolean("openlineage", "spark_inject_parent_job_info", fallback=False):
        return found
    from airflow.providers.common.compat.openlineage.utils.spark import (
        inject_parent_job_information_into_spark_properties,
    )

    return dict(inject_parent_job_information_into_spark_properties(found, context))


def connection_master(conn_id: str = SPARK_CONN_ID) -> str:
    """The master URL of the Airflow connection `conn_id` (its host; an `sc://` host without a
    port takes the connection's port, else 15002). AirflowFailException if it is missing."""
    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as exc:
        raise AirflowFailException(
            f"Airflow connection {conn_id!r} is missing ({exc}); run `scripts/airflow.sh init` "
            "(or add a connection of type spark with the master URL as host)"
        ) from exc
    master = conn.host or ""
    parts = re.match(r"^sc://([^/:;]+)(:\d+)?(.*)$", master)
    if parts is not None and parts.group(2) is None:
        master = f"sc://{parts.group(1)}:{conn.port or CONNECT_PORT}{parts.group(3)}"
    return master


def connect_url(conn_id: str = SPARK_CONN_ID) -> str | None:
    """The Spark Connect URL of `conn_id` if its host is one (`sc://HOST:PORT`), else None."""
    master = connection_master(conn_id)
    return master if master.startswith("sc://") else None


def check_spark_ready(conn_id: str = SPARK_CONN_ID) -> str:
    """The Spark master of `conn_id`, after checking that a job can be submitted at all:
    the connection exists with a master URL we know, spark-submit is on PATH, the jars exist;
    for a Spark Connect URL, that its server answers. Raises AirflowFailException naming the
    problem and the fix."""
    from jobs.spark.submit import submit_config
    from streamcore.errors import StreamcoreError

    master = connection_master(conn_id)
    if not _MASTER.match(master):
        raise AirflowFailException(
            f"connection {conn_id!r} has master {master!r}; set its host to local[*], "
            "spark://HOST:7077 or sc://HOST:15002 (STREAMCORE_SPARK_MASTER=... "
            "scripts/airflow.sh init)"
        )
    if master.startswith("sc://"):
        _check_connect_server(conn_id, master)
        return master
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


def _check_connect_server(conn_id: str, url: str) -> None:
    """AirflowFailException unless the Spark Connect server of `url` accepts connections."""
    found = re.match(r"^sc://([^:/]+):(\d+)", url)
    if found is None:
        raise AirflowFailException(
            f"connection {conn_id!r} has the Spark Connect URL {url!r}; give it as "
            "sc://HOST:PORT, e.g. sc://127.0.0.1:15002"
        )
    host, port = found.group(1), int(found.group(2))
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as exc:
        raise AirflowFailException(
            f"no Spark Connect server answers at {url} (connection {conn_id!r}: {exc}); start it "
            "with `make spark-connect` (scripts/spark-connect.sh start), or point the connection "
            "at local[*] to use spark-submit"
        ) from None


def check_job_arguments(job: str, argv: list[str]) -> None:
    """Runs the argument checks of `jobs/<job>.py` (its `build_parser()` and `check_args()`,
    which import no pyspark) on `argv`, so the DAG and the job cannot disagree about what is
    valid and a bad run stops before spark-submit. Raises AirflowFailException with the job's
    own message."""
    from jobs.spark.job import argument_errors

    error = argument_errors(importlib.import_module(f"jobs.{job}"), argv)
    if error is not None:
        raise AirflowFailException(f"jobs/{job}.py rejects `{' '.join(argv)}`: {error}")


def empty_steps(job: str, argvs: Mapping[str, list[str]]) -> str | None:
    """Why no step of the run has anything to do, from `jobs/<job>.py`'s own `empty_summary`
    (an interval with no record, told without Spark: jobs.spark.job.empty_run), or None. A
    refusal the job makes before Spark (an archive with a hole) fails the task for good; a
    backend that cannot be asked leaves the decision to the job."""
    from jobs.spark.job import JobError, empty_run
    from streamcore.errors import StreamcoreError

    module = importlib.import_module(f"jobs.{job}")
    reasons = []
    for step, argv in argvs.items():
        try:
            found = empty_run(module, argv)
        except JobError as exc:
            raise AirflowFailException(f"jobs/{job}.py {step}: {exc}") from None
        except StreamcoreError as exc:  # a broker down, say: the job fails on it with retries
            logger.warning("cannot tell whether %s %s has anything to do (%s)", job, step, exc)
            return None
        if found is None:
            return None
        logger.info("%s %s has nothing to do: %s", job, step, json.dumps(found, default=str))
        reasons.append(f"{step}: {found['reason']}")
    return "; ".join(reasons) if reasons else None


def write_run_record(job: str, dag_id: str, run_id: str, record: Mapping[str, Any]) -> Path:
    """Keeps the summary of run `run_id` of DAG `dag_id` where `streamcore.runs` says (and the UI
    plugin looks): STREAMCORE_HOME/runs/<job>/<dag id>+<run id>.json."""
    path = record_path(job, dag_id, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(path)
    return path


# -- the job-task factory --------------------------------------------------------------------------
Arguments = Callable[[dict[str, Any], Any], Mapping[str, list[str]]]
"""(the run's params, its Airflow context) -> the arguments of each spark-submit step, in order."""


def interval_arguments(context: Any) -> list[str]:
    """`--start ISO --end ISO`: the run's data interval `[start, end)` as job arguments. A run
    without one (triggered with no logical date) is refused with the fix."""
    start = context.get("data_interval_start")
    end = context.get("data_interval_end")
    if start is None or end is None:
        raise AirflowFailException(
            "this run has no data interval (it was triggered without a logical date); trigger it "
            "with a logical date, or run `airflow backfill create` over the dates to process"
        )
    return ["--start", start.isoformat(), "--end", end.isoformat()]


MANUAL = "manual"  # DagRun.run_type of runs a person triggers (UI, `airflow dags trigger`, REST)


def dry_run_param(description: str) -> Any:
    """The `dry_run` Param: on by default in the UI form (see `dry_run_for`)."""
    from airflow.sdk import Param

    return Param(True, type="boolean", title="Dry run", description=description)


def dry_run_for(params: Mapping[str, Any], context: Any) -> bool:
    """Whether the run is a dry run: a `dry_run` Param (default on in the UI form, so that a
    person who only clicks Trigger changes nothing) applies to runs a person triggers; scheduled
    and backfill runs always run for real."""
    return bool(params["dry_run"]) and context["dag_run"].run_type == MANUAL


def logs_exist(names: Sequence[str]) -> tuple[dict[str, bool], list[str]]:
    """({name: whether the log exists}, every log there is), asked of the log backends of
    STREAMCORE_HOME's configuration without Spark, for a validate task to refuse a run before
    spark-submit. A bad name or a backend that cannot be asked raises AirflowFailException."""
    from streamcore.config import load_config
    from streamcore.errors import StreamcoreError
    from streamcore.log import open_log_manager

    try:
        manager = open_log_manager(load_config(home=streamcore_home()))
        try:
            found = {name: manager.exists(name) for name in names}
            return found, sorted(str(n) for n in manager.list_logs())
        finally:
            manager.close()
    except StreamcoreError as exc:
        raise AirflowFailException(f"{', '.join(names)}: {exc}") from exc


def interval_params(doing: str) -> dict[str, Any]:
    """The `start` / `end` Params of a DAG whose runs may take an explicit interval instead of
    their data interval; `doing` says what the run does with it ("replay", "land")."""
    from airflow.sdk import Param

    return {
        "start": Param(
            None,
            type=["null", "string"],
            format="date-time",
            title="Start",
            description=f"First instant of the interval to {doing} (ISO 8601, UTC when no offset "
            "is given), instead of the run's data interval; give end too.",
        ),
        "end": Param(
            None,
            type=["null", "string"],
            format="date-time",
            title="End",
            description="End of the interval (excluded), with start.",
        ),
    }


def given_interval(params: Mapping[str, Any]) -> tuple[str, str] | None:
    """`interval_params`' (start, end) when the run gives them, None when it gives neither;
    AirflowFailException when it gives one only."""
    start, end = params.get("start") or None, params.get("end") or None
    if (start is None) != (end is None):
        raise AirflowFailException(
            f"start ({start!r}) and end ({end!r}) go together: give both for that interval, or "
            "neither for the run's data interval"
        )
    return (start, end) if start is not None else None


# Command ids of DAG runs: uuid5 of the DAG and run ids, so a retried or cleared validate task
# finds the command it submitted instead of submitting another.
BULK_RUN_NAMESPACE = uuid.UUID("5d3c9b0e-8f0b-4d52-9f6e-3b1c2f0e7a41")


def submit_bulk_command(
    context: Any,
    action: str,
    query: str,
    params: Mapping[str, Any],
    *,
    values: Mapping[str, Any] | None = None,
    sizes: Mapping[str, int | None] | None = None,
) -> dict[str, list[str]]:
    """Check and submit the bulk command of this DAG run (`streamcore.bulk.BulkService`), once
    per run; the arguments of `jobs/bulk_action.py`'s `run` step. A refused command fails the
    task with the reason, before Spark."""
    from streamcore.bulk import BulkError, BulkService
    from streamcore.bulk.dispatch import runner

    run = context["dag_run"]
    command_id = str(uuid.uuid5(BULK_RUN_NAMESPACE, f"{run.dag_id}/{run.run_id}"))
    username = getattr(run, "triggering_user_name", None) or "airflow"
    try:
        with BulkService() as service:
            status = service.submit(
                action,
                query,
                dict(params),
                username=username,
                command_id=command_id,
                values=values,
                runner=runner(run.dag_id, run.run_id),  # this run runs it: not dispatched
                **(sizes or {}),
            )
    except BulkError as exc:
        raise AirflowFailException(str(exc)) from None
    logger.info("bulk command %s (%s) is %s", command_id, action, status.state.value)
    return {"run": ["--command-id", command_id, "--home", str(streamcore_home())]}


def job_tasks(
    job: str,
    steps: Sequence[str],
    arguments: Arguments,
    *,
    retries: Mapping[str, int] | None = None,
    skip: Callable[[Mapping[str, list[str]]], str | None] | None = None,
    assets: Mapping[str, Any] | None = None,
    **submit: Any,
) -> Any:
    """`validate` → one spark-submit of `jobs/<job>.py` per step of `steps` (task ids, in order) →
    summary, inside a `@dag`.

    validate checks the Spark set-up and builds each step's arguments with `arguments`, checked by
    the job's own `check_args` (a bad run fails there, without retries). The summary task logs
    the job's own `render(summaries)` (`jobs.<job>.render`, given each step's summary by step
    name) and keeps the run record under STREAMCORE_HOME/runs/<job>/. `skip(arguments)`, asked
    once the arguments are valid, says why the run has nothing to do (or None), as does the job
    itself for every step (`empty_steps`): validate is then skipped, and with it every later task
    in the same scheduling pass (each is directly downstream of validate), so an idle scheduled
    run costs no Spark start-up. `assets` gives a step's inlets and outlets (`_assets.StepAssets`
    by step name): its success emits an asset event on each outlet whose extra is what the job's
    summary says of the batch. Returns the summary task."""
    from airflow.sdk import get_current_context, task

    # multiple_outputs: each step's spark-submit pulls its own key (`checked[step]`); said
    # explicitly: Airflow infers it from the return annotation only when it can evaluate it.
    @task(task_id="validate", retries=0, multiple_outputs=True)
    def validate() -> dict[str, list[str]]:
        context = get_current_context()
        check_spark_ready()
        argvs = dict(arguments(dict(context["params"]), context))
        if list(argvs) != list(steps):
            raise AirflowFailException(f"arguments of {job} gave steps {list(argvs)}, not {steps}")
        for argv in argvs.values():
            check_job_arguments(job, argv)
        reason = skip(argvs) if skip is not None else None
        if reason is None:
            reason = empty_steps(job, argvs)
        if reason is not None:
            raise AirflowSkipException(f"{reason}: the run skips its other tasks")
        logger.info("%s steps: %s", job, argvs)
        return argvs

    checked = validate()
    submits = []
    for step in steps:
        declared = (assets or {}).get(step)
        operator = StreamcoreSparkSubmitOperator(
            task_id=step,
            job=job,
            application_args=checked[step],
            retries=(retries or {}).get(step, 1),
            inlets=list(declared.inlets) if declared else [],
            outlets=list(declared.outlets) if declared else [],
            **submit,
        )
        if submits:
            submits[-1] >> operator
        submits.append(operator)

    # One dict argument, not **outputs: a task function taking **kwargs gets the whole Airflow
    # context in them. Its XComArgs are resolved, and make the steps upstream of summary.
    @task(task_id="summary", retries=0, multiple_outputs=False)
    def summary(outputs: dict[str, dict[str, Any]]) -> dict[str, Any]:
        context = get_current_context()
        dag_id, run_id = context["dag"].dag_id, context["dag_run"].run_id
        report = importlib.import_module(f"jobs.{job}").render(outputs)
        record = {
            "dag_id": dag_id,
            "run_id": run_id,
            "params": dict(context["params"]),
            **outputs,
            "report": report,
        }
        path = write_run_record(job, dag_id, run_id, record)
        logger.info("%s run %s\n%s\nrun record: %s", job, run_id, report, path)
        return record

    report = summary({op.task_id: op.output for op in submits})
    # validate also directly upstream of summary (it already is of each step): a skipped
    # validate then skips every later task in one scheduling pass, not one pass per level.
    checked >> report
    return report
