"""`PartitionCursor`: reads one local-log partition from any process, following segment rolls.

It serves only batches whose checksum holds. A batch that is incomplete or fails its checksum at the
very end of the newest segment is a write in progress (or a torn tail awaiting the writer's
recovery): the cursor waits for it rather than serving it. A bad batch followed by a valid one, or
at the end of a segment that a newer one follows, is real corruption and raises `CorruptLogError`.
If retention deleted the records a cursor was about to read, it continues from the oldest retained
record and counts the skipped records in `lost` (each purged offset once). Offsets that key
compaction removed (a gap before a `COMPACTED` batch, `streamcore.log.local.segment`) are not a
loss: the cursor moves past them and counts them in `compacted`.

A key that is not UTF-8 (only a writer below the API can store one) stops the cursor at that
record: the records before it are served, then `BinaryKey` is raised for it until a seek moves on.
"""

from __future__ import annotations

import bisect
import codecs
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from streamcore.errors import CorruptLogError
from streamcore.log.cursor.tailer import BinaryKey
from streamcore.log.local.segment import (
    HEADER_SIZE,
    INDEX_SUFFIX,
    Batch,
    BatchHeader,
    check_crc,
    find_valid_batch,
    list_segments,
    parse_header,
    read_index,
    segment_name,
)

__all__ = ["PartitionCursor"]

logger = logging.getLogger(__name__)
_CHUNK = 1 << 20


class PartitionCursor:
    """A reader of one local-log partition from a position, across segments (the module
    docstring has what it serves, waits for and skips)."""

    def __init__(self, folder: Path, label: str) -> None:
        self.folder = folder
        self.label = label
        self.lost = 0
        self.compacted = 0  # offsets skipped because key compaction removed their records
        self._lost_upto = 0
        self._fd = -1
        self._segment_base = -1
        self._expected = 0
        self._file_pos = 0
        self._buf = b""
        self._buf_pos = 0
        self._batch: Batch | None = None
        self._batch_index = 0
        self._position = 0
        self.seek(self.start_offset())

    # -- positions ---------------------------------------------------------------------------
    @property
    def position(self) -> int:
        """Offset of the next record this cursor returns."""
        return self._position

    def start_offset(self) -> int:
        segments = list_segments(self.folder)
        return segments[0] if segments else 0

    def end_offset(self) -> int:
        """Offset after the last complete batch of the newest segment."""
        segments = list_segments(self.folder)
        if not segments:
            return 0
        base = segments[-1]
        path = self.folder / segment_name(base)
        entries = read_index(self.folder / f"{base:020d}{INDEX_SUFFIX}")
        offset, pos = entries[-1] if entries else (base, 0)
        try:
            with open(path, "rb") as f:
                data = b""
                if 0 < pos < os.fstat(f.fileno()).st_size and base <= offset:  # a hint: verify
                    f.seek(pos)
                    data = f.read()
                    header = parse_header(data, 0)
                    if header is None or header.base_offset != offset:
                        data = b""
                if not data:
                    offset = base
                    f.seek(0)
                    data = f.read()
        except FileNotFoundError:
            return base
        view = memoryview(data)
        cur = 0
        while (header := parse_header(view, cur)) is not None and cur + header.size <= len(data):
            end = cur + header.size
            if not header.follows(offset) or not check_crc(
                header, view[cur : cur + HEADER_SIZE], view[cur + HEADER_SIZE : end]
            ):
                break  # a torn tail: never served, truncated by the next writer
            offset = header.next_offset
            cur = end
        view.release()
        return offset

    def seek(self, offset: int) -> None:
        segments = list_segments(self.folder)
        if not segments:
            self._close_fd()
            self._position = offset
            return
        if offset < segments[0]:
            self._report_loss(offset, segments[0])
            offset = segments[0]
        i = bisect.bisect_right(segments, offset) - 1
        self._open(segments[i])
        entries = read_index(self.folder / f"{segments[i]:020d}{INDEX_SUFFIX}")
        j = bisect.bisect_right([e[0] for e in entries], offset) - 1
        if j >= 0 and self._header_at(entries[j][1], entries[j][0]):
            self._file_pos, self._expected = entries[j][1], entries[j][0]
        self._batch = None
        self._position = offset
        # Skip whole batches before the target, then position inside the batch that holds it.
        while True:
            header = self._peek_header()
            if header is None or not header.follows(self._expected):
                break  # the end, or bytes that reading will judge
            if header.next_offset > offset:
                break
            self._file_pos += header.size
            self._expected = header.next_offset
            if self._file_pos >= self._file_size() and not self._advance_segment():
                break

    def _report_loss(self, wanted: int, oldest: int) -> None:
        # Count each purged offset once, however often this cursor is sent back before it.
        self.lost += max(0, oldest - max(wanted, self._lost_upto))
        self._lost_upto = max(self._lost_upto, oldest)
        logger.error(
            "%s: records %d..%d were purged by retention before being read; records have been "
            "lost, continuing from offset %d",
            self.label,
            wanted,
            oldest - 1,
            oldest,
        )

    def to_start(self) -> None:
        self.seek(self.start_offset())

    def to_end(self) -> None:
        self.seek(self.end_offset())

    # -- reading ------------------------------------------------------------------------------
    def next_batch(self) -> tuple[Batch, int] | None:
        """The batch holding `position` and the index of `position` in it, and advance past it."""
        if self._batch is None:
            self._batch = self._load_batch()
            if self._batch is None:
                return None
        batch = self._batch
        start = self._position - batch.base_offset
        self._batch = None
        if start < 0:
            start = 0
        self._position = batch.base_offset + batch.count
        return batch, start

    def next_records(self, max_records: int) -> list[tuple[int, int, str, bytes]]:
        records: list[tuple[int, int, str, bytes]] = []
        while not records:  # an empty batch must not look like the end of the partition
            found = self.next_batch()
            if found is None:
                return []
            batch, start = found
            try:
                records = batch.records(start, start + max_records)
            except UnicodeDecodeError:
                records = batch.records(start, self._binary_key(batch, start, max_records))
        if start + len(records) < batch.count:
            # Keep the rest for the next call: re-seek inside the same batch.
            self._batch = batch
            self._position = batch.base_offset + start + len(records)
        return records

    def next_arrow(self, max_records: int) -> Any:
        """The next records as a pyarrow RecordBatch (offset, timestamp, key, value), zero-copy."""
        import pyarrow as pa

        found = self.next_batch()
        if found is None:
            return None
        batch, start = found
        n = min(batch.count - start, max_records)
        body = pa.py_buffer(batch.body)
        offsets_k = pa.py_buffer(batch.key_offsets)
        offsets_v = pa.py_buffer(batch.value_offsets)
        keys = pa.Array.from_buffers(
            pa.string(), n, [None, offsets_k, body.slice(batch.key_start)], offset=start
        )
        if not _all_ascii(batch, start, n):  # ASCII keys are UTF-8: the common case stops here
            try:
                keys.validate(full=True)
            except pa.ArrowInvalid:
                n = self._binary_key(batch, start, n) - start
                keys = keys.slice(0, n)
        if start + n < batch.count:
            self._batch = batch
            self._position = batch.base_offset + start + n
        values = pa.Array.from_buffers(
            pa.binary(), n, [None, offsets_v, body.slice(batch.value_start)], offset=start
        )
        # Numpy buffers, not a Python range (pyarrow would convert one int object per record)
        # nor pa.array (which imports pandas on first use).
        first = batch.base_offset + start
        offsets = _int64s(np.arange(first, first + n, dtype=np.int64))
        if batch.timestamps is None:
            ts = _int64s(np.full(n, batch.first_ts, dtype=np.int64))
        else:
            ts = pa.Array.from_buffers(
                pa.int64(), n, [None, pa.py_buffer(batch.timestamps)], offset=start
            )
        return pa.RecordBatch.from_arrays(
            [offsets, ts, keys, values], names=["offset", "timestamp", "key", "value"]
        )

    def _binary_key(self, batch: Batch, start: int, max_records: int) -> int:
        """Where the first key that is not UTF-8 is among `max_records` records of `batch` from
        `start`; if it is at `start`, the cursor stays there and `BinaryKey` is raised."""
        ko, ks = batch.key_offsets, batch.key_start
        for i in range(start, min(batch.count, start + max_records)):
            key = bytes(batch.body[ks + ko[i] : ks + ko[i + 1]])
            try:
                key.decode()
            except UnicodeDecodeError:
                if i > start:
                    return i
                self._batch = batch
                self._position = batch.base_offset + i
                vo, vs = batch.value_offsets, batch.value_start
                value = bytes(batch.body[vs + vo[i] : vs + vo[i + 1]])
                raise BinaryKey(self._position, batch.timestamp(i), key, value) from None
        return min(batch.count, start + max_records)

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """Earliest retained offset whose timestamp is >= `timestamp_ms`, None if none."""
        for base in list_segments(self.folder):
            try:
                data = (self.folder / segment_name(base)).read_bytes()
            except FileNotFoundError:
                continue
            pos, expected = 0, base
            view = memoryview(data)
            while (header := parse_header(data, pos)) is not None and pos + header.size <= len(
                data
            ):
                if not header.follows(expected):
                    break  # stale bytes of a torn tail
                if header.last_ts >= timestamp_ms:
                    body = view[pos + HEADER_SIZE : pos + header.size]
                    if not check_crc(header, view[pos : pos + HEADER_SIZE], body):
                        break  # torn tail (or corruption, which reading reports)
                    batch = Batch(header, body)
                    for i in range(batch.count):
                        if batch.timestamp(i) >= timestamp_ms:
                            return batch.base_offset + i
                pos += header.size
                expected = header.next_offset
        return None

    # -- internals ----------------------------------------------------------------------------
    def _open(self, base: int) -> None:
        self._close_fd()
        try:
            self._fd = os.open(self.folder / segment_name(base), os.O_RDONLY)
        except FileNotFoundError:
            # Purged between listing and opening: start again from what is left.
            segments = list_segments(self.folder)
            if not segments:
                raise
            self._report_loss(base, segments[0])
            self._fd = os.open(self.folder / segment_name(segments[0]), os.O_RDONLY)
            base = segments[0]
        self._segment_base = base
        self._expected = base  # base offset of the batch expected at _file_pos
        self._file_pos = 0
        self._buf = b""
        self._buf_pos = 0

    def _close_fd(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _file_size(self) -> int:
        return os.fstat(self._fd).st_size if self._fd >= 0 else 0

    def _bytes(self, pos: int, n: int) -> memoryview | None:
        """`n` bytes at file position `pos` through a read-ahead buffer; None if not yet written."""
        if pos < self._buf_pos or pos + n > self._buf_pos + len(self._buf):
            if pos + n > self._file_size():
                return None  # not written yet: don't read a partial batch over and over
            self._buf = os.pread(self._fd, max(n, _CHUNK), pos)
            self._buf_pos = pos
            if len(self._buf) < n:
                return None
        start = pos - self._buf_pos
        return memoryview(self._buf)[start : start + n]

    def _header_at(self, pos: int, expected_base: int) -> bool:
        if pos < 0:
            return False  # a damaged index
        raw = self._bytes(pos, HEADER_SIZE)
        header = parse_header(raw) if raw is not None else None
        return header is not None and header.base_offset == expected_base

    def _peek_header(self) -> BatchHeader | None:
        if self._fd < 0:
            segments = list_segments(self.folder)
            if not segments:
                return None
            self._open(segments[0])
        raw = self._bytes(self._file_pos, HEADER_SIZE)
        return parse_header(raw) if raw is not None else None

    def _advance_segment(self) -> bool:
        """Move to the next segment if the writer rolled; False if this is still the newest."""
        segments = list_segments(self.folder)
        later = [b for b in segments if b > self._segment_base]
        if not later:
            return False
        if self._file_pos < self._file_size():
            return False  # bytes were appended before the roll: read them first
        if later[0] > self._position:
            # Retention purged the segment(s) between this one and the next we can open.
            self._report_loss(self._position, later[0])
            self._position = later[0]
        self._open(later[0])
        return True

    def _load_batch(self) -> Batch | None:
        while True:
            if self._fd < 0:
                self.seek(self._position)
                if self._fd < 0:
                    return None
            pos = self._file_pos
            raw = self._bytes(pos, HEADER_SIZE)
            if raw is None:
                if self._advance_segment():
                    continue
                size = self._file_size()
                if pos >= size:
                    return None  # nothing new
                if self._not_ready(f"{size - pos} stray bytes at byte {pos}", scan=False):
                    continue
                return None
            header = parse_header(raw)
            if header is None:
                if self._not_ready(f"no valid batch header at byte {pos}"):
                    continue
                return None
            data = self._bytes(pos, header.size)
            if data is None:
                if self._not_ready(f"batch at byte {pos} is cut short", scan=False):
                    continue
                return None  # the rest of the batch is still being written
            if not check_crc(header, data[:HEADER_SIZE], data[HEADER_SIZE:]):
                if self._not_ready(f"batch at byte {pos} fails its checksum"):
                    continue
                return None
            if not header.follows(self._expected):  # stale bytes, valid in themselves
                what = f"batch at byte {pos} starts at offset {header.base_offset}, "
                if self._not_ready(what + f"expected {self._expected}"):
                    continue
                return None
            self._file_pos += header.size
            self._expected = header.next_offset
            if header.base_offset > self._position:  # a gap key compaction left: move past it
                self.compacted += header.base_offset - self._position
                self._position = header.base_offset
            if header.count == 0 or header.next_offset <= self._position:
                continue
            return Batch(header, data[HEADER_SIZE:])

    def _not_ready(self, what: str, scan: bool = True) -> bool:
        """The bytes at the read position are not a complete, valid batch. True: read again;
        False: this is the unfinished end of the newest segment (a write in progress, or a torn
        tail that the next writer truncates), so there is nothing to serve yet. Raises
        `CorruptLogError` when valid data follows the bad bytes."""
        pos = self._file_pos
        # Never trust buffered bytes here again: a recovering writer truncates and rewrites them.
        self._buf, self._buf_pos = b"", 0
        if self._intact_at(pos):
            return True
        if scan:
            size = self._file_size()
            rest = os.pread(self._fd, size - pos - 1, pos + 1) if size > pos + 1 else b""
            if find_valid_batch(rest, 0, self._expected) is not None:
                raise CorruptLogError(self._corrupt(what))
        segments = list_segments(self.folder)
        if not any(b > self._segment_base for b in segments):
            return False
        # The writer rolled, so this segment was complete before the next one was created.
        if self._intact_at(pos) or self._file_size() - pos == 0:
            return True
        raise CorruptLogError(self._corrupt(f"{what}, and a newer segment follows"))

    def _intact_at(self, pos: int) -> bool:
        """Whether the expected batch is on disk at `pos`, complete and valid (bypassing the read
        buffer)."""
        raw = os.pread(self._fd, HEADER_SIZE, pos)
        header = parse_header(raw)
        if (
            header is None
            or not header.follows(self._expected)
            or pos + header.size > self._file_size()
        ):
            return False
        data = os.pread(self._fd, header.size, pos)
        return len(data) == header.size and check_crc(
            header, data[:HEADER_SIZE], data[HEADER_SIZE:]
        )

    def _corrupt(self, what: str) -> str:
        return (
            f"{self.label}: segment {segment_name(self._segment_base)} is corrupt ({what}) in the "
            "middle of the log; restore it from a backup, or dump the readable records and "
            "recreate the log"
        )

    def close(self) -> None:
        self._close_fd()


def _int64s(values: np.ndarray) -> Any:
    """An Arrow int64 array over a numpy int64 array's buffer, zero-copy."""
    import pyarrow as pa

    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def _all_ascii(batch: Batch, start: int, n: int) -> bool:
    ko, ks = batch.key_offsets, batch.key_start
    try:
        codecs.ascii_decode(batch.body[ks + ko[start] : ks + ko[start + n]])
    except UnicodeDecodeError:
        return False
    return True
