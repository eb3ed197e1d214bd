"""`demo`: write and consume records on the local log and print what it measured."""

from __future__ import annotations

from typing import Any

from streamcore.cli.context import (
    Context,
    UsageError,
    backend_for,
    backend_label,
    global_options,
    resolve_codec,
)
from streamcore.log.registry import MAX_PARTITIONS, partitions_in_range
from streamcore.text import TextColumn, human_bytes, render_table

__all__ = ["register"]


def _progress(ctx: Context) -> Any:
    def report(phase: str, done: int, total: int, elapsed: float) -> None:
        pct = 100 * done / total if total else 100
        per_s = done / elapsed if elapsed > 0 else 0
        ctx.err(
            f"{phase}: {done:,}/{total:,} records ({pct:.0f}%) in {elapsed:.1f}s, "
            f"{per_s:,.0f} records/s"
        )

    return report


def render_summary(s: dict[str, Any]) -> str:
    lines = [
        f"streamcore demo: {s['written']:,} records of {s['data_size']} bytes, "
        f"{s['partitions']} partitions, codec {s['codec']}, batches of {s['batch']:,}",
        "",
        render_table(
            [
                "phase",
                "records",
                TextColumn("seconds", "right"),
                TextColumn("records/s", "right"),
                TextColumn("MB/s", "right"),
            ],
            [
                [
                    "write",
                    s["written"],
                    f"{s['write_seconds']:.2f}",
                    f"{s['write_records_per_s']:,.0f}",
                    f"{s['write_mb_per_s']:.1f}",
                ],
                [
                    "read",
                    s["read"],
                    f"{s['read_seconds']:.2f}",
                    f"{s['read_records_per_s']:,.0f}",
                    f"{s['read_mb_per_s']:.1f}",
                ],
            ],
        ),
        "",
        render_table(
            ["group", "when", "pos", "end", "lag"],
            [
                [
                    s["group"],
                    "before consuming",
                    s["lag_before"]["pos"],
                    s["lag_before"]["end"],
                    s["lag_before"]["lag"],
                ],
                [
                    s["group"],
                    "after consuming",
                    s["lag_after"]["pos"],
                    s["lag_after"]["end"],
                    s["lag_after"]["lag"],
                ],
            ],
        ),
        "",
        f"log {s['log']}: {s['encoded_bytes']:,} bytes of encoded records"
        + (
            f", {human_bytes(s['disk_bytes'])} on disk in {s['path']}"
            if s.get("path")
            else f" in the {s.get('backend', 'log')} backend"
        ),
    ]
    if s.get("key_mismatches"):
        lines.append(f"warning: {s['key_mismatches']} decoded keys differed from the log keys")
    lines.append(
        f"next: streamcore lag -l {s['log']}   streamcore cat -l {s['log']} -n 3   streamcore logs"
    )
    return "\n".join(lines)


def run_demo_command(ctx: Context) -> int:
    from streamcore.demo import run_demo

    args = ctx.args
    if args.count < 0:
        raise UsageError(f"--count {args.count}: give a count >= 0")
    if not partitions_in_range(args.partitions):
        raise UsageError(f"--partitions {args.partitions}: use 1..{MAX_PARTITIONS}")
    if args.batch < 1:
        raise UsageError(f"--batch {args.batch}: give a batch size >= 1")
    resolve_codec(args.codec, ctx.config, allow_raw=False)  # validates the name
    from streamcore.demo import DEMO_LOG

    summary = run_demo(
        args.count,
        args.partitions,
        batch=args.batch,
        codec=args.codec,
        manager=backend_for(ctx.manager, DEMO_LOG),  # its own backend: path and size on disk
        config=ctx.config,
        progress=_progress(ctx),
    )
    summary["backend"] = backend_label(ctx.manager, DEMO_LOG)
    if ctx.json:
        ctx.emit_json(summary)
    else:
        ctx.out(render_summary(summary))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        parents=[global_options()],
        help="write and consume records, report rates and lag",
        description="(Re)create the log demo/records (local unless routed elsewhere), append "
        "--count Records (key doc-<i>, 100 bytes of data, watermark now) encoded with --codec in "
        "batches, then consume them with group demo/consumer (read, decode, commit per batch). "
        "Prints progress on stderr and a summary: rates, lag before/after, where the data is.",
    )
    p.add_argument("--count", type=int, default=1_000_000, help="records (default 1000000)")
    p.add_argument("--partitions", type=int, default=4, help="partitions (default 4)")
    p.add_argument("--batch", type=int, default=10_000, help="records per batch (default 10000)")
    p.add_argument("--codec", default="avro", help="Record codec (default avro)")
    p.set_defaults(func=run_demo_command)
