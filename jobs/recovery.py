"""Lists and redrives dead letters at scale: the Spark edition of `streamcore recovery list` and
`redrive` (docs/recovery.md), for dead-letter streams of millions of records.

    spark-submit jobs/recovery.py --action list --computation enrich --output /tmp/dead-letters
    spark-submit jobs/recovery.py --action redrive --error TimeoutError --reason "feed fixed"

`--engine process` runs the same action through `streamcore.recovery` in this process, without
Spark: the DAG `streamcore_recovery` uses it for selections under its `spark_threshold`. Both
engines select with the same rules, keep the same redrive ledger (so a record is redriven once,
whichever engine ran before) and write the same audit entry.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path
from typing import Any

from jobs.spark.job import JobArgumentError, JobContext, JobError, job_parser, run_job
from streamcore.errors import InvalidNameError
from streamcore.names import Name

ACTIONS = ("list", "redrive")
ENGINES = ("spark", "process")
SAMPLE = 20


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser("recovery", __doc__.split("\n\n")[0])
    parser.add_argument("--action", choices=ACTIONS, required=True)
    parser.add_argument(
        "--engine", choices=ENGINES, default="spark", help="spark (default) or process"
    )
    parser.add_argument(
        "--stream", action="append", help="a dead-letter stream (repeatable; default all)"
    )
    parser.add_argument("--computation", help="only dead letters of this computation")
    parser.add_argument("--error", help="error class, or text of the error message")
    parser.add_argument("--since", metavar="ISO8601", help="last failure at or after")
    parser.add_argument("--until", metavar="ISO8601", help="last failure before")
    parser.add_argument("--offsets", metavar="P:O,...", help="these records of one stream")
    parser.add_argument("--all", action="store_true", help="redrive: every dead letter")
    parser.add_argument("--to", metavar="STREAM", help="redrive: to this stream instead")
    parser.add_argument("--reason", default="", help="redrive: why (required unless dry run)")
    parser.add_argument("--user", help="who acts, for the audit entry (default: $USER)")
    parser.add_argument("--dry-run", action="store_true", help="redrive: change nothing")
    parser.add_argument("--output", help="list: write the whole listing here as Parquet")
    parser.add_argument(
        "--sample", type=int, default=SAMPLE, help=f"list: entries in the summary ({SAMPLE})"
    )
    parser.add_argument("--url", help="outbox database (default: the configuration's)")
    return parser


def check_args(args: argparse.Namespace) -> None:
    selection(args)
    for stream in (args.stream or []) + ([args.to] if args.to else []):
        try:
            Name.of(stream)
        except InvalidNameError as exc:
            raise JobArgumentError(f"{stream!r}: {exc}") from None
    if args.action == "redrive":
        if not (args.offsets or args.all or _filtered(args)):
            raise JobArgumentError(
                "a redrive selects explicitly: give --offsets, a filter (--computation, "
                "--error, --since, --until) or --all"
            )
        if not args.dry_run and not args.reason.strip():
            raise JobArgumentError("a redrive that changes something needs --reason")
    if args.sample < 0:
        raise JobArgumentError(f"--sample must be 0 or more, not {args.sample}")


def _filtered(args: argparse.Namespace) -> bool:
    return any((args.computation, args.error, args.since, args.until))


def selection(args: argparse.Namespace) -> Any:
    """The `DeadLetterFilter` the arguments give; JobArgumentError names a malformed one."""
    from streamcore.recovery import DeadLetterFilter, SelectionError, parse_date_ms, parse_offset

    try:
        offsets = frozenset(
            parse_offset(item, None, "--offsets")
            for item in (args.offsets or "").split(",")
            if item.strip()
        )
        since = parse_date_ms(args.since, "--since") if args.since else None
        until = parse_date_ms(args.until, "--until") if args.until else None
    except SelectionError as exc:
        raise JobArgumentError(str(exc)) from None
    return DeadLetterFilter(
        streams=tuple(args.stream or ()),
        computation=args.computation,
        error=args.error,
        since_ms=since,
        until_ms=until,
        offsets=offsets,
    )


def selected_records(args: argparse.Namespace, manager: Any) -> int:
    """How many records the selection reads (from the offsets, before any is read), after
    checking it against the logs (`SelectionError`): how the DAG chooses the engine."""
    from streamcore.recovery.deadletters import selection_bounds

    chosen = selection(args)
    bounds = selection_bounds(manager, chosen)
    if chosen.offsets:
        return len(chosen.offsets)
    return sum(e - s for starts, ends in bounds.values() for s, e in zip(starts, ends, strict=True))


def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    from streamcore.recovery import Recovery, RecoveryError

    recovery = Recovery(
        ctx.config, manager=ctx.logs, url=args.url, principal=args.user or getpass.getuser()
    )
    base = {"action": args.action, "engine": args.engine, "dry_run": bool(args.dry_run)}
    try:
        if args.engine == "process":
            done = _in_process(args, recovery)
        else:
            _check_codec(ctx)
            done = _with_spark(args, ctx, recovery)
    except RecoveryError as exc:
        raise JobError(str(exc), base) from None
    finally:
        recovery.close()
    return {**base, **done}


def _in_process(args: argparse.Namespace, recovery: Any) -> dict[str, Any]:
    from collections import Counter

    from streamcore.recovery import error_counts

    chosen = selection(args)
    if args.action == "list":
        entries = recovery.dead_letters(chosen)
        if args.output:
            _write_listing([e.to_dict() for e in entries], args.output)
        by_stream = Counter((e.dlq, e.letter.computation if e.letter else None) for e in entries)
        sample = [e.to_dict() for e in entries[: args.sample]]
        errors = sorted(error_counts(entries), key=lambda kv: (-kv[1], kv[0]))
        return _listing(errors, dict(by_stream), sample, args.output)
    outcome = recovery.redrive(chosen, reason=args.reason, target=args.to, dry_run=args.dry_run)
    return {**outcome.summary, "audit_event_id": outcome.audit_event_id}


def _check_codec(ctx: JobContext) -> None:
    if ctx.config.default_codec != "avro":
        raise JobError(
            f"the Spark engine reads Record envelopes of the avro codec; this configuration's "
            f"codec.default is {ctx.config.default_codec!r}: run with --engine process"
        )


def _listing(
    errors: list[tuple[str, int]],
    by_stream: dict[tuple[str, str | None], int],
    sample: list[dict[str, Any]],
    output: str | None,
) -> dict[str, Any]:
    """The list summary: counts per error class and per (stream, computation), a sample."""
    return {
        "selected": sum(n for _, n in errors),
        "by_error": [{"error_type": e, "records": n} for e, n in errors],
        "by_stream": [
            {"dlq": d, "computation": c, "records": n}
            for (d, c), n in sorted(by_stream.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))
        ],
        "sample": sample,
        "output": output,
    }


def _write_listing(rows: list[dict[str, Any]], output: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from jobs.spark.logs.dead_letters import LISTING_COLUMNS

    folder = Path(output)
    folder.mkdir(parents=True, exist_ok=True)
    columns = {c: [r.get(c) for r in rows] for c in LISTING_COLUMNS}
    pq.write_table(pa.table(columns), folder / "part-00000.parquet")


def _with_spark(args: argparse.Namespace, ctx: JobContext, recovery: Any) -> dict[str, Any]:
    from streamcore.recovery.deadletters import selection_bounds

    chosen = selection(args)
    bounds = selection_bounds(ctx.logs, chosen)
    from jobs.spark.logs.dead_letters import read_dead_letters

    with ctx.phases("read"):
        letters = read_dead_letters(ctx.spark, ctx.logs, bounds, chosen)
    if args.action == "list":
        return _list_spark(args, ctx, letters)
    return _redrive_spark(args, ctx, recovery, chosen, letters)


def _list_spark(args: argparse.Namespace, ctx: JobContext, letters: Any) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from jobs.spark.logs.dead_letters import LISTING_COLUMNS

    if letters is None:
        return _listing([], {}, [], args.output)
    listing = letters.select(*LISTING_COLUMNS)
    with ctx.phases("count"):
        error_class = F.coalesce("error_type", F.lit("(not a dead letter)"))
        counts = listing.groupBy("dlq", "computation", error_class.alias("e")).count().collect()
    if args.output:
        with ctx.phases("write"):
            listing.orderBy("dlq", "partition", "offset").write.mode("overwrite").parquet(
                args.output
            )
    with ctx.phases("sample"):
        sample = listing.orderBy("dlq", "partition", "offset").limit(args.sample).collect()
    per_error: dict[str, int] = {}
    per_stream: dict[tuple[str, str | None], int] = {}
    for row in counts:
        per_error[row["e"]] = per_error.get(row["e"], 0) + row["count"]
        key = (row["dlq"], row["computation"])
        per_stream[key] = per_stream.get(key, 0) + row["count"]
    errors = sorted(per_error.items(), key=lambda kv: (-kv[1], kv[0]))
    return _listing(errors, per_stream, [_entry_dict(r.asDict()) for r in sample], args.output)


def _entry_dict(row: dict[str, Any]) -> dict[str, Any]:
    """A listing row as `DeadLetterEntry.to_dict()` gives it: a foreign record has only its
    place and why, a dead letter no `foreign`."""
    place = ("dlq", "partition", "offset", "appended_ms")
    if row["foreign"] is not None:
        return {**{k: row[k] for k in place}, "foreign": row["foreign"]}
    return {k: v for k, v in row.items() if k != "foreign"}


def _redrive_spark(
    args: argparse.Namespace, ctx: JobContext, recovery: Any, chosen: Any, letters: Any
) -> dict[str, Any]:
    """Redrive with the ledger of the in-process redrive, under its claim of the dead-letter
    streams: rows `pending` (bulk, from the driver) → append from the executors → rows `done`
    with the audit entry, in one transaction. Rows already in the ledger are skipped (`done`),
    or resolved by the in-process redrive (`pending`: a run that stopped between its append
    and its ledger update, which looks for each record in its target) and marked done in that
    same last transaction."""
    from contextlib import nullcontext

    from pyspark.sql import functions as F

    from streamcore.recovery import RedriveResult
    from streamcore.recovery.service import selection_details

    result = RedriveResult(dry_run=bool(args.dry_run))
    if letters is None:
        return {**result.to_dict(), "audit_event_id": None}
    target = F.lit(Name.of(args.to).urn) if args.to else F.col("stream")
    with ctx.phases("select"):
        chosen_rows = (
            letters.select("dlq", "partition", "offset", "foreign", target.alias("target"))
            .toArrow()
            .to_pylist()
        )
    result.foreign = sum(1 for r in chosen_rows if r["foreign"] is not None)
    rows = [r for r in chosen_rows if r["foreign"] is None]
    result.selected = len(rows)
    _check_targets(ctx, rows)
    ledger = recovery.read_ledger() if args.dry_run else recovery.ledger
    # The claim covers reading the ledger too: a pending row is then no other run's.
    claim = nullcontext() if args.dry_run else ledger.claim({r["dlq"] for r in rows})
    with claim:
        todo, pending, known = _classify(ledger, rows, result)
        landed = _resolve_pending(args, recovery, ledger, chosen, pending, result)
        for row in todo:
            result.targets[Name.of(row["target"]).urn] += 1
        result.redriven += len(todo)
        if args.dry_run:
            return {**result.to_dict(), "audit_event_id": None}
        if todo:
            with ctx.phases("ledger"):
                _begin(ctx, recovery, args, todo)
            ctx.fault_point("recovery.after_ledger_begin")
            with ctx.phases("append"):
                _append(ctx, letters, target, known, todo)
            ctx.fault_point("recovery.before_ledger_done")
            landed += [(r["dlq"], r["partition"], r["offset"], None, None) for r in todo]

        def trail(conn: Any) -> str:
            entry = {"selection": selection_details(chosen), **result.to_dict(), "engine": "spark"}
            return recovery.publish_audit(conn, "redrive", args.reason, entry)

        with ctx.phases("ledger"):
            result.audit_event_id = ledger.finish(landed, trail)
    return {**result.to_dict(), "audit_event_id": result.audit_event_id}


def _check_targets(ctx: JobContext, rows: list[dict[str, Any]]) -> None:
    orphan = next((r for r in rows if not r["target"]), None)
    if orphan is not None:
        raise JobError(
            f"{orphan['dlq']} {orphan['partition']}:{orphan['offset']} came from no input "
            "stream (a timer or process_failure output); redrive it to a named stream with --to"
        )
    for name in sorted({r["target"] for r in rows}):
        if not ctx.logs.exists(name):
            raise JobError(
                f"cannot redrive to {Name.of(name).urn}: the stream does not exist; create it, "
                "or redrive to an existing stream with --to"
            )


def _classify(
    ledger: Any, rows: list[dict[str, Any]], result: Any
) -> tuple[list[dict[str, Any]], dict[str, set[tuple[int, int]]], list[tuple[str, int, int]]]:
    """(rows to redrive now, {dlq: pending positions}, every position the ledger holds); no
    `ledger` (no database yet) holds none."""
    from streamcore.recovery.ledger import DONE

    todo: list[dict[str, Any]] = []
    pending: dict[str, set[tuple[int, int]]] = {}
    known: list[tuple[str, int, int]] = []
    ledgers = {dlq: ledger.rows(dlq) if ledger else {} for dlq in {r["dlq"] for r in rows}}
    for r in rows:
        found = ledgers[r["dlq"]].get((r["partition"], r["offset"]))
        if found is None:
            todo.append(r)
            continue
        known.append((r["dlq"], r["partition"], r["offset"]))
        if found.state == DONE:
            result.already += 1
        else:
            pending.setdefault(r["dlq"], set()).add((r["partition"], r["offset"]))
    return todo, pending, known


def _resolve_pending(
    args: argparse.Namespace,
    recovery: Any,
    ledger: Any,
    chosen: Any,
    pending: dict[str, set[tuple[int, int]]],
    result: Any,
) -> list[Any]:
    """Resolve the `pending` rows in process (found in their target, or appended again), under
    the claim the caller holds; the letters to mark done with the rest of the run."""
    from dataclasses import replace

    # From its module: the face cannot hand out a name its own submodule has (importing
    # streamcore.recovery.redrive binds that name on the package to the module).
    from streamcore.recovery.redrive import redrive

    landed = []
    for dlq, positions in sorted(pending.items()):
        again = redrive(
            recovery.manager,
            ledger,
            replace(chosen, streams=(dlq,), offsets=frozenset(positions)),
            codec=recovery.codec,
            principal=recovery.principal,
            reason=args.reason,
            target=args.to,
            dry_run=args.dry_run,
            finish=False,
        )
        result.completed += again.completed
        result.redriven += again.redriven
        result.targets.update(again.targets)
        landed += again.landed
    return landed


def _begin(
    ctx: JobContext, recovery: Any, args: argparse.Namespace, todo: list[dict[str, Any]]
) -> None:
    import time

    from streamcore.recovery.ledger import PENDING, LedgerRow

    now = int(time.time() * 1000)
    ends = {t: tuple(ctx.logs.end_offsets(t)) for t in {r["target"] for r in todo}}
    recovery.ledger.begin(
        [
            LedgerRow(
                r["dlq"],
                r["partition"],
                r["offset"],
                Name.of(r["target"]).urn,
                PENDING,
                ends[r["target"]],
                None,
                None,
                now,
                recovery.principal,
                args.reason,
            )
            for r in todo
        ]
    )


def _append(
    ctx: JobContext,
    letters: Any,
    target: Any,
    known: list[tuple[str, int, int]],
    todo: list[dict[str, Any]],
) -> None:
    from pyspark.sql import functions as F

    from jobs.spark.logs.log_writer import append_dataframe

    rows = letters.where(F.col("foreign").isNull()).withColumn("_target", target)
    if known:
        ledgered = ctx.spark.createDataFrame(known, "dlq string, partition int, offset long")
        rows = rows.join(F.broadcast(ledgered), ["dlq", "partition", "offset"], "left_anti")
    for name in sorted({r["target"] for r in todo}):
        values = rows.where(F.col("_target") == name).select(
            "key", F.col("record_value").alias("value")
        )
        append_dataframe(values, ctx.logs, name, layout="by_key")


def main(argv: list[str] | None = None) -> int:
    return run_job(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(run_job(sys.modules[__name__]))
