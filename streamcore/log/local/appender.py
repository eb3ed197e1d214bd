"""`LocalAppender`: appends to a local log through the partition writers of its manager (one
writer per partition across processes, see `streamcore.log.local.writer`): single records,
all-or-nothing batches over several partitions, and Arrow columns for bulk loads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from streamcore.errors import (
    InvalidArgumentError,
    InvalidRecordError,
    LogClosedError,
    PartitionNotFoundError,
)
from streamcore.log.api import LogAppender
from streamcore.log.append_checks import check_keys_encode, check_timestamps, check_types
from streamcore.log.local.writer import PartitionWriter, append_all_or_nothing
from streamcore.log.partitioner import partition_for_key, partitions_for_keys
from streamcore.log.values import AppendedOffsets, LogOffset, LogPartition
from streamcore.names import Name

if TYPE_CHECKING:
    from streamcore.codecs import Codec
    from streamcore.log.local.manager import LocalLogManager

__all__ = ["LocalAppender"]


class LocalAppender(LogAppender[Any]):
    """Appends to one local log through the partition writers its manager owns."""

    def __init__(self, manager: LocalLogManager, name: Name, codec: Codec[Any] | None) -> None:
        self.manager = manager
        self.name = name
        self.codec = codec
        self._size = manager.size(name)
        self._log_partitions = [LogPartition(name, p) for p in range(self._size)]
        # The manager owns the writers; the appender keeps them at hand for the hot path.
        self._writers: dict[int, PartitionWriter] = {}
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
        return self.append_to(partition_for_key(key, self._size), key, message)

    def append_to(self, partition: int, key: str, message: Any) -> LogOffset:
        writer = self._writers.get(partition)
        if writer is None or writer.closed or self._closed:
            self._check(partition)
            writer = self._writers[partition] = self.manager._writer(self.name, partition)
        value = message if self.codec is None else self.codec.encode(message)
        return LogOffset(self._log_partitions[partition], writer.append_one(key, value))

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
            targets = partitions_for_keys(keys, self._size)
            b"".join(values)
        except TypeError:
            check_types(keys, values)
            raise
        counts = np.bincount(targets, minlength=self._size)
        used = np.flatnonzero(counts).tolist()
        if len(used) == 1:
            base = self.manager._writer(self.name, used[0]).append(keys, values, times)
            return AppendedOffsets(self.name, targets, np.arange(base, base + count))
        check_keys_encode(keys)  # here, where a bad key's index is the caller's
        order = np.argsort(targets, kind="stable")
        keys_by_order = np.empty(count, dtype=object)
        keys_by_order[:] = keys
        values_by_order = np.empty(count, dtype=object)
        values_by_order[:] = values
        keys_by_order, values_by_order = keys_by_order[order], values_by_order[order]
        # Every writer (so every partition's lock) first: LogLockedError writes nothing.
        writers = [self.manager._writer(self.name, p) for p in used]
        batches: list[tuple[PartitionWriter, Sequence[str], Sequence[bytes], np.ndarray | None]]
        batches = []
        start = 0
        for p, writer in zip(used, writers, strict=True):
            part = slice(start, start + int(counts[p]))
            part_ts = times[order[part]] if times is not None else None
            # Object arrays of the keys and values: the writer takes them as sequences.
            keys_part = cast("Sequence[str]", keys_by_order[part])
            values_part = cast("Sequence[bytes]", values_by_order[part])
            batches.append((writer, keys_part, values_part, part_ts))
            start = part.stop
        bases = append_all_or_nothing(batches)
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
