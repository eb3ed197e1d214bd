"""`PartitionCursor`: reads one local-log partition from any process, following segment rolls.

It serves only batches whose checksum holds. A batch that is incomplete or fails its checksum at the
very end of the newest segment is a write in progress (or a torn tail awaiting the writer's
recovery): the cursor waits for it rather than serving it. A bad batch followed by more data is real
corruption and raises `CorruptLogError`. If retention deleted the records a cursor was about to read,
it continues from the oldest retained record and counts the skipped records in `lost`.
"""

from __future__ import annotations

import bisect
import logging
import os
from pathlib import Path
from typing import Any

from streamcore.errors import CorruptLogError
from streamcore.log.local.segment import (
    HEADER_SIZE,
    INDEX_SUFFIX,
    Batch,
    check_crc,
    list_segments,
    parse_header,
    read_index,
    segment_name,
)

logger = logging.getLogger(__name__)
_CHUNK = 1 << 20


class PartitionCursor:
    def __init__(self, folder: Path, label: str) -> None:
        self.folder = folder
        self.label = label
        self.lost = 0
        self._fd = -1
        self._segment_base = -1
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
                f.seek(pos)
                data = f.read()
        except FileNotFoundError:
            return base
        header = parse_header(data, 0)
        if header is None or header.base_offset != offset:
            offset, pos = base, 0
            with open(path, "rb") as f:
                data = f.read()
        cur = 0
        while (header := parse_header(data, cur)) is not None and cur + header.size <= len(data):
            offset = header.next_offset
            cur += header.size
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
            self._file_pos = entries[j][1]
        self._batch = None
        self._position = offset
        # Skip whole batches before the target, then position inside the batch that holds it.
        while True:
            header = self._peek_header()
            if header is None or header.next_offset > offset:
                break
            self._file_pos += header.size
            if self._file_pos >= self._file_size() and not self._advance_segment():
                break

    def _report_loss(self, wanted: int, oldest: int) -> None:
        self.lost += oldest - wanted
        logger.error(
            "%s: records %d..%d were purged by retention before being read; records have been "
            "lost, continuing from offset %d", self.label, wanted, oldest - 1, oldest,
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
        found = self.next_batch()
        if found is None:
            return []
        batch, start = found
        records = batch.records(start)
        if len(records) > max_records:
            # Keep the rest for the next call: re-seek inside the same batch.
            self._batch = batch
            self._position = records[max_records][0]
            records = records[:max_records]
        return records

    def next_arrow(self, max_records: int) -> Any:
        """The next records as a pyarrow RecordBatch (offset, timestamp, key, value), zero-copy."""
        import pyarrow as pa

        found = self.next_batch()
        if found is None:
            return None
        batch, start = found
        n = min(batch.count - start, max_records)
        if start + n < batch.count:
            self._batch = batch
            self._position = batch.base_offset + start + n
        body = pa.py_buffer(batch.body)
        offsets_k = pa.py_buffer(batch.key_offsets)
        offsets_v = pa.py_buffer(batch.value_offsets)
        keys = pa.Array.from_buffers(
            pa.string(), n, [None, offsets_k, body.slice(batch.key_start)], offset=start
        )
        values = pa.Array.from_buffers(
            pa.binary(), n, [None, offsets_v, body.slice(batch.value_start)], offset=start
        )
        offsets = pa.array(range(batch.base_offset + start, batch.base_offset + start + n),
                           type=pa.int64())
        if batch.timestamps is None:
            ts = pa.repeat(pa.scalar(batch.first_ts, pa.int64()), n)
        else:
            ts = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(batch.timestamps)],
                                       offset=start)
        return pa.RecordBatch.from_arrays(
            [offsets, ts, keys, values], names=["offset", "timestamp", "key", "value"]
        )

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """Earliest retained offset whose timestamp is >= `timestamp_ms`, None if none."""
        for base in list_segments(self.folder):
            try:
                data = (self.folder / segment_name(base)).read_bytes()
            except FileNotFoundError:
                continue
            pos = 0
            while (header := parse_header(data, pos)) is not None and pos + header.size <= len(data):
                if header.last_ts >= timestamp_ms:
                    batch = Batch(header, memoryview(data)[pos + HEADER_SIZE : pos + header.size])
                    for i in range(batch.count):
                        if batch.timestamp(i) >= timestamp_ms:
                            return batch.base_offset + i
                pos += header.size
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
            self._buf = os.pread(self._fd, max(n, _CHUNK), pos)
            self._buf_pos = pos
            if len(self._buf) < n:
                return None
        start = pos - self._buf_pos
        return memoryview(self._buf)[start : start + n]

    def _header_at(self, pos: int, expected_base: int) -> bool:
        raw = self._bytes(pos, HEADER_SIZE)
        header = parse_header(raw) if raw is not None else None
        return header is not None and header.base_offset == expected_base

    def _peek_header(self):
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
        self._open(later[0])
        return True

    def _load_batch(self) -> Batch | None:
        while True:
            if self._fd < 0:
                self.seek(self._position)
                if self._fd < 0:
                    return None
            raw = self._bytes(self._file_pos, HEADER_SIZE)
            if raw is None:
                if self._advance_segment():
                    continue
                return None
            header = parse_header(raw)
            size = self._file_size()
            if header is None:
                if self._file_pos + HEADER_SIZE >= size:
                    return None
                raise CorruptLogError(self._corrupt(f"no valid batch header at byte {self._file_pos}"))
            data = self._bytes(self._file_pos, header.size)
            if data is None:
                return None  # the rest of the batch is still being written
            if not check_crc(header, data[:HEADER_SIZE], data[HEADER_SIZE:]):
                if self._file_pos + header.size >= size:
                    return None  # write in progress, or a torn tail the writer will truncate
                raise CorruptLogError(
                    self._corrupt(f"batch at byte {self._file_pos} fails its checksum")
                )
            self._file_pos += header.size
            if header.next_offset <= self._position:
                continue
            return Batch(header, data[HEADER_SIZE:])

    def _corrupt(self, what: str) -> str:
        return (
            f"{self.label}: segment {segment_name(self._segment_base)} is corrupt ({what}) in the "
            "middle of the log; restore it from a backup, or dump the readable records and "
            "recreate the log"
        )

    def close(self) -> None:
        self._close_fd()
