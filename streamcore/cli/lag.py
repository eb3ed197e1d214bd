"""`lag` and `latency`: how far consumer groups are behind, in records and in time."""

from __future__ import annotations

import logging
from typing import Any

from streamcore.cli.context import (
    Context,
    codec_label,
    global_options,
    group_name,
    resolve_codec,
)
from streamcore.codecs.base import Codec
from streamcore.errors import CodecError
from streamcore.log import Latency, LogLag
from streamcore.names import Name
from streamcore.text import TextColumn, format_time, human_duration, iso_time, render_table

__all__ = ["lag_dict", "register"]

logger = logging.getLogger(__name__)


def lag_dict(lag: LogLag) -> dict[str, int]:
    return {"pos": lag.pos, "end": lag.end, "lag": lag.lag, "lost": lag.lost}


def _targets(ctx: Context, log: str | None, group: str | None) -> list[tuple[Name, list[str]]]:
    manager = ctx.manager
    names = [ctx.log(log)] if log else manager.list_logs()
    wanted = group_name(group) if group else None
    out = []
    for name in names:
        groups = manager.list_groups(name)
        if wanted is not None:
            groups = [wanted]
        out.append((name, groups))
    return out


def run_lag(ctx: Context) -> int:
    args = ctx.args
    manager = ctx.manager
    report = []
    rows: list[list[Any]] = []
    for name, groups in _targets(ctx, args.log, args.group):
        ends = manager.end_offsets(name)
        entry: dict[str, Any] = {"log": name.urn, "end": sum(ends), "groups": []}
        if not groups:
            row: list[Any] = [name.urn, "(no group)"]
            if args.per_partition:
                row.append("")
            rows.append([*row, None, sum(ends), None, None])
        for group in groups:
            per = manager.lag_per_partition(name, group)
            total = LogLag.aggregate(per)
            entry["groups"].append(
                {
                    "group": group,
                    **lag_dict(total),
                    "partitions": [{"partition": p, **lag_dict(x)} for p, x in enumerate(per)],
                }
            )
            if args.per_partition:
                rows.append([name.urn, group, "all", total.pos, total.end, total.lag, total.lost])
                rows.extend(
                    [name.urn, group, p, x.pos, x.end, x.lag, x.lost] for p, x in enumerate(per)
                )
            else:
                rows.append([name.urn, group, total.pos, total.end, total.lag, total.lost])
        report.append(entry)
    if ctx.json:
        ctx.emit_json({"logs": report})
        return 0
    if not rows:
        ctx.out("no logs")
        return 0
    columns: list[str | TextColumn] = ["log", "group"]
    if args.per_partition:
        columns.append(TextColumn("partition", "right"))
    columns += [
        TextColumn("pos", "right"),
        TextColumn("end", "right"),
        TextColumn("lag", "right"),
        TextColumn("lost", "right"),
    ]
    ctx.out(render_table(columns, rows))
    return 0


class _TolerantCodec(Codec[Any]):
    """Decodes the last processed record for its watermark; undecodable → append time."""

    def __init__(self, codec: Codec[Any], label: str) -> None:
        self.codec = codec
        self.name = codec.name
        self.label = label
        self.failures = 0

    def encode(self, message: Any) -> bytes:
        return self.codec.encode(message)

    def decode(self, raw: bytes) -> Any:
        try:
            return self.codec.decode(raw)
        except CodecError as exc:
            self.failures += 1
            logger.debug("cannot decode a record with %s: %s", self.label, exc)
            return None


def _latency_dict(lat: Latency) -> dict[str, Any]:
    return {
        "latency_ms": lat.latency_ms,
        "latency": human_duration(lat.latency_ms),
        **lag_dict(lat.lag),
        "pos_timestamp": lat.lower or None,
        "pos_date": iso_time(lat.lower),
        "now": iso_time(lat.upper),
        "key": lat.key,
    }


def _aggregate(per: list[Latency]) -> Latency:
    agg = Latency.aggregate(per)
    key = next((x.key for x in per if x.lower == agg.lower and x.lag.lag > 0), None)
    return Latency(agg.lower, agg.upper, LogLag.aggregate(x.lag for x in per), key)


def run_latency(ctx: Context) -> int:
    args = ctx.args
    codec = resolve_codec(args.codec, ctx.config)
    label = codec_label(args.codec, ctx.config)
    tolerant = _TolerantCodec(codec, label) if codec is not None else None
    report = []
    rows: list[list[Any]] = []
    for name, groups in _targets(ctx, args.log, args.group):
        entry: dict[str, Any] = {"log": name.urn, "groups": []}
        for group in groups:
            per = ctx.manager.latency_per_partition(name, group, tolerant)
            total = _aggregate(per)
            entry["groups"].append(
                {
                    "group": group,
                    **_latency_dict(total),
                    "partitions": [{"partition": p, **_latency_dict(x)} for p, x in enumerate(per)],
                }
            )
            shown = [("all", total)] + (list(enumerate(per)) if args.per_partition else [])
            for part, lat in shown:
                row: list[Any] = [name.urn, group]
                if args.per_partition:
                    row.append(part)
                row += [
                    lat.lag.lag,
                    lat.latency_ms,
                    human_duration(lat.latency_ms),
                    format_time(lat.lower),
                    lat.lag.pos,
                    lat.lag.end,
                    lat.key or "-",
                ]
                rows.append(row)
        report.append(entry)
    if tolerant is not None and tolerant.failures:
        ctx.err(
            f"streamcore: warning: {tolerant.failures} record(s) could not be decoded with codec "
            f"{label}; their append time was used instead of the watermark (try --codec)"
        )
    if ctx.json:
        ctx.emit_json({"codec": label, "logs": report})
        return 0
    if not rows:
        ctx.out("no consumer groups")
        return 0
    columns: list[str | TextColumn] = ["log", "group"]
    if args.per_partition:
        columns.append(TextColumn("partition", "right"))
    columns += [
        TextColumn("lag", "right"),
        TextColumn("latency_ms", "right"),
        TextColumn("latency", "right"),
        "pos_date (UTC)",
        TextColumn("pos", "right"),
        TextColumn("end", "right"),
        "key",
    ]
    ctx.out(render_table(columns, rows))
    return 0


def register(sub: Any) -> None:
    parent = global_options(verbose=False)
    p = sub.add_parser(
        "lag",
        parents=[parent],
        help="records consumer groups still have to process",
        description="Per log and consumer group: committed position (pos), end, lag and records "
        "lost to retention. pos and end are summed over partitions. Without -l: every log; "
        "without -g: every group of the log. (-v here means per partition; for debug logging "
        "put -v before the command: streamcore -v lag ...)",
    )
    p.add_argument("-l", "--log", help="log name (default: all logs)")
    p.add_argument("-g", "--group", help="consumer group (default: all groups)")
    p.add_argument(
        "-v",
        "--verbose",
        dest="per_partition",
        action="store_true",
        help="one row per partition too",
    )
    p.set_defaults(func=run_lag)

    p = sub.add_parser(
        "latency",
        parents=[parent],
        help="how far behind consumer groups are in time",
        description="Latency = now - watermark of the last record the group processed, while it "
        "has lag (0 once caught up). Records are decoded with --codec to read their watermark; "
        "with --codec raw (or undecodable records) the append time is used. (-v here means per "
        "partition; for debug logging: streamcore -v latency ...)",
    )
    p.add_argument("-l", "--log", help="log name (default: all logs)")
    p.add_argument("-g", "--group", help="consumer group (default: all groups)")
    p.add_argument("--codec", help="Record codec (default: config codec.default)")
    p.add_argument(
        "-v",
        "--verbose",
        dest="per_partition",
        action="store_true",
        help="one row per partition too",
    )
    p.set_defaults(func=run_latency)
