"""`LocalAppender`: appends to a local log through the partition writers of its manager (one
writer per partition across processes, see `streamcore.log.local.writer`): single records,
all-or-nothing batches over several partitions, and Arrow columns for bulk loads."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from streamcore.errors import (
    InvalidArgumentError,
    InvalidRecordError,
    LogClosedError,
    PartitionNotFoundError,
    RecordTooLargeError,
)
from streamcore.log.api import LogAppender
from streamcore.log.append_checks import check_keys_encode, check_timestamps, check_types
from streamcore.log.local.segment import encode_key, lengths_of
from streamcore.log.local.writer import Encoded, PartitionWriter
from streamcore.log.partitioner import (
    partition_for_ascii,
    partition_for_key,
    partitions_for_ascii,
    partitions_for_keys,
)
from streamcore.log.values import AppendedOffsets, LogOffset, LogPartition
from streamcore.names import Name

if TYPE_CHECKING:
    from streamcore.codecs import Codec
    from streamcore.log.local.manager import LocalLogManager

__all__ = ["LocalAppender"]

# LogOffset(partition, offset) without the named tuple's Python-level __new__ (the hot path).
_offset = tuple.__new__


class LocalAppender(LogAppender[Any]):
    """Appends to one local log through the partition writers its manager owns."""

    def __init__(self, manager: LocalLogManager, name: Name, codec: Codec[Any] | None) -> None:
        self.manager = manager
        self.name = name
        self.codec = codec
        self._size = manager.size(name)
        self._log_partitions = [LogPartition(name, p) for p in range(self._size)]
        # The manager owns the writers; the appender keeps them at hand for the hot path.
        self._writers: list[PartitionWriter | None] = [None] * self._size
        self._closed = False

    @property
    def size(self) -> int:
        return self._size

    @property
    def closed(self) -> bool:
        return self._closed

    def _encode(self, message: Any) -> bytes:
        return message if self.codec is None else self.codec.encode(message)

    def _check(self, partition: int) -> None:
        if self._closed:
            raise LogClosedError(f"appender of {self.name} is closed")
        if not 0 <= partition < self._size:
            raise PartitionNotFoundError(
                f"{self.name} has partitions 0..{self._size - 1}, not {partition}"
            )

    def append(self, key: str, message: Any) -> LogOffset:
        # The hot path, flattened for ASCII keys (one frame here, the writer's, the encoder's):
        # the key is encoded once, for its partition and for the record.
        if type(key) is not str:
            check_types((key,), ())
        if not key.isascii():
            return self.append_to(partition_for_key(key, self._size), key, message)
        key_bytes = key.encode("ascii")
        partition = partition_for_ascii(key_bytes, self._size)
        writer = self._writers[partition]
        if writer is None or writer.closed or self._closed:
            writer = self._open_writer(partition)
        value = message if self.codec is None else self.codec.encode(message)
        return _offset(
            LogOffset, (self._log_partitions[partition], writer.append_one(key_bytes, value))
        )

    def append_to(self, partition: int, key: str, message: Any) -> LogOffset:
        writer = self._writers[partition] if 0 <= partition < self._size else None
        if writer is None or writer.closed or self._closed:
            writer = self._open_writer(partition)
        value = message if self.codec is None else self.codec.encode(message)
        if type(key) is not str:
            check_types((key,), ())
        try:
            key_bytes = key.encode()
        except UnicodeEncodeError:
            key_bytes = encode_key(key)  # raises, naming the key and the fix
        return _offset(
            LogOffset, (self._log_partitions[partition], writer.append_one(key_bytes, value))
        )

    def _open_writer(self, partition: int) -> PartitionWriter:
        self._check(partition)
        writer = self._writers[partition] = self.manager._writer(self.name, partition)
        return writer

    def append_batch(
        self,
        items: Sequence[tuple[str, Any]],
        *,
        partition: int | None = None,
        timestamps: Sequence[int] | None = None,
    ) -> AppendedOffsets:
        """Append (key, message) pairs as one batch per partition (one write, one checksum),
        all or nothing: every item is encoded and checked, and every partition's writer lock
        taken, before the first byte is written. Only a write error (a full disk) on a later
        partition leaves the earlier partitions' batches in place; see docs/log.md.
        `timestamps` (ms, one per item) keep original times, e.g. for copies."""
        count = len(items)
        times = check_timestamps(timestamps, count)
        if not count:
            return AppendedOffsets(self.name, (), ())
        keys = [k for k, _ in items]
        encode = self.codec.encode if self.codec is not None else None
        values = [encode(m) for _, m in items] if encode else [m for _, m in items]
        if partition is not None:
            self._check(partition)
            base = self.manager._writer(self.name, partition).append(keys, values, times)
            return AppendedOffsets(
                self.name, np.full(count, partition), np.arange(base, base + count)
            )
        self._check(0)
        try:  # the joins check every type in C; check_types only words the error
            joined_keys = "".join(keys)
            value_bytes = b"".join(values)
        except TypeError:
            check_types(keys, values)
            raise
        # Columns (offsets and joined bytes) from here on: hashing, grouping by partition and
        # encoding are vectorised, with no Python work per record.
        if joined_keys.isascii():  # the common case
            key_bytes = joined_keys.encode("ascii")
            key_offsets = _offsets(keys)
            targets = partitions_for_ascii(key_bytes, key_offsets, self._size)
        else:
            check_keys_encode(keys)  # here, where a bad key's index is the caller's
            encoded = [k.encode() for k in keys]
            key_bytes, key_offsets = b"".join(encoded), _offsets(encoded)
            targets = partitions_for_keys(keys, self._size)
        value_offsets = _offsets(values)
        counts = np.bincount(targets, minlength=self._size)
        used = np.flatnonzero(counts).tolist()
        order = None
        if len(used) > 1:
            order = np.argsort(targets, kind="stable")
            key_offsets, key_bytes = _take(key_offsets, key_bytes, order)
            value_offsets, value_bytes = _take(value_offsets, value_bytes, order)
            times = times[order] if times is not None else None
        # Every writer (so every partition's lock) first: LogLockedError writes nothing.
        writers = [self.manager._writer(self.name, p) for p in used]
        encoders: list[tuple[PartitionWriter, Callable[[], Encoded | None]]] = []
        start = 0
        for p, writer in zip(used, writers, strict=True):
            stop = start + int(counts[p])
            ko, kb = _part(key_offsets, key_bytes, start, stop)
            vo, vb = _part(value_offsets, value_bytes, start, stop)
            ts = times[start:stop] if times is not None else None
            encode_part = functools.partial(writer.encode_columns, stop - start, ko, kb, vo, vb, ts)
            encoders.append((writer, encode_part))
            start = stop
        bases = _write_all_or_nothing(encoders)
        if order is None:
            return AppendedOffsets(self.name, targets, np.arange(bases[0], bases[0] + count))
        offsets = np.empty(count, dtype=np.int64)
        start = 0
        for p, base in zip(used, bases, strict=True):
            n = int(counts[p])
            offsets[order[start : start + n]] = np.arange(base, base + n)
            start += n
        return AppendedOffsets(self.name, targets, offsets)

    def append_arrow(self, partition: int, keys: Any, values: Any) -> int:
        """Append pyarrow string/binary arrays as one batch without per-record Python work;
        returns the first offset. The fast path for bulk loads."""
        import pyarrow as pa

        self._check(partition)
        if len(keys) != len(values):
            raise InvalidArgumentError(
                f"{len(keys)} keys for {len(values)} values; give one key per value"
            )
        if keys.null_count or values.null_count:
            raise InvalidRecordError("keys and values must not be null; use '' / b'' instead")

        def columns(array: Any) -> tuple[Any, Any]:
            if isinstance(array, pa.ChunkedArray):
                array = array.combine_chunks()
            # string and binary share one layout (int32 offsets, then bytes): read either's
            # buffers as they are; only the large (int64-offset) types need the cast.
            if not (pa.types.is_binary(array.type) or pa.types.is_string(array.type)):
                array = array.cast(pa.binary())
            _, offsets, data = array.buffers()
            count = len(array)
            if not count:
                return np.zeros(1, dtype=np.int32), b""
            # A sliced array starts at `array.offset` and its offsets need not start at 0.
            view = np.frombuffer(offsets, dtype=np.int32, count=count + 1, offset=array.offset * 4)
            first, last = int(view[0]), int(view[-1])
            if first:
                view = view - np.int32(first)
            return view, (memoryview(data)[first:last] if data is not None else b"")

        if not (pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type)):
            keys = _utf8_keys(keys)
        key_offsets, key_bytes = columns(keys)
        value_offsets, value_bytes = columns(values)
        writer = self.manager._writer(self.name, partition)
        return writer.append_columns(
            len(values), key_offsets, key_bytes, value_offsets, value_bytes
        )

    def wait_for(self, offset: LogOffset, group: str, timeout: float) -> bool:
        import time

        deadline = time.monotonic() + timeout
        store = self.manager._positions(offset.partition.name)
        while True:
            committed = store.committed(group, offset.partition.partition)
            if committed is not None and committed > offset.offset:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def flush(self) -> None:
        """`fsync` every partition this process writes (whatever the fsync setting)."""
        for (name, _), writer in list(self.manager._writers.items()):
            if name == self.name:
                writer.flush()

    def close(self) -> None:
        self._closed = True


def _write_all_or_nothing(
    batches: Sequence[tuple[PartitionWriter, Callable[[], Encoded | None]]],
) -> list[int]:
    """Write one batch per writer, each writer once, in ascending partition order (every
    caller takes the mutexes in that order, so two of them cannot deadlock). Every batch is
    checked and encoded (its writer's encode call) under every writer's mutex before the first
    byte is written, so a bad item, an oversize batch or a closed writer leaves every partition
    as it was. Only a write error (a full disk) on a later partition leaves the earlier
    partitions' batches in place. Returns the first offsets."""
    with contextlib.ExitStack() as held:
        for writer, _ in batches:
            held.enter_context(writer.mutex)
        encoded = [encode() for _, encode in batches]
        return [
            writer.write(batch) if batch is not None else writer.next_offset
            for (writer, _), batch in zip(batches, encoded, strict=True)
        ]


def _offsets(items: Sequence[str] | Sequence[bytes]) -> np.ndarray:
    """Arrow-style offsets (count + 1, from 0) of the items' lengths, int64: a whole keyed
    batch may hold more than an int32 spans before it is split by partition."""
    out = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(lengths_of(items), out=out[1:])
    return out


def _take(offsets: np.ndarray, data: bytes, order: np.ndarray) -> tuple[np.ndarray, Any]:
    """The column (int64 offsets, bytes) with its items in `order`, gathered by Arrow in C++."""
    import pyarrow as pa

    count = len(offsets) - 1
    column = pa.Array.from_buffers(
        pa.large_binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    indices = np.ascontiguousarray(order, dtype=np.int64)
    taken = column.take(pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(indices)]))
    _, taken_offsets, taken_data = taken.buffers()
    return (
        np.frombuffer(taken_offsets, dtype=np.int64, count=count + 1),
        taken_data if taken_data is not None else b"",
    )


def _part(offsets: np.ndarray, data: Any, start: int, stop: int) -> tuple[memoryview, memoryview]:
    """Items `start..stop-1` of a column as one batch's int32 offsets (from 0) and bytes."""
    first, last = int(offsets[start]), int(offsets[stop])
    if last - first > 0x7FFFFFFF - 8:
        raise RecordTooLargeError("a batch holds more than 2 GiB of data; append smaller batches")
    return (offsets[start : stop + 1] - first).astype(np.int32).data, memoryview(data)[first:last]


def _utf8_keys(keys: Any) -> Any:
    """Binary Arrow keys as strings, checked in one vectorised cast: a key is text, and every
    tailer decodes it as UTF-8, so one that is not would stop them all."""
    import pyarrow as pa

    if not (pa.types.is_binary(keys.type) or pa.types.is_large_binary(keys.type)):
        return keys
    try:
        return keys.cast(pa.large_string() if pa.types.is_large_binary(keys.type) else pa.string())
    except pa.ArrowInvalid:
        for index, key in enumerate(keys.to_pylist()):
            try:
                key.decode()
            except UnicodeDecodeError:
                raise InvalidRecordError(
                    f"key #{index} ({key!r}) is not valid UTF-8; log keys are text that every "
                    "tailer decodes as UTF-8: decode the keys with their real encoding, or encode "
                    "binary ids as hex or base64. Nothing of this batch was appended"
                ) from None
        raise
