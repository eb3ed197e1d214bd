"""The audit job: entries of the stream `audit/entries` into the Delta table `audit`
(docs/design.md, "The catalog"; Nuxeo's stream audit writer, landed by Spark), exactly once.

    spark-submit jobs/audit.py batch [--failure-threshold 0.01] [--batch-size 100000]
    spark-submit jobs/audit.py interval --start 2026-11-23T10:00 --end 2026-11-23T10:05

`batch` (the schedule) reads the group `audit/delta` from its committed positions to the end seen
at the start, checks the entries (the suite generated from AuditEntry.avsc and the rules on
whole entries of streamcore.audit.rules: known event types, a document event has a path, no
event date beyond `--max-future-skew` in the future; `publish` checks the same), sends failing
rows to `quarantine`, and MERGEs the others into `audit` on the event id:
an event id the table has is a duplicate of the relay's at-least-once delivery and is left as
it is. Then it commits the group's positions (`jobs.spark.batches`).

`interval` (backfills, re-runs) lands the entries whose event date is in `[--start, --end)`
with the same insert-only MERGE: the entries the table lacks are added, the others left as they
are, so running it again changes nothing, and it never deletes a row (replacing the interval
would remove an entry it could not read again). An entry is appended after its event (the relay
runs after the commit), but how long after has no bound (a relay down for hours, a computation
replaying old events), so it reads everything appended from `--start` minus the skew up to the
end of the log seen at its start, and keeps the entries by their event date: a rebuild finds
every entry of its interval the log holds, whatever its append time. When nothing was appended
since then, the interval has no entry and the run ends before Spark (`empty_summary`). It
refuses an interval older than the log's retention, whose entries it could only partly give
back, and never moves the batch mode's positions.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from jobs.spark.batches import BatchWrite
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
from jobs.spark.quality.checked import Checked, CheckedBatch, CheckedLanding
from streamcore.audit.rules import MAX_FUTURE_SKEW, EntryRules, configured_rules
from streamcore.errors import InvalidNameError
from streamcore.names import Name

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from jobs.spark.batch_positions import BatchPlan
    from jobs.spark.logs.intervals import IntervalRanges

SCHEMA = "org.streamcore.audit.AuditEntry"
STREAM, GROUP, TABLE = "audit/entries", "audit/delta", "audit"
_DAY_MS = 86_400_000


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser("audit", __doc__.split("\n\n")[0])
    steps = parser.add_subparsers(dest="step", required=True, metavar="{batch,interval}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--stream", default=STREAM, help=f"log name (default {STREAM})")
    add_check_options(
        common,
        default_threshold=0.0,
        threshold_help="fail when more than this fraction of the entries fails expectations "
        "(0..1; default 0: an audit trail quarantines nothing silently)",
    )
    common.add_argument(
        "--max-future-skew",
        type=float,
        default=MAX_FUTURE_SKEW,
        help=f"seconds an event date may lie ahead of the job's clock (default "
        f"{MAX_FUTURE_SKEW:g}, what publish allows: less can refuse entries publish accepted)",
    )
    for name in ("home", "master"):  # also after the step, as the importer takes them
        common.add_argument(f"--{name}", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    batch = steps.add_parser("batch", parents=[common], help="land the group's new entries")
    batch.add_argument("--group", default=GROUP, help=f"consumer group (default {GROUP})")
    batch.add_argument(
        "--batch-size", type=int, default=0, help="max entries this run reads (0 = all)"
    )
    interval = steps.add_parser(
        "interval", parents=[common], help="land the entries of a time interval the table lacks"
    )
    add_interval(interval)
    # Removed, but still parsed so that a scheduler or script passing it is told why and what to
    # do instead of argparse's bare "unrecognized arguments".
    interval.add_argument("--lateness", default=None, help=argparse.SUPPRESS)
    return parser


def check_args(args: argparse.Namespace) -> None:
    try:
        Name.of(args.stream)
        if args.step == "batch":
            Name.of(args.group)
    except InvalidNameError as exc:
        raise JobArgumentError(f"--stream/--group: {exc}") from None
    check_failure_threshold(args)
    if args.max_future_skew < 0:
        raise JobArgumentError(f"--max-future-skew must be >= 0 s, got {args.max_future_skew}")
    if args.step == "batch" and args.batch_size < 0:
        raise JobArgumentError(f"--batch-size must be >= 0 (0 = all), got {args.batch_size}")
    if args.step == "interval":
        if args.lateness is not None:
            raise JobArgumentError(
                "--lateness was removed: interval mode now reads every entry appended since "
                "--start minus --max-future-skew, whatever its lateness; drop the option"
            )
        interval_ms(args)


def empty_summary(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any] | None:
    """An interval run when nothing was appended since `--start` minus the skew: no entry of
    the interval can be in the log, told by its offsets before Spark. None otherwise, and for
    batch mode (the DAG's validate task skips an idle batch run itself)."""
    from streamcore.tables import table_spec

    if args.step != "interval":
        return None
    _check_stream(args, ctx)
    found = _appended_since(args, ctx)
    if found.records:
        return None
    since = (args.start - timedelta(seconds=args.max_future_skew)).isoformat()
    return {
        "stream": Name.of(args.stream).urn,
        "table_path": table_spec(TABLE, ctx.config).location,
        **_interval_summary(args, found),
        "read": 0,
        **nothing_landed(),
        "reason": f"nothing was appended to {args.stream} since {since} (--start minus "
        "--max-future-skew), so it holds no entry of the interval",
    }


def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    from jobs.spark.delta.catalog import Catalog
    from jobs.spark.quality.validation import preload

    _check_stream(args, ctx)
    catalog = Catalog(ctx.spark, ctx.config)
    preload()
    landing = AuditLanding(args, ctx, catalog)
    base = {"stream": Name.of(args.stream).urn, "table_path": catalog.path(TABLE)}
    if args.step == "batch":
        return {**base, **_batch(args, ctx, catalog, landing)}
    return {**base, **_interval(args, ctx, catalog, landing)}


def _check_stream(args: argparse.Namespace, ctx: JobContext) -> None:
    if not ctx.logs.exists(args.stream):
        raise JobError(
            f"stream {args.stream} does not exist: nothing was ever published to it. Run the "
            "audit relay (streamcore.audit.relay) first, or check --stream"
        )


def _batch(
    args: argparse.Namespace, ctx: JobContext, catalog: Any, landing: AuditLanding
) -> dict[str, Any]:
    from jobs.spark.batches import run_offset_batch

    summary = run_offset_batch(
        ctx,
        app="audit",
        stream=args.stream,
        group=args.group,
        table_path=catalog.path(TABLE),
        land=landing,
        max_records=args.batch_size,
    )
    lag = ctx.logs.lag(args.stream, args.group)
    return {**nothing_landed(), **summary, "lag": lag.lag}


def nothing_landed() -> dict[str, Any]:
    """The landing's part of the summary of a run that read nothing: the keys a landing
    reports, so a summary has the same keys whether the run read entries or not."""
    return {
        "landed": 0,
        "duplicates": 0,
        "quarantined": 0,
        "by_event_type": {},
        "validation": None,
        "data_docs": None,
        "validation_run": None,
        "entries_per_s": 0.0,
    }


def _appended_since(args: argparse.Namespace, ctx: JobContext) -> IntervalRanges:
    """The offsets of everything appended since `--start` minus the skew (where the interval's
    entries can be, whatever their lateness); JobError if the log purged part of that."""
    from jobs.spark.logs.intervals import interval_ranges

    start_ms, _end_ms = interval_ms(args)
    since_ms = start_ms - int(args.max_future_skew * 1000)
    found = interval_ranges(ctx.logs, args.stream, since_ms, None)
    if not found.complete:
        raise JobError(
            f"the interval [{args.start.isoformat()}, {args.end.isoformat()}) begins before "
            f"the oldest entry {args.stream} still holds: a rerun would give back only part of "
            "it. Nothing was written; rerun a more recent interval",
            _interval_summary(args, found),
        )
    return found


def _interval_summary(args: argparse.Namespace, found: IntervalRanges) -> dict[str, Any]:
    return {
        "start": args.start.isoformat(),
        "end": args.end.isoformat(),
        "offsets": {str(p): list(r) for p, r in sorted(found.ranges.items())},
    }


def _interval(
    args: argparse.Namespace, ctx: JobContext, catalog: Any, landing: AuditLanding
) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from jobs.spark.delta.sql import latest_version
    from jobs.spark.logs.streams import read_stream

    start_ms, end_ms = interval_ms(args)
    found = _appended_since(args, ctx)
    summary = _interval_summary(args, found)
    catalog.ensure(TABLE)
    records = read_stream(ctx.spark, ctx.logs, args.stream, found.ranges)
    event_ms = F.unix_millis(F.col("event_date"))
    batch = CheckedBatch(
        job=f"audit/interval/{start_ms}-{end_ms}",
        batch=start_ms,
        run_name=f"audit-interval-{start_ms}-{end_ms}",
        records=found.records,
        unmoved=f"the audit rows of [{args.start.isoformat()}, {args.end.isoformat()}) are as "
        "they were",
    )
    write = landing.land(
        records,
        batch,
        rows=lambda decoded: decoded.where((event_ms >= start_ms) & (event_ms < end_ms)),
    )
    # Not an offset batch: a plain MERGE, idempotent by the event id (the module doc).
    path = catalog.path(TABLE)
    with ctx.phases(write.phase):
        before = latest_version(ctx.spark, path)
        write.action.execute()
        after = latest_version(ctx.spark, path)
    version = after if after != before else None  # None: nothing to add, no commit
    return {**summary, **write.finish(version), "delta_version": version}


class AuditLanding(CheckedLanding):
    """Checked landing of audit entries (`jobs.spark.quality.checked`) with the audit table's write:
    the insert-only MERGE on the event id, as the batch mode's `land` or for an interval."""

    job = "audit"

    def __init__(self, args: argparse.Namespace, ctx: JobContext, catalog: Any) -> None:
        super().__init__(
            ctx,
            catalog,
            failure_threshold=args.failure_threshold,
            result_format=args.gx_result_format,
        )
        self.schema = ctx.schemas.by_name(SCHEMA)
        rules = configured_rules(ctx.config, max_future_skew=args.max_future_skew)
        self.suite = audit_suite(self.schema, rules)
        self.known_types = rules.event_types

    def run_name(self, plan: BatchPlan) -> str:
        return f"audit-batch-{plan.batch}"

    def land(
        self,
        records: DataFrame,
        batch: CheckedBatch,
        *,
        rows: Any = None,
        before_write: Any = None,
    ) -> BatchWrite:
        """Check `records` (the decoded rows `rows` leaves) and return the write of the table's
        rows of the good ones, one per event id; its summary counts the entries per second
        from here to the written version."""
        started = time.monotonic()
        landed = super().land(records, batch, rows=rows, before_write=before_write)

        def then(version: int | None) -> dict[str, Any]:
            summary = landed.finish(version)
            seconds = time.monotonic() - started
            summary["entries_per_s"] = round(summary["read"] / seconds, 1) if seconds > 0 else None
            return summary

        return dataclasses.replace(landed, then=then)

    def aggregates(self, keep: Column, batch: CheckedBatch) -> list[Column]:
        from pyspark.sql import functions as F

        from jobs.spark.delta.keys import unique_key_aggregates

        counted = [
            F.count(F.when(keep & (F.col("event_type") == t), 1)).alias(f"_type {t}")
            for t in self.known_types
        ]
        return [*unique_key_aggregates("event_id", keep, rows=batch.records), *counted]

    def prepare(self) -> Any:
        return self.catalog.check_existing(TABLE)  # then `ensure` below only creates a new one

    def write(self, checked: Checked, batch: CheckedBatch) -> BatchWrite:
        from pyspark.sql import functions as F

        from jobs.spark.delta.keys import read_unique_keys

        fields = [f["name"] for f in self.schema.raw["fields"]]
        rows = checked.good.select(
            *fields,
            F.date_from_unix_date(
                F.floor(F.unix_millis(F.col("event_date")) / _DAY_MS).cast("int")
            ).alias("event_day"),  # the UTC day, whatever the session's time zone
        )
        row = checked.row
        found = {t: row[f"_type {t}"] for t in self.known_types if row[f"_type {t}"]}
        by_type = dict(sorted(found.items(), key=lambda kv: -kv[1]))
        if not read_unique_keys(row, "event_id"):
            rows = rows.dropDuplicates(["event_id"])  # the relay's at-least-once repeats
        # Created outside the batch's transaction (see jobs.spark.documents.repository), and only
        # once a batch lands.
        path = self.catalog.ensure(TABLE)
        merge = _merge_entries(self.ctx.spark, path, rows)
        return BatchWrite(merge, summary={"by_event_type": by_type})

    def finish(self, summary: dict[str, Any], version: int | None) -> dict[str, Any]:
        good = summary.pop("written")
        by_type = summary.pop("by_event_type")
        path = self.catalog.path(TABLE)
        new = _inserted(self.ctx.spark, path, version) if version is not None else {}
        # Landed: the rows new in the table (Delta's commit metrics); the other good entries
        # were in it already (the relay's repeats, an interval run again).
        summary["landed"] = new.get("inserted", 0)
        summary["duplicates"] = good - summary["landed"]
        summary["by_event_type"] = by_type
        return summary


def audit_suite(schema: Any, rules: EntryRules) -> Any:
    """The expectations of entries: those generated from AuditEntry.avsc's field attributes and
    the rules on whole entries of `streamcore.audit.rules`, judged at the job's start (so both
    passes over a batch judge an entry the same way). `publish` checks both kinds, so
    expectations kept only here, in include/expectations/AuditEntry.json, are refused."""
    from jobs.spark.quality.expectations import EXPECTATIONS_DIR, Expectation, load_suite

    suite = load_suite(schema)
    if any(e.origin != "schema" for e in suite.expectations):
        raise JobError(
            f"{EXPECTATIONS_DIR / 'AuditEntry.json'} adds expectations that publish would not "
            "check, so an entry it accepts could stop the audit job: declare the rule in "
            "streamcore/audit/rules.py (event types: [audit] event_types in "
            "include/streamcore.toml) and delete the file"
        )
    now_ms = time.time_ns() // 1_000_000
    for rule in rules.rules:
        kind, kwargs = rule.expectation(now_ms)
        suite.expectations.append(Expectation(kind, kwargs, "streamcore.audit", rule.notes))
    return suite


def _merge_entries(spark: Any, path: str, rows: Any) -> Any:
    """The insert-only MERGE of entry rows into the audit table at `path` (not executed): an
    event id the table has is a repeat of the same entry, left as it is."""
    from jobs.spark.delta.sql import Merge

    # Same event id, same entry, same day: the day prunes the partitions the MERGE joins.
    condition = "t.event_day = s.event_day AND t.event_id = s.event_id"
    # A batch's entries mostly share one day: spread, so that day is not written by one task.
    return Merge(spark, path, rows, condition, "WHEN NOT MATCHED THEN INSERT *", spread=True)


def _inserted(spark: Any, path: str, version: int) -> dict[str, int]:
    """The rows commit `version` of the table at `path` added: {"inserted": n}."""
    from jobs.spark.delta.sink import commit_metrics

    metrics = commit_metrics(spark, path, version)
    if "numTargetRowsInserted" in metrics:
        return {"inserted": int(metrics["numTargetRowsInserted"])}
    return {}


# -- summary --------------------------------------------------------------------------------------
def render(summary: dict[str, Any]) -> str:
    """What a run landed, as an aligned two-column table (the DAG's summary task logs it).
    `summary`: the run's job summaries by step, here `land`'s."""
    from streamcore.text import render_rows

    land = summary["land"]
    validation = land.get("validation") or {}
    failed = validation.get("quarantined_by_expectation") or {}
    by_type = land.get("by_event_type") or {}
    if land.get("step") == "batch":
        mode = f"batch {land.get('batch')} of group {land.get('group')}"
        lag = f"{land.get('lag', 0):,} entries"
    else:
        mode = f"interval [{land.get('start')}, {land.get('end')})"
        lag = "- (interval mode moves no position)"
    offsets = land.get("offsets") or {}
    rows = [
        ("mode", mode),
        ("entries read", f"{land.get('read', 0):,}"),
        ("entries landed", f"{land.get('landed', 0):,}"),
        ("duplicates", f"{land.get('duplicates', 0):,}"),
        ("quarantined", f"{land.get('quarantined', 0):,}"),
        ("failed expectations", ", ".join(f"{k} ({v:,})" for k, v in failed.items()) or "none"),
        ("by event type", ", ".join(f"{k} {v:,}" for k, v in by_type.items()) or "none"),
        ("lag left", lag),
        ("offsets", ", ".join(f"{p}: {lo}..{hi}" for p, (lo, hi) in offsets.items()) or "none"),
        ("Delta table", f"{land.get('table_path', '?')} (version {land.get('delta_version')})"),
        ("Data Docs", str(land.get("data_docs") or "none (nothing to validate)")),
        ("seconds", f"{land.get('seconds', 0):.1f}"),
    ]
    return render_rows(rows)


def main(argv: list[str] | None = None) -> int:
    return run_job(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
