"""`PartitionWriter`: the single writer of one local-log partition.

One process at a time owns a partition: the writer takes an exclusive `flock` on `P-NN/.lock`
(released by the kernel if the process dies) and a second process gets `LogLockedError` at once,
naming the holder's pid. On open it validates the last segment batch by batch and truncates a torn
or corrupt tail, so readers never see it. Appends are single `writev` calls of whole batches.

A write that fails or stops short (a full disk) is undone before the error is raised: the segment
is cut back to the end of the last good batch, so the next append lands right after it with the
next offset. If even that fails, the writer closes itself and the next one, on open, drops the
partial batch as a torn tail. Either way nothing after a failed write is acknowledged on garbage.

Segments roll at `segment_bytes` or by record time (`segment_roll`, Kafka's `segment.ms`): before
a batch holding a record whose timestamp is `segment_roll` or more away from the segment's first
record's, either way. Record time is the append time, or the time given with `timestamps=`, so
history appended in one run (a copy, a back-fill) still lands in segments of `segment_roll` that
retention can purge one by one. A batch is never split: one spanning more lands whole.

Durability (`fsync`): `none` — an acknowledged append survives a crash of the process but not of the
machine; `batch` — fsynced by the manager's `BatchSyncer` within about a second of an append (also
on roll/close), so a power loss loses at most about a second of acknowledged appends; `always` —
fsynced before `append` returns.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from streamcore.errors import (
    CorruptLogError,
    LogClosedError,
    LogLockedError,
    LogWriteError,
    RecordTooLargeError,
    StreamcoreError,
)
from streamcore.log.append_checks import check_timestamps, check_types
from streamcore.log.local.maintenance import maintenance_lock
from streamcore.log.local.retention import sealed_segments
from streamcore.log.local.segment import (
    INDEX_SUFFIX,
    encode_batch,
    encode_columns,
    encode_single,
    list_segments,
    scan_segment,
    segment_name,
)

__all__ = ["BATCH_FSYNC_INTERVAL", "Encoded", "PartitionWriter"]

logger = logging.getLogger(__name__)
INDEX_EVERY = 64 * 1024  # bytes of log between two sparse index entries
BATCH_FSYNC_INTERVAL = 1.0  # seconds: fsync=batch's promise
_NO_INDEX = -(1 << 62)  # `_since_index` that never reaches INDEX_EVERY: stop indexing a segment
_NEVER = 1 << 64  # beyond any ms timestamp: the roll window of a segment that never rolls by time
_Buf = bytes | memoryview  # an Arrow column's buffer (`append_columns`)
# An encoded batch: its buffers, size, record count and record times (first, oldest, newest).
Encoded = tuple[list[bytes | memoryview], int, int, int, int, int]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class PartitionWriter:
    """The one writer of a local-log partition, holding its lock: appends whole batches, rolls
    segments and purges expired ones on roll."""

    def __init__(
        self,
        folder: Path,
        *,
        fsync: str,
        segment_bytes: int,
        segment_roll_ms: int,
        retention_ms: int,
        max_record_bytes: int,
        label: str,
        hold: Callable[[], int | None] | None = None,
    ) -> None:
        self.folder = folder
        # The first offset a purge on roll must keep (`retention.hold_offset`), asked at each
        # roll: the groups' positions change between rolls.
        self._hold = hold
        self.label = label
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        self.segment_roll_ms = segment_roll_ms
        self.retention_ms = retention_ms
        self.max_record_bytes = max_record_bytes
        self._mutex = threading.Lock()
        self._closed = False
        self._last_sync = time.monotonic()
        self._last_ts = 0
        folder.mkdir(parents=True, exist_ok=True)
        self._lock_fd = self._acquire_lock()
        try:
            self._recover()
        except BaseException:
            os.close(self._lock_fd)
            raise
        # What a restart finds is on disk already, as far as this writer can tell.
        self._synced_offset = self._next_offset

    def _acquire_lock(self) -> int:
        path = self.folder / ".lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise LogLockedError(
                f"partition {self.label} is being written by another process (pid {holder}); "
                "a local-log partition has one writer at a time: stop that process, or append "
                "through it"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        return fd

    def _recover(self) -> None:
        segments = list_segments(self.folder)
        if not segments:
            self._open_segment(0)
            return
        base = segments[-1]
        path = self.folder / segment_name(base)
        result = scan_segment(path, base, INDEX_EVERY)
        size = path.stat().st_size
        if result.valid_after is not None:
            raise CorruptLogError(
                f"{self.label}: segment {path.name} is corrupt at byte {result.valid_end} "
                f"({result.bad_reason}) but valid batches follow at byte {result.valid_after}, so "
                "this is not a torn tail and the writer will not truncate it; restore the segment "
                f"from a backup, or drop everything from offset {result.next_offset} on with "
                f"`truncate -s {result.valid_end} {path}`"
            )
        if result.valid_end < size:
            logger.warning(
                "%s: truncating %d bytes at the tail of %s (%s); records after offset %d were "
                "never acknowledged as durable and are dropped",
                self.label,
                size - result.valid_end,
                path.name,
                result.bad_reason,
                result.next_offset,
            )
            with open(path, "r+b") as f:
                f.truncate(result.valid_end)
                os.fsync(f.fileno())
        self._segment_base = base
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        self._size = result.valid_end
        self._next_offset = result.next_offset
        self._last_ts = result.last_ts
        self._start_roll_window(self._first_ts_of(path) if result.batches else None)
        self._index_fd = self._write_index_file(base, result.index)
        self._index_size = 16 * len(result.index)
        self._since_index = INDEX_EVERY if not result.index else self._size - result.index[-1][1]

    def _first_ts_of(self, path: Path) -> int:
        from streamcore.log.local.segment import parse_header

        with open(path, "rb") as f:
            header = parse_header(f.read(64))
        return header.first_ts if header else 0

    def _write_index_file(self, base: int, entries: list[tuple[int, int]]) -> int:
        """Write the sparse index of segment `base` afresh; returns its fd, open for appends."""
        from array import array

        path = self.folder / f"{base:020d}{INDEX_SUFFIX}"
        flat = array("q", [v for pair in entries for v in pair])
        tmp = path.with_suffix(".index.tmp")
        tmp.write_bytes(flat.tobytes())
        os.replace(tmp, path)
        return os.open(path, os.O_WRONLY | os.O_APPEND)

    def _open_segment(self, base: int) -> None:
        """Create segment `base` and make it the active one; on failure nothing changes (a
        half-made segment would make readers leave the active one too early)."""
        path = self.folder / segment_name(base)
        fd = index_fd = -1
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
            index_fd = self._write_index_file(base, [])
            if self.fsync != "none":
                fsync_dir(self.folder)
        except BaseException:
            for opened in (fd, index_fd):
                if opened >= 0:
                    os.close(opened)
            if fd >= 0:
                path.unlink(missing_ok=True)
                (self.folder / f"{base:020d}{INDEX_SUFFIX}").unlink(missing_ok=True)
            raise
        self._fd, self._index_fd = fd, index_fd
        self._segment_base = base
        self._start_roll_window(None)
        self._size = 0
        self._next_offset = base
        self._index_size = 0
        self._since_index = INDEX_EVERY

    def _start_roll_window(self, first_ts: int | None) -> None:
        """Records whose time is strictly within `segment_roll` of `first_ts`, the segment's
        first record's, stay in the segment; None: it has no record yet."""
        if first_ts is None or self.segment_roll_ms <= 0:
            self._roll_after, self._roll_before = _NEVER, -_NEVER
        else:
            self._roll_after = first_ts + self.segment_roll_ms
            self._roll_before = first_ts - self.segment_roll_ms

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def next_offset(self) -> int:
        return self._next_offset

    @property
    def synced_offset(self) -> int:
        """Offset up to which appends are known to be on disk (fsynced), whatever `fsync` is."""
        return self._synced_offset

    def _timestamp(self) -> int:
        # Append timestamps never go backwards within a partition, so offset_for_timestamp can
        # rely on batch order even if the wall clock steps back.
        ts = max(now_ms(), self._last_ts)
        self._last_ts = ts
        return ts

    def append(
        self,
        keys: Sequence[str],
        values: Sequence[bytes],
        timestamps: Sequence[int] | np.ndarray | None = None,
    ) -> int:
        """Append one batch; returns the offset of its first record."""
        with self._mutex:
            batch = self.encode(keys, values, timestamps)
            return self._next_offset if batch is None else self.write(batch)

    def encode(
        self,
        keys: Sequence[str],
        values: Sequence[bytes],
        timestamps: Sequence[int] | np.ndarray | None = None,
    ) -> Encoded | None:
        """Check and encode a batch for `write` without touching the disk (None if it is empty):
        its buffers, size, record count and record times (first, oldest, newest). Call both
        under `mutex`, with no other append in between."""
        self._check_open()
        if not len(values) and not len(keys):
            return None
        timestamps = check_timestamps(timestamps, len(values))
        ts = self._timestamp()
        try:
            parts, size = encode_batch(self._next_offset, keys, values, ts, timestamps)
        except TypeError:
            check_types(keys, values)
            raise
        self._check_sizes(values, size)
        if timestamps is None:
            return parts, size, len(values), ts, ts, ts
        first, oldest, newest = int(timestamps[0]), int(timestamps.min()), int(timestamps.max())
        return parts, size, len(values), first, oldest, newest

    @property
    def mutex(self) -> threading.Lock:
        """Held across `encode` and `write` (see the appender's `_write_all_or_nothing`)."""
        return self._mutex

    def append_one(self, key: bytes, value: bytes) -> int:
        """Append a single record, its key already UTF-8 (the appender checked it); returns its
        offset. The hot path of `append`: one call, one `write`, no numpy."""
        if type(value) is not bytes:
            if not isinstance(value, bytes | bytearray | memoryview):
                check_types((), (value,))
            value = bytes(value)
        if len(value) > self.max_record_bytes:
            raise RecordTooLargeError(self._too_large(len(value)))
        with self._mutex:
            if self._closed:
                self._check_open()
            ts = now_ms()
            if ts < self._last_ts:
                ts = self._last_ts
            self._last_ts = ts
            base = self._next_offset
            data = encode_single(base, key, value, ts)
            size = len(data)
            position = None
            try:
                if self._size and (
                    self._size + size > self.segment_bytes
                    or not self._roll_before < ts < self._roll_after
                ):
                    self._roll()
                position = self._size
                written = os.write(self._fd, data)
                if written != size:
                    self._finish_partial_write((data,), written)
                if self.fsync != "none":
                    self._sync(base + 1)
            except OSError as exc:
                raise self._write_failed(position, exc) from exc
            except BaseException:
                self._undo_write(position)
                raise
            if not position:
                self._start_roll_window(ts)
            self._size = position + size
            self._next_offset = base + 1
            if self._since_index >= INDEX_EVERY:
                self._write_index(base, position)
            self._since_index += size
            return base

    def append_columns(
        self, count: int, key_offsets: _Buf, key_bytes: _Buf, value_offsets: _Buf, value_bytes: _Buf
    ) -> int:
        """Append one batch given as Arrow-style columns (no per-record Python work)."""
        with self._mutex:
            batch = self.encode_columns(count, key_offsets, key_bytes, value_offsets, value_bytes)
            # An empty batch would only make readers stop early.
            return self._next_offset if batch is None else self.write(batch)

    def encode_columns(
        self,
        count: int,
        key_offsets: _Buf,
        key_bytes: _Buf,
        value_offsets: _Buf,
        value_bytes: _Buf,
        timestamps: np.ndarray | None = None,
    ) -> Encoded | None:
        """`encode` for a batch given as Arrow-style columns (offsets from 0; keys UTF-8)."""
        self._check_open()
        if not count:
            return None
        ts = self._timestamp()
        parts, size = encode_columns(
            self._next_offset,
            count,
            key_offsets,
            key_bytes,
            value_offsets,
            value_bytes,
            ts,
            timestamps,
        )
        if size > self.max_record_bytes:
            lengths = np.diff(np.frombuffer(value_offsets, dtype=np.int32))
            if int(lengths.max()) > self.max_record_bytes:
                raise RecordTooLargeError(self._too_large(int(lengths.max())))
        if timestamps is None:
            return parts, size, count, ts, ts, ts
        return parts, size, count, int(timestamps[0]), int(timestamps.min()), int(timestamps.max())

    def _too_large(self, size: int) -> str:
        return (
            f"a record of {size} bytes exceeds log.max_record_bytes={self.max_record_bytes} "
            f"on {self.label}; raise the limit in include/streamcore.toml or split the payload"
        )

    def _check_sizes(self, values: Sequence[bytes], size: int) -> None:
        if size <= self.max_record_bytes:
            return
        self.check_record_sizes(values)

    def check_record_sizes(self, values: Sequence[bytes]) -> None:
        largest = max(map(len, values), default=0)
        if largest > self.max_record_bytes:
            raise RecordTooLargeError(self._too_large(largest))

    def write(self, batch: Encoded) -> int:
        """Write a batch made by `encode` (under `mutex`); returns its first offset. On failure
        nothing of it stays in the segment (see the module docstring)."""
        parts, size, count, first_ts, oldest, newest = batch
        base = self._next_offset
        position = None
        try:
            if self._size and (
                self._size + size > self.segment_bytes
                or oldest <= self._roll_before
                or newest >= self._roll_after
            ):
                self._roll()
            position = self._size
            written = os.writev(self._fd, parts)
            if written != size:
                self._finish_partial_write(parts, written)
            self._sync(base + count)
        except OSError as exc:
            raise self._write_failed(position, exc) from exc
        except BaseException:
            self._undo_write(position)
            raise
        if not position:
            self._start_roll_window(first_ts)
        self._size = position + size
        self._next_offset = base + count
        if self._since_index >= INDEX_EVERY:
            self._write_index(base, position)
        self._since_index += size
        return base

    def _finish_partial_write(self, parts: Sequence[bytes | memoryview], written: int) -> None:
        # writev may stop short on huge batches; write what remains, in order. A disk that
        # fills up meanwhile raises ENOSPC here, and the caller undoes the whole batch.
        remaining = memoryview(b"".join(bytes(p) for p in parts))[written:]
        while remaining:
            n = os.write(self._fd, remaining)
            if n <= 0:
                raise LogWriteError(
                    f"write() to a segment of {self.label} made no progress", errno.EIO
                )
            remaining = remaining[n:]

    def _undo_write(self, position: int | None) -> bool:
        """Cut the segment back to `position`, the end of the last good batch (None: nothing
        was written). If that fails, close this writer so nothing is appended after the partial
        batch; the next writer's recovery drops it as a torn tail. True if the file is intact."""
        if position is None or self._closed:
            return not self._closed
        try:
            os.ftruncate(self._fd, position)
            if os.fstat(self._fd).st_size == position:
                return True
        except OSError as exc:
            logger.error("%s: cannot cut a failed write off its segment: %s", self.label, exc)
        self._close_files()
        return False

    def _write_failed(self, position: int | None, exc: OSError) -> LogWriteError:
        intact = self._undo_write(position)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            what = (
                f"the disk holding {self.folder} is full ({exc.strerror})"
                if exc.errno == errno.ENOSPC
                else f"the disk quota for {self.folder} is used up ({exc.strerror})"
            )
            fix = (
                "free space on that disk (delete files there, or shorten log.retention and run "
                "`streamcore purge`), then append again"
            )
        else:
            what = f"writing to {self.folder} failed ({exc})"
            fix = "check the disk (dmesg) and the filesystem, then append again"
        state = (
            "nothing of this batch was written"
            if intact
            else "nothing of this batch was acknowledged; the writer could not cut it off the "
            "segment, so it closed itself and the next append reopens the partition, dropping it"
        )
        return LogWriteError(f"cannot append to {self.label}: {what}; {state}; {fix}", exc.errno)

    def _write_index(self, base: int, position: int) -> None:
        entry = base.to_bytes(8, "little") + position.to_bytes(8, "little")
        with contextlib.suppress(OSError):
            if os.write(self._index_fd, entry) == len(entry):
                self._index_size += len(entry)
                self._since_index = 0
                return
        # The sparse index is a hint that readers verify: appends go on without it. A partial
        # entry would shift every later one, so cut it off, or stop indexing this segment.
        logger.warning("%s: cannot extend the index of segment %d", self.label, self._segment_base)
        try:
            os.ftruncate(self._index_fd, self._index_size)
            self._since_index = 0
        except OSError:
            self._since_index = _NO_INDEX

    def _sync(self, offset: int) -> None:
        """`fsync` per the mode, `offset` being the end offset once the pending write counts."""
        if self.fsync == "always" or (
            self.fsync == "batch" and time.monotonic() - self._last_sync >= BATCH_FSYNC_INTERVAL
        ):
            os.fsync(self._fd)
            self._last_sync = time.monotonic()
            self._synced_offset = offset

    def sync_pending(self) -> None:
        """`fsync` if appends were acknowledged since the last fsync (the `fsync=batch` timer)."""
        with self._mutex:
            if self._closed or self._synced_offset >= self._next_offset:
                return
            os.fsync(self._fd)
            self._last_sync = time.monotonic()
            self._synced_offset = self._next_offset

    def _roll(self) -> None:
        if self.fsync != "none":
            os.fsync(self._fd)
            self._synced_offset = self._next_offset
        old_fd, old_index_fd = self._fd, self._index_fd
        self._open_segment(self._next_offset)
        os.close(old_fd)
        os.close(old_index_fd)
        try:
            self.purge_expired(below=self._hold() if self._hold is not None else None)
        except (OSError, StreamcoreError) as exc:  # retention must not fail an append
            logger.warning("%s: retention purge failed: %s", self.label, exc)

    def purge_expired(self, now: int | None = None, *, below: int | None = None) -> list[int]:
        """Delete sealed segments whose newest record is older than the retention, oldest
        first, and only while a segment ends at or before `below` (None: no bound), the first
        offset some consumer group still needs (`streamcore.log.local.retention`).

        A segment's age is its newest record's timestamp (`retention.sealed_segments`). The
        active segment is never deleted. Returns the base offsets removed."""
        if self.retention_ms <= 0:
            return []
        now = now if now is not None else now_ms()
        removed = []
        with maintenance_lock(self.folder) as locked:
            if not locked:
                logger.info("%s: a compaction is running; purging on a later roll", self.label)
                return []
            for segment in sealed_segments(self.folder, self.retention_ms, now):
                if segment.base >= self._segment_base:
                    break
                if not segment.expired or (below is not None and segment.end > below):
                    break
                base = segment.base
                path = self.folder / segment_name(base)
                path.unlink()
                (self.folder / f"{base:020d}{INDEX_SUFFIX}").unlink(missing_ok=True)
                removed.append(base)
        if removed:
            logger.info(
                "%s: retention purged %d segment(s) up to offset %d",
                self.label,
                len(removed),
                self._first_kept(),
            )
        return removed

    def _first_kept(self) -> int:
        return list_segments(self.folder)[0]

    def flush(self) -> None:
        with self._mutex:
            if not self._closed:
                os.fsync(self._fd)
                self._last_sync = time.monotonic()
                self._synced_offset = self._next_offset

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"the writer of {self.label} is closed; get a new appender")

    def _close_files(self) -> None:
        self._closed = True
        for fd in (self._fd, self._index_fd, self._lock_fd):
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        with self._mutex:
            if self._closed:
                return
            try:
                if self.fsync != "none":
                    os.fsync(self._fd)
                    self._synced_offset = self._next_offset
            finally:
                self._close_files()
