"""`CursorTailer`: the LogTailer shared by the local and memory backends.

A backend supplies one cursor per assigned partition (`next_records`, `seek`, `start_offset`,
`end_offset`, `offset_for_timestamp`; an `ArrowCursor` also `next_arrow`) and a position store.
The tailer rotates between partitions one batch at a time, decodes messages with its codec, tracks
the position after the last record it returned per partition, and commits those positions.

Positions move only past records returned: a record the codec rejects, or whose key a cursor
cannot read as UTF-8 (`BinaryKey`), raises `UndecodableRecordError` with the tailer standing at
it, after the records before it were returned. Decoding stays one list comprehension per fetched
chunk; only a failing chunk is decoded again record by record to find where it fails.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from streamcore.collector import collector_paused
from streamcore.errors import (
    CodecError,
    InvalidArgumentError,
    LogClosedError,
    LogError,
    PartitionNotFoundError,
    UndecodableRecordError,
)
from streamcore.log.api import LogTailer
from streamcore.log.tuning import GroupTuning
from streamcore.log.values import LogOffset, LogPartition, LogRecord

if TYPE_CHECKING:
    from streamcore.codecs import Codec

__all__ = [
    "NOTHING_TO_SKIP",
    "ArrowCursor",
    "BinaryKey",
    "Cursor",
    "CursorTailer",
    "PositionStore",
    "key_error",
    "value_error",
]

logger = logging.getLogger(__name__)
_FETCH = 4096
NOTHING_TO_SKIP = (
    "skip_one() found no undecodable record at the read position: it skips only the record "
    "the last UndecodableRecordError was about, before any seek; use seek() to move elsewhere"
)


class BinaryKey(LogError):
    """Raised by a cursor's `next_records` / `next_arrow` when the record at its position has a
    key that is not UTF-8 (written below the API or by an older version). The cursor stays at
    that record; the tailer turns this into an `UndecodableRecordError`. Internal to the
    backends (callers of the log API never meet it); a `LogError`, not retryable, since reading
    again meets the same bytes."""

    def __init__(self, offset: int, timestamp: int, key: bytes, value: bytes) -> None:
        super().__init__(offset)
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value


def _past(offset: LogOffset) -> str:
    return (
        f"the tailer stays at it: read again if the cause passes (a registry out of reach), "
        f"else skip it with skip_one() (or seek to offset {offset.offset + 1}) once its bytes "
        "(the error's key and value) are saved"
    )


def key_error(
    offset: LogOffset, key: bytes, value: bytes, timestamp: int
) -> UndecodableRecordError:
    """The error for a record whose key is not UTF-8."""
    return UndecodableRecordError(
        "utf-8",
        f"the key of the record at {offset} is not UTF-8 ({bytes(key[:40])!r}): a producer "
        f"outside streamcore wrote it; {_past(offset)}",
        offset=offset,
        key=bytes(key),
        value=bytes(value),
        timestamp=timestamp,
    )


def value_error(
    codec: Codec[Any] | None,
    offset: LogOffset,
    key: str,
    value: bytes,
    timestamp: int,
    failure: Exception,
) -> UndecodableRecordError:
    """The error for a record whose value `codec` rejects with `failure`."""
    if isinstance(failure, CodecError):
        name, why = failure.codec, failure.reason
    else:  # a codec breaking its contract (CodecError only): still no record is lost
        name, why = (
            getattr(codec, "name", type(codec).__name__),
            f"{type(failure).__name__}: {failure}",
        )
    return UndecodableRecordError(
        name,
        f"cannot decode the record at {offset} ({why}); {_past(offset)}, or read the log with "
        "the codec that wrote it",
        offset=offset,
        key=key.encode(),
        value=bytes(value),
        timestamp=timestamp,
    )


class Cursor(Protocol):
    """What `CursorTailer` needs of a backend's reader of one partition: positioned reads, the
    partition's bounds, a lookup by time, and `lost`, the records retention took before they were
    read."""

    lost: int

    @property
    def position(self) -> int: ...
    def seek(self, offset: int) -> None: ...
    def start_offset(self) -> int: ...
    def end_offset(self) -> int: ...
    def next_records(self, max_records: int) -> list[tuple[int, int, str, bytes]]: ...
    def offset_for_timestamp(self, timestamp_ms: int) -> int | None: ...
    def close(self) -> None: ...


@runtime_checkable
class ArrowCursor(Protocol):
    """A cursor that also returns raw records as Arrow batches without per-record Python work
    (the local log's, mapped from its segments); `read_arrow` builds batches from
    `next_records` for the others."""

    def next_arrow(self, max_records: int) -> Any: ...


class PositionStore(Protocol):
    """Where a backend keeps the committed position of each group on one partition."""

    def commit(self, group: str, partition: int, offset: int) -> None: ...
    def committed(self, group: str, partition: int) -> int | None: ...


class CursorTailer(LogTailer[Any]):
    """The tailer of a group over one cursor per assigned partition (the module docstring has how
    it reads, decodes and commits)."""

    # Where a partition without a committed position is read from (`subscribe(start=)`).
    start = "earliest"
    # How often `read(timeout)` looks for records: from the minimum, doubling to the maximum
    # while none come (`[groups] poll_interval_min/max`, set by the manager).
    poll_interval_min = GroupTuning.poll_interval_min
    poll_interval_max = GroupTuning.poll_interval_max

    def __init__(
        self,
        group: str,
        cursors: dict[LogPartition, Cursor],
        positions: Callable[[LogPartition], PositionStore],
        codec: Codec[Any] | None = None,
        on_close: Callable[[CursorTailer], None] | None = None,
    ) -> None:
        self.group = group
        self.codec = codec
        self._cursors = cursors
        self._partitions = list(cursors)
        self._positions = positions
        self._on_close = on_close
        self._read_pos: dict[LogPartition, int] = {}
        self._pending: list[tuple[int, int, str, bytes]] = []
        self._pending_i = 0
        self._pending_partition: LogPartition | None = None
        self._next = 0
        self._closed = False
        self._undecodable: LogOffset | None = None  # where the last UndecodableRecordError was
        self.to_last_committed()

    @property
    def assignments(self) -> list[LogPartition]:
        return list(self._partitions)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def lost(self) -> int:
        """Records skipped because retention purged them before this tailer read them."""
        return sum(c.lost for c in self._cursors.values())

    # -- reading --------------------------------------------------------------------------------
    def _settle(self) -> None:
        """Record the position after the last record `read()` returned. `read()` skips this per
        record (it is the hot path); everything that needs positions or refills calls it first."""
        if self._pending_i and self._pending_partition is not None:
            self._read_pos[self._pending_partition] = self._pending[self._pending_i - 1][0] + 1
            if self._pending_i >= len(self._pending):  # consumed: never re-apply it later
                self._pending, self._pending_i, self._pending_partition = [], 0, None

    def _fill(self) -> bool:
        self._settle()
        self.commit_marked_if_due()
        count = len(self._partitions)
        for step in range(count):
            partition = self._partitions[(self._next + step) % count]
            try:
                records = self._cursors[partition].next_records(_FETCH)
            except BinaryKey as bad:
                raise self._binary_key(partition, bad) from None
            if records:
                self._next = (self._next + step + 1) % count
                self._pending = records
                self._pending_i = 0
                self._pending_partition = partition
                return True
        return False

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"tailer of group {self.group!r} is closed; create a new one")

    def _stand_at(self, partition: LogPartition, offset: int) -> LogOffset:
        """The tailer stops at a record it cannot return: that is its position now."""
        self._read_pos[partition] = offset
        self._undecodable = LogOffset(partition, offset)
        return self._undecodable

    def _binary_key(self, partition: LogPartition, bad: BinaryKey) -> UndecodableRecordError:
        at = self._stand_at(partition, bad.offset)
        return key_error(at, bad.key, bad.value, bad.timestamp)

    def _undecodable_value(
        self, partition: LogPartition, record: tuple[int, int, str, bytes], failure: Exception
    ) -> UndecodableRecordError:
        offset, ts, key, value = record
        return value_error(self.codec, self._stand_at(partition, offset), key, value, ts, failure)

    def _decode_until_failure(
        self,
        chunk: list[tuple[int, int, str, bytes]],
        partition: LogPartition,
        decode: Callable[[bytes], Any],
    ) -> tuple[list[LogRecord[Any]], UndecodableRecordError | None]:
        """A chunk that failed to decode, decoded again record by record (with `decode`, the
        codec's): the records up to the failing one and its error (None if it decodes now, e.g.
        a registry is back)."""
        good: list[LogRecord[Any]] = []
        for record in chunk:
            o, t, k, v = record
            try:
                good.append(LogRecord(decode(v), partition, o, t, k))
            except Exception as exc:
                failure = self._undecodable_value(partition, record, exc)
                failure.__cause__ = exc
                return good, failure
        return good, None

    def _before_fill(self) -> None:
        """Called before each attempt to fetch while no fetched record is left to return; a
        subscribed tailer applies assignment changes here (never in the middle of a batch)."""

    def _assignment_due(self) -> bool:
        """True when `_before_fill` has assignment changes to apply: `read_batch` then returns
        what it has instead of fetching more, so a member with a backlog still hands over."""
        return False

    def _wait_fill(self, timeout: float) -> bool:
        self._before_fill()
        if self._fill():
            return True
        if timeout <= 0:
            return False
        deadline = time.monotonic() + timeout
        pause = self.poll_interval_min
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(pause, remaining))
            self._before_fill()
            if self._fill():
                return True
            pause = min(pause * 2, self.poll_interval_max)

    def _chunk_partition(self) -> LogPartition:
        """The partition of the pending chunk, set with it (`_fill`), so whenever a record is
        pending."""
        partition = self._pending_partition
        if partition is None:
            raise LogError(f"{len(self._pending)} records pending without their partition")
        return partition

    def read(self, timeout: float = 0.0) -> LogRecord[Any] | None:
        if self._closed:
            self._check_open()
        if self._pending_i >= len(self._pending) and not self._wait_fill(timeout):
            return None
        record = self._pending[self._pending_i]
        partition = self._chunk_partition()
        offset, ts, key, message = record
        if self.codec is not None:
            try:
                message = self.codec.decode(message)
            except Exception as exc:
                raise self._undecodable_value(partition, record, exc) from exc
        self._pending_i += 1
        return LogRecord(message, partition, offset, ts, key)

    def read_batch(self, max_records: int, timeout: float = 0.0) -> list[LogRecord[Any]]:
        self._check_open()
        if max_records < 1:
            raise InvalidArgumentError(f"max_records must be at least 1, got {max_records}")
        if self._pending_i >= len(self._pending) and not self._wait_fill(timeout):
            return []
        decode = self.codec.decode if self.codec is not None else None
        out: list[LogRecord[Any]] = []
        # Take whole fetched chunks (one per partition batch) until full or nothing is available.
        while True:
            start = self._pending_i
            chunk = self._pending[start : start + max_records - len(out)]
            partition = self._chunk_partition()
            # Thousands of records that all survive make the cyclic GC run and re-scan them again
            # and again (it halves the rate); none of them can form a cycle, so pause it.
            with collector_paused():
                if decode is None:
                    out += [LogRecord(v, partition, o, t, k) for o, t, k, v in chunk]
                else:
                    try:
                        out += [LogRecord(decode(v), partition, o, t, k) for o, t, k, v in chunk]
                    except Exception:
                        good, failure = self._decode_until_failure(chunk, partition, decode)
                        if failure is not None:
                            self._pending_i = start + len(good)
                            if not out and not good:
                                raise failure from failure.__cause__
                            return out + good  # the next call raises it, at the failing record
                        out += good
            self._pending_i = start + len(chunk)
            self._read_pos[partition] = chunk[-1][0] + 1
            if len(out) >= max_records or self._assignment_due():
                return out
            try:
                if not self._fill():
                    return out
            except UndecodableRecordError:
                return out  # raised again, by the cursor that stays at it, on the next call

    def read_arrow(self, max_records: int = 65536, timeout: float = 0.0) -> Any:
        """Raw records as a pyarrow RecordBatch with columns partition, offset, timestamp, key,
        value (no codec applied). Local-log batches are mapped without copying; None on timeout."""
        import pyarrow as pa

        self._check_open()
        self._settle()
        deadline = time.monotonic() + timeout
        while True:
            if self._pending_i < len(self._pending):
                chunk = self._pending[self._pending_i : self._pending_i + max_records]
                self._pending_i += len(chunk)
                partition = self._chunk_partition()
                self._read_pos[partition] = chunk[-1][0] + 1
                batch = pa.RecordBatch.from_pydict(
                    {
                        "offset": [c[0] for c in chunk],
                        "timestamp": [c[1] for c in chunk],
                        "key": [c[2] for c in chunk],
                        "value": [c[3] for c in chunk],
                    },
                    schema=pa.schema(
                        [
                            ("offset", pa.int64()),
                            ("timestamp", pa.int64()),
                            ("key", pa.string()),
                            ("value", pa.binary()),
                        ]
                    ),
                )
                return self._with_partition(batch, partition)
            count = len(self._partitions)
            for step in range(count):
                partition = self._partitions[(self._next + step) % count]
                cursor = self._cursors[partition]
                if isinstance(cursor, ArrowCursor):
                    try:
                        batch = cursor.next_arrow(max_records)
                    except BinaryKey as bad:
                        raise self._binary_key(partition, bad) from None
                    if batch is not None and batch.num_rows:
                        self._next = (self._next + step + 1) % count
                        self._read_pos[partition] = cursor.position
                        return self._with_partition(batch, partition)
                elif self._fill():
                    break
            else:
                if time.monotonic() >= deadline:
                    return None
                time.sleep(self.poll_interval_min)

    @staticmethod
    def _with_partition(batch: Any, partition: LogPartition) -> Any:
        import numpy as np
        import pyarrow as pa

        # A numpy buffer handed to Arrow as it is: pa.repeat of a scalar took ~25x longer
        # (240 against 10 us for 65,536 rows).
        rows = batch.num_rows
        values = pa.py_buffer(np.full(rows, partition.partition, dtype=np.int32))
        column = pa.Array.from_buffers(pa.int32(), rows, [None, values])
        return batch.add_column(0, "partition", column)

    # -- positions ------------------------------------------------------------------------------
    def position(self, partition: LogPartition) -> int:
        self._settle()
        return self._read_pos[self._check(partition)]

    def skip_one(self) -> LogOffset:
        failed = self._undecodable
        if failed is None or failed.partition not in self._cursors:
            raise LogError(NOTHING_TO_SKIP)
        self._settle()
        partition, offset = failed
        if self._read_pos[partition] != offset:
            raise LogError(NOTHING_TO_SKIP)
        self._undecodable = None
        pending = self._pending
        i = self._pending_i
        if self._pending_partition == partition and i < len(pending) and pending[i][0] == offset:
            self._pending_i = i + 1  # the fetched chunk goes on after it
            self._read_pos[partition] = offset + 1
        else:
            self._drop_pending()
            self._seek(partition, offset + 1)
        return failed

    def _check(self, partition: LogPartition) -> LogPartition:
        if partition not in self._cursors:
            raise PartitionNotFoundError(
                f"partition {partition} is not assigned to this tailer (assigned: "
                f"{', '.join(map(str, self._partitions))})"
            )
        return partition

    def _drop_pending(self) -> None:
        self._settle()
        if self._pending_i < len(self._pending):
            for partition, cursor in self._cursors.items():
                if cursor.position != self._read_pos[partition]:
                    cursor.seek(self._read_pos[partition])
        self._pending, self._pending_i, self._pending_partition = [], 0, None

    def _seek(self, partition: LogPartition, offset: int) -> None:
        cursor = self._cursors[partition]
        cursor.seek(offset)
        self._read_pos[partition] = cursor.position

    def seek(self, offset: LogOffset) -> None:
        self._drop_pending()
        self._seek(self._check(offset.partition), offset.offset)

    def to_start(self) -> None:
        self._drop_pending()
        for partition, cursor in self._cursors.items():
            self._seek(partition, cursor.start_offset())

    def to_end(self) -> None:
        self._drop_pending()
        for partition, cursor in self._cursors.items():
            self._seek(partition, cursor.end_offset())

    def to_last_committed(self) -> None:
        self._drop_pending()
        for partition, cursor in self._cursors.items():
            committed = self._positions(partition).committed(self.group, partition.partition)
            self._seek(partition, cursor.start_offset() if committed is None else committed)

    # -- dynamic assignment (used by subscribed tailers) -----------------------------------------
    def _assign(self, cursors: dict[LogPartition, Cursor]) -> None:
        """Start reading more partitions, each from its committed position (or its start)."""
        self._drop_pending()
        for partition, cursor in cursors.items():
            if partition in self._cursors:
                cursor.close()
                continue
            self._cursors[partition] = cursor
            self._partitions.append(partition)
            positions = self._positions(partition)
            committed = positions.committed(self.group, partition.partition)
            if committed is None and self.start == "latest":
                # Committed at once: a rewind, or the next owner, resumes here, not at a later end.
                committed = cursor.end_offset()
                positions.commit(self.group, partition.partition, committed)
            self._seek(partition, cursor.start_offset() if committed is None else committed)

    def _unassign(self, partitions: Sequence[LogPartition]) -> None:
        """Stop reading partitions: fetched records of them are dropped, their cursors closed and
        their marks forgotten (commit them first if they count)."""
        self._drop_pending()
        for partition in partitions:
            cursor = self._cursors.pop(partition, None)
            if cursor is None:
                continue
            cursor.close()
            self._partitions.remove(partition)
            self._read_pos.pop(partition, None)
        self._drop_marks(partitions)
        self._next = 0

    def commit_offset(self, partition: LogPartition, offset: int) -> None:
        self._positions(self._check(partition)).commit(self.group, partition.partition, offset)

    def commit_partition(self, partition: LogPartition) -> LogOffset:
        self._settle()
        offset = self._read_pos[self._check(partition)]
        self._positions(partition).commit(self.group, partition.partition, offset)
        return LogOffset(partition, offset)

    def commit(self) -> dict[LogPartition, int]:
        return {p: self.commit_partition(p).offset for p in self._partitions}

    def reset(self, partition: LogPartition | None = None) -> None:
        self._drop_pending()
        targets: Sequence[LogPartition] = (
            [self._check(partition)] if partition else self._partitions
        )
        for p in targets:
            self._seek(p, self._cursors[p].start_offset())
            self.commit_partition(p)

    def offset_for_timestamp(self, partition: LogPartition, timestamp_ms: int) -> LogOffset | None:
        found = self._cursors[self._check(partition)].offset_for_timestamp(timestamp_ms)
        return None if found is None else LogOffset(partition, found)

    def close(self) -> None:
        if self._closed:
            return
        self.commit_marked()
        self._closed = True
        for cursor in self._cursors.values():
            cursor.close()
        if self._on_close is not None:
            self._on_close(self)
