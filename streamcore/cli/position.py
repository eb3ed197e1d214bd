"""`position`: move a consumer group's committed position."""

from __future__ import annotations

from typing import Any

from streamcore.cli.context import (
    Context,
    UsageError,
    global_options,
    group_name,
)
from streamcore.recovery.errors import SelectionError
from streamcore.recovery.positions import apply_plan, plan_reset
from streamcore.recovery.targets import parse_reset_target
from streamcore.text import iso_time, render_table

__all__ = ["register"]


def run_position(ctx: Context) -> int:
    """The move is `streamcore.recovery`'s reset plan (one engine for both commands), without
    its live-member refusal and audit entry: `streamcore recovery reset` adds those."""
    args = ctx.args
    name = ctx.log(args.log)
    group = group_name(args.group)
    manager = ctx.manager
    if args.to_start or args.reset or args.to_end:
        kind, value, option = "end" if args.to_end else "start", None, ""
    elif args.to_offset is not None:
        kind, value, option = "offset", args.to_offset, "--to-offset"
    else:
        kind, value, option = "date", args.after_date, "--after-date"
    try:
        target, partitions = parse_reset_target(
            kind, value, partition=args.partition, option=option
        )
        plan = plan_reset(manager, name.urn, group, target, partitions=partitions, new_group=True)
    except SelectionError as exc:
        raise UsageError(str(exc)) from None
    apply_plan(manager, plan)
    action = "reset" if args.reset else target.label
    if target.timestamp_ms is not None:
        action = f"after-date {iso_time(target.timestamp_ms)}"
    lags = manager.lag_per_partition(name, group)
    parts = [
        {
            "partition": m.partition,
            "before": m.before,
            "after": m.after,
            "end": m.end,
            "lag": lags[m.partition].lag,
        }
        for m in plan.moves
    ]
    if ctx.json:
        ctx.emit_json({"log": name.urn, "group": group, "action": action, "partitions": parts})
        return 0
    rows = [[x["partition"], x["before"], x["after"], x["end"], x["lag"]] for x in parts]
    ctx.out(render_table(["partition", "before", "after", "end", "lag"], rows))
    moved = f"{len(parts)} of {manager.size(name)} partition(s)"
    ctx.out(f"moved group {group} on {name} ({action}), {moved}")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "position",
        parents=[global_options()],
        help="set a consumer group's committed position",
        description="Set the committed position (the next record to process) of a group, for "
        "every partition or only -p. --after-date moves to the first record appended at or after "
        "the date (partitions with none go to the end). Stop the group's consumers first.",
    )
    p.add_argument("-l", "--log", required=True, help="log name")
    p.add_argument("-g", "--group", required=True, help="consumer group")
    p.add_argument("-p", "--partition", type=int, help="only this partition")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--to-start", action="store_true", help="oldest retained record")
    where.add_argument("--to-end", action="store_true", help="after the last record")
    where.add_argument("--to-offset", metavar="P:O", help="partition P, offset O (or O with -p)")
    where.add_argument(
        "--after-date",
        metavar="ISO8601",
        help="first record appended at/after this time (UTC if no zone)",
    )
    where.add_argument("--reset", action="store_true", help="back to the beginning (Nuxeo reset)")
    p.set_defaults(func=run_position)
