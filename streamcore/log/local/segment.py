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

from streamcore.errors import RecordTooLargeError
from streamcore.log.append_checks import unencodable_key

MAGIC = b"SCLB"
VERSION = 1
HAS_TIMESTAMPS = 0x01
HEADER = struct.Struct("<4sBBHqIqqII4x")
HEADER_SIZE = HEADER.size  # 48
_CRC_SPAN = 40  # header bytes covered by the checksum (everything before the crc field)
MAX_BATCH_BODY = 1 << 30  # readers refuse a larger body_len as a damaged header
SEGMENT_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
_ZEROS = bytes(8)


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


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
    """One record as one batch, without numpy: the single-append hot path."""
    klen, vlen = len(key), len(value)
    if klen + vlen > MAX_BATCH_BODY - _SINGLE_OFFSETS.size:
        # Written anyway, it would be acknowledged, unreadable, and dropped as a torn tail.
        raise RecordTooLargeError(record_too_large(klen, vlen))
    body = b"".join(
        (_SINGLE_OFFSETS.pack(0, klen, 0, vlen), key, value, _ZEROS[: (-(klen + vlen)) % 8])
    )
    prefix = _PREFIX.pack(MAGIC, VERSION, 0, 0, base_offset, 1, timestamp, timestamp, len(body))
    return b"".join((prefix, _CRC.pack(crc32c(body, crc32c(prefix))), body))


def offsets_of(items: Sequence[str] | Sequence[bytes]) -> np.ndarray:
    """Arrow-style int32 offsets (count + 1 entries, starting at 0) of the items' lengths."""
    out = np.zeros(len(items) + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, items), dtype=np.int64, count=len(items)), out=out[1:])
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
    timestamps: Sequence[int] | None = None,
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
    )


def encode_columns(
    base_offset: int,
    count: int,
    key_offsets: bytes | memoryview,
    key_bytes: bytes | memoryview,
    value_offsets: bytes | memoryview,
    value_bytes: bytes | memoryview,
    timestamp: int,
) -> tuple[list[bytes | memoryview], int]:
    """Encode one batch from Arrow-style columns (offsets must start at 0)."""
    return _assemble(
        base_offset, count, key_offsets, value_offsets, key_bytes, value_bytes, timestamp, None
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
) -> tuple[list[bytes | memoryview], int]:
    parts: list[bytes | memoryview] = []
    flags = 0
    first_ts = last_ts = timestamp
    if timestamps is not None:
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
        if header.base_offset != expected:
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
