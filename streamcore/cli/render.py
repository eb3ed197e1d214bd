"""How `cat`, `tail` and `dump` show a log record: decoded as a `Record` when a codec is given,
rendered Nuxeo-style as `offset | watermark | flag | key | length | data`, or as a JSON object."""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from streamcore.errors import CodecError, InvalidArgumentError
from streamcore.log import LogOffset, LogPartition, LogRecord, LogTailer
from streamcore.record import Flag, Record
from streamcore.text import format_time, iso_time
from streamcore.watermark import Watermark

__all__ = [
    "DATA_FORMATS",
    "Decoder",
    "ShownRecord",
    "end_snapshot",
    "read_until",
    "render_json",
    "render_line",
]

logger = logging.getLogger(__name__)
DATA_FORMATS = ("preview", "text", "hex", "base64", "none")
PREVIEW_CHARS = 127


@dataclass(slots=True)
class ShownRecord:
    """A log record with its Record envelope when it could be decoded."""

    partition: LogPartition
    offset: int
    timestamp: int  # append time, ms
    log_key: str
    raw: bytes
    record: Record | None
    error: str | None = None

    @property
    def key(self) -> str:
        return self.record.key if self.record is not None else self.log_key

    @property
    def data(self) -> bytes:
        return self.record.data if self.record is not None else self.raw


class Decoder:
    """Decodes raw log values with a Record codec (None = raw), counting failures instead of
    stopping: a diagnostic tool should show what it can."""

    def __init__(self, codec: Any, label: str) -> None:
        self.codec = codec
        self.label = label
        self.failures = 0

    def __call__(self, rec: LogRecord[bytes]) -> ShownRecord:
        raw = bytes(rec.message)
        record, error = None, None
        if self.codec is not None:
            try:
                record = self.codec.decode(raw)
            except CodecError as exc:
                self.failures += 1
                error = str(exc)
                logger.debug("%s:+%d: %s", rec.partition, rec.offset, exc)
        return ShownRecord(rec.partition, rec.offset, rec.timestamp, rec.key, raw, record, error)

    def warning(self) -> str | None:
        if not self.failures:
            return None
        return (
            f"streamcore: warning: {self.failures} record(s) could not be decoded with codec "
            f"{self.label} and are shown raw; try another --codec, or --codec raw"
        )


def flag_names(flags: int) -> list[str]:
    return [f.name for f in Flag if flags & f and f.name]


def preview(data: bytes, limit: int = PREVIEW_CHARS) -> str:
    text = data[:limit].decode("utf-8", "replace")
    return "".join(c if c.isprintable() and c != "\ufffd" else "." for c in text)


def format_data(data: bytes, data_format: str) -> str | None:
    if data_format == "none":
        return None
    if data_format == "preview":
        return preview(data)
    if data_format == "text":
        return data.decode("utf-8", "replace")
    if data_format == "hex":
        return data.hex()
    if data_format == "base64":
        return base64.b64encode(data).decode("ascii")
    raise InvalidArgumentError(f"unknown data format {data_format!r}")


def render_line(item: ShownRecord, data_format: str) -> str:
    position = str(LogOffset(item.partition, item.offset))
    if item.record is not None:
        watermark = str(Watermark(item.record.watermark))
        flags = "[" + ", ".join(flag_names(item.record.flags)) + "]"
    else:
        watermark = format_time(item.timestamp)
        flags = "[undecodable]" if item.error else "[raw]"
    cells = [position, watermark, flags, item.key, str(len(item.data))]
    data = format_data(item.data, data_format)
    if data is not None:
        cells.append(data)
    return " | ".join(cells)


def render_json(item: ShownRecord, data_format: str) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "log": item.partition.name.urn,
        "partition": item.partition.partition,
        "offset": item.offset,
        "position": str(LogOffset(item.partition, item.offset)),
        "timestamp": item.timestamp,
        "time": iso_time(item.timestamp),
        "key": item.key,
    }
    if item.record is not None:
        doc["watermark"] = item.record.watermark
        doc["watermark_time"] = str(Watermark(item.record.watermark))
        doc["flags"] = flag_names(item.record.flags)
    else:
        doc["watermark"] = None
        doc["flags"] = None
        if item.error:
            doc["error"] = item.error
    doc["length"] = len(item.data)
    data = format_data(item.data, data_format)
    if data is not None:
        doc["data"] = data
        doc["data_format"] = data_format
    return doc


def read_until(
    tailer: LogTailer[Any],
    ends: dict[LogPartition, int],
    limit: int | None = None,
    batch: int = 1000,
) -> Iterator[LogRecord[Any]]:
    """Records of the tailer's partitions up to the `ends` seen at start (records appended
    later are not waited for), at most `limit` of them."""
    count = 0
    while limit is None or count < limit:
        if all(tailer.position(p) >= end for p, end in ends.items()):
            return
        want = batch if limit is None else min(batch, limit - count)
        records = tailer.read_batch(want, timeout=0)
        if not records:
            return
        for rec in records:
            if rec.offset >= ends.get(rec.partition, 0):
                continue
            yield rec
            count += 1
            if limit is not None and count >= limit:
                return


def end_snapshot(manager: Any, partitions: Sequence[LogPartition]) -> dict[LogPartition, int]:
    out: dict[LogPartition, int] = {}
    for name in {p.name for p in partitions}:
        ends = manager.end_offsets(name)
        for p in partitions:
            if p.name == name:
                out[p] = ends[p.partition]
    return out
