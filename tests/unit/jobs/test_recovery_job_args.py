"""jobs/recovery.py without Spark: what `check_args` (and so the recovery DAG's validate task,
through `argument_errors`) accepts and refuses, and the selection it builds."""

from __future__ import annotations

import pytest

from jobs import recovery
from jobs.spark.job import argument_errors
from streamcore.recovery import DeadLetterFilter


@pytest.mark.parametrize(
    "argv",
    [
        ["--action", "list"],
        ["--action", "list", "--engine", "process", "--stream", "app/dlq-a", "--sample", "0"],
        ["--action", "redrive", "--all", "--dry-run"],
        ["--action", "redrive", "--offsets", "0:1, 1:2", "--stream", "app/dlq-a", "--reason", "r"],
        ["--action", "redrive", "--error", "ValueError", "--to", "app/replay", "--reason", "r"],
    ],
)
def test_accepted(argv: list[str]) -> None:
    assert argument_errors(recovery, argv) is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--action", "purge"], "invalid choice"),
        (["--action", "redrive", "--reason", "r"], "selects explicitly"),
        (["--action", "redrive", "--all"], "needs --reason"),
        (["--action", "redrive", "--all", "--reason", "  "], "needs --reason"),
        (["--action", "list", "--offsets", "zero"], "--offsets 'zero': expected PARTITION:OFFSET"),
        (["--action", "list", "--since", "yesterday"], "--since 'yesterday': not an ISO 8601"),
        (["--action", "list", "--stream", "no slash!"], "'no slash!'"),
        (["--action", "redrive", "--all", "--to", "bad name", "--dry-run"], "'bad name'"),
        (["--action", "list", "--sample", "-1"], "--sample must be 0 or more"),
        (["--action", "list", "--engine", "gpu"], "invalid choice"),
    ],
)
def test_refused_with_the_reason(argv: list[str], message: str) -> None:
    error = argument_errors(recovery, argv)
    assert error is not None and message in error, error


def test_the_selection_the_arguments_give() -> None:
    args = recovery.build_parser().parse_args(
        [
            "--action", "redrive", "--stream", "app/dlq-a", "--offsets", "0:1,1:2",
            "--computation", "enrich", "--error", "Timeout", "--since", "2026-11-24",
            "--until", "2026-11-24T01:00:00Z",
        ]
    )  # fmt: skip
    assert recovery.selection(args) == DeadLetterFilter(
        streams=("app/dlq-a",),
        computation="enrich",
        error="Timeout",
        since_ms=1_795_478_400_000,
        until_ms=1_795_482_000_000,
        offsets=frozenset({(0, 1), (1, 2)}),
    )
