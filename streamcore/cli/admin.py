"""Log administration: `logs`, `create`, `delete`, `groups`, `purge`."""

from __future__ import annotations

from typing import Any

from streamcore.cli.context import (
    Context,
    UsageError,
    backend_with,
    global_options,
    group_name,
    require_backend,
)
from streamcore.cli.lag import lag_dict
from streamcore.config import FSYNC_MODES, parse_duration_ms
from streamcore.errors import ConfigError, LogExistsError, StreamcoreError
from streamcore.log import LogManager, LogPartition
from streamcore.log.capabilities import Inspectable, Purgeable
from streamcore.log.config import BackendConfig
from streamcore.log.registry import MAX_PARTITIONS, backend_type, partitions_in_range
from streamcore.log.unified import UnifiedLogManager
from streamcore.names import Name
from streamcore.text import (
    TextColumn,
    format_time,
    human_bytes,
    iso_time,
    render_table,
    short_duration,
)


def log_summary(manager: LogManager, name: Name) -> dict[str, Any]:
    """Partitions, records, bytes, retention and oldest/newest append time of a log, from
    `info()` when the backend has it, else from the offsets."""
    inspectable = backend_with(manager, name, Inspectable)
    info = inspectable.info(name) if inspectable is not None else None
    starts = list(info.first_offsets) if info else manager.start_offsets(name)
    ends = list(info.end_offsets) if info else manager.end_offsets(name)
    oldest: int | None = None
    newest: int | None = None
    for p, (start, end) in enumerate(zip(starts, ends, strict=True)):
        if end <= start:
            continue
        first = manager.record_at(LogPartition(name, p), start)
        last = manager.record_at(LogPartition(name, p), end - 1)
        if first is not None:
            oldest = first[2] if oldest is None else min(oldest, first[2])
        if last is not None:
            newest = last[2] if newest is None else max(newest, last[2])
    return {
        "log": name.urn,
        "partitions": len(ends),
        "records": sum(e - s for s, e in zip(starts, ends, strict=True)),
        "size_bytes": info.size_bytes if info else None,
        "retention_ms": info.retention_ms if info else None,
        "oldest_ms": oldest,
        "newest_ms": newest,
        "start_offsets": starts,
        "end_offsets": ends,
    }


def _located_logs(manager: LogManager) -> list[tuple[Name, LogManager, dict[str, Any]]]:
    """Every log with the backend manager holding it and its backend fields for the output. A
    log found in a backend its name does not route to (e.g. after a routing change) is listed
    with a note: commands on that name go to the routed backend, not there."""
    if not isinstance(manager, UnifiedLogManager):
        label = type(manager).__name__
        return [(name, manager, {"backend": label}) for name in manager.list_logs()]
    out = []
    for name, backend in manager.locations():
        fields: dict[str, Any] = {"backend": backend.label, "config": backend.name}
        routed = manager.route(name).config
        if routed != backend.name:
            fields["note"] = f"the name routes to config {routed!r}; commands don't reach this copy"
        out.append((name, manager.backend_manager(backend.name), fields))
    return out


def _searched(ctx: Context) -> str:
    if not isinstance(ctx.manager, UnifiedLogManager):
        return f"under {ctx.config.log_dir}"
    places = []
    for b in ctx.manager.log_config.used():
        folder = backend_type(b.type).folder(b, ctx.config.home)
        places.append(f"{b.label} under {folder}" if folder is not None else b.label)
    return "in " + ", ".join(places)


def run_logs(ctx: Context) -> int:
    summaries = []
    for name, backend, fields in _located_logs(ctx.manager):
        summary = log_summary(backend, name)
        summary["groups"] = backend.list_groups(name)
        summaries.append({**fields, **summary})
    if ctx.json:
        for s in summaries:
            s["oldest"] = iso_time(s["oldest_ms"])
            s["newest"] = iso_time(s["newest_ms"])
        ctx.emit_json({"home": str(ctx.config.home), "logs": summaries})
        return 0
    if not summaries:
        ctx.out(f"no logs {_searched(ctx)} (create one with `streamcore create -l NAME`)")
        return 0
    rows = [
        [
            s["log"],
            s["backend"] + (" *" if "note" in s else ""),
            s["partitions"],
            s["records"],
            human_bytes(s["size_bytes"]),
            short_duration(s["retention_ms"]) if s["retention_ms"] is not None else "-",
            len(s["groups"]),
            format_time(s["oldest_ms"]),
            format_time(s["newest_ms"]),
        ]
        for s in summaries
    ]
    columns: list[str | TextColumn] = [
        "log",
        "backend",
        "partitions",
        "records",
        TextColumn("size", "right"),
        TextColumn("retention", "right"),
        "groups",
        "oldest (UTC)",
        "newest (UTC)",
    ]
    ctx.out(render_table(columns, rows))
    for s in summaries:
        if "note" in s:
            ctx.out(f"* {s['log']} in {s['backend']}: {s['note']}")
    return 0


def run_create(ctx: Context) -> int:
    args = ctx.args
    name = ctx.log(args.log, must_exist=False)
    options: dict[str, Any] = {}
    if args.retention is not None:
        try:
            options["retention"] = parse_duration_ms(args.retention, "--retention")
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
    if args.fsync is not None:
        options["fsync"] = args.fsync
    if args.partitions is not None and not partitions_in_range(args.partitions):
        raise UsageError(f"-p {args.partitions}: partitions must be 1..{MAX_PARTITIONS}")
    manager = ctx.manager
    if manager.exists(name):
        size = manager.size(name)
        if not args.if_not_exists or (args.partitions is not None and args.partitions != size):
            raise LogExistsError(
                f"log {name} exists already with {size} partitions; delete it first "
                f"(`streamcore delete -l {name} --yes`) or pass --if-not-exists"
            )
        created = False
    else:
        created = manager.create(name, args.partitions, **options)
    summary = log_summary(manager, name)
    result = {
        "log": name.urn,
        "created": created,
        "partitions": summary["partitions"],
        "retention_ms": summary["retention_ms"],
    }
    if ctx.json:
        ctx.emit_json(result)
    else:
        retention = (
            short_duration(summary["retention_ms"]) if summary["retention_ms"] is not None else "-"
        )
        verb = "created" if created else "exists:"
        ctx.out(f"{verb} log {name} ({summary['partitions']} partitions, retention {retention})")
    return 0


def run_delete(ctx: Context) -> int:
    args = ctx.args
    name = ctx.log(args.log)
    if not args.yes:
        raise UsageError(
            f"refusing to delete log {name} and its consumer positions without --yes; "
            f"run `streamcore delete -l {name} --yes`"
        )
    records = log_summary(ctx.manager, name)["records"]
    ctx.manager.delete(name)
    if ctx.json:
        ctx.emit_json({"log": name.urn, "deleted": True, "records": records})
    else:
        ctx.out(f"deleted log {name} ({records} records)")
    return 0


def run_groups(ctx: Context) -> int:
    name = ctx.log(ctx.args.log)
    manager = ctx.manager
    groups = []
    for group in manager.list_groups(name):
        groups.append({"group": group, **lag_dict(manager.lag(name, group))})
    if ctx.json:
        ctx.emit_json({"log": name.urn, "groups": groups})
        return 0
    if not groups:
        ctx.out(f"log {name} has no consumer group")
        return 0
    rows = [[g["group"], g["pos"], g["end"], g["lag"], g["lost"]] for g in groups]
    ctx.out(render_table(["group", "pos", "end", "lag", "lost"], rows))
    return 0


def run_purge(ctx: Context) -> int:
    """Retention now, with the guard of `streamcore.log.local.retention`: an expired segment a
    group has not read past stays unless --force; --dry-run only shows the plan."""
    name = ctx.log(ctx.args.log)
    manager = ctx.manager
    what = "purge command (a broker applies retention)"
    purgeable = require_backend(manager, name, Purgeable, what)
    force, dry_run = ctx.args.force, ctx.args.dry_run
    plans = purgeable.purge_plan(name)
    before = manager.start_offsets(name)
    removed: dict[int, list[int]] = {} if dry_run else purgeable.purge(name, force=force)
    after = manager.start_offsets(name)
    parts = []
    for plan in plans:
        p = plan.partition
        if dry_run:
            segments = plan.expired_segments if force else plan.purgeable_segments
            records = plan.expired_records if force else plan.purgeable_records
        else:
            segments, records = len(removed.get(p, [])), after[p] - before[p]
        parts.append(
            {
                "partition": p,
                "expired_segments": plan.expired_segments,
                "segments_removed": segments,
                "records_removed": records,
                "first_offset": before[p] + records,
                "held_by": {} if force else plan.held_by,
                "lost": plan.held_by if force else {},
                "skipped": not dry_run and p not in removed,
            }
        )
    total_segments = sum(x["segments_removed"] for x in parts)
    total_records = sum(x["records_removed"] for x in parts)
    if ctx.json:
        ctx.emit_json(
            {
                "log": name.urn,
                "dry_run": dry_run,
                "force": force,
                "segments_removed": total_segments,
                "records_removed": total_records,
                "partitions": parts,
            }
        )
        return 0

    def groups(counts: dict[str, int]) -> str:
        return ", ".join(f"{g} ({n:,})" for g, n in counts.items())

    rows = [
        [
            x["partition"],
            x["expired_segments"],
            x["segments_removed"],
            x["records_removed"],
            x["first_offset"],
            groups(x["held_by"]) or groups(x["lost"]),
            "written by another process" if x["skipped"] else "",
        ]
        for x in parts
    ]
    kept_for = "lost by" if force else "kept for"
    headers = ["partition", "expired", "segments removed", "records removed", "first offset"]
    ctx.out(render_table([*headers, f"{kept_for} (records)", "note"], rows))
    verb = "would purge" if dry_run else "purged"
    ctx.out(f"{verb} {total_segments} segment(s), {total_records} record(s) from {name}")
    held = {g for x in parts for g in x["held_by"]}
    if held:
        ctx.out(
            f"expired segments kept: group(s) {', '.join(sorted(held))} have not read them; let "
            "them catch up, move them on (`streamcore position`), or purge with --force (they "
            "lose those records)"
        )
    return 0


def _backend_where(ctx: Context, backend: BackendConfig) -> str:
    return backend_type(backend.type).where(backend, ctx.config.home)


def run_route(ctx: Context) -> int:
    """Where a log (read by a group) goes and why; without -l, the whole routing table."""
    args = ctx.args
    manager = ctx.manager
    if not isinstance(manager, UnifiedLogManager):
        raise StreamcoreError(f"the {type(manager).__name__} manager does not route logs")
    log_config = manager.log_config
    if args.log:
        name = Name.of(args.log)
        group = group_name(args.group) if args.group else None
        route = log_config.route(name, group)
        backend = log_config.configs[route.config]
        doc = {
            "log": name.urn,
            "group": group,
            "config": route.config,
            "type": backend.type,
            "reason": route.reason,
            "by_group": route.by_group,
            "where": _backend_where(ctx, backend),
        }
        if ctx.json:
            ctx.emit_json(doc)
        else:
            reader = f" read by {group}" if group else ""
            ctx.out(f"{name}{reader} -> config {route.config!r} ({backend.type}): {route.reason}")
            ctx.out(f"  {doc['where']}")
        return 0
    used = {b.name for b in log_config.used()}
    configs = [
        {
            "config": b.name,
            "type": b.type,
            "used": b.name in used,
            "builtin": b.builtin,
            "where": _backend_where(ctx, b),
        }
        for b in log_config.configs.values()
    ]
    rules: list[dict[str, Any]] = [
        {
            "rule": r.position,
            "namespace": list(r.namespaces),
            "group": list(r.groups),
            "config": r.config,
        }
        for r in log_config.rules
    ]
    forced = log_config.forced.reason if log_config.forced else None
    if ctx.json:
        ctx.emit_json({"configs": configs, "rules": rules, "forced": forced})
        return 0
    rows = [[c["config"], c["type"], "yes" if c["used"] else "no", c["where"]] for c in configs]
    ctx.out(render_table(["config", "type", "used", "where"], rows))
    if rules:
        ctx.out("")
        rows = [
            [
                f"#{r['rule']}",
                "namespace" if r["namespace"] else "group",
                ", ".join(r["namespace"] or r["group"]),
                r["config"],
            ]
            for r in rules
        ]
        ctx.out(render_table(["rule", "matches", "prefix", "config"], rows))
    ctx.out("")
    ctx.out(forced or "no rule matched: config 'default'")
    return 0


def register(sub: Any) -> None:
    parent = global_options()
    p = sub.add_parser(
        "logs",
        parents=[parent],
        help="list logs",
        description="Every log of every backend in use: its backend, partitions, retained "
        "records, size on disk, retention, number of consumer groups, oldest and newest append "
        "time (UTC).",
    )
    p.set_defaults(func=run_logs)

    p = sub.add_parser(
        "create",
        parents=[parent],
        help="create a log",
        description="Create a log in the backend its name routes to (see `streamcore route`).",
    )
    p.add_argument("-l", "--log", required=True, help="log name, e.g. import/docs")
    p.add_argument(
        "-p", "--partitions", type=int, help="number of partitions (default: config log.partitions)"
    )
    p.add_argument("--retention", help="e.g. 4d, 12h, 0 = keep forever (default: config)")
    p.add_argument("--fsync", choices=FSYNC_MODES, help="durability mode (default: config)")
    p.add_argument(
        "--if-not-exists",
        action="store_true",
        help="succeed if the log exists already (with the same partitions)",
    )
    p.set_defaults(func=run_create)

    p = sub.add_parser(
        "delete",
        parents=[parent],
        help="delete a log and its positions",
        description="Delete a log with its records and consumer positions.",
    )
    p.add_argument("-l", "--log", required=True, help="log name")
    p.add_argument("--yes", action="store_true", help="confirm the deletion")
    p.set_defaults(func=run_delete)

    p = sub.add_parser(
        "groups",
        parents=[parent],
        help="consumer groups of a log with their lag",
        description="Consumer groups that committed a position on the log, with "
        "pos/end/lag/lost summed over partitions.",
    )
    p.add_argument("-l", "--log", required=True, help="log name")
    p.set_defaults(func=run_groups)

    p = sub.add_parser(
        "purge",
        parents=[parent],
        help="apply retention now",
        description="Delete the sealed segments older than the log's retention that every "
        "consumer group has read past, and report what went and which groups keep the others. "
        "Partitions written by another process are skipped (their writer applies the same rule "
        "when it rolls a segment).",
    )
    p.add_argument("-l", "--log", required=True, help="log name")
    p.add_argument(
        "--force",
        action="store_true",
        help="purge expired segments even where groups have not read them (they lose those "
        "records; the loss is kept in the log's purges.jsonl)",
    )
    p.add_argument("--dry-run", action="store_true", help="show what would go; change nothing")
    p.set_defaults(func=run_purge)

    p = sub.add_parser(
        "route",
        parents=[parent],
        help="show which backend a log goes to",
        description="With -l: the config (backend) a log routes to and the rule that decided it "
        "(with -g: for calls of that consumer group). Without: the configs and [[log.match]] "
        "rules of the configuration, in the order they are tried.",
    )
    p.add_argument("-l", "--log", help="log name")
    p.add_argument("-g", "--group", help="consumer group reading it")
    p.set_defaults(func=run_route)


__all__ = ["log_summary", "register"]
