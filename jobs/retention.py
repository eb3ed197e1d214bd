"""Retention compaction (DESIGN.md section 7): history out of the hot log into the Delta table
`archive`, exactly once, before retention purges it.

    spark-submit jobs/retention.py archive [--streams import/docs,audit/entries] [--horizon 1d]
        [--batch-size 1000000] [--dry-run]

`archive` lands, for every stream LogConfig archives (`archive = true` on its namespace rule, the
default) or those of `--streams`, the records appended before the horizon (now minus
`--horizon`) that the archiver has not archived yet: one offset-range batch per stream for the
consumer group `retention/archiver` (`jobs.spark.batches`), appended to `archive` as it was in
the log (key, watermark, flags, data, the payload's schema fingerprint), partitioned by stream
and UTC day. The Delta commit carries the batch's txn id, so a crash at any point and a rerun
land every record once. `--dry-run` reads no record and changes nothing: it says per stream what
a real run would archive.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script (spark-submit): make `jobs` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobs.spark.batches import Landed
from jobs.spark.job import JobArgumentError, JobContext, job_parser, run_job
from streamcore.config import parse_duration_ms
from streamcore.errors import ConfigError, InvalidNameError
from streamcore.names import Name

ARCHIVER, TABLE = "retention/archiver", "archive"
_DAY_MS = 86_400_000
_SINGLE_OBJECT = b"\xc3\x01"
logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser("retention", __doc__.split("\n\n")[0])
    steps = parser.add_subparsers(dest="step", required=True, metavar="{archive}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--streams",
        default="",
        help="comma-separated stream names (default: every stream the configuration archives)",
    )
    common.add_argument(
        "--dry-run", action="store_true", help="change nothing; say what a real run would do"
    )
    for name in ("home", "master"):  # also after the step
        common.add_argument(f"--{name}", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    archive = steps.add_parser(
        "archive", parents=[common], help="land records older than the horizon in `archive`"
    )
    archive.add_argument(
        "--horizon",
        default="1d",
        help='archive the records appended before now minus this ("1d", "12h", "0" = up to '
        "now; default 1d)",
    )
    archive.add_argument(
        "--batch-size",
        type=int,
        default=0,
        help="most records archived per stream in this run (0 = all; the rest waits)",
    )
    return parser


def stream_names(text: str) -> list[Name]:
    """`--streams` as names (empty: all), each checked."""
    return [Name.of(part.strip()) for part in text.split(",") if part.strip()]


def check_args(args: argparse.Namespace) -> None:
    try:
        stream_names(args.streams)
    except InvalidNameError as exc:
        raise JobArgumentError(f"--streams: {exc}") from None
    if args.step == "archive":
        try:
            horizon = parse_duration_ms(args.horizon, "--horizon")
        except ConfigError as exc:
            raise JobArgumentError(str(exc)) from None
        if horizon < 0:
            raise JobArgumentError(f"--horizon must be >= 0, got {args.horizon!r}")
        if args.batch_size < 0:
            raise JobArgumentError(f"--batch-size must be >= 0 (0 = all), got {args.batch_size}")


def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    from streamcore.log.config import LogConfig

    routing = LogConfig.from_settings(ctx.config)
    chosen = stream_names(args.streams)
    if chosen:
        missing = [n.urn for n in chosen if not ctx.logs.exists(n)]
        if missing:
            raise JobArgumentError(
                f"--streams names stream(s) that do not exist: {', '.join(missing)}; list them "
                "with `streamcore logs`"
            )
        names = chosen
    else:
        names = [n for n in sorted(ctx.logs.list_logs(), key=str) if routing.archived(n)]
    return _archive(args, ctx, names, routing)


def _archive(
    args: argparse.Namespace, ctx: JobContext, names: list[Name], routing: Any
) -> dict[str, Any]:
    from jobs.spark.intervals import offsets_at

    horizon_ms = parse_duration_ms(args.horizon, "--horizon")
    before_ms = int(time.time() * 1000) - horizon_ms
    streams: dict[str, dict[str, Any]] = {}
    for name in names:
        skipped = _why_not_archived(name, routing)
        if skipped is not None:
            streams[name.urn] = {"skipped": skipped, "archived": 0}
            continue
        until = offsets_at(ctx.logs, name, before_ms)
        if args.dry_run:
            streams[name.urn] = _preview(ctx, name, until, args.batch_size)
        else:
            streams[name.urn] = _archive_stream(ctx, name, until, args.batch_size)
    return {
        "step": "archive",
        "dry_run": args.dry_run,
        "horizon": args.horizon,
        "before_ms": before_ms,
        "archived": sum(s.get("archived", 0) for s in streams.values()),
        "bytes": sum(s.get("bytes", 0) for s in streams.values()),
        "streams": streams,
    }


def _why_not_archived(name: Name, routing: Any) -> str | None:
    if not routing.archived(name):
        return "archive = false in its [[log.match]] rule"
    backend = routing.config_for(name).type
    if backend not in ("local", "kafka"):
        return f"a {backend} log, which Spark cannot read"
    return None


def _preview(ctx: JobContext, name: Name, until: dict[int, int], limit: int) -> dict[str, Any]:
    """What `_archive_stream` would read, from the archiver's positions (no recovery, no write;
    a batch that reached Delta but not the positions shows as still to archive)."""
    starts = ctx.logs.start_offsets(name)
    committed = ctx.logs.committed(name, ARCHIVER)
    ranges = {}
    for p, (start, pos) in enumerate(zip(starts, committed, strict=True)):
        lo = start if pos is None else max(start, pos)
        ranges[str(p)] = [lo, max(lo, until[p])]
    records = sum(hi - lo for lo, hi in ranges.values())
    return {"would_archive": min(records, limit) if limit else records, "offsets": ranges}


def _archive_stream(
    ctx: JobContext, name: Name, until: dict[int, int], limit: int
) -> dict[str, Any]:
    from jobs.spark.batches import run_offset_batch
    from jobs.spark.catalog import Catalog

    catalog = Catalog(ctx.spark, ctx.config)
    # Created outside the batch's transaction (a creation commit carrying the txn id would
    # make Delta skip the batch as landed).
    path = catalog.ensure(TABLE)

    def land(records: Any, plan: Any, sink: Any) -> Landed:
        rows = archive_rows(records, name.urn)
        ctx.fault_point("retention.before_delta_commit")
        with ctx.phases("write"):
            version = sink.write(plan, lambda: rows.write.format("delta").mode("append").save(path))
        written = _written(ctx.spark, path, version) if version is not None else {}
        return Landed(version, {"archived": plan.records, **written})

    return run_offset_batch(
        ctx,
        app=f"archive/{name.urn}",
        stream=name,
        group=ARCHIVER,
        table_path=path,
        land=land,
        max_records=limit,
        until=until,
    ) | {"archived_until": {str(p): o for p, o in until.items()}}


def archive_rows(records: Any, stream: str) -> Any:
    """The `archive` table's rows of `stream`'s records as `read_stream` gives them."""
    from pyspark.sql import functions as F

    data = F.col("data")
    single_object = F.substring(data, 1, 2) == F.lit(_SINGLE_OBJECT)
    return records.select(
        F.lit(stream).alias("stream"),
        "partition",
        "offset",
        "timestamp",
        "key",
        "watermark",
        F.col("flags").cast("int").alias("flags"),
        data,
        F.when(single_object, F.lower(F.hex(F.substring(data, 3, 8)))).alias("schema_fingerprint"),
        # The UTC day, whatever the session's time zone.
        F.date_from_unix_date(
            F.floor(F.unix_millis(F.col("timestamp")) / _DAY_MS).cast("int")
        ).alias("date"),
    )


def _written(spark: Any, path: str, version: int) -> dict[str, int]:
    """The bytes and files commit `version` of the table at `path` wrote (Delta's metrics)."""
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, path).history().where(f"version = {int(version)}")
    row = history.select("operationMetrics").first()
    metrics = dict(row["operationMetrics"] or {}) if row else {}
    return {
        "bytes": int(metrics.get("numOutputBytes", 0)),
        "files": int(metrics.get("numFiles", 0)),
    }


def main(argv: list[str] | None = None) -> int:
    return run_job(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
