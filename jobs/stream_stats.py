"""Counts the records, distinct keys and bytes of a stream appended in a time interval, per
partition. The example job of docs/spark-jobs.md "How to add a job": argument checks before
Spark, an empty interval told without Spark, a `run` that returns the summary, and one call of
the shared runner.

    spark-submit jobs/stream_stats.py --stream import/docs --start 2026-11-23 --end 2026-11-24
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from jobs.spark.job import (
    JobArgumentError,
    JobContext,
    JobError,
    add_interval,
    interval_ms,
    job_parser,
    run_job,
)
from streamcore.errors import InvalidNameError
from streamcore.names import Name

if TYPE_CHECKING:
    from jobs.spark.logs.intervals import IntervalRanges


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser("stream_stats", __doc__.split("\n\n")[0])
    parser.add_argument("--stream", required=True, help="log name, e.g. import/docs")
    add_interval(parser)
    return parser


def check_args(args: argparse.Namespace) -> None:
    try:
        Name.of(args.stream)
    except InvalidNameError as exc:
        raise JobArgumentError(f"--stream: {exc}") from None
    interval_ms(args)


def empty_summary(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any] | None:
    """An interval with no record, told by its offsets: the runner ends the run here, no Spark."""
    found = _interval(args, ctx)
    if found.records:
        return None
    interval = f"[{args.start.isoformat()}, {args.end.isoformat()})"
    return {**_summary(args, found, {}), "reason": f"no record of {args.stream} in {interval}"}


def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    found = _interval(args, ctx)
    return _summary(args, found, _count(ctx, args.stream, found.ranges))


def _interval(args: argparse.Namespace, ctx: JobContext) -> IntervalRanges:
    from jobs.spark.logs.intervals import interval_ranges

    if not ctx.logs.exists(args.stream):
        raise JobError(f"stream {args.stream} does not exist; check --stream (streamcore logs)")
    return interval_ranges(ctx.logs, args.stream, *interval_ms(args))


def _summary(
    args: argparse.Namespace, found: IntervalRanges, counted: dict[int, Any]
) -> dict[str, Any]:
    return {
        "stream": args.stream,
        "start": args.start.isoformat(),
        "end": args.end.isoformat(),
        "records": found.records,
        "complete": found.complete,  # False: part of the interval is only in the archive
        "per_partition": {
            str(p): {"offsets": [lo, hi], **counted.get(p, {"records": 0, "keys": 0, "bytes": 0})}
            for p, (lo, hi) in found.ranges.items()
        },
    }


def _count(ctx: JobContext, stream: str, ranges: dict[int, tuple[int, int]]) -> dict[int, Any]:
    """{partition: {records, keys, bytes}} of the records in `ranges`, counted by Spark."""
    from pyspark.sql import functions as F

    from jobs.spark.logs.streams import read_stream

    rows = (
        read_stream(ctx.spark, ctx.logs, stream, ranges)
        .groupBy("partition")
        .agg(
            F.count("*").alias("records"),
            F.countDistinct("key").alias("keys"),
            F.coalesce(F.sum(F.length("data")), F.lit(0)).alias("bytes"),
        )
        .collect()
    )
    return {r["partition"]: {k: r[k] for k in ("records", "keys", "bytes")} for r in rows}


def render(summary: dict[str, Any]) -> str:
    """The run's summary for the DAG's summary task log: each step's scalar fields as an aligned
    two-column table under the step's name (nested values are in the run record)."""
    from streamcore.text import render_rows

    def rows(out: dict[str, Any]) -> list[tuple[str, str]]:
        return [
            (key, f"{value:,}" if type(value) is int else str(value))
            for key, value in out.items()
            if not isinstance(value, dict | list)
        ]

    return "\n\n".join(f"{step}\n{render_rows(rows(out))}" for step, out in summary.items())


if __name__ == "__main__":
    sys.exit(run_job(sys.modules[__name__]))
