"""`StoreEngine`: the bytes layer under a key-value store, one per task and store.

An engine keeps keys in bytewise order and applies a batch of changes together with its
checkpoint in one atomic write, so a store on disk is always at a checkpoint: the changes of a
checkpoint and the changelog position they end at are both there or both not (the offset kept
inside the store, as KIP-1035 and Quix Streams do, not in a side file a crash can tear from it).
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Mapping

__all__ = ["StoreEngine"]


class StoreEngine(abc.ABC):
    """Sorted bytes -> bytes with atomic batch writes and a checkpoint. Not thread-safe: a task's
    stores are used from the one thread that runs the task."""

    @abc.abstractmethod
    def get(self, key: bytes) -> bytes | None:
        """The value of `key`, None when absent."""

    @abc.abstractmethod
    def items(
        self, start: bytes | None = None, end: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """The entries with `start <= key < end` (None: unbounded), in bytewise key order."""

    @abc.abstractmethod
    def write(self, changes: Mapping[bytes, bytes | None], checkpoint: bytes | None) -> None:
        """Apply `changes` (None deletes the key) and, when given, replace the checkpoint, in one
        atomic write: after a crash the engine holds all of it or none of it."""

    @abc.abstractmethod
    def checkpoint(self) -> bytes | None:
        """The checkpoint of the last write that set one; None for a new or cleared engine."""

    @abc.abstractmethod
    def approximate_count(self) -> int:
        """About how many keys the engine holds (exact for the memory engine)."""

    @abc.abstractmethod
    def clear(self) -> None:
        """Remove every key and the checkpoint (before a restore from the changelog's start)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the engine (and its lock on disk); idempotent."""
