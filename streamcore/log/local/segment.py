"""The on-disk batch format of the local log, and scanning/recovery of segment files.

A partition is a folder of segment files named by the offset of their first record
(`00000000000000000000.log`). A segment is a sequence of batches; each batch is

    header (48 bytes, little-endian)
      magic "SCLB" | version u8 | flags u8 | reserved u16 | base_offset i64 | count u32
      | first_ts i64 | last_ts i64 | body_len u32 | crc32 u32 | pad u32
    body (body_len bytes, a multiple of 8)
      [timestamps i64 x count]            only when flags & HAS_TIMESTAMPS, else all = first_ts
      key offsets   i32 x (count + 1)     Arrow layout: starts at 0, end-exclusive
      value offsets i32 x (count + 1)
      key bytes (UTF-8) | value bytes | zero padding

Every section starts 8-byte aligned, so key/value columns map straight onto Arrow binary arrays.

Offsets run without a gap from batch to batch, except before a batch flagged `COMPACTED`: key
compaction (`streamcore.log.local.compaction`) rewrites a sealed segment with only the surviving
records, each run of consecutive survivors one such batch, so the offsets before it were removed
by compaction, not lost. A compacted segment whose last records were removed ends with an empty
`COMPACTED` batch (count 0) at the segment's end offset, so the next segment follows it without
a gap.
The CRC-32C (Castagnoli, as in Kafka's record batches; hardware-accelerated, about 3x faster
than zlib's CRC-32 here) covers the header's first 40 bytes and the body: a batch is valid as a
whole or not at all. A batch that fails its checksum at the tail of the last segment is a torn
write: the writer truncates it on open and readers never serve it.
"""

from __future__ import annotations

import os
import struct
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from crc32c import crc32c

from streamcore.errors import CorruptLogError, RecordTooLargeError
from streamcore.log.append_checks import unencodable_key

__all__ = [
    "COMPACTED",
    "HEADER_SIZE",
    "INDEX_SUFFIX",
    "MAX_BATCH_BODY",
    "SEGMENT_SUFFIX",
    "Batch",
    "BatchHeader",
    "check_crc",
    "encode_batch",
    "encode_columns",
    "encode_key",
    "encode_raw_batch",
    "encode_single",
    "find_valid_batch",
    "index_name",
    "lengths_of",
    "list_segments",
    "newest_batch_timestamp",
    "parse_header",
    "read_batches",
    "read_index",
    "scan_segment",
    "segment_name",
]

MAGIC = b"SCLB"
VERSION = 1
HAS_TIMESTAMPS = 0x01
COMPACTED = 0x02  # written by key compaction: a gap of removed offsets may come before it
HEADER = struct.Struct("<4sBBHqIqqII4x")
HEADER_SIZE = HEADER.size  # 48
_CRC_SPAN = 40  # header bytes covered by the checksum (everything before the crc field)
MAX_BATCH_BODY = 1 << 30  # readers refuse a larger body_len as a damaged header
SEGMENT_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
_ZEROS = bytes(8)


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def index_name(base_offset: int) -> str:
    return f"{base_offset:020d}{INDEX_SUFFIX}"


def list_segments(folder: Path) -> list[int]:
    """Base offsets of the segment files in `folder`, ascending."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted(int(n[:-4]) for n in names if n.endswith(SEGMENT_SUFFIX) and n[:-4].isdigit())


def _pad(n: int) -> bytes:
    return _ZEROS[: (-n) % 8]


_PREFIX = struct.Struct("<4sBBHqIqqI")
# The prefix of a single record's batch (no flags): magic, version, flags and reserved fixed.
_SINGLE_PREFIX = struct.Struct("<8sqIqqI")
_SINGLE_HEAD = struct.pack("<4sBBH", MAGIC, VERSION, 0, 0)
_SINGLE_OFFSETS = struct.Struct("<iiii")  # key offsets [0, k], value offsets [0, v]
_CRC = struct.Struct("<I4x")


def record_too_large(key_len: int, value_len: int, index: int | None = None) -> str:
    which = "a record" if index is None else f"record #{index}"
    return (
        f"{which} of {key_len} key and {value_len} value bytes does not fit in one batch of the "
        f"local log (at most {MAX_BATCH_BODY - _SINGLE_OFFSETS.size} bytes of key and value); "
        "split the payload, or store it elsewhere and log a reference to it"
    )


def encode_single(base_offset: int, key: bytes, value: bytes, timestamp: int) -> bytes:
    """One record as one batch, without numpy: the single-append hot path (few calls: the
    prefix's constant fields are one pre-packed field, the body one concatenation)."""
    klen, vlen = len(key), len(value)
    if klen + vlen > MAX_BATCH_BODY - _SINGLE_OFFSETS.size:
        # Written anyway, it would be acknowledged, unreadable, and dropped as a torn tail.
        raise RecordTooLargeError(record_too_large(klen, vlen))
    pad = -(klen + vlen) & 7
    body = _SINGLE_OFFSETS.pack(0, klen, 0, vlen) + key + value + _ZEROS[:pad]
    prefix = _SINGLE_PREFIX.pack(_SINGLE_HEAD, base_offset, 1, timestamp, timestamp, len(body))
    return prefix + _CRC.pack(crc32c(body, crc32c(prefix))) + body


def lengths_of(items: Sequence[str] | Sequence[bytes] | Sequence[memoryview]) -> np.ndarray:
    """The items' lengths, int64. One `struct.pack` of them all converts the ints in one C loop,
    about 3x faster than `np.fromiter`, which packs each item into the array on its own (the
    measuring is most of a list batch's per-record cost)."""
    return np.frombuffer(struct.pack(f"<{len(items)}q", *map(len, items)), dtype=np.int64)


def offsets_of(items: Sequence[str] | Sequence[bytes]) -> np.ndarray:
    """Arrow-style int32 offsets (count + 1 entries, starting at 0) of the items' lengths."""
    out = np.zeros(len(items) + 1, dtype=np.int32)
    np.cumsum(lengths_of(items), out=out[1:])
    return out


def encode_key(key: str, index: int = 0) -> bytes:
    """The UTF-8 bytes of a key; `InvalidRecordError` for a str that has no UTF-8 form (a lone
    surrogate, e.g. from bytes decoded with errors="surrogateescape")."""
    try:
        return key.encode()
    except UnicodeEncodeError as exc:
        raise unencodable_key(index, key, exc) from None


def encode_keys(keys: Sequence[str]) -> tuple[np.ndarray, bytes]:
    """Offsets and UTF-8 bytes of string keys (one encode call when they are all ASCII)."""
    joined = "".join(keys)
    if joined.isascii():
        return offsets_of(keys), joined.encode("ascii")
    encoded = [encode_key(k, i) for i, k in enumerate(keys)]
    return offsets_of(encoded), b"".join(encoded)


def encode_batch(
    base_offset: int,
    keys: Sequence[str],
    values: Sequence[bytes],
    timestamp: int,
    timestamps: Sequence[int] | np.ndarray | None = None,
    flags: int = 0,
) -> tuple[list[bytes | memoryview], int]:
    """Encode one batch; returns the buffers to write (in order) and their total size."""
    key_offsets, key_bytes = encode_keys(keys)
    value_offsets = offsets_of(values)
    if value_offsets[-1] > 0x7FFFFFFF - 8 or key_offsets[-1] > 0x7FFFFFFF - 8:
        raise RecordTooLargeError("a batch holds more than 2 GiB of data; append smaller batches")
    value_bytes = b"".join(values)
    return _assemble(
        base_offset,
        len(values),
        key_offsets.data,
        value_offsets.data,
        key_bytes,
        value_bytes,
        timestamp,
        timestamps,
        flags,
    )


def encode_raw_batch(
    base_offset: int,
    keys: Sequence[bytes],
    values: Sequence[bytes],
    timestamps: Sequence[int],
    *,
    timestamp: int = 0,
    flags: int = 0,
) -> tuple[list[bytes | memoryview], int]:
    """Encode one batch of records whose keys are bytes as stored (compaction rewrites records
    without decoding them). An empty batch carries `timestamp`."""
    return _assemble(
        base_offset,
        len(values),
        offsets_of(keys).data,
        offsets_of(values).data,
        b"".join(keys),
        b"".join(values),
        timestamps[0] if timestamps else timestamp,
        timestamps,
        flags,
    )


def encode_columns(
    base_offset: int,
    count: int,
    key_offsets: bytes | memoryview,
    key_bytes: bytes | memoryview,
    value_offsets: bytes | memoryview,
    value_bytes: bytes | memoryview,
    timestamp: int,
    timestamps: np.ndarray | None = None,
) -> tuple[list[bytes | memoryview], int]:
    """Encode one batch from Arrow-style columns (offsets must start at 0)."""
    return _assemble(
        base_offset,
        count,
        key_offsets,
        value_offsets,
        key_bytes,
        value_bytes,
        timestamp,
        timestamps,
    )


def _assemble(
    base_offset: int,
    count: int,
    key_offsets: bytes | memoryview,
    value_offsets: bytes | memoryview,
    key_bytes: bytes | memoryview,
    value_bytes: bytes | memoryview,
    timestamp: int,
    timestamps: Sequence[int] | np.ndarray | None,
    flags: int = 0,
) -> tuple[list[bytes | memoryview], int]:
    parts: list[bytes | memoryview] = []
    first_ts = last_ts = timestamp
    if timestamps is not None and len(timestamps):
        flags |= HAS_TIMESTAMPS
        ts = np.asarray(timestamps, dtype=np.int64)
        first_ts, last_ts = int(ts[0]), int(ts.max())
        parts.append(ts.tobytes())
    ko, vo = memoryview(key_offsets).cast("B"), memoryview(value_offsets).cast("B")
    kb, vb = memoryview(key_bytes).cast("B"), memoryview(value_bytes).cast("B")
    parts += [ko, _pad(len(ko)), vo, _pad(len(vo)), kb, vb]
    data_len = len(kb) + len(vb)
    parts.append(_pad(data_len))
    body_len = sum(len(p) for p in parts)
    if body_len > MAX_BATCH_BODY:
        raise RecordTooLargeError(_batch_too_large(count, body_len, ko, vo))
    prefix = struct.pack(
        "<4sBBHqIqqI", MAGIC, VERSION, flags, 0, base_offset, count, first_ts, last_ts, body_len
    )
    crc = crc32c(prefix)
    for p in parts:
        crc = crc32c(p, crc)
    header = prefix + struct.pack("<I4x", crc)
    return [header, *parts], HEADER_SIZE + body_len


def _batch_too_large(
    count: int, body_len: int, key_offsets: memoryview, value_offsets: memoryview
) -> str:
    key_lens = np.diff(np.frombuffer(key_offsets, dtype=np.int32).astype(np.int64))
    value_lens = np.diff(np.frombuffer(value_offsets, dtype=np.int32).astype(np.int64))
    largest = int(np.argmax(key_lens + value_lens))
    if key_lens[largest] + value_lens[largest] > MAX_BATCH_BODY - _SINGLE_OFFSETS.size:
        return record_too_large(int(key_lens[largest]), int(value_lens[largest]), largest)
    return (
        f"a batch of {count} records is {body_len} bytes, over the local log's batch limit of "
        f"{MAX_BATCH_BODY} bytes; append it in smaller batches"
    )


@dataclass(slots=True)
class BatchHeader:
    """The 48-byte header of one batch, decoded (the module docstring has the layout)."""

    base_offset: int
    count: int
    first_ts: int
    last_ts: int
    body_len: int
    crc: int
    flags: int

    @property
    def size(self) -> int:
        return HEADER_SIZE + self.body_len

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.count

    def follows(self, expected: int) -> bool:
        """Whether this batch may come where offset `expected` is due: it starts there, or later
        after offsets key compaction removed."""
        return self.base_offset == expected or (
            self.base_offset > expected and bool(self.flags & COMPACTED)
        )


def parse_header(buf: bytes | memoryview, pos: int = 0) -> BatchHeader | None:
    """The header at `pos`, or None if the bytes there are not a plausible header."""
    if len(buf) - pos < HEADER_SIZE:
        return None
    magic, version, flags, _, base, count, first_ts, last_ts, body_len, crc = HEADER.unpack_from(
        buf, pos
    )
    if magic != MAGIC or version != VERSION or body_len % 8 or body_len > MAX_BATCH_BODY:
        return None
    return BatchHeader(base, count, first_ts, last_ts, body_len, crc, flags)


def check_crc(
    header: BatchHeader, header_bytes: bytes | memoryview, body: bytes | memoryview
) -> bool:
    return crc32c(body, crc32c(header_bytes[:_CRC_SPAN])) == header.crc


class Batch:
    """A decoded batch: column views over its body (no copies until a record is materialised)."""

    __slots__ = (
        "base_offset",
        "body",
        "count",
        "first_ts",
        "flags",
        "key_offsets",
        "key_start",
        "timestamps",
        "value_offsets",
        "value_start",
    )

    def __init__(self, header: BatchHeader, body: memoryview) -> None:
        count = header.count
        self.base_offset = header.base_offset
        self.count = count
        self.first_ts = header.first_ts
        self.flags = header.flags
        self.body = body
        pos = 0
        self.timestamps: memoryview | None = None
        if header.flags & HAS_TIMESTAMPS:
            self.timestamps = body[: 8 * count].cast("q")
            pos = 8 * count
        width = 4 * (count + 1)
        self.key_offsets = body[pos : pos + width].cast("i")
        pos += width + (-width) % 8
        self.value_offsets = body[pos : pos + width].cast("i")
        pos += width + (-width) % 8
        self.key_start = pos
        self.value_start = pos + self.key_offsets[count]

    def raw(self) -> list[tuple[int, int, bytes, bytes]]:
        """(offset, timestamp, key bytes, value bytes) of every record, keys not decoded."""
        body, ko, vo = self.body, self.key_offsets, self.value_offsets
        ks, vs = self.key_start, self.value_start
        return [
            (
                self.base_offset + i,
                self.timestamp(i),
                bytes(body[ks + ko[i] : ks + ko[i + 1]]),
                bytes(body[vs + vo[i] : vs + vo[i + 1]]),
            )
            for i in range(self.count)
        ]

    def timestamp(self, i: int) -> int:
        return self.first_ts if self.timestamps is None else self.timestamps[i]

    def records(self, start: int = 0, stop: int | None = None) -> list[tuple[int, int, str, bytes]]:
        """(offset, timestamp, key, value) for records `start..stop-1` (default: to the end).

        Only the requested slice is materialised, so reading a large batch in chunks costs
        linear time overall.
        """
        stop = self.count if stop is None else min(stop, self.count)
        if start >= stop:
            return []
        body = self.body
        ko = self.key_offsets[start : stop + 1].tolist()
        vo = self.value_offsets[start : stop + 1].tolist()
        ks, vs = self.key_start, self.value_start
        keys = bytes(body[ks + ko[0] : ks + ko[-1]])
        values = bytes(body[vs + vo[0] : vs + vo[-1]])
        kbase, vbase = ko[0], vo[0]
        base = self.base_offset + start
        n = stop - start
        if self.timestamps is None:
            ts = self.first_ts
            return [
                (
                    base + i,
                    ts,
                    keys[ko[i] - kbase : ko[i + 1] - kbase].decode(),
                    values[vo[i] - vbase : vo[i + 1] - vbase],
                )
                for i in range(n)
            ]
        tss = self.timestamps[start:stop].tolist()
        return [
            (
                base + i,
                tss[i],
                keys[ko[i] - kbase : ko[i + 1] - kbase].decode(),
                values[vo[i] - vbase : vo[i + 1] - vbase],
            )
            for i in range(n)
        ]


def read_batches(path: Path, base_offset: int) -> list[Batch]:
    """Every batch of a sealed segment, each checked; `CorruptLogError` at the first bad one (a
    sealed segment is complete: its writer moved on to the next)."""
    data = path.read_bytes()
    view = memoryview(data)
    out, pos, expected = [], 0, base_offset
    while pos < len(data):
        header = parse_header(view, pos)
        end = pos + header.size if header is not None else 0
        if (
            header is None
            or end > len(data)
            or not header.follows(expected)
            or not check_crc(header, view[pos : pos + HEADER_SIZE], view[pos + HEADER_SIZE : end])
        ):
            raise CorruptLogError(
                f"{path}: the batch at byte {pos} (offset {expected}) of this sealed segment is "
                "damaged; restore the segment from a backup, or dump the readable records and "
                "recreate the log"
            )
        out.append(Batch(header, view[pos + HEADER_SIZE : end]))
        expected = header.next_offset
        pos = end
    return out


def find_valid_batch(data: bytes, start: int, min_offset: int) -> int | None:
    """Position of the first complete, checksum-valid batch at or after `start` in `data` whose
    base offset is at least `min_offset`, or None. Bytes before such a batch are not a torn tail
    (a crash only ever damages the end of a segment): they are corruption in the middle."""
    view = memoryview(data)
    try:
        pos = data.find(MAGIC, start)
        while pos != -1:
            header = parse_header(view, pos)
            end = pos + header.size if header is not None else 0
            if (
                header is not None
                and header.base_offset >= min_offset
                and end <= len(data)
                and check_crc(header, view[pos : pos + HEADER_SIZE], view[pos + HEADER_SIZE : end])
            ):
                return pos
            pos = data.find(MAGIC, pos + 1)
        return None
    finally:
        view.release()


@dataclass(slots=True)
class ScanResult:
    """What scanning a segment found: where its valid batches end, the next offset, the sparse
    index, and why the scan stopped early if it did."""

    valid_end: int  # file position after the last valid batch
    next_offset: int  # offset after the last valid batch (base offset if none)
    last_ts: int
    batches: int
    index: list[tuple[int, int]]  # sparse (base_offset, position)
    bad_reason: str | None  # why scanning stopped before the end of file, if it did
    valid_after: int | None = None  # position of a valid batch beyond the bad bytes, if any


def scan_segment(path: Path, base_offset: int, index_every: int) -> ScanResult:
    """Validate every batch of a segment (checksums included), stopping at the first bad one."""
    data = path.read_bytes()
    view = memoryview(data)
    pos, expected, last_ts, batches = 0, base_offset, 0, 0
    index: list[tuple[int, int]] = []
    since_index = index_every
    reason = None
    while pos < len(data):
        header = parse_header(view, pos)
        if header is None:
            reason = f"no valid batch header at byte {pos}"
            break
        end = pos + header.size
        if end > len(data):
            reason = f"batch at byte {pos} is cut short ({len(data) - pos} of {header.size} bytes)"
            break
        if not header.follows(expected):
            reason = (
                f"batch at byte {pos} starts at offset {header.base_offset}, expected {expected}"
            )
            break
        if not check_crc(header, view[pos : pos + HEADER_SIZE], view[pos + HEADER_SIZE : end]):
            reason = f"batch at byte {pos} (offset {expected}) fails its checksum"
            break
        if since_index >= index_every:
            index.append((header.base_offset, pos))
            since_index = 0
        since_index += header.size
        expected = header.next_offset
        last_ts = max(last_ts, header.last_ts)
        batches += 1
        pos = end
    view.release()
    valid_after = find_valid_batch(data, pos + 1, expected) if reason else None
    return ScanResult(pos, expected, last_ts, batches, index, reason, valid_after)


def read_index(path: Path) -> list[tuple[int, int]]:
    """Sparse (offset, position) pairs written beside a segment; a hint that readers verify."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    entries = array("q")
    entries.frombytes(raw[: len(raw) - len(raw) % 16])
    return list(zip(entries[0::2], entries[1::2], strict=True))


def newest_batch_timestamp(path: Path, index_path: Path) -> int | None:
    """The newest append time (ms) in a sealed segment: the `last_ts` of its valid batches from
    the last sparse index entry on (an empty `COMPACTED` batch keeps the time of the records
    removed before it), or None if no valid batch is found."""
    try:
        with open(path, "rb") as f:
            entries = read_index(index_path)
            offset, pos = entries[-1] if entries else (None, 0)
            f.seek(pos)
            data = f.read()
            header = parse_header(data, 0)
            if pos and (header is None or header.base_offset != offset):  # a stale hint
                f.seek(0)
                data = f.read()
    except FileNotFoundError:
        return None
    view = memoryview(data)
    cur, newest = 0, None
    try:
        while (header := parse_header(view, cur)) is not None and cur + header.size <= len(data):
            end = cur + header.size
            if not check_crc(header, view[cur : cur + HEADER_SIZE], view[cur + HEADER_SIZE : end]):
                break
            newest = header.last_ts if newest is None else max(newest, header.last_ts)
            cur = end
    finally:
        view.release()
    return newest
