r"""Backfill (docs/design.md, "Micro-batches, exactly-once and intervals"): replay the records a
stream received in `[--start, --end)` into another stream, a topology or a Delta table, from the
hot log while it holds them and from the Delta table `archive` for the part retention purged,
seamlessly.

    spark-submit jobs/backfill.py --stream import/docs --start 2026-11-01 --end 2026-11-02 \
        --target replay/docs [--target-kind stream|topology|table] [--topology MODULE:FACTORY] \
        [--dry-run]

Records are those appended (their append time) in the interval. Per source partition, the
offsets the hot log no longer holds come from `archive` (which the retention job fills before it
purges), the rest from the log through `offset_for_timestamp`. Before anything is read, the
archive's part is proven to have no hole, from both ends of each partition's run of offsets
(`jobs.spark.logs.coverage`); records purged before they were archived (a stream LogConfig does not
archive, a forced purge) refuse the run with nothing written. On a log LogConfig compacts
(`compact = true`), `archive` serves every offset below the archiver's position, since
compaction removed older versions there that the archive keeps: a replay gives back every
version, not the survivors. An interval with no record is told before Spark (`empty_summary`:
the log's offsets, the archive's rows read with delta-rs), so a replay over quiet intervals
costs seconds each.

`--target-kind stream` (the default): they are appended to `--target` (an existing log) in
source order, keeping key, data, watermark and append time, each Record flagged `REPLAYED`
(`streamcore.record.Flag.INTERNAL2`); a value that is not a Record envelope is appended as it is.
A target with as many partitions as the source gets each record in its source partition,
another one by key.

Exactly once per interval: before appending, the job writes a replay record
`STREAMCORE_HOME/backfill/<target>/<stream>-<start ms>-<end ms>.json` with the target's end
offsets, and marks it done after. A rerun of a done interval appends nothing; a rerun after a
crash in the middle finds how many records each target partition got since, checks that they
are the first ones it planned (keys, in order), and appends the rest. So no other writer may
append to the target while a backfill runs.

`--target-kind topology --topology MODULE:FACTORY`: the records are replayed into `--target`
exactly as above (same replay record), then the topology the factory builds (loaded as
`streamcore run` loads it, from a module under a prefix `[backfill] topologies` lists) runs in
the job's driver process until it has consumed everything
(`StreamProcessor.drain_and_stop(--drain-timeout)`), and stops. The topology must read
`--target`: one that does not is refused before anything is appended. Its computations' groups
commit what they processed, so a rerun of a done interval appends nothing and its drain finds
nothing left; a run whose drain timed out or failed is finished by running it again.

`--target-kind table --target repository`: the records are Documents landed into `repository`
by the importer's own landing (`jobs.spark.documents.repository.DocumentLanding`: decode, checks,
quarantine, `--failure-threshold`, and the repository MERGE). Idempotent per interval
without a replay record: the MERGE on the document id inserts the ids the table lacks and
updates a row only with a newer version (watermark, partition, offset), so a rerun changes
nothing and an old interval never overwrites what the importer landed since. It is a plain
MERGE, not one of the importer's offset batches: no txn id of the importer's app id, and the
importer's group positions do not move; the rows it writes get the interval's start (epoch ms)
as `import_batch`. Only tables with such a writer are targets (`repository`, from a Document
stream).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jobs.spark.job import (
    JobArgumentError,
    JobContext,
    JobError,
    add_check_options,
    add_interval,
    check_failure_threshold,
    interval_ms,
    job_parser,
    run_job,
)
from jobs.spark.logs.history import HistoryPlan, history_records, locate_history, prove_archive
from streamcore.errors import InvalidNameError, StreamcoreError
from streamcore.names import Name
from streamcore.record import Flag

REPLAYED = Flag.INTERNAL2  # set on every Record a backfill appends
APPEND_BATCH = 10_000
TARGET_KINDS = ("stream", "topology", "table")
# The tables a backfill can land into, and the records their writer takes.
TABLE_WRITERS = {"repository": "Document records, through the importer's landing"}
# Run as __main__ by spark-submit: the logger is named for the module's path, not __name__.
logger = logging.getLogger("jobs.backfill")


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser("backfill", __doc__.split("\n\n")[0])
    parser.add_argument("--stream", required=True, help="the stream to replay")
    add_interval(parser)
    parser.add_argument(
        "--target",
        required=True,
        help="the stream to append the records to (kinds stream and topology), or the table "
        "to land them into (kind table: repository)",
    )
    parser.add_argument(
        "--target-kind",
        choices=TARGET_KINDS,
        default="stream",
        help="stream: append to --target; topology: append to --target, then drain --topology "
        "on it; table: land into the table --target (default stream)",
    )
    parser.add_argument(
        "--topology",
        metavar="MODULE:FACTORY",
        help="kind topology: the factory returning a Topology or (Topology, Settings), as "
        "`streamcore run` takes it; it must read --target",
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=600.0,
        help="kind topology: seconds the topology may take to drain (default 600)",
    )
    add_check_options(
        parser,
        default_threshold=0.05,
        threshold_help="kind table: fail when more than this fraction of the rows fails "
        "expectations (0..1, default 0.05, as the importer)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="append nothing; say what a real run would do"
    )
    return parser


def check_args(args: argparse.Namespace) -> None:
    kind = args.target_kind
    if args.topology and kind != "topology":
        raise JobArgumentError(
            f"--topology is for --target-kind topology (this run's kind is {kind}): drop it, "
            "or give --target-kind topology"
        )
    if kind == "table" and args.target not in TABLE_WRITERS:
        known = ", ".join(f"{t} ({what})" for t, what in TABLE_WRITERS.items())
        raise JobArgumentError(
            f"--target {args.target}: no writer lands replayed records into that table; "
            f"--target-kind table takes {known}. Replay into a stream instead "
            "(--target-kind stream) and land it with its job"
        )
    try:
        source = Name.of(args.stream)
        target = Name.of(args.target)  # a table's name is a valid stream name too
    except InvalidNameError as exc:
        raise JobArgumentError(f"--stream/--target: {exc}") from None
    interval_ms(args)
    if kind == "table":
        check_failure_threshold(args)
        return
    if source == target:
        raise JobArgumentError(
            f"--target {target} is the replayed stream itself: replay into another stream"
        )
    if kind == "topology":
        if not args.topology:
            raise JobArgumentError(
                "--target-kind topology needs --topology MODULE:FACTORY, the topology to drain "
                "on --target"
            )
        if args.drain_timeout <= 0:
            raise JobArgumentError(f"--drain-timeout must be > 0 s, got {args.drain_timeout}")
        _check_topology_allowed(args)
        topology, _ = _load_topology(args.topology)
        inputs = sorted(
            {s for n in topology.computation_names() for s in topology.input_streams(n)}
        )
        if target.urn not in inputs:
            raise JobArgumentError(
                f"--topology {args.topology} does not read --target {target}: its input streams "
                f"are {', '.join(inputs) or 'none'}. Give one of them as --target, or a "
                f"topology reading {target}"
            )


def _check_topology_allowed(args: argparse.Namespace) -> None:
    """`--topology`'s module is under a prefix `[backfill] topologies` lists, before anything
    imports it: whoever may trigger the backfill DAG names it, and loading it runs its code."""
    from streamcore.config import load_config

    try:
        allowed = load_config(**({"home": args.home} if args.home else {})).backfill_topologies
    except StreamcoreError as exc:
        raise JobArgumentError(f"--topology: {exc}") from None
    module, colon, factory = args.topology.partition(":")
    if not (module and colon and factory):
        return  # not MODULE:FACTORY: refused by the loader, which then imports nothing
    if any(module == prefix or module.startswith(f"{prefix}.") for prefix in allowed):
        return
    shown = ", ".join(allowed) if allowed else "none"
    raise JobArgumentError(
        f"--topology {args.topology}: module {module!r} is not one a backfill may run (allowed "
        f"module prefixes: {shown}). Add its package to `[backfill] topologies` in "
        f'include/streamcore.toml (e.g. topologies = ["{module.split(".")[0]}"]), or to '
        "STREAMCORE_BACKFILL_TOPOLOGIES (comma-separated), where the job and the DAG's validate "
        "task run"
    )


def _load_topology(spec: str) -> tuple[Any, Any]:
    """(Topology, Settings) of `spec`, loaded as `streamcore run` loads it."""
    from streamcore.computation.loader import load_topology

    try:
        return load_topology(spec)
    except StreamcoreError as exc:
        raise JobArgumentError(f"--topology: {exc}") from None


def empty_summary(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any] | None:
    """The summary of a run whose interval holds no record, decided before Spark from the log's
    offsets and, where retention purged part of the interval, the archive's own rows (read with
    delta-rs; a hole there fails the run now); None when there is something to replay, a replay
    record to report, or the archive is remote (only Spark reads it)."""
    plan = _locate(args, ctx)
    if plan.hot_records:
        return None
    if args.target_kind != "table" and _replay_state(args, ctx) is not None:
        return None
    plan = prove_archive(ctx, plan)
    if plan.records != 0:
        return None
    done: dict[str, Any]
    if args.dry_run:
        done = {"dry_run": True, "would_land" if args.target_kind == "table" else "would_append": 0}
    elif args.target_kind == "table":
        done = {"read": 0, "imported": 0, "quarantined": 0, "inserted": 0, "updated": 0}
    else:
        done = {"appended": 0}
    return {
        **_summary(args, plan),
        "records": 0,
        "from_archive": 0,
        **done,
        "reason": f"no record of {plan.stream} was appended in [{args.start.isoformat()}, "
        f"{args.end.isoformat()})",
    }


def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    plan = _locate(args, ctx)
    summary = _summary(args, plan)
    if args.target_kind == "table":
        return _land_table(args, ctx, summary, plan)
    marker = _marker_path(ctx, args)
    state = _replay_state(args, ctx)
    if state is not None and state["state"] == "done":
        summary |= {"appended": 0, "already_replayed": True, "replay_record": str(marker)}
    else:
        # Proven before anything is read: a hole refuses the run with nothing written.
        frame, counts = history_records(ctx, prove_archive(ctx, plan, spark=True))
        summary |= counts
        if args.dry_run:
            return {**summary, "dry_run": True, "would_append": counts["records"]}
        with ctx.phases("append"):
            ordered = frame.orderBy("partition", "offset").toLocalIterator(prefetchPartitions=True)
            source, target = plan.stream, Name.of(args.target)
            appended = _append(ctx, target, ordered, ctx.logs.size(source), marker, state)
        summary |= {"appended": appended, "replay_record": str(marker)}
    if args.target_kind == "topology" and not args.dry_run:
        summary |= _drain(args, ctx, summary)
    return summary


def _locate(args: argparse.Namespace, ctx: JobContext) -> HistoryPlan:
    """Where the interval's records are, once the logs are known to exist."""
    source, target = Name.of(args.stream), Name.of(args.target)
    logs = [(source, "--stream")]
    if args.target_kind != "table":  # a table target is created by its writer
        logs.append((target, "--target"))
    for name, what in logs:
        if not ctx.logs.exists(name):
            raise JobError(
                f"{what} {name} does not exist; list the logs with `streamcore logs` (create "
                "the target first, e.g. `streamcore create -l NAME -p PARTITIONS`)"
            )
    return locate_history(ctx, source, *interval_ms(args))


def _summary(args: argparse.Namespace, plan: HistoryPlan) -> dict[str, Any]:
    return {
        "stream": plan.stream.urn,
        "target": Name.of(args.target).urn,
        "target_kind": args.target_kind,
        "start": args.start.isoformat(),
        "end": args.end.isoformat(),
        "hot_offsets": {str(p): list(r) for p, r in sorted(plan.hot.items())},
    }


def _replay_state(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any] | None:
    """The replay record of this interval into this target, None before a first replay."""
    marker = _marker_path(ctx, args)
    return json.loads(marker.read_text()) if marker.exists() else None


def _marker_path(ctx: JobContext, args: argparse.Namespace) -> Path:
    source, target = Name.of(args.stream), Name.of(args.target)
    start, end = interval_ms(args)
    return Path(ctx.config.home) / "backfill" / target.id / f"{source.id}-{start}-{end}.json"


def _land_table(
    args: argparse.Namespace, ctx: JobContext, summary: dict[str, Any], plan: HistoryPlan
) -> dict[str, Any]:
    """Land the interval's Documents into the table `--target` through the importer's landing,
    with a MERGE that only inserts missing ids and updates older versions (see the module doc)."""
    from jobs.spark.delta.catalog import Catalog
    from jobs.spark.delta.sink import commit_metrics
    from jobs.spark.delta.sql import latest_version
    from jobs.spark.documents.repository import DocumentLanding
    from jobs.spark.quality.checked import CheckedBatch
    from jobs.spark.quality.validation import preload

    start_ms, end_ms = interval_ms(args)
    source = plan.stream
    frame, counts = history_records(ctx, prove_archive(ctx, plan, spark=True))
    summary |= counts
    if args.dry_run:
        return {**summary, "dry_run": True, "would_land": counts["records"]}
    if counts["records"] == 0:  # as the importer's empty batch: nothing to check or merge
        return {**summary, "read": 0, "imported": 0, "quarantined": 0, "inserted": 0, "updated": 0}
    catalog = Catalog(ctx.spark, ctx.config)
    preload()
    table = args.target
    landing = DocumentLanding(
        ctx,
        catalog,
        table=table,
        failure_threshold=args.failure_threshold,
        result_format=args.gx_result_format,
        newer_only=True,
    )
    path = catalog.ensure(table)
    interval = f"{start_ms}-{end_ms}"
    batch = CheckedBatch(
        job=f"backfill/{table}/{interval}",
        batch=start_ms,
        run_name=f"backfill-{source.id}-{interval}",
        records=counts["records"],
        unmoved=f"{table} is as it was",
    )
    try:
        write = landing.land(frame.drop("_archived"), batch)
        # Not an offset batch: a plain MERGE, idempotent per interval (the module doc).
        with ctx.phases(write.phase):
            write.action.execute()
            version = latest_version(ctx.spark, path)
        landed = write.finish(version)
    except JobError as exc:  # the failure's summary line names the interval too
        exc.summary = {**summary, **exc.summary}
        raise
    metrics = commit_metrics(ctx.spark, path, version)
    return {
        **summary,
        **landed,
        "table_path": path,
        "delta_version": version,
        "inserted": int(metrics.get("numTargetRowsInserted", 0)),
        "updated": int(metrics.get("numTargetRowsUpdated", 0)),
    }


def _drain(args: argparse.Namespace, ctx: JobContext, summary: dict[str, Any]) -> dict[str, Any]:
    """Run `--topology` on the logs until it has consumed everything, then stop it; its
    computations' records processed, and whether it drained (else JobError)."""
    from streamcore.computation import StreamProcessor
    from streamcore.computation.summary import summary_rows

    topology, settings = _load_topology(args.topology)
    processor = StreamProcessor(ctx.logs, topology, settings)
    started = time.monotonic()
    with ctx.phases("drain"):
        processor.start()
        drained = processor.drain_and_stop(args.drain_timeout)
    rows = summary_rows(processor)
    result = {
        "drained": drained,
        "processed": {r["computation"]: r["processed"] for r in rows},
        "drain_seconds": round(time.monotonic() - started, 3),
    }
    if not drained:
        failures = "; ".join(f"{r['computation']}: {r['failure']}" for r in rows if r["failure"])
        lag = {r["computation"]: r["lag"] for r in rows if r["lag"]}
        raise JobError(
            f"--topology {args.topology} did not drain within --drain-timeout "
            f"{args.drain_timeout:g} s ({failures or f'lag {lag}'}). The records are in "
            f"{args.target} once: fix the topology (or raise --drain-timeout) and run the same "
            "interval again, which appends nothing and drains the rest",
            {**summary, **result},
        )
    return result


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


# -- summary --------------------------------------------------------------------------------------
def render(summary: dict[str, Any]) -> str:
    """What a replay did, as an aligned two-column table (the DAG's summary task logs it).
    `summary`: the run's job summaries by step, here `replay`'s."""
    from streamcore.text import render_rows

    replay = summary["replay"]
    kind = replay.get("target_kind", "stream")
    rows = [
        ("stream", f"{replay.get('stream')} -> {replay.get('target')} ({kind})"),
        ("interval", f"[{replay.get('start')}, {replay.get('end')})"),
        ("records", f"{replay.get('records', 0):,}"),
        ("from the archive", f"{replay.get('from_archive', 0):,}"),
    ]
    if replay.get("dry_run"):
        would = replay.get("would_land", replay.get("would_append", 0))
        rows.append(("written", f"none (dry run; would replay {would:,})"))
    elif kind == "table":
        rows.append(("landed", f"{replay.get('imported', 0):,} documents checked and merged"))
        rows.append(("quarantined", f"{replay.get('quarantined', 0):,}"))
        rows.append(("inserted", f"{replay.get('inserted', 0):,}"))
        rows.append(("updated", f"{replay.get('updated', 0):,} (older versions)"))
    elif replay.get("already_replayed"):
        rows.append(("appended", "none (this interval was replayed before)"))
    else:
        rows.append(("appended", f"{replay.get('appended', 0):,}"))
    if kind == "topology" and "drained" in replay:
        processed = ", ".join(f"{c} {n:,}" for c, n in replay.get("processed", {}).items())
        rows.append(("drained", f"{replay['drained']} in {replay.get('drain_seconds')} s"))
        rows.append(("processed", processed or "none"))
    return render_rows(rows)


def main(argv: list[str] | None = None) -> int:
    return run_job(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
