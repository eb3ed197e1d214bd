"""`work schedule` and `work stats`: Nuxeo's Stream WorkManager from the shell
(`streamcore.work`; docs/work.md). The workers run as a topology: `streamcore run
module:factory` with a factory returning `WorkManager.topology()`."""

from __future__ import annotations

import json
from typing import Any

from streamcore.cli.context import Context, UsageError, global_options
from streamcore.text import render_table

__all__ = ["register"]


def _queues(ctx: Context, pool: int | None) -> list[Any]:
    """The work queues of the logs in namespace `work` (pool size: `pool`, or the partition
    count over the default over-provisioning)."""
    from streamcore.work import DEFAULT_OVERPROVISIONING, NAMESPACE, WorkQueue

    out = []
    for name in ctx.manager.list_logs():
        if name.namespace != NAMESPACE or name.name.endswith("-dlq"):
            continue
        size = ctx.manager.size(name)
        guess = 1 if size == 1 else max(1, size // DEFAULT_OVERPROVISIONING)
        out.append(WorkQueue(name.name, pool_size=pool or guess))
    return out


def run_schedule(ctx: Context) -> int:
    from streamcore.work import Work, WorkManager, WorkQueue

    args = ctx.args
    try:
        params = json.loads(args.params)
    except ValueError as exc:
        raise UsageError(f"--params {args.params!r} is not JSON ({exc})") from None
    if not isinstance(params, dict):
        raise UsageError(f"--params must be a JSON object, got {args.params!r}")
    works = WorkManager([WorkQueue(args.queue, pool_size=args.pool)])
    for work_id in args.id:
        works.schedule(ctx.manager, args.queue, Work(args.name, work_id, params))
    ctx.err(f"scheduled {len(args.id)} work(s) {args.name!r} on queue {args.queue}")
    return 0


def run_stats(ctx: Context) -> int:
    from streamcore.work import WorkManager

    stats = WorkManager(_queues(ctx, ctx.args.pool)).stats(ctx.manager)
    if ctx.json:
        ctx.emit_json([s.as_json() for s in stats])
        return 0
    columns = ["queue", "scheduled", "running (est.)", "completed", "pool"]
    rows = [[s.queue, s.scheduled, s.running, s.completed, s.pool_size] for s in stats]
    ctx.out(render_table(columns, rows) if rows else "no work queue (no log in namespace work)")
    return 0


def register(sub: Any) -> None:
    parent = global_options(verbose=False)
    p = sub.add_parser(
        "work", parents=[parent], help="schedule works, count them", description=__doc__
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    s = actions.add_parser("schedule", parents=[parent], help="schedule works on a queue")
    s.add_argument("queue", help="the queue (its log is work/QUEUE)")
    s.add_argument("name", help="the work's handler name")
    s.add_argument("--id", action="append", required=True, help="work id (repeatable)")
    s.add_argument("--params", default="{}", help="JSON object passed to the handler")
    s.add_argument("--pool", type=int, default=1, help="pool size, if the queue is new (1)")
    s.set_defaults(func=run_schedule)
    t = actions.add_parser("stats", parents=[parent], help="scheduled, running, completed")
    t.add_argument("--pool", type=int, help="pool size (default: from the partition count)")
    t.set_defaults(func=run_stats)
