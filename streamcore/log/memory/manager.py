"""`MemoryLogManager`: an in-process backend for tests and examples.

Same contracts as the local log (contiguous offsets, committed = next to read, one live tailer per
group and partition), nothing on disk, no retention. Appenders and tailers of one manager share
its data; a second manager is a separate world.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from streamcore.errors import ConfigError, LogClosedError, LogNotFoundError
from streamcore.log.api import LogAppender
from streamcore.log.append_checks import check_keys_encode, check_timestamps
from streamcore.log.cursor.manager import CursorLogManager
from streamcore.log.cursor.subscription import MemoryGroupStore
from streamcore.log.partitioner import partition_for_key
from streamcore.log.values import LogDescription, LogOffset, LogPartition
from streamcore.names import Name


class _Partition:
    __slots__ = ("records",)

    def __init__(self) -> None:
        self.records: list[tuple[int, int, str, bytes]] = []  # (offset, ts, key, value)


class _MemoryCursor:
    def __init__(self, partition: _Partition) -> None:
        self._partition = partition
        self._position = 0
        self.lost = 0

    @property
    def position(self) -> int:
        return self._position

    def seek(self, offset: int) -> None:
        self._position = max(0, offset)

    def start_offset(self) -> int:
        return 0

    def end_offset(self) -> int:
        return len(self._partition.records)

    def next_records(self, max_records: int) -> list[tuple[int, int, str, bytes]]:
        records = self._partition.records[self._position : self._position + max_records]
        self._position += len(records)
        return records

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        return next((r[0] for r in self._partition.records if r[1] >= timestamp_ms), None)

    def close(self) -> None:
        pass


class _Positions:
    def __init__(self) -> None:
        self.committed_offsets: dict[tuple[str, int], int] = {}

    def commit(self, group: str, partition: int, offset: int) -> None:
        self.committed_offsets[(Name.of(group).urn, partition)] = offset

    def committed(self, group: str, partition: int) -> int | None:
        return self.committed_offsets.get((Name.of(group).urn, partition))


class MemoryLogManager(CursorLogManager):
    """The memory backend on the cursor template (`streamcore.log.cursor.manager`): partitions
    are lists, positions and group states dicts of this manager."""

    kind = "memory"

    def __init__(self) -> None:
        super().__init__()
        self._logs: dict[Name, list[_Partition]] = {}
        self._position_stores: dict[Name, _Positions] = {}
        self._incarnations: dict[Name, str] = {}
        self._group_stores: dict[tuple[str, tuple[str, ...]], MemoryGroupStore] = {}

    def _log(self, name: str | Name) -> list[_Partition]:
        name = Name.of(name)
        try:
            return self._logs[name]
        except KeyError:
            raise LogNotFoundError(
                f"log {name} does not exist in this memory manager; create it first"
            ) from None

    # -- what the cursor template needs ----------------------------------------------------
    def _default_partitions(self) -> int:
        return 4

    def _create(self, name: Name, partitions: int, prepared: Any) -> None:
        self._logs[name] = [_Partition() for _ in range(partitions)]
        self._position_stores[name] = _Positions()
        self._incarnations[name] = uuid.uuid4().hex

    def _open_cursor(self, partition: LogPartition) -> _MemoryCursor:
        return _MemoryCursor(self._log(partition.name)[partition.partition])

    def _positions(self, name: Name) -> _Positions:
        self._log(name)
        return self._position_stores[name]

    def _group_store(
        self, group: str, logs: list[Name], history: Callable[[], bool]
    ) -> MemoryGroupStore:
        # Nothing outside this manager deletes a memory state: `history` is not needed.
        key = (Name.of(group).urn, tuple(sorted(n.urn for n in logs)))
        store = self._group_stores.get(key)
        if store is None:
            store = self._group_stores[key] = MemoryGroupStore(*key)
        return store

    def _group_states(self, group: str) -> list[dict[str, Any]]:
        urn = Name.of(group).urn
        with self._lock:
            stores = [store for (g, _), store in self._group_stores.items() if g == urn]
        return [store.load() for store in stores]

    # -- logs ------------------------------------------------------------------------------
    def exists(self, name: str | Name) -> bool:
        return Name.of(name) in self._logs

    def size(self, name: str | Name) -> int:
        return len(self._log(name))

    def incarnation(self, name: str | Name) -> str:
        self._log(name)
        return self._incarnations[Name.of(name)]

    def delete(self, name: str | Name) -> bool:
        with self._lock:
            self._position_stores.pop(Name.of(name), None)
            self._incarnations.pop(Name.of(name), None)
            return self._logs.pop(Name.of(name), None) is not None

    def list_logs(self) -> list[Name]:
        return sorted(self._logs, key=lambda n: n.urn)

    def list_groups(self, name: str | Name) -> list[str]:
        return sorted({g for g, _ in self._positions(Name.of(name)).committed_offsets})

    def end_offsets(self, name: str | Name) -> list[int]:
        return [len(p.records) for p in self._log(name)]

    def start_offsets(self, name: str | Name) -> list[int]:
        return [0] * self.size(name)

    def describe(self, name: str | Name) -> LogDescription:
        """Refused: the records live in this process's memory, which no other process sees."""
        self._log(name)
        raise ConfigError(
            f"log {Name.of(name)} is in the memory backend, which lives in one process; a Spark "
            "job needs a local or Kafka log: route the stream to a local or kafka config with "
            "LogConfig ([[log.match]] in include/streamcore.toml, or STREAMCORE_LOG_BACKEND)"
        )

    def record_at(self, partition: LogPartition, offset: int) -> tuple[str, bytes, int] | None:
        records = self._log(partition.name)[partition.partition].records
        if not 0 <= offset < len(records):
            return None
        _, ts, key, value = records[offset]
        return key, value, ts

    def appender(self, name: str | Name, codec: Any = None) -> LogAppender[Any]:
        return _MemoryAppender(self, Name.of(name), codec)


class _MemoryAppender(LogAppender[Any]):
    def __init__(self, manager: MemoryLogManager, name: Name, codec: Any) -> None:
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
            raise ValueError(f"{self.name} has partitions 0..{self.size - 1}, not {partition}")

    def _encode(self, key: Any, message: Any) -> bytes:
        if not isinstance(key, str):
            raise TypeError(f"log keys must be str, got {type(key).__name__}")
        value = message if self.codec is None else self.codec.encode(message)
        if not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError(
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
