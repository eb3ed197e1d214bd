"""`streamcore bulk submit | status | abort | list | wait`: bulk commands from the shell
(docs/bulk.md), through `streamcore.bulk.BulkService`.

The command store is the outbox database (`$STREAMCORE_OUTBOX_URL`, else SQLite at
`STREAMCORE_HOME/outbox.db`); the streams are the configuration's logs. A bad action, query,
params or command id exits with 2, like any bad argument.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from streamcore.bulk import (
    BulkParamsError,
    BulkQueryError,
    BulkService,
    BulkStatus,
    CommandNotFoundError,
    State,
    UnknownActionError,
)
from streamcore.bulk.dispatch import DISPATCH_DAG_ID
from streamcore.bulk.model import check_command_id
from streamcore.bulk.progress import progress, progress_line
from streamcore.cli.context import Context, UsageError, global_options
from streamcore.text import iso_time, render_table

__all__ = ["register"]

_BAD_ARGUMENTS = (BulkParamsError, BulkQueryError, UnknownActionError, CommandNotFoundError)
_TIMES = (
    ("submitted", "submit_ms"),
    ("scroll start", "scroll_start_ms"),
    ("scroll end", "scroll_end_ms"),
    ("processing start", "processing_start_ms"),
    ("processing end", "processing_end_ms"),
    ("completed", "completed_ms"),
)


@contextmanager
def _service(ctx: Context) -> Iterator[BulkService]:
    """A service on the configuration (its own log manager for each publish: the CLI must not
    hold the bulk streams' local-log partitions). Errors that mean a wrong argument become
    usage errors (exit 2)."""
    service = BulkService(ctx.config)
    try:
        yield service
    except _BAD_ARGUMENTS as exc:
        raise UsageError(str(exc)) from None
    finally:
        service.close()


def status_json(status: BulkStatus) -> dict[str, Any]:
    """The status as its Avro datum (Nuxeo's field names), with ISO times and the progress."""
    document = status.to_datum()
    for label, name in _TIMES:
        document[label.replace(" ", "_") + "_time"] = iso_time(getattr(status, name))
    document["progress"] = progress(status)
    return document


def _show(ctx: Context, status: BulkStatus) -> None:
    if ctx.json:
        ctx.emit_json(status_json(status))
        return
    rows: list[list[Any]] = [
        ["command", status.command_id],
        ["action", status.action or "-"],
        ["username", status.username or "-"],
        ["state", status.state.value if status.state else "-"],
        ["progress", progress_line(status)],
    ]
    if status.error_count:
        first = f" (first: {status.error_message})" if status.error_message else ""
        rows.append(["errors", f"{status.error_count:,}{first}"])
    if status.query_limit_reached:
        rows.append(["query limit", "reached: the query matched more documents"])
    rows.extend([label, iso_time(getattr(status, name)) or "-"] for label, name in _TIMES)
    rows.extend([f"result {key}", value] for key, value in sorted((status.result or {}).items()))
    ctx.out("\n".join(f"{label:<17} {value}" for label, value in rows))


def _follow(
    ctx: Context, service: BulkService, command_id: str, submitted: BulkStatus | None = None
) -> int:
    """Wait for the command with a line on stderr at each change of its progress, show the last
    status read; the exit code: 0 COMPLETED, 1 ABORTED or not finished after --timeout. A command
    just `submitted` is shown as stored first, so its SCHEDULED line is printed even when a job
    picks it up before the first read."""
    shown = ""

    def show(status: BulkStatus) -> None:
        nonlocal shown
        if status.state is State.SCHEDULED:
            line = (
                f"SCHEDULED: waiting for the dispatcher (the Airflow DAG {DISPATCH_DAG_ID}) to "
                "start its job"
            )
        else:
            line = f"{status.state.value if status.state else '-'} {progress_line(status)}"
        if line != shown:
            ctx.err(line)
            shown = line

    if submitted is not None:
        show(submitted)
    status = service.wait(command_id, ctx.args.timeout, on_status=show)
    _show(ctx, status)
    if status.state is State.COMPLETED:
        return 0
    if not (status.state is not None and status.state.terminal):
        ctx.err(
            f"streamcore: command {status.command_id} not finished after {ctx.args.timeout:g} s"
        )
    return 1


def run_submit(ctx: Context) -> int:
    args = ctx.args
    try:
        params = json.loads(args.params) if args.params is not None else None
    except ValueError as exc:
        raise UsageError(f"--params is not JSON ({exc}); give an object, e.g. '{{}}'") from None
    username = args.username or os.environ.get("USER") or getpass.getuser()
    with _service(ctx) as service:
        status = service.submit(
            args.action,
            args.query,
            params,
            username=username,
            command_id=args.id,
            bucket_size=args.bucket_size,
            batch_size=args.batch_size,
            query_limit=args.query_limit,
        )
        if args.wait:
            return _follow(ctx, service, status.command_id, submitted=status)
    _show(ctx, status)
    return 0


def run_status(ctx: Context) -> int:
    with _service(ctx) as service:
        status = service.status(ctx.args.id)
    _show(ctx, status)
    return 0


def run_abort(ctx: Context) -> int:
    with _service(ctx) as service:
        status = service.abort(ctx.args.id)
    _show(ctx, status)
    return 0


def run_wait(ctx: Context) -> int:
    with _service(ctx) as service:
        return _follow(ctx, service, ctx.args.id)


def run_list(ctx: Context) -> int:
    if ctx.args.limit <= 0:
        raise UsageError(f"--limit {ctx.args.limit}: give a positive number")
    with _service(ctx) as service:
        statuses = service.list(state=ctx.args.state, action=ctx.args.action, limit=ctx.args.limit)
    if ctx.json:
        ctx.emit_json({"commands": [status_json(s) for s in statuses]})
        return 0
    if not statuses:
        ctx.out("no bulk commands")
        return 0
    ctx.out(
        render_table(
            ["command", "action", "username", "state", "progress", "submitted"],
            [
                [
                    s.command_id,
                    s.action or "-",
                    s.username or "-",
                    s.state.value if s.state else "-",
                    progress_line(s),
                    iso_time(s.submit_ms) or "-",
                ]
                for s in statuses
            ],
        )
    )
    return 0


def _positive(value: str) -> int:
    number = int(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return number


def _command_id(value: str) -> str:
    try:
        return check_command_id(value)
    except BulkParamsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(sub: Any) -> None:
    parent = global_options()
    top = sub.add_parser(
        "bulk",
        help="submit, follow and abort bulk actions",
        description="Bulk commands (docs/bulk.md): an action run over every repository "
        "document a query matches, by the bulk Spark job.",
    )
    commands = top.add_subparsers(title="bulk commands", dest="bulk_command", required=True)

    p = commands.add_parser(
        "submit",
        parents=[parent],
        help="check and submit a command",
        description="Check ACTION, --query and --params, store the command SCHEDULED and "
        "publish it on bulk/command; prints its status. Airflow's dispatcher DAG "
        f"({DISPATCH_DAG_ID}) starts its job; --wait follows it to the end.",
    )
    p.add_argument("action", help="action name, e.g. setProperties, trash, csvExport")
    p.add_argument("--query", required=True, help="Spark SQL predicate, e.g. \"type = 'Note'\"")
    p.add_argument("--params", help="the action's params as a JSON object")
    p.add_argument("--username", help="who submits (default: $USER)")
    p.add_argument("--bucket-size", type=_positive, help="ids per bucket (action default)")
    p.add_argument("--batch-size", type=_positive, help="ids per batch (action default)")
    p.add_argument("--query-limit", type=int, help="at most N documents; 0 = all")
    p.add_argument(
        "--id",
        type=_command_id,
        help="command id (default: a new UUID); a stored id is not resubmitted",
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="then wait until the command is COMPLETED (exit 0) or ABORTED (exit 1), with its "
        "progress on stderr",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="with --wait: give up after this many seconds, exit 1 (600)",
    )
    p.set_defaults(func=run_submit)

    p = commands.add_parser(
        "status",
        parents=[parent],
        help="a command's status",
        description="State, progress (processed/total, percent, rate, ETA) and times.",
    )
    p.add_argument("id", type=_command_id, help="command id")
    p.set_defaults(func=run_status)

    p = commands.add_parser(
        "abort",
        parents=[parent],
        help="abort a command",
        description="The command becomes ABORTED; the job stops at its next bucket. A "
        "completed command cannot be aborted (exit 1).",
    )
    p.add_argument("id", type=_command_id, help="command id")
    p.set_defaults(func=run_abort)

    p = commands.add_parser(
        "list",
        parents=[parent],
        help="commands, newest first",
        description="Commands, newest submitted first.",
    )
    p.add_argument("--state", choices=[s.value for s in State], help="only this state")
    p.add_argument("--action", help="only this action")
    p.add_argument("--limit", type=int, default=50, help="how many (50)")
    p.set_defaults(func=run_list)

    p = commands.add_parser(
        "wait",
        parents=[parent],
        help="wait until a command completes or is aborted",
        description="Poll every 100 ms until the command is COMPLETED (exit 0) or ABORTED "
        "(exit 1), with its progress on stderr; exit 1 as well when --timeout passes first.",
    )
    p.add_argument("id", type=_command_id, help="command id")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds (60)")
    p.set_defaults(func=run_wait)
