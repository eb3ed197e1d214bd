"""Backfill (DESIGN.md section 7): replay the records a stream received in `[--start, --end)` into
another stream, from the hot log while it holds them and from the Delta table `archive` for the
part retention purged, seamlessly.

    spark-submit jobs/backfill.py --stream import/docs --start 2026-11-01 --end 2026-11-02 \\
        --target replay/docs [--dry-run]

Records are those appended (their append time) in the interval. Per source partition, the
offsets the hot log no longer holds come from `archive` (which the retention job fills before it
purges), the rest from the log through `offset_for_timestamp`; an interval that reaches before
both is refused. They are appended to `--target` (an existing log) in source order, keeping key,
data, watermark and append time, each Record flagged `REPLAYED`
(`streamcore.record.Flag.INTERNAL2`); a value that is not a Record envelope is appended as it is.
A target with as many partitions as the source gets each record in its source partition,
another one by key.

Exactly once per interval: before appending, the job writes a replay record
`STREAMCORE_HOME/backfill/<target>/<stream>-<start ms>-<end ms>.json` with the target's end
offsets, and marks it done after. A rerun of a done interval appends nothing; a rerun after a
crash in the middle finds how many records each target partition got since, checks that they
are the first ones it planned (keys, in order), and appends the rest. So no other writer may
append to the target while a backfill runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script (spark-submit): make `jobs` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobs.spark.job import (
    JobArgumentError,
    JobContext,
    JobError,
    instant,
    interval_ms,
    job_parser,
    run_job,
)
from streamcore.errors import InvalidNameError
from streamcore.names import Name
from streamcore.record import Flag

REPLAYED = Flag.INTERNAL2  # set on every Record a backfill appends
APPEND_BATCH = 10_000
logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser("backfill", __doc__.split("\n\n")[0])
    parser.add_argument("--stream", required=True, help="the stream to replay")
    parser.add_argument("--start", type=instant, required=True, help="ISO 8601, included")
    parser.add_argument("--end", type=instant, required=True, help="ISO 8601, excluded")
    parser.add_argument("--target", required=True, help="the stream to append the records to")
    parser.add_argument(
        "--dry-run", action="store_true", help="append nothing; say what a real run would do"
    )
    return parser


def check_args(args: argparse.Namespace) -> None:
    try:
        source, target = Name.of(args.stream), Name.of(args.target)
    except InvalidNameError as exc:
        raise JobArgumentError(f"--stream/--target: {exc}") from None
    if source == target:
        raise JobArgumentError(
            f"--target {target} is the replayed stream itself: replay into another stream"
        )
    interval_ms(args)


def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from jobs.spark.intervals import interval_ranges

    source, target = Name.of(args.stream), Name.of(args.target)
    for name, what in ((source, "--stream"), (target, "--target")):
        if not ctx.logs.exists(name):
            raise JobError(
                f"{what} {name} does not exist; list the logs with `streamcore logs` (create "
                "the target first, e.g. `streamcore create -l NAME -p PARTITIONS`)"
            )
    start_ms, end_ms = interval_ms(args)
    found = interval_ranges(ctx.logs, source, start_ms, end_ms)
    starts = ctx.logs.start_offsets(source)
    summary: dict[str, Any] = {
        "stream": source.urn,
        "target": target.urn,
        "start": args.start.isoformat(),
        "end": args.end.isoformat(),
        "hot_offsets": {str(p): list(r) for p, r in sorted(found.ranges.items())},
    }
    marker = _marker_path(ctx, source, target, start_ms, end_ms)
    state = json.loads(marker.read_text()) if marker.exists() else None
    if state is not None and state["state"] == "done":
        return {**summary, "appended": 0, "already_replayed": True, "replay_record": str(marker)}
    frame, archived = _records(ctx, source, found, starts, start_ms, end_ms)
    with ctx.phases("count"):
        counts = frame.agg(
            F.count(F.lit(1)).alias("records"),
            F.count(F.when(F.col("_archived"), 1)).alias("from_archive"),
        ).first()
    summary |= {"records": counts["records"], "from_archive": counts["from_archive"]}
    if args.dry_run:
        return {**summary, "dry_run": True, "would_append": counts["records"]}
    if archived is not None:
        _check_archive_covers(archived, starts, source)
    with ctx.phases("append"):
        ordered = frame.orderBy("partition", "offset").toLocalIterator(prefetchPartitions=True)
        appended = _append(ctx, target, ordered, ctx.logs.size(source), marker, state)
    return {**summary, "appended": appended, "replay_record": str(marker)}


def _marker_path(ctx: JobContext, source: Name, target: Name, start: int, end: int) -> Path:
    return Path(ctx.config.home) / "backfill" / target.id / f"{source.id}-{start}-{end}.json"


def _records(
    ctx: JobContext, source: Name, found: Any, starts: list[int], start_ms: int, end_ms: int
) -> tuple[Any, Any]:
    """The interval's records (`_archived` says which come from `archive`: per partition, those
    below the hot log's first offset) and the archived part alone (None if none is needed)."""
    from pyspark.sql import functions as F

    from jobs.spark.catalog import Catalog
    from jobs.spark.streams import read_stream

    columns = ["partition", "offset", "timestamp", "key", "watermark", "flags", "data"]
    hot = read_stream(ctx.spark, ctx.logs, source, found.ranges).select(*columns)
    missing = [p for p, ms in found.before_retention_ms.items() if ms]
    if not missing:
        return hot.withColumn("_archived", F.lit(False)), None
    catalog = Catalog(ctx.spark, ctx.config)
    if not catalog.exists("archive"):
        raise JobError(
            f"[{start_ms}, {end_ms}) begins before the oldest record {source} still holds, "
            "and nothing was ever archived: run the retention job's archive step (before "
            "retention purges), or replay a more recent interval"
        )
    below = F.lit(False)
    for p in missing:
        below = below | ((F.col("partition") == p) & (F.col("offset") < starts[p]))
    start, end = (F.timestamp_millis(F.lit(ms)) for ms in (start_ms, end_ms))
    archived = (
        ctx.spark.read.format("delta")
        .load(catalog.path("archive"))
        .where((F.col("stream") == source.urn) & below)
        .where((F.col("timestamp") >= start) & (F.col("timestamp") < end))
        .select(*columns)
    )
    frame = archived.withColumn("_archived", F.lit(True)).unionByName(
        hot.withColumn("_archived", F.lit(False))
    )
    return frame, archived


def _check_archive_covers(archived: Any, starts: list[int], source: Name) -> None:
    """Refuse a replay with a hole: per partition, the archived offsets must run without a gap
    up to the hot log's first offset."""
    from pyspark.sql import functions as F

    spans = archived.groupBy("partition").agg(
        F.min("offset").alias("lo"), F.max("offset").alias("hi"), F.count("*").alias("n")
    )
    for row in spans.collect():
        p = row["partition"]
        if row["hi"] != starts[p] - 1 or row["n"] != row["hi"] - row["lo"] + 1:
            raise JobError(
                f"partition {p} of {source}: the archive does not hold every record the log "
                f"purged before offset {starts[p]} (offsets {row['lo']}..{row['hi']}, "
                f"{row['n']} records), so the replay would have a hole. Nothing was appended"
            )


def _append(
    ctx: JobContext,
    target: Name,
    rows: Iterator[Any],
    source_partitions: int,
    marker: Path,
    state: dict[str, Any] | None,
) -> int:
    """Append `rows` (in source order) to `target`, resuming an unfinished replay (`state`)."""
    from streamcore.codecs import get_codec
    from streamcore.log import LogPartition
    from streamcore.record import Record

    same_layout = ctx.logs.size(target) == source_partitions
    codec = get_codec("avro", config=ctx.config)
    ends = ctx.logs.end_offsets(target)
    if state is None:
        state = {"state": "appending", "target_ends_before": ends}
        marker.parent.mkdir(parents=True, exist_ok=True)
        _write(marker, state)
    before = state["target_ends_before"]
    if not same_layout and sum(ends) != sum(before):
        raise JobError(
            f"{target} got records since an unfinished replay into it began, and its partitions "
            "differ from the source's, so the replay cannot tell which were its own. Check the "
            f"target, then delete {marker} to replay again (duplicates) or mark it done"
        )
    appender = ctx.logs.appender(target)
    seen: dict[int, int] = {}  # records of each source partition met so far
    chunk: list[tuple[str, bytes, int]] = []
    chunk_partition: int | None = None
    appended = 0

    def flush() -> None:
        nonlocal appended, chunk
        if chunk:
            appender.append_batch(
                [(k, v) for k, v, _ in chunk],
                partition=chunk_partition,
                timestamps=[t for _, _, t in chunk],
            )
            appended += len(chunk)
            chunk = []
            ctx.fault_point("backfill.mid_append")

    for r in rows:
        p = r["partition"]
        n = seen.get(p, 0)
        seen[p] = n + 1
        if same_layout and n < ends[p] - before[p]:  # appended before a crash: check it
            _check_resumed(ctx, LogPartition(target, p), before[p] + n, r["key"])
            continue
        if r["watermark"] is None:  # not a Record envelope: as it was
            value = bytes(r["data"])
        else:
            flags = Flag((r["flags"] or 0) & 0xFF) | REPLAYED
            value = codec.encode(Record(r["key"], bytes(r["data"]), r["watermark"], flags))
        partition = p if same_layout else None
        if partition != chunk_partition or len(chunk) >= APPEND_BATCH:
            flush()
            chunk_partition = partition
        chunk.append((r["key"], value, int(r["timestamp"].timestamp() * 1000)))
    flush()
    _write(marker, {**state, "state": "done", "target_ends_after": ctx.logs.end_offsets(target)})
    return appended


def _check_resumed(ctx: JobContext, partition: Any, offset: int, key: str) -> None:
    """The record at `offset` of the target is the one this replay appended there before it
    stopped (same key), else another writer appended meanwhile."""
    found = ctx.logs.record_at(partition, offset)
    if found is None or found[0] != key:
        raise JobError(
            f"{partition}: offset {offset} is not the record this replay appended there before "
            f"it stopped (key {found[0] if found else None!r}, expected {key!r}): another writer "
            "appended to the target meanwhile. Nothing more was appended"
        )


def _write(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    return run_job(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
