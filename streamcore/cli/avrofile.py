"""`dump` and `append`: records to and from Avro container files.

A dump file is an Avro object container whose schema is `include/schemas/Record.avsc` (same
name and namespace, so any Avro tool and Nuxeo's Record readers understand it) extended with
three nullable fields that default to null: `partition` (int), `offset` (long) and
`appendTimestamp` (long, ms since the epoch) telling where each record was in the dumped log.
The file metadata holds `streamcore.log`, `streamcore.partitions` and `streamcore.codec`.
Blocks are compressed with snappy when cramjam/python-snappy is installed, else deflate.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import fastavro

from streamcore.cli.context import (
    RAW,
    Context,
    UsageError,
    codec_label,
    global_options,
    group_name,
    resolve_codec,
)
from streamcore.cli.copy import append_grouped, supports_timestamps
from streamcore.cli.render import end_snapshot, read_until
from streamcore.config import StreamcoreConfig
from streamcore.errors import CodecError, ConfigError, StreamcoreError
from streamcore.log import partition_for_key
from streamcore.log.config import TOOLS_GROUP
from streamcore.log.registry import MAX_PARTITIONS, partitions_in_range
from streamcore.record import Flag, Record
from streamcore.text import Progress
from streamcore.watermark import Watermark

__all__ = ["register"]

EXTRA_FIELDS = [
    {
        "name": "partition",
        "type": ["null", "int"],
        "default": None,
        "doc": "partition of the record in the dumped log",
    },
    {
        "name": "offset",
        "type": ["null", "long"],
        "default": None,
        "doc": "offset of the record in its partition",
    },
    {
        "name": "appendTimestamp",
        "type": ["null", "long"],
        "default": None,
        "doc": "append time in the dumped log, ms since the epoch",
    },
]


def dump_schema(config: StreamcoreConfig) -> dict[str, Any]:
    """Record.avsc from the configured schemas folder plus the dump fields."""
    path = Path(config.schemas_dir) / "Record.avsc"
    try:
        schema: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot read the Record schema {path}: {exc}; check codec.schemas_dir"
        ) from exc
    names = {f["name"] for f in schema["fields"]}
    schema["fields"] = schema["fields"] + [f for f in EXTRA_FIELDS if f["name"] not in names]
    return schema


def container_codec() -> str:
    if importlib.util.find_spec("cramjam") or importlib.util.find_spec("snappy"):
        return "snappy"
    return "deflate"


def run_dump(ctx: Context) -> int:
    args = ctx.args
    if args.lines is not None and args.lines < 0:
        raise UsageError(f"-n {args.lines}: give a count >= 0")
    name = ctx.log(args.log)
    partitions = ctx.partitions(name, args.partition)
    codec = resolve_codec(args.codec, ctx.config)
    label = codec_label(args.codec, ctx.config)
    output = Path(args.output)
    if output.exists() and not args.force:
        raise UsageError(f"--output {output} exists; remove it or pass --force to overwrite it")
    if not output.parent.is_dir():
        raise UsageError(f"--output {output}: folder {output.parent} does not exist")
    schema = fastavro.parse_schema(dump_schema(ctx.config))
    group = group_name(args.group) if args.group else TOOLS_GROUP
    ends = end_snapshot(ctx.manager, partitions)
    progress = Progress(f"dump {name}")
    count = 0

    def rows(tailer: Any) -> Iterator[dict[str, Any]]:
        nonlocal count
        for rec in read_until(tailer, ends, args.lines):
            raw = bytes(rec.message)
            if codec is None:
                row = {
                    "watermark": Watermark.of(rec.timestamp).value,
                    "key": rec.key,
                    "data": raw,
                    "flagsAsByte": int(Flag.DEFAULT),
                    "traceContext": None,
                }
            else:
                try:
                    record: Record = codec.decode(raw)
                except CodecError as exc:
                    raise StreamcoreError(
                        f"{rec.partition}:+{rec.offset} cannot be decoded with codec {label} "
                        f"({exc}); dump with the right --codec, or --codec raw to keep the bytes"
                    ) from exc
                row = {
                    "watermark": record.watermark,
                    "key": record.key,
                    "data": record.data,
                    "flagsAsByte": int(record.flags),
                    "traceContext": record.trace_context,
                }
            row["partition"] = rec.partition.partition
            row["offset"] = rec.offset
            row["appendTimestamp"] = rec.timestamp
            count += 1
            progress.update(count)
            yield row

    metadata = {
        "streamcore.log": name.urn,
        "streamcore.partitions": str(ctx.manager.size(name)),
        "streamcore.codec": label,
    }
    compression = container_codec()
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        with ctx.manager.tailer(group, partitions) as tailer, open(tmp, "wb") as fo:
            if not args.group:
                tailer.to_start()
            fastavro.writer(fo, schema, rows(tailer), codec=compression, metadata=metadata)
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)
    progress.done(count)
    size = output.stat().st_size
    if ctx.json:
        ctx.emit_json(
            {
                "log": name.urn,
                "output": str(output),
                "records": count,
                "bytes": size,
                "codec": label,
                "compression": compression,
            }
        )
    else:
        ctx.out(f"dumped {count} records of {name} to {output} ({size} bytes, {compression})")
    return 0


@contextmanager
def open_container(path: Path) -> Iterator[Any]:
    """A fastavro reader over a container of Record envelopes, or a UsageError saying why not."""
    try:
        fo = path.open("rb")
    except OSError as exc:
        raise UsageError(
            f"--input {path}: {exc.strerror}; give an Avro file made by `streamcore dump`"
        ) from None
    with fo:
        try:
            reader = fastavro.reader(fo)
        except Exception as exc:
            raise UsageError(f"--input {path} is not an Avro container file ({exc})") from None
        writer = reader.writer_schema
        if not isinstance(writer, dict):  # a file of plain values (a primitive or union schema)
            raise UsageError(
                f"--input {path} holds {writer!r} values, not Record envelopes "
                "(include/schemas/Record.avsc)"
            )
        fields = {f["name"] for f in writer.get("fields", [])}
        missing = {"watermark", "key", "data"} - fields
        if missing:
            raise UsageError(
                f"--input {path} holds {writer.get('name')} records without "
                f"{', '.join(sorted(missing))}; it needs Record envelopes "
                "(include/schemas/Record.avsc)"
            )
        yield reader


def run_append(ctx: Context) -> int:
    args = ctx.args
    manager = ctx.manager
    codec = resolve_codec(args.codec, ctx.config)
    label = codec_label(args.codec, ctx.config)
    if args.batch < 1:
        raise UsageError(f"--batch {args.batch}: give a batch size >= 1")
    with open_container(Path(args.input)) as reader:
        meta = reader.metadata
        file_partitions = meta.get("streamcore.partitions")
        name = ctx.log(args.log, must_exist=False)
        created = False
        if not manager.exists(name):
            if args.partitions is not None and not partitions_in_range(args.partitions):
                raise UsageError(f"-p {args.partitions}: partitions must be 1..{MAX_PARTITIONS}")
            size = args.partitions or (int(file_partitions) if file_partitions else None)
            created = manager.create(name, size)
        size = manager.size(name)
        keep_partition = file_partitions is None or int(file_partitions) == size
        progress = Progress(f"append {name}")
        count = kept = 0
        per_partition = [0] * size
        started = time.monotonic()
        with manager.appender(name) as appender:
            keep_ts = args.keep_timestamps and supports_timestamps(appender)
            pending: list[tuple[int, str, bytes, int]] = []
            for row in reader:
                key = row["key"]
                record = Record(
                    key,
                    row["data"] or b"",
                    row["watermark"],
                    Flag(row.get("flagsAsByte", int(Flag.DEFAULT)) & 0xFF),
                    row.get("traceContext"),
                )
                value = record.data if codec is None else codec.encode(record)
                partition = row.get("partition")
                if keep_partition and partition is not None and 0 <= partition < size:
                    kept += 1
                else:
                    partition = partition_for_key(key, size)
                ts = row.get("appendTimestamp") or record.timestamp
                pending.append((partition, key, value, ts))
                per_partition[partition] += 1
                if len(pending) >= args.batch:
                    append_grouped(appender, pending, keep_ts)
                    count += len(pending)
                    pending = []
                    progress.update(count)
            if pending:
                append_grouped(appender, pending, keep_ts)
                count += len(pending)
    seconds = time.monotonic() - started
    progress.done(count)
    result = {
        "log": name.urn,
        "input": str(args.input),
        "created": created,
        "records": count,
        "kept_partition": kept,
        "per_partition": per_partition,
        "codec": label if codec is not None else RAW,
        "seconds": round(seconds, 3),
    }
    if ctx.json:
        ctx.emit_json(result)
    else:
        how = "same partitions" if kept == count else f"{kept} kept their partition, rest by key"
        ctx.out(
            f"appended {count} records from {args.input} to {'new log ' if created else ''}{name} "
            f"({how}, codec {result['codec']})"
        )
    return 0


def register(sub: Any) -> None:
    parent = global_options()
    p = sub.add_parser(
        "dump",
        parents=[parent],
        help="write records to an Avro container file",
        description="Write records to an Avro object container file. Schema: "
        "include/schemas/Record.avsc (org.nuxeo.lib.stream.computation.Record: watermark, key, "
        "data, flagsAsByte, traceContext) extended with nullable partition (int), offset (long) "
        "and appendTimestamp (long ms) fields; file metadata streamcore.log/.partitions/.codec. "
        "Records are decoded with --codec; with --codec raw the log value goes to data as is and "
        "the watermark is the append time. Reads from the start (or -g GROUP's position), never "
        "commits.",
    )
    p.add_argument("-l", "--log", required=True, help="log name")
    p.add_argument("--output", "-o", required=True, metavar="FILE.avro", help="file to write")
    p.add_argument(
        "-n",
        "--count",
        dest="lines",
        type=int,
        metavar="N",
        help="at most N records (default: all)",
    )
    p.add_argument("-g", "--group", help="start at this group's committed position")
    p.add_argument("-p", "--partition", type=int, help="only this partition")
    p.add_argument("--codec", help="Record codec of the log, or raw (default: config)")
    p.add_argument("--force", action="store_true", help="overwrite --output if it exists")
    p.set_defaults(func=run_dump)

    p = sub.add_parser(
        "append",
        parents=[parent],
        help="append records from an Avro container file",
        description="Append the Records of an Avro container (made by dump, or any file of "
        "Record.avsc records) to a log, encoded with --codec (raw: data appended as is). A "
        "record keeps its dumped partition when the file came from a log with the same number "
        "of partitions; otherwise it goes to its key's partition. The log is created if "
        "missing, with -p partitions (default: the dumped log's, else the config's).",
    )
    p.add_argument("-l", "--log", required=True, help="log name")
    p.add_argument("--input", "-i", required=True, metavar="FILE.avro", help="file to read")
    p.add_argument("--codec", help="Record codec to encode with, or raw (default: config)")
    p.add_argument("-p", "--partitions", type=int, help="partitions if the log is created")
    p.add_argument(
        "--keep-timestamps",
        action="store_true",
        help="reuse the dumped append times instead of now",
    )
    p.add_argument("--batch", type=int, default=10_000, help="records per batch (default 10000)")
    p.set_defaults(func=run_append)
