"""`MemoryLogManager`: an in-process backend for tests and examples.

Same contracts as the local log (contiguous offsets, committed = next to read, one live tailer per
group and partition), nothing on disk, no retention. Appenders and tailers of one manager share
its data; a second manager is a separate world.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streamcore.errors import ConfigError, LogNotFoundError
from streamcore.log.cursor.manager import CursorLogManager
from streamcore.log.memory.appender import MemoryAppender
from streamcore.log.memory.groups import MemoryGroupStore
from streamcore.log.memory.positions import MemoryPositionStore
from streamcore.log.tuning import GroupTuning
from streamcore.log.values import LogDescription, LogPartition
from streamcore.names import Name

if TYPE_CHECKING:
    from streamcore.codecs import Codec

__all__ = ["MemoryLogManager"]


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


class MemoryLogManager(CursorLogManager):
    """The memory backend on the cursor template (`streamcore.log.cursor.manager`): partitions
    are lists, positions and group states dicts of this manager."""

    kind = "memory"

    def __init__(self, tuning: GroupTuning | None = None) -> None:
        super().__init__(tuning)
        self._logs: dict[Name, list[_Partition]] = {}
        self._position_stores: dict[Name, MemoryPositionStore] = {}
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

    def _create(self, name: Name, partitions: int, prepared: Any) -> bool:
        self._logs[name] = [_Partition() for _ in range(partitions)]
        self._position_stores[name] = MemoryPositionStore()
        self._incarnations[name] = uuid.uuid4().hex
        return True

    def _open_cursor(self, partition: LogPartition) -> _MemoryCursor:
        return _MemoryCursor(self._log(partition.name)[partition.partition])

    def _positions(self, name: Name) -> MemoryPositionStore:
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

    def appender(self, name: str | Name, codec: Codec[Any] | None = None) -> MemoryAppender:
        return MemoryAppender(self, Name.of(name), codec)
