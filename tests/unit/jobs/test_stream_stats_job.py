"""jobs/stream_stats.py without Spark: what `check_args` and the DAG's `argument_errors` accept
and refuse (times without an offset are UTC), an interval without records (no Spark session), a
missing stream (exit 1 with a failure summary)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from timed_records import append_timed_records

from jobs import stream_stats
from jobs.spark.job import JobArgumentError, JobContext, argument_errors, run_job

OK = ["--stream", "import/docs", "--start", "2026-11-23", "--end", "2026-11-24"]


def _args(*argv: str):
    return stream_stats.build_parser().parse_args(list(argv))


def test_an_interval_parses_as_utc_instants() -> None:
    args = _args(*OK)
    stream_stats.check_args(args)
    assert args.start == datetime(2026, 11, 23, tzinfo=UTC)
    assert args.end - args.start == timedelta(days=1)
    # what interval_arguments() gives: Airflow's data interval, with an offset
    aware = ["--start", "2026-11-23T00:00:00+00:00", "--end", "2026-11-24T00:00:00+00:00"]
    assert argument_errors(stream_stats, ["--stream", "import/docs", *aware]) is None
    # the same instant written in two zones is an empty interval
    same = ["--start", "2026-11-23T00:00:00+00:00", "--end", "2026-11-23T01:00:00+01:00"]
    error = argument_errors(stream_stats, ["--stream", "import/docs", *same])
    assert error is not None and "must be after --start" in error


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--stream", "import/docs", "--start", "2026-11-24", "--end", "2026-11-23"], "after"),
        (["--stream", "import/docs", "--start", "2026-11-23", "--end", "2026-11-23"], "after"),
        (["--stream", "Not A Name", "--start", "2026-11-23", "--end", "2026-11-24"], "--stream"),
        (["--stream", "import/docs", "--start", "yesterday", "--end", "2026-11-24"], "ISO 8601"),
        (["--stream", "import/docs", "--start", "2026-11-23"], "--end"),
    ],
)
def test_bad_arguments_are_refused_with_the_jobs_message(argv: list[str], message: str) -> None:
    error = argument_errors(stream_stats, argv)
    assert error is not None and message in error, error


def test_check_args_raises_job_argument_error() -> None:
    args = _args("--stream", "import/docs", "--start", "2026-11-24", "--end", "2026-11-23")
    with pytest.raises(JobArgumentError, match=r"--end 2026-11-23 .* must be after --start"):
        stream_stats.check_args(args)


def test_an_offset_and_no_offset_compare_as_instants() -> None:
    args = _args(
        "--stream", "import/docs", "--start", "2026-11-23T00:00",
        "--end", "2026-11-23T00:30:00-01:00",
    )  # fmt: skip
    stream_stats.check_args(args)  # 01:30 UTC is after 00:00 UTC
    assert args.end.astimezone(UTC) == datetime(2026, 11, 23, 1, 30, tzinfo=UTC)
    assert args.end.utcoffset() == timezone(timedelta(hours=-1)).utcoffset(None)


def test_the_runner_exits_2_before_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[object] = []
    monkeypatch.setattr(stream_stats, "run", lambda args, ctx: ran.append(args) or {})
    with pytest.raises(SystemExit) as exc:
        run_job(stream_stats, ["--stream", "a/b", "--start", "2026-11-24", "--end", "2026-11-23"])
    assert exc.value.code == 2 and not ran
    assert "must be after --start" in capsys.readouterr().err


def _summary(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_an_interval_without_records_is_counted_without_spark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    append_timed_records(tmp_path, "test/stats")
    monkeypatch.setattr(JobContext, "spark", property(lambda ctx: pytest.fail("Spark started")))
    later = ["--start", "2026-03-12", "--end", "2026-03-13", "--home", str(tmp_path)]
    assert run_job(stream_stats, ["--stream", "test/stats", *later]) == 0
    summary = _summary(capsys.readouterr().out)
    assert summary["status"] == "ok" and summary["records"] == 0 and summary["complete"]
    assert summary["empty"] is True and "no record of test/stats" in summary["reason"]
    assert summary["per_partition"] == {
        p: {"offsets": [end, end], "records": 0, "keys": 0, "bytes": 0}
        for p, end in (("0", 6), ("1", 2), ("2", 1))
    }


def test_a_missing_stream_fails_with_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--stream", "test/nothing", *OK[2:], "--home", str(tmp_path)]
    assert run_job(stream_stats, argv) == 1
    summary = _summary(capsys.readouterr().out)
    assert summary["status"] == "failed" and summary["job"] == "stream_stats"
    assert summary["error"].startswith("stream test/nothing does not exist")


def test_the_docs_quote_the_example_job_and_dag_as_they_are() -> None:
    """docs/spark-jobs.md "How to add a job" shows the example in ```py blocks (not executed by
    tests/unit/test_readme.py): the job file whole, the DAG file's part verbatim."""
    root = Path(__file__).resolve().parents[3]
    section = (root / "docs" / "spark-jobs.md").read_text().split("## How to add a job", 1)[1]
    job, dag = re.findall(r"```py\n(.*?)```", section.split("\n## ", 1)[0], flags=re.S)
    assert job == (root / "jobs" / "stream_stats.py").read_text()
    assert dag in (root / "dags" / "streamcore_stream_stats.py").read_text()
