"""`copy`: copy a log into a new one, keeping keys, partitions, order and append timestamps."""

from __future__ import annotations

import inspect
import time
from collections import defaultdict
from typing import Any

from streamcore.cli.context import (
    Context,
    UsageError,
    backend_with,
    global_options,
    group_name,
    resolve_codec,
)
from streamcore.log import LogAppender, LogRecord
from streamcore.log.capabilities import Segmented
from streamcore.log.config import TOOLS_GROUP
from streamcore.names import Name
from streamcore.text import Progress, human_bytes, rate

__all__ = ["append_grouped", "register", "supports_timestamps"]


def supports_timestamps(appender: LogAppender[Any]) -> bool:
    return "timestamps" in inspect.signature(appender.append_batch).parameters


def append_grouped(
    appender: LogAppender[Any],
    records: list[tuple[int, str, bytes, int]],
    keep_timestamps: bool,
    roll_ms: int = 0,
) -> None:
    """Append (partition, key, value, timestamp) tuples: one batch per partition, in order, cut
    where a record's time is `roll_ms` or more from its batch's first (the destination's segment
    roll: a local writer never splits a batch, so a batch of sparse history spanning days would
    land in one segment that retention could not purge day by day)."""
    by_partition: dict[int, list[tuple[str, bytes, int]]] = defaultdict(list)
    for partition, key, value, ts in records:
        by_partition[partition].append((key, value, ts))
    for partition, items in by_partition.items():
        if not keep_timestamps:
            appender.append_batch([(k, v) for k, v, _ in items], partition=partition)
            continue
        for run in _time_runs(items, roll_ms):
            appender.append_batch(
                [(k, v) for k, v, _ in run], partition=partition, timestamps=[t for *_, t in run]
            )


def _time_runs(
    items: list[tuple[str, bytes, int]], roll_ms: int
) -> list[list[tuple[str, bytes, int]]]:
    """`items` cut into runs whose times lie strictly within `roll_ms` of the run's first."""
    if roll_ms <= 0:
        return [items]
    runs: list[list[tuple[str, bytes, int]]] = []
    first = 0
    for item in items:
        if not runs or abs(item[2] - first) >= roll_ms:
            runs.append([])
            first = item[2]
        runs[-1].append(item)
    return runs


def run_copy(ctx: Context) -> int:
    args = ctx.args
    manager = ctx.manager
    src = ctx.log(args.src)
    dest = Name.of(args.dest)
    if dest == src:
        raise UsageError("--src and --dest are the same log; pick a new log name for --dest")
    if manager.exists(dest):
        raise UsageError(
            f"--dest {dest} exists already; copy needs a new log (delete it with "
            f"`streamcore delete -l {dest} --yes` or choose another name)"
        )
    if args.batch < 1:
        raise UsageError(f"--batch {args.batch}: give a batch size >= 1")
    transcode = None
    if args.src_codec or args.dest_codec:
        src_codec = resolve_codec(args.src_codec, ctx.config, allow_raw=False)
        dest_codec = resolve_codec(args.dest_codec, ctx.config, allow_raw=False)
        label_src = args.src_codec or ctx.config.default_codec
        label_dest = args.dest_codec or ctx.config.default_codec
        if label_src != label_dest:
            transcode = (src_codec, dest_codec)
    partitions = manager.size(src)
    options: dict[str, Any] = {}
    source = backend_with(manager, src, Segmented)
    if source is not None and backend_with(manager, dest, Segmented) is not None:
        options["retention"] = source.retention_ms(src)  # both local: keep the source's retention
    manager.create(dest, partitions, **options)
    destination = backend_with(manager, dest, Segmented)
    roll_ms = destination.segment_roll_ms(dest) if destination is not None else 0
    group = group_name(args.group) if args.group else TOOLS_GROUP
    ends = manager.end_offsets(src)
    count = nbytes = 0
    progress = Progress(f"copy {src} -> {dest}")
    started = time.monotonic()
    with manager.appender(dest) as appender, manager.tailer(group, src) as tailer:
        keep_ts = supports_timestamps(appender)
        if not keep_ts:
            ctx.err(
                "streamcore: warning: this backend cannot set append timestamps; the copy "
                "gets the current time"
            )
        if not args.group:
            tailer.to_start()
        while not all(tailer.position(p) >= ends[p.partition] for p in tailer.assignments):
            batch: list[LogRecord[bytes]] = tailer.read_batch(args.batch, timeout=0)
            if not batch:
                break
            out = []
            for rec in batch:
                value = rec.message
                if transcode is not None:
                    value = transcode[1].encode(transcode[0].decode(value))
                out.append((rec.partition.partition, rec.key, value, rec.timestamp))
                nbytes += len(value)
            append_grouped(appender, out, keep_ts, roll_ms)
            if args.group:
                tailer.commit()
            count += len(batch)
            progress.update(count, nbytes)
    seconds = time.monotonic() - started
    progress.done(count, nbytes)
    result = {
        "src": src.urn,
        "dest": dest.urn,
        "partitions": partitions,
        "records": count,
        "bytes": nbytes,
        "seconds": round(seconds, 3),
        "records_per_s": round(rate(count, seconds)),
        "mode": "transcode" if transcode else "raw",
        "group": group if args.group else None,
    }
    if ctx.json:
        ctx.emit_json(result)
    else:
        ctx.out(
            f"copied {count} records ({human_bytes(nbytes)}) from {src} to {dest} "
            f"({partitions} partitions, {result['mode']}) in {seconds:.2f}s, "
            f"{result['records_per_s']:,} records/s"
        )
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "copy",
        parents=[global_options()],
        help="copy a log into a new log",
        description="Copy every record of --src into --dest, which must not exist and is created "
        "with the same partitions and retention. Keys, partitions, order and append timestamps are "
        "kept. Bytes are copied as they are unless --src-codec and --dest-codec differ (then "
        "each Record is decoded and re-encoded). With -g the copy starts at that group's position "
        "and commits it as it goes. Progress on stderr.",
    )
    p.add_argument("--src", required=True, help="source log")
    p.add_argument("--dest", required=True, help="destination log (must not exist)")
    p.add_argument("--src-codec", help="Record codec of --src (default: config codec.default)")
    p.add_argument("--dest-codec", help="Record codec of --dest (default: config codec.default)")
    p.add_argument("-g", "--group", help="read from and commit this group's position")
    p.add_argument("--batch", type=int, default=10_000, help="records per batch (default 10000)")
    p.set_defaults(func=run_copy)
