"""The job skeleton every `jobs/<job>.py` follows, and the one runner that executes it.

A job module defines three functions and a two-line entry point:

    def build_parser() -> argparse.ArgumentParser: ...
    def check_args(args: argparse.Namespace) -> None: ...   # raise JobArgumentError; no Spark
    def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]: ...  # the summary

    if __name__ == "__main__":
        sys.exit(run_job(sys.modules[__name__]))

`run_job` parses the arguments, runs `check_args` before anything else (the DAG's validate task
calls the same function through `argument_errors`), sets up logging and `STREAMCORE_HOME`, opens
the `JobContext` (configuration, log manager, schema store, Spark session on first use), calls
`run`, prints one JSON summary line on stdout and returns the exit code: 0 on success, 1 when the
job failed (`JobError`, or any `StreamcoreError`), 2 for bad arguments. A `JobError` carries the
summary of what the job did before it failed, so the failure line says as much as a success line.

A job whose runs may have nothing to do (an interval job over a quiet interval) also defines

    def empty_summary(args, ctx) -> dict[str, Any] | None: ...   # no Spark, no writes

which the runner asks before `run`: a summary (with a `reason`) ends the run there, `empty: true`
added, so no Spark session starts; None runs `run`. The DAG's validate task asks it too
(`empty_run`) and skips the spark-submit, and with it the JVM.

Crash tests kill a job at a named point: `ctx.fault_point("importer.before_delta_commit")` sends
SIGKILL to the process when `STREAMCORE_FAULT` names that point, and does nothing otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from streamcore.errors import StreamcoreError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.spark.phases import Phases
    from streamcore.codecs import SchemaStore
    from streamcore.config import StreamcoreConfig
    from streamcore.log import LogManager

__all__ = [
    "FAULT_ENV",
    "Job",
    "JobArgumentError",
    "JobContext",
    "JobError",
    "add_interval",
    "argument_errors",
    "empty_run",
    "execute_job",
    "instant",
    "interval_ms",
    "job_parser",
    "run_job",
]

logger = logging.getLogger(__name__)

FAULT_ENV = "STREAMCORE_FAULT"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class JobArgumentError(StreamcoreError):
    """An argument (or a combination of them) the job cannot run with; the message names it and
    says what to give instead. Raised by `check_args`, before any Spark session."""


class JobError(StreamcoreError):
    """The job failed after it started. `summary` is what it did until then (counts, offsets,
    phases), printed in the failure's summary line."""

    def __init__(self, message: str, summary: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.summary: dict[str, Any] = dict(summary or {})


class Job(Protocol):
    """What `run_job` needs of a job module."""

    def build_parser(self) -> argparse.ArgumentParser: ...

    def check_args(self, args: argparse.Namespace) -> None: ...

    def run(self, args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]: ...


@dataclass
class JobContext:
    """What a running job works with. Everything is opened on first use, so a job that needs no
    Spark (or no log) pays nothing for it; `close()` releases what was opened."""

    name: str
    master: str | None = None
    session_conf: dict[str, str] = field(default_factory=dict)
    home: str | None = None  # STREAMCORE_HOME when not the environment's

    @cached_property
    def config(self) -> StreamcoreConfig:
        from streamcore.config import load_config

        return load_config(home=self.home) if self.home else load_config()

    @cached_property
    def logs(self) -> LogManager:
        from streamcore.log import open_log_manager

        return open_log_manager(self.config)

    @cached_property
    def schemas(self) -> SchemaStore:
        from streamcore.codecs import SchemaStore

        return SchemaStore(self.config.schemas_dir)

    @cached_property
    def phases(self) -> Phases:
        from jobs.spark.phases import Phases

        return Phases()

    @cached_property
    def spark(self) -> SparkSession:
        from jobs.spark.session import build_session

        with self.phases("session"):
            return build_session(f"streamcore-{self.name}", self.master, conf=self.session_conf)

    def fault_point(self, point: str) -> None:
        """Crash here (SIGKILL, no clean-up) if `STREAMCORE_FAULT` names `point`."""
        if os.environ.get(FAULT_ENV) == point:
            logger.error("fault injection: killing the job at %s", point)
            sys.stdout.flush()
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    def close(self) -> None:
        if "logs" in self.__dict__:
            self.logs.close()


def job_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A job's argument parser with the two arguments `run_job` reads: `--home`
    (STREAMCORE_HOME) and `--master` (the Spark master when spark-submit did not set one)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--home", help="STREAMCORE_HOME (default: the configured one)")
    parser.add_argument("--master", help="Spark master when not run by spark-submit")
    return parser


def instant(text: str) -> datetime:
    """An ISO 8601 time as an argument type; one without a UTC offset is UTC (never the
    machine's time zone, which differs between a laptop, Airflow workers and Spark)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def add_interval(parser: argparse.ArgumentParser) -> None:
    """`--start` (included) and `--end` (excluded): the time interval a job covers, as the
    DAG side's `interval_arguments` passes an Airflow data interval."""
    parser.add_argument("--start", type=instant, required=True, help="ISO 8601, included")
    parser.add_argument("--end", type=instant, required=True, help="ISO 8601, excluded")


def add_check_options(
    parser: argparse.ArgumentParser, *, default_threshold: float, threshold_help: str
) -> None:
    """`--failure-threshold` and `--gx-result-format`: the options of a job whose landing checks
    its rows (`jobs.spark.quality.checked`); `check_failure_threshold` checks the first (call it
    from `check_args`)."""
    parser.add_argument(
        "--failure-threshold", type=float, default=default_threshold, help=threshold_help
    )
    parser.add_argument(
        "--gx-result-format",
        choices=("BOOLEAN_ONLY", "BASIC", "SUMMARY", "COMPLETE"),
        default="SUMMARY",
        help="detail of the Great Expectations report and Data Docs (SUMMARY: unexpected counts "
        "and examples; BOOLEAN_ONLY: pass/fail, about twice as fast)",
    )


def check_failure_threshold(args: argparse.Namespace) -> None:
    if not 0.0 <= args.failure_threshold <= 1.0:
        raise JobArgumentError(
            f"--failure-threshold must be within 0..1, got {args.failure_threshold}"
        )


def interval_ms(args: argparse.Namespace) -> tuple[int, int]:
    """The `[start, end)` of `add_interval`'s arguments in epoch milliseconds; refuses an empty
    or reversed interval (call it from `check_args`)."""
    if args.end <= args.start:
        raise JobArgumentError(f"--end {args.end} must be after --start {args.start}")
    start_ms, end_ms = (int(t.timestamp() * 1000) for t in (args.start, args.end))
    return start_ms, end_ms


def argument_errors(job: Job, argv: list[str]) -> str | None:
    """Why `job` refuses `argv` (argparse's or `check_args`' message), or None if it accepts
    them: how a DAG checks a run's arguments before spark-submit, with the job's own rules."""
    parser = job.build_parser()
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            args = parser.parse_args(argv)
    except SystemExit as exc:
        if not exc.code:  # --help
            return None
        lines = errors.getvalue().strip().splitlines()
        return lines[-1] if lines else f"invalid arguments `{' '.join(argv)}` (see --help)"
    try:
        job.check_args(args)
    except JobArgumentError as exc:
        return str(exc)
    return None


def run_job(job: Job | ModuleType, argv: list[str] | None = None) -> int:
    """Run a job module end to end (see the module docstring); returns the exit code."""
    summary, code = execute_job(job, argv)
    print(json.dumps(summary, separators=(",", ":"), default=str), flush=True)
    return code


def execute_job(job: Job | ModuleType, argv: list[str] | None = None) -> tuple[dict[str, Any], int]:
    """`run_job` without the summary line: (summary, exit code). How a DAG task runs a job in its
    own process when the job needs no Spark for that run (`streamcore_recovery`'s small
    selections)."""
    name = _job_name(job)
    parser = job.build_parser()
    args = parser.parse_args(argv)
    try:
        job.check_args(args)
    except JobArgumentError as exc:
        parser.error(str(exc))  # exit 2 with the usage line, as argparse does
    _setup_logging()
    home = getattr(args, "home", None)
    if home:
        os.environ["STREAMCORE_HOME"] = str(Path(home).resolve())
    ctx = JobContext(name, master=getattr(args, "master", None))
    base = {"job": name, **_step(args)}
    started = time.monotonic()
    try:
        empty = _empty_summary(job, args, ctx)
        summary = empty if empty is not None else dict(job.run(args, ctx))
        code = EXIT_OK
    except JobError as exc:
        logger.error("%s failed: %s", name, exc)
        summary, code = {**exc.summary, "status": "failed", "error": str(exc)}, EXIT_FAILED
    except StreamcoreError as exc:
        logger.error("%s failed: %s", name, exc)
        summary, code = {"status": "failed", "error": str(exc)}, EXIT_FAILED
    finally:
        ctx.close()
    if "phases" in ctx.__dict__:
        summary.setdefault("phases", ctx.phases.seconds)
    summary = {**base, **summary, "seconds": round(time.monotonic() - started, 3)}
    summary.setdefault("status", "ok")
    return summary, code


def empty_run(job: Job | ModuleType, argv: list[str]) -> dict[str, Any] | None:
    """The summary a run of `job` with `argv` (already checked) gives without Spark because it
    has nothing to do (the job's `empty_summary`), or None: it has work, or the job cannot tell
    before Spark. How a DAG's validate task skips the spark-submit of an empty interval. Raises
    the job's JobError when it would fail before Spark (an archive with a hole, say)."""
    if getattr(job, "empty_summary", None) is None:
        return None
    args = job.build_parser().parse_args(argv)
    home = getattr(args, "home", None)
    ctx = JobContext(_job_name(job), home=str(Path(home).resolve()) if home else None)
    try:
        return _empty_summary(job, args, ctx)
    finally:
        ctx.close()


def _empty_summary(job: Job | ModuleType, args: argparse.Namespace, ctx: JobContext) -> Any:
    check = getattr(job, "empty_summary", None)
    found = check(args, ctx) if check is not None else None
    if found is None:
        return None
    if "spark" in ctx.__dict__:
        raise RuntimeError(f"{_job_name(job)}.empty_summary started Spark; it must decide without")
    return {**found, "empty": True}


def _job_name(job: Job | ModuleType) -> str:
    module = getattr(job, "__name__", type(job).__name__)
    if module == "__main__":  # spark-submit jobs/x.py: name the job by its file
        return Path(getattr(job, "__file__", "job")).stem
    return module.rsplit(".", 1)[-1]


def _step(args: argparse.Namespace) -> dict[str, Any]:
    step = getattr(args, "step", None)
    return {"step": step} if step else {}


def _setup_logging(quiet: tuple[str, ...] = ("great_expectations", "py4j")) -> None:
    logging.basicConfig(
        level=os.environ.get("STREAMCORE_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in quiet:
        logging.getLogger(noisy).setLevel(logging.WARNING)
