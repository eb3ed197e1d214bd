"""`MemoryEngine`: a store engine in a dict, for tests and the `TopologyTestDriver`; its state
lives as long as the process (a restart restores it from the changelog)."""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping
from typing import cast

from streamcore.state.engine import StoreEngine

__all__ = ["MemoryEngine"]


class MemoryEngine(StoreEngine):
    """A dict plus a sorted key list, rebuilt lazily after writes that add or remove keys."""

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._sorted: list[bytes] | None = []
        self._checkpoint: bytes | None = None

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def items(
        self, start: bytes | None = None, end: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        keys = self._sorted
        if keys is None:
            keys = self._sorted = sorted(self._data)
        lo = 0 if start is None else bisect.bisect_left(keys, start)
        hi = len(keys) if end is None else bisect.bisect_left(keys, end)
        data = self._data
        # A copy of the entries, as RocksDB's iterator reads a snapshot: a write during the
        # iteration (a checkpoint's flush) neither disturbs it nor shows in it.
        yield from [(key, data[key]) for key in keys[lo:hi]]

    def write(self, changes: Mapping[bytes, bytes | None], checkpoint: bytes | None) -> None:
        data = self._data
        if None not in changes.values():  # no delete (a restore's batches): one C-level update
            count = len(data)
            data.update(cast("Mapping[bytes, bytes]", changes))
            if len(data) != count:  # keys were added: the sorted list is stale
                self._sorted = None
        else:
            for key, value in changes.items():
                if value is None:
                    if data.pop(key, None) is not None:
                        self._sorted = None
                else:
                    if key not in data:
                        self._sorted = None
                    data[key] = value
        if checkpoint is not None:
            self._checkpoint = checkpoint

    def checkpoint(self) -> bytes | None:
        return self._checkpoint

    def approximate_count(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        self._data.clear()
        self._sorted = []
        self._checkpoint = None

    def close(self) -> None:
        return None  # nothing to release: the data lives with the object
