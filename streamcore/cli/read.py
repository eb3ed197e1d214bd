"""`cat` and `tail`: print records of a log (never committing any position)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

from streamcore.cli.context import (
    Context,
    UsageError,
    codec_label,
    global_options,
    group_name,
    resolve_codec,
)
from streamcore.cli.render import (
    DATA_FORMATS,
    Decoder,
    ShownRecord,
    end_snapshot,
    read_until,
    render_json,
    render_line,
)
from streamcore.log import LogOffset
from streamcore.log.config import TOOLS_GROUP

__all__ = ["register"]


def _show(ctx: Context, items: Iterable[ShownRecord]) -> int:
    count = 0
    data_format = ctx.args.data_format
    for item in items:
        if ctx.json:
            ctx.emit_json_line(render_json(item, data_format))
        else:
            ctx.out(render_line(item, data_format))
        count += 1
    return count


def _decoder(ctx: Context) -> Decoder:
    codec = resolve_codec(ctx.args.codec, ctx.config)
    return Decoder(codec, codec_label(ctx.args.codec, ctx.config))


def _check_count(n: int | None) -> None:
    if n is not None and n < 0:
        raise UsageError(f"-n {n}: give a count >= 0")


def run_cat(ctx: Context) -> int:
    args = ctx.args
    _check_count(args.lines)
    name = ctx.log(args.log)
    partitions = ctx.partitions(name, args.partition)
    decode = _decoder(ctx)
    group = group_name(args.group) if args.group else TOOLS_GROUP
    ends = end_snapshot(ctx.manager, partitions)
    with ctx.manager.tailer(group, partitions) as tailer:
        if not args.group:
            tailer.to_start()
        _show(ctx, (decode(r) for r in read_until(tailer, ends, args.lines)))
    if warning := decode.warning():
        ctx.err(warning)
    return 0


class _StopSignals:
    """Turns SIGINT/SIGTERM into a flag while following (main thread only)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.event = threading.Event()
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _StopSignals:
        if self.enabled and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.event.set()

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def run_tail(ctx: Context) -> int:
    args = ctx.args
    _check_count(args.lines)
    name = ctx.log(args.log)
    partitions = ctx.partitions(name, args.partition)
    decode = _decoder(ctx)
    manager = ctx.manager
    ends = end_snapshot(manager, partitions)
    starts = manager.start_offsets(name)
    # Signals are caught from the start so that a Ctrl-C while following always exits 0.
    with (
        _StopSignals(enabled=args.follow) as stop,
        manager.tailer(TOOLS_GROUP, partitions) as tailer,
    ):
        for p in partitions:
            tailer.seek(LogOffset(p, max(starts[p.partition], ends[p] - args.lines)))
        last = [decode(r) for r in read_until(tailer, ends)]
        last.sort(key=lambda x: (x.timestamp, x.partition.partition, x.offset))
        _show(ctx, last[len(last) - args.lines :] if args.lines else [])
        sys.stdout.flush()
        if args.follow:
            for p in partitions:
                tailer.seek(LogOffset(p, ends[p]))
            deadline = time.monotonic() + args.max_seconds if args.max_seconds else None
            while not stop.event.is_set():
                if deadline is not None and time.monotonic() >= deadline:
                    break
                records = tailer.read_batch(1000, timeout=0.2)
                if records:
                    _show(ctx, (decode(r) for r in records))
                    sys.stdout.flush()
    if warning := decode.warning():
        ctx.err(warning)
    return 0


def _common(p: Any) -> None:
    p.add_argument("-l", "--log", required=True, help="log name")
    p.add_argument("-p", "--partition", type=int, help="only this partition")
    p.add_argument(
        "--codec", help="Record codec, or raw for undecoded bytes (default: config codec.default)"
    )
    p.add_argument(
        "--data-format",
        choices=DATA_FORMATS,
        default="preview",
        help="how to show data: preview (first 127 printable chars, default), full "
        "text, hex, base64 or none",
    )


def register(sub: Any) -> None:
    parent = global_options()
    p = sub.add_parser(
        "cat",
        parents=[parent],
        help="print records from the start (or a group's position)",
        description="Print records as `offset | watermark | flags | key | length | data` "
        "(watermark in UTC), from the start of each partition or from the committed position of "
        "-g GROUP. Never commits. Stops at the end seen when it starts. --json prints JSON lines.",
    )
    _common(p)
    p.add_argument("-n", "--lines", type=int, metavar="N", help="at most N records (default: all)")
    p.add_argument("-g", "--group", help="start at this group's committed position")
    p.set_defaults(func=run_cat)

    p = sub.add_parser(
        "tail",
        parents=[parent],
        help="print the last records, optionally follow",
        description="Print the last N records of the log (by append time over the partitions), "
        "then with -f every new record until Ctrl-C / SIGTERM (exit 0). --json prints JSON lines.",
    )
    _common(p)
    p.add_argument(
        "-n", "--lines", type=int, metavar="N", default=10, help="number of records (default 10)"
    )
    p.add_argument("-f", "--follow", action="store_true", help="wait for and print new records")
    p.add_argument("--max-seconds", type=float, default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=run_tail)
