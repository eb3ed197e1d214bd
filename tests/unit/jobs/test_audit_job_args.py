"""jobs/audit.py without Spark: what `check_args` (and so the DAG's validate task, through
`argument_errors`) accepts and refuses, and a missing stream (exit 1, a failure summary, no
Spark session)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from jobs import audit
from jobs.spark.job import argument_errors

INTERVAL = ["interval", "--start", "2026-11-23T10:00", "--end", "2026-11-23T10:05"]


@pytest.mark.parametrize(
    "argv",
    [["batch"], ["batch", "--batch-size", "100", "--failure-threshold", "0.5"], INTERVAL],
)
def test_good_arguments_pass(argv) -> None:
    assert argument_errors(audit, argv) is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["batch", "--failure-threshold", "1.5"], "--failure-threshold must be within 0..1"),
        (["batch", "--batch-size", "-1"], "--batch-size must be >= 0"),
        (["batch", "--group", "no spaces allowed"], "--stream/--group"),
        (["batch", "--max-future-skew", "-1"], "--max-future-skew must be >= 0"),
        (["interval", "--start", "2026-11-23T10:05", "--end", "2026-11-23T10:00"], "after --start"),
        # gone: interval mode finds an entry whatever its lateness
        ([*INTERVAL, "--lateness", "3600"], "--lateness was removed: interval mode now reads"),
        (["interval", "--start", "yesterday", "--end", "2026-11-23"], "not an ISO 8601 time"),
        (["interval", "--end", "2026-11-23"], "--start"),
        (["refresh"], "invalid choice"),
    ],
)
def test_bad_arguments_are_named(argv, message) -> None:
    error = argument_errors(audit, argv)
    assert error is not None and message in error


def test_a_missing_stream_fails_before_spark(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STREAMCORE_HOME", str(tmp_path))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = audit.main(["batch"])
    summary = json.loads(out.getvalue().strip().splitlines()[-1])
    assert code == 1 and summary["status"] == "failed"
    assert "audit/entries does not exist" in summary["error"]
    assert "phases" not in summary  # no Spark session was started
