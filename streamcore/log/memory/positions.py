"""`MemoryPositionStore`: the committed positions of a memory log, in the manager's memory (the
`PositionStore` of `streamcore.log.cursor.tailer`; the local log keeps them in files)."""

from __future__ import annotations

from streamcore.names import Name

__all__ = ["MemoryPositionStore"]


class MemoryPositionStore:
    """The committed positions of one memory log: (group urn, partition) -> next offset."""

    def __init__(self) -> None:
        self.committed_offsets: dict[tuple[str, int], int] = {}

    def commit(self, group: str, partition: int, offset: int) -> None:
        self.committed_offsets[(Name.of(group).urn, partition)] = offset

    def committed(self, group: str, partition: int) -> int | None:
        return self.committed_offsets.get((Name.of(group).urn, partition))
