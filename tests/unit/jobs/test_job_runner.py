"""The job skeleton without Spark: argument checks before anything runs, one JSON summary line,
exit codes, a failure's summary, fault points."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jobs.spark.job import JobArgumentError, JobContext, JobError, argument_errors, run_job


def _job(run: Any) -> SimpleNamespace:
    def build_parser() -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog="demo")
        parser.add_argument("--count", type=int, default=1)
        return parser

    def check_args(args: argparse.Namespace) -> None:
        if args.count < 1:
            raise JobArgumentError(f"--count must be at least 1, got {args.count}")

    return SimpleNamespace(
        __name__="jobs.demo", build_parser=build_parser, check_args=check_args, run=run
    )


def _summary(out: str) -> dict[str, Any]:
    return json.loads(out.strip().splitlines()[-1])


def test_a_successful_run_prints_one_summary_line(capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(lambda args, ctx: {"counted": args.count})
    assert run_job(job, ["--count", "3"]) == 0
    summary = _summary(capsys.readouterr().out)
    assert summary["job"] == "demo" and summary["counted"] == 3 and summary["status"] == "ok"
    assert summary["seconds"] >= 0


def test_bad_arguments_exit_2_before_run(capsys: pytest.CaptureFixture[str]) -> None:
    ran = []
    job = _job(lambda args, ctx: ran.append(1) or {})
    with pytest.raises(SystemExit) as exc:
        run_job(job, ["--count", "0"])
    assert exc.value.code == 2 and not ran
    assert "--count must be at least 1, got 0" in capsys.readouterr().err


def test_a_job_error_exits_1_with_what_was_done(capsys: pytest.CaptureFixture[str]) -> None:
    def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
        raise JobError("2 of 4 rows failed; nothing was written", {"read": 4})

    assert run_job(_job(run), []) == 1
    summary = _summary(capsys.readouterr().out)
    assert summary["status"] == "failed" and summary["read"] == 4
    assert summary["error"] == "2 of 4 rows failed; nothing was written"


def test_the_dag_side_gets_the_jobs_own_messages() -> None:
    job = _job(lambda args, ctx: {})
    assert argument_errors(job, ["--count", "2"]) is None
    assert argument_errors(job, ["--count", "0"]) == "--count must be at least 1, got 0"
    assert "argument --count: invalid int value: 'x'" in argument_errors(job, ["--count", "x"])


def test_a_fault_point_kills_the_process(tmp_path: Path) -> None:
    script = tmp_path / "crash.py"
    script.write_text(
        textwrap.dedent(
            """
            from jobs.spark.job import JobContext
            ctx = JobContext("crash")
            ctx.fault_point("other")
            print("passed other", flush=True)
            ctx.fault_point("here")
            print("not reached", flush=True)
            """
        )
    )
    env = {"STREAMCORE_FAULT": "here", "PATH": "/usr/bin:/bin"}
    root = str(Path(__file__).resolve().parents[3])
    done = subprocess.run(
        [sys.executable, str(script)],
        env={**env, "PYTHONPATH": root},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == -9
    assert done.stdout == "passed other\n"
