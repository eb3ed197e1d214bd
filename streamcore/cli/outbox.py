"""`streamcore outbox stats | errors | retry | purge`: operate the outbox queue's database.

The database is `--url`, else `$STREAMCORE_OUTBOX_URL`, else SQLite at `STREAMCORE_HOME/outbox.db`.
These commands need no consumer: `retry` hands errored jobs back to the workers of the
application, which run them at once.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from streamcore.cli.context import Context, UsageError, global_options
from streamcore.config import parse_duration_ms
from streamcore.errors import ConfigError, StreamcoreError
from streamcore.text import TextColumn, iso_time, render_table

__all__ = ["register"]

MESSAGE_WIDTH = 60


def _outbox(ctx: Context) -> Any:
    from streamcore.outbox import Outbox
    from streamcore.outbox.schema import TABLE
    from streamcore.sql import default_url

    url = ctx.args.url or default_url(ctx.config)
    if url.startswith("sqlite:///"):
        path = Path(sa.engine.make_url(url).database or "")
        if not path.is_file():
            raise StreamcoreError(
                f"no outbox database at {path}; give --url (or STREAMCORE_OUTBOX_URL) or "
                "--home of the application"
            )
    outbox = Outbox(url)
    try:
        with outbox.engine.connect() as conn:
            present = sa.inspect(conn).has_table(TABLE)
    except sa.exc.SQLAlchemyError as exc:
        outbox.close()
        raise StreamcoreError(f"cannot open the outbox database {url}: {exc}") from exc
    if not present:
        outbox.close()
        raise StreamcoreError(f"{url} has no outbox table {TABLE}; is it the right database?")
    return outbox


def run_stats(ctx: Context) -> int:
    outbox = _outbox(ctx)
    try:
        age = ctx.args.age_days
        report = {
            "queues": outbox.queue_stats(),
            "retries": outbox.retry_stats(age),
            "processing_times": outbox.processing_time_stats(age, ctx.args.queue),
        }
    finally:
        outbox.close()
    if ctx.args.queue:
        report["queues"] = [q for q in report["queues"] if q["queue"] == ctx.args.queue]
        report["retries"] = [q for q in report["retries"] if q["queue"] == ctx.args.queue]
    if ctx.json:
        ctx.emit_json(report)
        return 0
    if not report["queues"]:
        ctx.out("no jobs")
        return 0
    ctx.out(
        render_table(
            ["queue", "init", "processing", "done", "error", "total"],
            [
                [q["queue"], q["init"], q["processing"], q["done"], q["error"], q["total"]]
                for q in report["queues"]
            ],
        )
    )
    if report["retries"]:
        ctx.out(f"\nretries (jobs updated in the last {age:g} days)")
        ctx.out(
            render_table(
                ["queue", "jobs", "retried jobs", "retries", "max tries", "errors"],
                [
                    [
                        r["queue"],
                        r["jobs"],
                        r["retried_jobs"],
                        r["retries"],
                        r["max_tries"],
                        r["errors"],
                    ]
                    for r in report["retries"]
                ],
            )
        )
    if report["processing_times"]:
        ctx.out(f"\nprocessing time in ms (jobs done in the last {age:g} days)")
        keys = ["count", "avg_ms", "min_ms", "max_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms"]
        ctx.out(
            render_table(
                ["queue", "count", "avg", "min", "max", "p50", "p90", "p95", "p99"],
                [[t["queue"], *(t[k] for k in keys)] for t in report["processing_times"]],
            )
        )
    return 0


def _shown(payload: Any) -> Any:
    """A payload for JSON output: decoded by its queue's codec when this process knows the
    queue, else parsed as JSON when it is JSON, else hex."""
    if not isinstance(payload, bytes):
        return payload
    try:
        return json.loads(payload)
    except ValueError:
        return {"hex": payload.hex()}


def run_errors(ctx: Context) -> int:
    outbox = _outbox(ctx)
    try:
        errors = outbox.get_errors(ctx.args.queue, ctx.args.limit)
    finally:
        outbox.close()
    if ctx.json:
        ctx.emit_json(
            {
                "queue": ctx.args.queue,
                "errors": [
                    {
                        "id": e.id,
                        "tries": e.tries,
                        "error_ms": e.error_ms,
                        "error_date": iso_time(e.error_ms),
                        "error_type": e.error_type,
                        "error_message": e.error_message,
                        "error_traceback": e.error_traceback,
                        "payload": _shown(e.payload),
                    }
                    for e in errors
                ],
            }
        )
        return 0
    if not errors:
        ctx.out(f"no job of queue {ctx.args.queue} is in error")
        return 0
    rows = []
    for e in errors:
        message = (e.error_message or "").replace("\n", " ")
        if len(message) > MESSAGE_WIDTH:
            message = message[: MESSAGE_WIDTH - 3] + "..."
        rows.append([e.id, e.tries, iso_time(e.error_ms), e.error_type, message])
    columns: list[str | TextColumn] = [
        "id",
        TextColumn("tries", "right"),
        "last error",
        "type",
        "message",
    ]
    ctx.out(render_table(columns, rows))
    return 0


def run_retry(ctx: Context) -> int:
    outbox = _outbox(ctx)
    try:
        count = outbox.force_retry(ctx.args.queue, ctx.args.id)
    finally:
        outbox.close()
    if ctx.json:
        ctx.emit_json({"queue": ctx.args.queue, "retried": count})
    else:
        ctx.out(f"{count} job(s) of {ctx.args.queue} sent back to the workers")
    return 0


def run_purge(ctx: Context) -> int:
    try:
        older_ms = parse_duration_ms(ctx.args.older_than, "--older-than")
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    outbox = _outbox(ctx)
    try:
        count = outbox.purge(older_ms / 1000, ctx.args.queue)
    finally:
        outbox.close()
    if ctx.json:
        ctx.emit_json({"purged": count, "older_than_ms": older_ms, "queue": ctx.args.queue})
    else:
        ctx.out(f"purged {count} done job(s) finished more than {ctx.args.older_than} ago")
    return 0


def register(sub: Any) -> None:
    parent = global_options()
    url = argparse.ArgumentParser(add_help=False)
    url.add_argument(
        "--url",
        help="SQLAlchemy URL of the outbox database (default: $STREAMCORE_OUTBOX_URL, else "
        "sqlite at STREAMCORE_HOME/outbox.db)",
    )
    top = sub.add_parser(
        "outbox",
        help="inspect and operate the outbox queue",
        description="Statistics, errors, retries and purge of the outbox queue's database.",
    )
    commands = top.add_subparsers(title="outbox commands", dest="outbox_command", required=True)

    p = commands.add_parser(
        "stats",
        parents=[parent, url],
        help="jobs per queue and status, retries, processing times",
        description="Jobs per queue and status; retries and processing-time percentiles over "
        "the last --age-days.",
    )
    p.add_argument("--age-days", type=float, default=1.0, help="window of retries/times (1)")
    p.add_argument("-q", "--queue", help="only this queue")
    p.set_defaults(func=run_stats)

    p = commands.add_parser(
        "errors",
        parents=[parent, url],
        help="jobs in error with their last error",
        description="Jobs of a queue in error, oldest error first (--json adds tracebacks).",
    )
    p.add_argument("queue", help="queue name")
    p.add_argument("--limit", type=int, default=20, help="how many (20)")
    p.set_defaults(func=run_errors)

    p = commands.add_parser(
        "retry",
        parents=[parent, url],
        help="send errored jobs back to the workers now",
        description="Every job of QUEUE in error (or only --id) goes back to init, whatever "
        "its backoff and tries; the application's workers run it at once.",
    )
    p.add_argument("queue", help="queue name")
    p.add_argument("--id", help="only this job")
    p.set_defaults(func=run_retry)

    p = commands.add_parser(
        "purge",
        parents=[parent, url],
        help="delete old done jobs",
        description="Delete done jobs finished more than --older-than ago.",
    )
    p.add_argument("--older-than", required=True, help="e.g. 7d, 12h, 30m")
    p.add_argument("-q", "--queue", help="only this queue")
    p.set_defaults(func=run_purge)
