"""`MemoryAppender`: appends to a memory log (all or nothing per batch, like a local-log batch)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from streamcore.errors import ArgumentTypeError, LogClosedError, PartitionNotFoundError
from streamcore.log.api import LogAppender
from streamcore.log.append_checks import check_keys_encode, check_timestamps
from streamcore.log.partitioner import partition_for_key
from streamcore.log.values import LogOffset, LogPartition
from streamcore.names import Name

if TYPE_CHECKING:
    from streamcore.codecs import Codec
    from streamcore.log.memory.manager import MemoryLogManager

__all__ = ["MemoryAppender"]


class MemoryAppender(LogAppender[Any]):
    """Appends to the partitions of one memory log, under its manager's lock."""

    def __init__(self, manager: MemoryLogManager, name: Name, codec: Codec[Any] | None) -> None:
        self.manager = manager
        self.name = name
        self.codec = codec
        self._partitions = manager._log(name)
        self._closed = False
        self._last_ts = 0

    @property
    def size(self) -> int:
        return len(self._partitions)

    @property
    def closed(self) -> bool:
        return self._closed

    def append(self, key: str, message: Any) -> LogOffset:
        return self.append_to(partition_for_key(key, self.size), key, message)

    def _check(self, partition: int) -> None:
        if self._closed:
            raise LogClosedError(f"appender of {self.name} is closed")
        if not 0 <= partition < self.size:
            raise PartitionNotFoundError(
                f"{self.name} has partitions 0..{self.size - 1}, not {partition}"
            )

    def _encode(self, key: Any, message: Any) -> bytes:
        if not isinstance(key, str):
            raise ArgumentTypeError(f"log keys must be str, got {type(key).__name__}")
        value = message if self.codec is None else self.codec.encode(message)
        if not isinstance(value, bytes | bytearray | memoryview):
            raise ArgumentTypeError(
                f"log values must be bytes, got {type(value).__name__}; pass a codec to the "
                "appender to encode messages"
            )
        return bytes(value)

    def append_to(self, partition: int, key: str, message: Any) -> LogOffset:
        return self.append_batch([(key, message)], partition=partition)[0]

    def append_batch(
        self,
        items: Sequence[tuple[str, Any]],
        *,
        partition: int | None = None,
        timestamps: Sequence[int] | None = None,
    ) -> list[LogOffset]:
        """All or nothing, like a local-log batch: every key, value and timestamp is checked
        before any record is added."""
        checked = check_timestamps(timestamps, len(items))
        targets = [
            partition if partition is not None else partition_for_key(k, self.size)
            for k, _ in items
        ]
        for p in set(targets) or {0}:
            self._check(p)
        values = [self._encode(k, m) for k, m in items]
        check_keys_encode([k for k, _ in items])  # a key other backends could not store
        out = []
        with self.manager._lock:
            self._last_ts = max(self._last_ts, time.time_ns() // 1_000_000)
            times = checked.tolist() if checked is not None else [self._last_ts] * len(items)
            for p, (key, _), value, ts in zip(targets, items, values, times, strict=True):
                records = self._partitions[p].records
                offset = len(records)
                records.append((offset, ts, key, value))
                out.append(LogOffset(LogPartition(self.name, p), offset))
        return out

    def wait_for(self, offset: LogOffset, group: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        positions = self.manager._positions(offset.partition.name)
        while True:
            committed = positions.committed(group, offset.partition.partition)
            if committed is not None and committed > offset.offset:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    def close(self) -> None:
        self._closed = True
