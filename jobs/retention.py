"""Retention compaction (docs/design.md, "Micro-batches, exactly-once and intervals"): history
out of the hot log into the Delta table `archive` exactly once, then the hot log purged without
losing what a group has not read, then the Delta tables tidied.

Four steps, run in this order by dags/streamcore_retention.py:

    spark-submit jobs/retention.py archive [--streams import/docs,audit/entries] [--horizon 1d]
        [--batch-size 1000000] [--partial-ok] [--dry-run]
    spark-submit jobs/retention.py purge [--streams ...] [--force] [--dry-run]
    spark-submit jobs/retention.py compact [--streams ...] [--min-lag 0] [--delete-retention 1d]
        [--dry-run]
    spark-submit jobs/retention.py maintain [--tables audit,archive] [--vacuum-hours 168]
        [--force-vacuum] [--dry-run]

`archive` lands, for every stream LogConfig archives (`archive = true` on its namespace rule, the
default) or those of `--streams`, the records appended before the horizon (now minus
`--horizon`) that the archiver has not archived yet: one offset-range batch per stream for the
consumer group `retention/archiver` (`jobs.spark.batches`), appended to `archive` as it was in
the log (key, watermark, flags, data, the payload's schema fingerprint) with the log's
incarnation, partitioned by stream and UTC day. The Delta commit carries the batch's txn id, so
a crash at any point and a rerun land every record once. The batches of a stream are numbered
per incarnation of its log (app id `archive/<stream>@<incarnation>`): a stream deleted and
created again starts its own batches at offset 0, and its rows stand beside the old
incarnation's. Each stream is archived on its own: one that fails (its error is in its summary
and in `failed_streams`) leaves the others archived; the step then exits 1, or 0 with
`--partial-ok` and `status: partial` (the DAG's way: its later steps still run, and it fails the
run at the end).

`purge` applies retention to every local log (or those of `--streams`): expired segments go
once every group, the archiver included, has read past them
(`streamcore.log.local.retention`); the others stay, and the summary says which groups hold how
many records. `--force` purges them anyway and records each group's loss. Kafka applies its own
retention on the broker: its logs are reported, not purged. It needs no Spark.

`compact` key-compacts every log LogConfig compacts (`compact = true` on its namespace rule) or
those of `--streams`, after the purge so it never rewrites segments about to go: on a local log,
the sealed segments keep only the latest record per key, up to what the archiver has archived
(`streamcore.log.local.compaction`; tombstones go after `--delete-retention`, segments younger
than `--min-lag` wait); a Kafka topic is compacted by the broker (`cleanup.policy=compact`), so
it is reported with its policy, not compacted. It needs no Spark.

`maintain` runs OPTIMIZE (bin-packing, z-ordered by the catalog's columns) and VACUUM (the
declared retention, or `--vacuum-hours`; below Delta's 168 h safety minimum only with
`--force-vacuum`) on every catalog table that exists, or those of `--tables`.

`--dry-run` changes nothing in any step and says what a real run would do.

Kept whole (over 600 lines): a job is one file that spark-submit runs (docs/spark-jobs.md, "How
to add a job"). The four steps share its parser, `check_args`, `run`'s dispatch and `render`, and
what they could shed (the Spark, Delta and log helpers) already lives in `jobs/spark/` and
`streamcore.log`.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
import time
from typing import Any

from jobs.spark.batches import BatchWrite
from jobs.spark.job import JobArgumentError, JobContext, JobError, job_parser, run_job
from streamcore.config import parse_duration_ms
from streamcore.errors import ConfigError, InvalidNameError, StreamcoreError
from streamcore.log.capabilities import Compactable, Purgeable, TopicConfigurable
from streamcore.log.config import ARCHIVER
from streamcore.log.registry import backend_type
from streamcore.names import Name
from streamcore.tables import DELTA_MIN_RETENTION_HOURS, TABLES

TABLE = "archive"
_DAY_MS = 86_400_000
_SINGLE_OBJECT = b"\xc3\x01"
# Run as __main__ by spark-submit: the logger is named for the module's path, not __name__.
logger = logging.getLogger("jobs.retention")


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser("retention", __doc__.split("\n\n")[0])
    steps = parser.add_subparsers(
        dest="step", required=True, metavar="{archive,purge,compact,maintain}"
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--dry-run", action="store_true", help="change nothing; say what a real run would do"
    )
    for name in ("home", "master"):  # also after the step
        common.add_argument(f"--{name}", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    streams = argparse.ArgumentParser(add_help=False)
    streams.add_argument(
        "--streams",
        default="",
        help="comma-separated stream names (default: archive: every stream the configuration "
        "archives; purge: every log)",
    )
    archive = steps.add_parser(
        "archive",
        parents=[common, streams],
        help="land records older than the horizon in `archive`",
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
    archive.add_argument(
        "--partial-ok",
        action="store_true",
        help="exit 0 when some streams failed (status partial, listed in failed_streams), so "
        "the steps after it still run",
    )
    compact = steps.add_parser(
        "compact", parents=[common, streams], help="keep the latest record per key"
    )
    compact.add_argument(
        "--min-lag",
        default="0",
        help='compact only segments whose newest record is older than this ("1h"; default 0)',
    )
    compact.add_argument(
        "--delete-retention",
        default="1d",
        help="how long a tombstone stays readable before compaction removes it (default 1d, "
        "as Kafka's delete.retention.ms)",
    )
    purge = steps.add_parser(
        "purge", parents=[common, streams], help="delete expired segments every group has read"
    )
    purge.add_argument(
        "--force",
        action="store_true",
        help="purge expired segments groups have not read too (they lose those records)",
    )
    maintain = steps.add_parser(
        "maintain", parents=[common], help="OPTIMIZE and VACUUM the catalog's Delta tables"
    )
    maintain.add_argument(
        "--tables",
        default="",
        help=f"comma-separated tables (default: every one of {', '.join(TABLES)} that exists)",
    )
    maintain.add_argument(
        "--vacuum-hours",
        type=float,
        default=None,
        help="VACUUM retention in hours (default: each table's declared one)",
    )
    maintain.add_argument(
        "--force-vacuum",
        action="store_true",
        help="allow a VACUUM retention below Delta's 168 h safety minimum (no job may read or "
        "write the tables meanwhile)",
    )
    return parser


def stream_names(text: str) -> list[Name]:
    """`--streams` as names (empty: all), each checked."""
    return [Name.of(part.strip()) for part in text.split(",") if part.strip()]


def table_names(text: str) -> list[str]:
    """`--tables` as catalog table names (empty: all)."""
    return [part.strip() for part in text.split(",") if part.strip()]


def check_args(args: argparse.Namespace) -> None:
    if args.step == "maintain":
        unknown = [t for t in table_names(args.tables) if t not in TABLES]
        if unknown:
            raise JobArgumentError(
                f"--tables: unknown table(s) {', '.join(unknown)}; the catalog has "
                f"{', '.join(TABLES)}"
            )
        if args.vacuum_hours is not None and args.vacuum_hours < 0:
            raise JobArgumentError(f"--vacuum-hours must be >= 0, got {args.vacuum_hours}")
        if (
            args.vacuum_hours is not None
            and args.vacuum_hours < DELTA_MIN_RETENTION_HOURS
            and not args.force_vacuum
        ):
            raise JobArgumentError(
                f"--vacuum-hours {args.vacuum_hours:g} is below Delta's safety minimum of "
                f"{DELTA_MIN_RETENTION_HOURS} h: a reader or writer running longer could lose "
                "files it still needs. Give at least that, or add --force-vacuum if no job uses "
                "the tables meanwhile"
            )
        return
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
    if args.step == "compact":
        for option in ("min_lag", "delete_retention"):
            flag = "--" + option.replace("_", "-")
            try:
                if parse_duration_ms(getattr(args, option), flag) < 0:
                    raise JobArgumentError(f"{flag} must be >= 0, got {getattr(args, option)!r}")
            except ConfigError as exc:
                raise JobArgumentError(str(exc)) from None


def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    from streamcore.log.config import LogConfig

    if args.step == "maintain":
        return _maintain(args, ctx)
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
        names = sorted(ctx.logs.list_logs(), key=str)
    if args.step == "purge":
        return _purge(args, ctx, names, routing)
    if args.step == "compact":
        return _compact(args, ctx, chosen or [n for n in names if routing.compacted(n)], routing)
    return _archive(args, ctx, chosen or [n for n in names if routing.archived(n)], routing)


def _archive(
    args: argparse.Namespace, ctx: JobContext, names: list[Name], routing: Any
) -> dict[str, Any]:
    from jobs.spark.delta.catalog import Catalog
    from jobs.spark.logs.intervals import offsets_at

    # Created once, when a real run first needs it, outside any batch's transaction (a creation
    # commit carrying a txn id would make Delta skip that batch as landed).
    archive_path = functools.cache(lambda: Catalog(ctx.spark, ctx.config).ensure(TABLE))
    horizon_ms = parse_duration_ms(args.horizon, "--horizon")
    before_ms = int(time.time() * 1000) - horizon_ms
    streams: dict[str, dict[str, Any]] = {}
    for name in names:
        skipped = _why_not_archived(name, routing)
        if skipped is not None:
            streams[name.urn] = {"skipped": skipped, "archived": 0}
            continue
        path = None if args.dry_run else archive_path()  # the table's failure fails them all
        # One stream's failure (a position moved past its log's end, a damaged segment, a
        # broker out of reach) must not keep the others from their archive and purge.
        try:
            until = offsets_at(ctx.logs, name, before_ms)
            if path is None:
                streams[name.urn] = _preview(ctx, name, until, args.batch_size)
            else:
                streams[name.urn] = _archive_stream(ctx, name, until, args.batch_size, path)
        except Exception as exc:
            logger.exception("archiving %s failed; going on with the other streams", name)
            done = exc.summary if isinstance(exc, JobError) else {}
            error = str(exc) if isinstance(exc, StreamcoreError) else f"{type(exc).__name__}: {exc}"
            streams[name.urn] = {**done, "status": "failed", "error": error, "archived": 0}
    failed = [urn for urn, s in streams.items() if s.get("status") == "failed"]
    summary = {
        "step": "archive",
        "dry_run": args.dry_run,
        "horizon": args.horizon,
        "before_ms": before_ms,
        "archived": sum(s.get("archived", 0) for s in streams.values()),
        "bytes": sum(s.get("bytes", 0) for s in streams.values()),
        "failed_streams": failed,
        "streams": streams,
    }
    if not failed:
        return summary
    message = f"archiving failed for {len(failed)} of {len(streams)} stream(s) (" + "; ".join(
        f"{urn}: {streams[urn]['error']}" for urn in failed
    )
    message += ")" if len(failed) == len(streams) else "); the other streams were archived"
    if not args.partial_ok:
        raise JobError(message, summary)
    logger.error("%s", message)
    return {**summary, "status": "partial"}


def _why_not_archived(name: Name, routing: Any) -> str | None:
    if not routing.archived(name):
        return "archive = false in its [[log.match]] rule"
    backend = routing.config_for(name).type
    if backend_type(backend).description() is None:  # no other process opens its logs
        return f"a {backend} log, which Spark cannot read"
    return None


def _preview(ctx: JobContext, name: Name, until: dict[int, int], limit: int) -> dict[str, Any]:
    """What `_archive_stream` would read, from the archiver's positions (no recovery, no write;
    a batch that reached Delta but not the positions shows as still to archive)."""
    from jobs.spark.batch_positions import read_positions

    positions = read_positions(ctx.logs, name, ARCHIVER)
    ranges = {str(p): [lo, max(lo, until[p])] for p, lo in enumerate(positions)}
    records = sum(hi - lo for lo, hi in ranges.values())
    return {"would_archive": min(records, limit) if limit else records, "offsets": ranges}


def _archive_stream(
    ctx: JobContext, name: Name, until: dict[int, int], limit: int, path: str
) -> dict[str, Any]:
    """One batch of `name` for the archiver, numbered per incarnation of the log: offsets and
    positions restart with a new incarnation, and so do its batches (the former app id's
    record of a batch would describe another log)."""
    from jobs.spark.batches import run_offset_batch

    incarnation = ctx.logs.incarnation(name)
    unkeyed = f"archive/{name.urn}"
    app = unkeyed if incarnation is None else f"{unkeyed}@{incarnation}"
    recovered = _finish_unkeyed_batch(ctx, name, incarnation, path, f"{app}/{ARCHIVER}")

    def land(records: Any, plan: Any) -> BatchWrite:
        from jobs.spark.delta.sql import Append

        rows = archive_rows(records, name.urn, plan.incarnation)
        ctx.fault_point("retention.before_delta_commit")
        return BatchWrite(
            Append(path, rows),
            summary={"archived": plan.records},
            then=lambda version: {} if version is None else _written(ctx.spark, path, version),
        )

    summary = run_offset_batch(
        ctx,
        app=app,
        stream=name,
        group=ARCHIVER,
        table_path=path,
        land=land,
        max_records=limit,
        until=until,
    )
    return summary | {
        "incarnation": incarnation,
        "recovered_positions": {**recovered, **summary["recovered_positions"]},
        "archived_until": {str(p): o for p, o in until.items()},
    }


def _finish_unkeyed_batch(
    ctx: JobContext, name: Name, incarnation: str | None, path: str, keyed: str
) -> dict[str, int]:
    """Before the archiver was keyed by incarnation, its app id was `archive/<stream>` for every
    incarnation. A batch of that id read from this very incarnation may have reached Delta but
    not the positions: commit them (the recovery of that id) before the keyed app's first
    batch, which would read its records again. Returns the positions committed."""
    from jobs.spark.batch_positions import recover
    from jobs.spark.delta.sink import DeltaBatchSink

    if incarnation is None or DeltaBatchSink(ctx.spark, path, keyed).txn_version() is not None:
        return {}
    former = DeltaBatchSink(ctx.spark, path, f"archive/{name.urn}/{ARCHIVER}")
    landed = former.last_batch()
    if landed is None or landed.incarnation != incarnation:
        return {}
    return {str(p): o for p, o in recover(former, ctx.logs, name, ARCHIVER, incarnation)[1].items()}


def archive_rows(records: Any, stream: str, incarnation: str | None) -> Any:
    """The `archive` table's rows of `stream`'s records as `read_stream` gives them, read from
    its log's `incarnation`."""
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
        F.lit(incarnation).cast("string").alias("incarnation"),
    )


def _written(spark: Any, path: str, version: int) -> dict[str, int]:
    """The bytes and files commit `version` of the table at `path` wrote (Delta's metrics)."""
    from jobs.spark.delta.sink import commit_metrics

    metrics = commit_metrics(spark, path, version)
    return {
        "bytes": int(metrics.get("numOutputBytes", 0)),
        "files": int(metrics.get("numFiles", 0)),
    }


def _compact(
    args: argparse.Namespace, ctx: JobContext, names: list[Name], routing: Any
) -> dict[str, Any]:
    """Key compaction of each local log; Kafka topics are compacted by their broker."""
    streams: dict[str, dict[str, Any]] = {}
    for name in names:
        if not routing.compacted(name):
            streams[name.urn] = {
                "skipped": "not a compacted log (set compact = true on its [[log.match]] rule)"
            }
            continue
        manager = ctx.logs.backend_for(name)
        if isinstance(manager, TopicConfigurable):  # the broker compacts it
            policy = manager.topic_config(name).get("cleanup.policy", "?")
            streams[name.urn] = {
                "skipped": f"compacted by the broker (cleanup.policy={policy})"
                if "compact" in policy.split(",")
                else f"cleanup.policy={policy}: the broker does not compact it; set "
                "cleanup.policy=compact on the topic (kafka-configs --alter)"
            }
        elif not isinstance(manager, Compactable):
            streams[name.urn] = {"skipped": f"a {routing.config_for(name).type} log"}
        else:
            parts = manager.compact(
                name,
                min_lag_ms=parse_duration_ms(args.min_lag),
                delete_retention_ms=parse_duration_ms(args.delete_retention),
                dry_run=args.dry_run,
            )
            streams[name.urn] = {
                "records_removed": sum(p.removed for p in parts),
                "keys_compacted": sum(p.keys for p in parts),
                "tombstones_removed": sum(p.tombstones for p in parts),
                "segments_rewritten": sum(p.rewritten for p in parts),
                "bytes_before": sum(p.bytes_before for p in parts),
                "bytes_after": sum(p.bytes_after for p in parts),
                # another purge or compaction held them: the next run compacts them
                "busy_partitions": [p.partition for p in parts if p.busy],
            }
    return {
        "step": "compact",
        "dry_run": args.dry_run,
        "records_removed": sum(s.get("records_removed", 0) for s in streams.values()),
        "keys_compacted": sum(s.get("keys_compacted", 0) for s in streams.values()),
        "streams": streams,
    }


def _purge(
    args: argparse.Namespace, ctx: JobContext, names: list[Name], routing: Any
) -> dict[str, Any]:
    """Retention on each local log, with the guard of `streamcore.log.local.retention`."""
    streams: dict[str, dict[str, Any]] = {}
    for name in names:
        local = ctx.logs.backend_for(name)
        if not isinstance(local, Purgeable):
            backend = routing.config_for(name).type
            why = backend_type(backend).retention_by
            streams[name.urn] = {"skipped": f"a {backend} log: {why}"}
            continue
        plans = local.purge_plan(name)
        before = local.start_offsets(name)
        removed = {} if args.dry_run else local.purge(name, force=args.force)
        after = local.start_offsets(name)
        segments = records = size = 0
        for plan in plans:
            p = plan.partition
            if args.dry_run:
                went = plan.expired_segments if args.force else plan.purgeable_segments
                records += plan.expired_records if args.force else plan.purgeable_records
            else:
                went = len(removed.get(p, []))
                records += after[p] - before[p]
            segments += went
            # The sizes are the plan's, made just before the purge.
            size += (plan.expired_bytes if args.force else plan.purgeable_bytes) if went else 0
        held = _by_group(plans)
        streams[name.urn] = {
            "expired_segments": sum(p.expired_segments for p in plans),
            "segments_purged": segments,
            "records_purged": records,
            "bytes_purged": size,
            "held_by": {} if args.force else held,
            "lost": held if args.force else {},
            # written by another process: its writer purges them on roll, with the same rule
            "skipped_partitions": [
                p.partition for p in plans if not args.dry_run and p.partition not in removed
            ],
        }
    return {
        "step": "purge",
        "dry_run": args.dry_run,
        "force": args.force,
        "segments_purged": sum(s.get("segments_purged", 0) for s in streams.values()),
        "records_purged": sum(s.get("records_purged", 0) for s in streams.values()),
        "bytes_purged": sum(s.get("bytes_purged", 0) for s in streams.values()),
        "streams": streams,
    }


def _by_group(plans: list[Any]) -> dict[str, int]:
    """Records of expired segments each group has not read, over the partitions."""
    total: dict[str, int] = {}
    for plan in plans:
        for group, records in plan.held_by.items():
            total[group] = total.get(group, 0) + records
    return dict(sorted(total.items()))


def _maintain(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    from jobs.spark.delta.catalog import Catalog

    catalog = Catalog(ctx.spark, ctx.config)
    chosen = table_names(args.tables) or list(TABLES)
    tables: dict[str, dict[str, Any]] = {}
    for table in chosen:
        if not catalog.exists(table):
            tables[table] = {"skipped": "does not exist yet"}
            continue
        if args.dry_run:
            tables[table] = {"sizes": catalog.sizes(table)}
            continue
        with ctx.phases(f"optimize {table}"):
            optimized = catalog.optimize(table)
        with ctx.phases(f"vacuum {table}"):
            vacuumed = catalog.vacuum(table, args.vacuum_hours, force=args.force_vacuum)
        tables[table] = {"optimize": optimized, "vacuum": vacuumed}
    return {"step": "maintain", "dry_run": args.dry_run, "tables": tables}


# -- summary --------------------------------------------------------------------------------------
def render(summary: dict[str, Any]) -> str:
    """One row per stream (archive, purge and compact) and per table (maintain), as text tables
    (the DAG's summary task logs it). `summary`: the run's job summaries by step."""
    from streamcore.text import render_rows, render_table

    archive, purge, maintain = summary["archive"], summary["purge"], summary["maintain"]
    streams = []
    purged = purge.get("streams") or {}
    archived = archive.get("streams") or {}
    compacted = summary["compact"].get("streams") or {}
    for stream in sorted(set(purged) | set(archived) | set(compacted)):
        a, p, c = archived.get(stream, {}), purged.get(stream, {}), compacted.get(stream, {})
        if a.get("status") == "failed":
            got = "FAILED (below)"
        elif "would_archive" in a:
            got = f"{a['would_archive']:,} records"
        elif "skipped" in a:
            got = f"skipped ({a['skipped']})"
        else:
            got = f"{a.get('archived', 0):,} records, {_mb(a.get('bytes', 0))}"
        if "skipped" in p:
            went = f"skipped ({p['skipped']})"
        else:
            went = (
                f"{p.get('segments_purged', 0):,} segments, {p.get('records_purged', 0):,} "
                f"records, {_mb(p.get('bytes_purged', 0))}"
            )
        held, lost = _groups(p.get("held_by", {})), _groups(p.get("lost", {}))
        streams.append((stream, got, _compacted(c), went, held, lost))
    rows = []
    for table, t in sorted((maintain.get("tables") or {}).items()):
        if "skipped" in t:
            rows.append((table, f"skipped ({t['skipped']})"))
        elif "sizes" in t:
            rows.append((table, f"{t['sizes']['snapshot_files']:,} files"))
        else:
            o, v = t["optimize"], t["vacuum"]
            rows.append(
                (
                    table,
                    f"OPTIMIZE {o['files_before']:,} -> {o['files_after']:,} files, "
                    f"VACUUM removed {_mb(v['bytes_removed'])}",
                )
            )
    header = [
        "stream",
        "archived",
        "compacted",
        "purged",
        "kept for groups (records)",
        "lost (records)",
    ]
    dry = "dry run: nothing changed; what a real run would do\n\n" if archive.get("dry_run") else ""
    failures = "".join(
        f"\n\narchive of {stream} FAILED: {archived[stream]['error']}"
        for stream in archive.get("failed_streams", [])
    )
    return f"{dry}{render_table(header, streams)}{failures}\n\n{render_rows(rows)}"


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def _groups(counts: dict[str, int]) -> str:
    return ", ".join(f"{g} {n:,}" for g, n in counts.items()) or "-"


def _compacted(c: dict[str, Any]) -> str:
    if not c or "not a compacted log" in c.get("skipped", ""):
        return "-"
    if "skipped" in c:
        return c["skipped"]
    return (
        f"{c['keys_compacted']:,} keys, {c['records_removed']:,} records, "
        f"{_mb(c['bytes_before'] - c['bytes_after'])}"
    )


def main(argv: list[str] | None = None) -> int:
    return run_job(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
