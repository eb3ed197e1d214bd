"""`streamcore recovery list | redrive | skip | reset | outbox`: see what failed, repair it
(docs/recovery.md), through `streamcore.recovery.Recovery`.

Every command that changes something takes `--reason` (kept in its audit entry) and `--dry-run`
(shows the same table, changes nothing); `skip` and `reset` refuse while the group has live
members unless `--force`. A selection that does not fit the logs (unknown stream or group, an
offset out of range, a reset into purged data) exits with 2 before anything changes.
"""

from __future__ import annotations

import getpass
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from streamcore.cli.context import Context, UsageError, global_options, group_name
from streamcore.recovery import (
    DeadLetterFilter,
    Outcome,
    Recovery,
    SelectionError,
    error_counts,
    parse_date_ms,
    parse_offset,
    parse_reset_target,
)
from streamcore.text import Progress, format_time, render_table

__all__ = ["register"]

MESSAGE_WIDTH = 50


@contextmanager
def _recovery(ctx: Context) -> Iterator[Recovery]:
    recovery = Recovery(
        ctx.config,
        manager=ctx.manager,
        url=ctx.args.url,
        codec=ctx.args.codec,
        principal=getattr(ctx.args, "user", None) or getpass.getuser(),
    )
    try:
        yield recovery
    except SelectionError as exc:
        raise UsageError(str(exc)) from None
    finally:
        recovery.close()


@contextmanager
def _usage() -> Iterator[None]:
    """A position the arguments write wrongly is a usage error (exit 2)."""
    try:
        yield
    except SelectionError as exc:
        raise UsageError(str(exc)) from None


def _selection(ctx: Context) -> DeadLetterFilter:
    args = ctx.args
    with _usage():
        offsets = frozenset(
            parse_offset(item, None, "--offsets")
            for item in (args.offsets or "").split(",")
            if item.strip()
        )
        since_ms = parse_date_ms(args.since, "--since") if args.since else None
        until_ms = parse_date_ms(args.until, "--until") if args.until else None
    return DeadLetterFilter(
        streams=tuple(args.stream or ()),
        computation=args.computation,
        error=args.error,
        since_ms=since_ms,
        until_ms=until_ms,
        offsets=offsets,
    )


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_WIDTH else text[: MESSAGE_WIDTH - 3] + "..."


class _ScanProgress:
    """Records read so far with their rate on stderr, once a scan takes over a second."""

    def __init__(self, label: str) -> None:
        self.progress = Progress(label)
        self.read = 0

    def __call__(self, read: int, total: int) -> None:
        self.read = read
        self.progress.total = total
        self.progress.update(read)

    def done(self) -> None:
        if self.progress.elapsed >= self.progress.interval:
            self.progress.done(self.read)


def run_list(ctx: Context) -> int:
    scanning = _ScanProgress("scan dead letters")
    with _recovery(ctx) as recovery:
        selection = _selection(ctx)
        entries = recovery.dead_letters(selection, limit=ctx.args.limit or None, progress=scanning)
    scanning.done()
    counts = error_counts(entries)
    if ctx.json:
        ctx.emit_json(
            {"dead_letters": [e.to_dict() for e in entries], "error_counts": dict(counts)}
        )
        return 0
    rows: list[list[Any]] = []
    for e in entries:
        letter = e.letter
        if letter is None:
            rows.append(
                [
                    e.dlq,
                    f"{e.partition}:{e.offset}",
                    "-",
                    "-",
                    "-",
                    "-",
                    _short(e.foreign or ""),
                    "-",
                    "-",
                ]
            )
            continue
        source = f"{letter.stream}@{letter.partition}:{letter.offset}" if letter.stream else "-"
        rows.append(
            [
                e.dlq,
                f"{e.partition}:{e.offset}",
                letter.computation,
                source,
                letter.attempts,
                letter.error_type,
                _short(letter.error),
                format_time(letter.first_failed_at),
                format_time(letter.failed_at),
            ]
        )
    headers = [
        "dlq",
        "at",
        "computation",
        "source",
        "attempts",
        "error",
        "message",
        "first failure",
        "last failure",
    ]
    ctx.out(render_table(headers, rows))
    ctx.out()
    ctx.out(render_table(["error class", "records"], [list(c) for c in counts]))
    limited = " (--limit reached)" if ctx.args.limit and len(entries) >= ctx.args.limit else ""
    ctx.out(f"{len(entries)} dead letter(s){limited}")
    return 0


def _show(ctx: Context, outcome: Outcome, done: str) -> int:
    if ctx.json:
        ctx.emit_json(outcome.to_dict())
        return 0
    if outcome.rows:
        headers = list(outcome.rows[0])
        ctx.out(render_table(headers, [[row[h] for h in headers] for row in outcome.rows]))
    facts = ", ".join(
        f"{k} {v}"
        for k, v in outcome.summary.items()
        if k not in ("dry_run", "targets") and v not in (None, [], {})
    )
    if outcome.dry_run:
        ctx.out(f"dry run, nothing changed: {facts}")
    else:
        audit = f"; audit event {outcome.audit_event_id}" if outcome.audit_event_id else ""
        ctx.out(f"{done}: {facts}{audit}")
    return 0


def run_redrive(ctx: Context) -> int:
    args = ctx.args
    selection = _selection(ctx)
    chosen = selection.offsets or selection.computation or selection.error
    if not (chosen or selection.since_ms or selection.until_ms or args.all):
        raise UsageError(
            "choose what to redrive: --offsets, a filter (--computation, --error, --since, "
            "--until), or --all"
        )
    scanning = _ScanProgress("scan dead letters")
    with _recovery(ctx) as recovery:
        outcome = recovery.redrive(
            selection, reason=args.reason, target=args.to, dry_run=args.dry_run, progress=scanning
        )
    scanning.done()
    return _show(ctx, outcome, "redriven")


def run_skip(ctx: Context) -> int:
    args = ctx.args
    with _usage():
        partition, offset = parse_offset(args.offset, None, "--offset")
    with _recovery(ctx) as recovery:
        outcome = recovery.skip(
            ctx.log(args.stream).urn,
            group_name(args.group),
            partition,
            offset,
            reason=args.reason,
            dry_run=args.dry_run,
            force=args.force,
        )
    return _show(ctx, outcome, "moved")


def run_reset(ctx: Context) -> int:
    args = ctx.args
    if args.to_offset is not None:
        kind, value, option = "offset", args.to_offset, "--to-offset"
    elif args.to_date is not None:
        kind, value, option = "date", args.to_date, "--to-date"
    elif args.to_watermark is not None:
        kind, value, option = "watermark", args.to_watermark, "--to-watermark"
    else:
        kind, value, option = "start" if args.to_start else "end", None, ""
    with _usage():
        target, partitions = parse_reset_target(
            kind, value, partition=args.partition, option=option
        )
    with _recovery(ctx) as recovery:
        outcome = recovery.reset(
            ctx.log(args.stream).urn,
            group_name(args.group),
            target,
            reason=args.reason,
            partitions=partitions,
            dry_run=args.dry_run,
            force=args.force,
        )
    return _show(ctx, outcome, "moved")


def run_outbox_errors(ctx: Context) -> int:
    with _recovery(ctx) as recovery:
        errors = recovery.outbox_errors(ctx.args.queue, limit=ctx.args.limit)
    if ctx.json:
        ctx.emit_json(
            [
                {
                    "id": e.id,
                    "tries": e.tries,
                    "error_ms": e.error_ms,
                    "error_type": e.error_type,
                    "error_message": e.error_message,
                }
                for e in errors
            ]
        )
        return 0
    rows = [
        [e.id, e.tries, format_time(e.error_ms), e.error_type or "-", _short(e.error_message or "")]
        for e in errors
    ]
    ctx.out(render_table(["id", "tries", "last error", "error", "message"], rows))
    ctx.out(f"{len(errors)} job(s) in error in {ctx.args.queue}")
    return 0


def run_outbox_retry(ctx: Context) -> int:
    args = ctx.args
    with _recovery(ctx) as recovery:
        outcome = recovery.outbox_retry(
            args.queue, reason=args.reason, job_id=args.id, dry_run=args.dry_run
        )
    return _show(ctx, outcome, "sent back to the workers")


def run_outbox_purge(ctx: Context) -> int:
    args = ctx.args
    if args.older_than < 0:
        raise UsageError(f"--older-than {args.older_than}: give seconds >= 0")
    with _recovery(ctx) as recovery:
        outcome = recovery.outbox_purge(
            older_than_s=args.older_than, reason=args.reason, queue=args.queue, dry_run=args.dry_run
        )
    return _show(ctx, outcome, "purged")


def register(sub: Any) -> None:
    parent = global_options()
    common = [parent]
    top = sub.add_parser(
        "recovery",
        help="dead letters, poison records, group positions, outbox errors",
        description="See what failed and repair it (docs/recovery.md). Changes need --reason, "
        "accept --dry-run and are written to the audit trail.",
    )
    commands = top.add_subparsers(title="recovery commands", dest="recovery_command", required=True)

    def add(
        name: str,
        help_text: str,
        description: str,
        func: Any,
        *,
        changes: bool,
        under: Any = commands,
    ) -> Any:
        p = under.add_parser(name, parents=common, help=help_text, description=description)
        _shared(p, changes)
        p.set_defaults(func=func)
        return p

    p = add(
        "list",
        "dead letters with their failure",
        "Dead letters of every */dlq-* stream (or --stream), with the failed computation, "
        "where the record came from, attempts, error and failure times; then counts per "
        "error class.",
        run_list,
        changes=False,
    )
    _filters(p)
    p.add_argument("--limit", type=int, default=1000, help="at most N records (1000; 0 = all)")

    p = add(
        "redrive",
        "send dead letters back to their stream",
        "Append the selected dead letters' original records (key, data, watermark) to the "
        "stream they failed on, or --to STREAM. Each is redriven once: a rerun skips them.",
        run_redrive,
        changes=True,
    )
    _filters(p)
    p.add_argument("--all", action="store_true", help="every dead letter of the streams")
    p.add_argument("--to", metavar="STREAM", help="redrive to this stream instead")

    p = add(
        "skip",
        "move a group past a poison record",
        "Advance GROUP past the record at --offset P:O of --stream, which must be where the "
        "group stands (the record its computation terminated on); restart the computation "
        "after.",
        run_skip,
        changes=True,
    )
    p.add_argument("--stream", "-l", required=True, help="the input stream")
    p.add_argument("--group", "-g", required=True, help="the group (a computation's name)")
    p.add_argument("--offset", required=True, metavar="P:O", help="partition:offset to skip")
    p.add_argument("--force", action="store_true", help="even while the group has live members")

    p = add(
        "reset",
        "move a group's positions, with a preview",
        "Set GROUP's positions on --stream to an offset, a date, a watermark, the start or the "
        "end; the table shows per partition what will be re-read or skipped.",
        run_reset,
        changes=True,
    )
    p.add_argument("--stream", "-l", required=True, help="the stream")
    p.add_argument("--group", "-g", required=True, help="the group")
    p.add_argument("-p", "--partition", type=int, help="only this partition")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--to-offset", metavar="P:O", help="partition P, offset O")
    where.add_argument("--to-date", metavar="ISO8601", help="first record appended at/after")
    where.add_argument(
        "--to-watermark", type=int, metavar="W", help="first record with watermark >= W"
    )
    where.add_argument("--to-start", action="store_true", help="the oldest retained record")
    where.add_argument("--to-end", action="store_true", help="after the last record")
    p.add_argument("--force", action="store_true", help="even while the group has live members")

    outbox = commands.add_parser(
        "outbox", help="outbox jobs in error", description="Outbox errors."
    )
    jobs = outbox.add_subparsers(title="outbox commands", dest="outbox_command", required=True)
    p = add(
        "errors",
        "jobs in error",
        "Jobs of QUEUE in error, oldest first.",
        run_outbox_errors,
        changes=False,
        under=jobs,
    )
    p.add_argument("queue", help="queue, e.g. audit/entries")
    p.add_argument("--limit", type=int, default=100, help="at most N (100)")
    p = add(
        "retry",
        "send errors back to the workers",
        "Send the jobs of QUEUE in error (or --id) back to the workers.",
        run_outbox_retry,
        changes=True,
        under=jobs,
    )
    p.add_argument("queue", help="queue")
    p.add_argument("--id", help="only this job")
    p = add(
        "purge",
        "delete old done jobs",
        "Delete done jobs finished more than --older-than seconds ago.",
        run_outbox_purge,
        changes=True,
        under=jobs,
    )
    p.add_argument(
        "--older-than", type=float, required=True, metavar="SECONDS", help="age of the done jobs"
    )
    p.add_argument("--queue", help="only this queue")


def _shared(p: Any, changes: bool) -> None:
    p.add_argument(
        "--url",
        help="outbox database (default: $STREAMCORE_OUTBOX_URL, else STREAMCORE_HOME/outbox.db)",
    )
    p.add_argument("--codec", help="Record codec of the streams (default: config codec.default)")
    if changes:
        p.add_argument(
            "--reason", default="", help="why (kept in the audit entry; required unless --dry-run)"
        )
        p.add_argument(
            "--dry-run", action="store_true", help="show what would change, change nothing"
        )
        p.add_argument("--user", help="who acts (default: $USER)")


def _filters(p: Any) -> None:
    p.add_argument(
        "--stream", "-l", action="append", help="a dead-letter stream (repeatable; default all)"
    )
    p.add_argument("--computation", help="only this computation's failures")
    p.add_argument("--error", help="error class, or text of the message")
    p.add_argument("--since", metavar="ISO8601", help="last failure at/after")
    p.add_argument("--until", metavar="ISO8601", help="last failure before")
    p.add_argument("--offsets", metavar="P:O,...", help="only these records (one --stream)")
