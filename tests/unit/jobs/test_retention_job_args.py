"""jobs/retention.py without Spark: what `check_args` (and so the DAG's validate task, through
`argument_errors`) accepts and refuses."""

from __future__ import annotations

import pytest

from jobs import retention
from jobs.spark.job import argument_errors


@pytest.mark.parametrize(
    "argv",
    [
        ["archive"],
        ["archive", "--streams", "import/docs, audit/entries", "--horizon", "12h", "--dry-run"],
        ["archive", "--horizon", "0", "--batch-size", "1000"],
        ["compact"],
        ["compact", "--streams", "state/prices", "--min-lag", "1h", "--delete-retention", "0"],
        ["purge"],
        ["purge", "--streams", "import/docs", "--force", "--dry-run"],
        ["maintain"],
        ["maintain", "--tables", "audit, archive", "--vacuum-hours", "200", "--dry-run"],
        ["maintain", "--vacuum-hours", "0", "--force-vacuum"],
    ],
)
def test_good_arguments_pass(argv: list[str]) -> None:
    assert argument_errors(retention, argv) is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["archive", "--horizon", "yesterday"], "--horizon"),
        (["archive", "--horizon", "-1d"], "--horizon"),
        (["archive", "--batch-size", "-1"], "--batch-size must be >= 0"),
        (["archive", "--streams", "no spaces/allowed here"], "--streams"),
        (["compact-everything"], "invalid choice"),
        (["maintain", "--tables", "audit,nope"], "unknown table(s) nope"),
        (["maintain", "--vacuum-hours", "0"], "--force-vacuum"),
        (["maintain", "--vacuum-hours", "-1"], "--vacuum-hours must be >= 0"),
        (["purge", "--horizon", "1d"], "unrecognized arguments"),
        (["compact", "--min-lag", "soon"], "--min-lag"),
        (["compact", "--delete-retention", "-1h"], "--delete-retention"),
        (["compact", "--force"], "unrecognized arguments"),
    ],
)
def test_bad_arguments_are_refused_with_the_fix(argv: list[str], message: str) -> None:
    error = argument_errors(retention, argv)
    assert error is not None and message in error, error


def test_streams_are_parsed_as_names() -> None:
    names = retention.stream_names(" import/docs ,audit/entries,, ")
    assert [n.urn for n in names] == ["import/docs", "audit/entries"]
