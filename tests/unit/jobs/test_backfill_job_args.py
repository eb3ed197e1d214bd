"""jobs/backfill.py without Spark: what `check_args` (and so the DAG's validate task, through
`argument_errors`) accepts and refuses."""

from __future__ import annotations

import pytest

from jobs import backfill
from jobs.spark.job import argument_errors

WINDOW = ["--start", "2026-11-20", "--end", "2026-11-21"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--stream", "import/docs", *WINDOW, "--target", "replay/docs"],
        ["--stream", "import/docs", *WINDOW, "--target", "replay/docs", "--dry-run"],
    ],
)
def test_good_arguments_pass(argv: list[str]) -> None:
    assert argument_errors(backfill, argv) is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--stream", "import/docs", *WINDOW, "--target", "import/docs"], "replay into another"),
        (["--stream", "import/docs", *WINDOW, "--target", "bad name!"], "--stream/--target"),
        (
            ["--stream", "a/b", "--start", "2026-11-21", "--end", "2026-11-20", "--target", "c/d"],
            "must be after --start",
        ),
        (["--stream", "a/b", *WINDOW], "--target"),
        (["--stream", "a/b", "--start", "soon", "--end", "2026-11-20", "--target", "c/d"], "ISO"),
    ],
)
def test_bad_arguments_are_refused_with_the_fix(argv: list[str], message: str) -> None:
    error = argument_errors(backfill, argv)
    assert error is not None and message in error, error
