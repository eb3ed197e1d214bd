"""`KeyValueStore`: the state store a computation reads and writes (Kafka Streams'
`KeyValueStore`), one per task and store name.

Keys are `str` (a Record's key type), ordered by their UTF-8 bytes; values go through the store's
codec (`"json"`, an Avro mode with a schema, `"bytes"` or a `Codec`: never pickle). Writes are
buffered in the store until the processor's next checkpoint, where they are appended to the
changelog and then written to the engine in one atomic write with the changelog position
(`docs/state.md`, "Checkpoints"); reads see the buffered writes. A rewind (the task's partitions
moved, or its checkpoint failed) drops the buffer, so the engine only ever holds checkpointed
state.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from streamcore.codecs import Codec
from streamcore.errors import ArgumentTypeError
from streamcore.state.engine import StoreEngine

__all__ = ["KeyValueStore"]

V = TypeVar("V")

_DELETED = object()
_MISSING = object()


class _Undo:
    """One buffered write, undone by `pop()`: an entry of the runner's journal of what a record
    did, which drops a failed attempt's effects before its retry (`UnitContext._rollback`)."""

    __slots__ = ("key", "old", "pending")

    def __init__(self, pending: dict[bytes, Any], key: bytes, old: Any) -> None:
        self.pending, self.key, self.old = pending, key, old

    def pop(self) -> None:
        if self.old is _MISSING:
            self.pending.pop(self.key, None)
        else:
            self.pending[self.key] = self.old


def _key(key: Any) -> bytes:
    if type(key) is not str:
        raise ArgumentTypeError(
            f"a state store key must be a str (a Record key), got {type(key).__name__} {key!r}"
        )
    return key.encode("utf-8")


class KeyValueStore(Generic[V]):
    """A task's key-value store (see the module doc). Not thread-safe: use it from the calls the
    processor makes to its computation."""

    def __init__(self, name: str, engine: StoreEngine, codec: Codec[V]) -> None:
        self.name = name
        self.engine = engine
        self.codec = codec
        self._pending: dict[bytes, Any] = {}  # key -> encoded value, or _DELETED
        # Where each write records how to undo it (the runner's journal), when set.
        self.journal: list[Any] | None = None

    # -- reads ----------------------------------------------------------------------------------
    def get(self, key: str) -> V | None:
        """The value of `key`, None when absent."""
        raw = _key(key)
        stored = self._pending.get(raw)
        if stored is None:
            stored = self.engine.get(raw)
        elif stored is _DELETED:
            return None
        return None if stored is None else self.codec.decode(stored)

    def range(self, start: str | None = None, end: str | None = None) -> Iterator[tuple[str, V]]:
        """The entries with `start <= key < end` (None: unbounded) in key order, buffered writes
        included. Writing to the store while iterating is allowed; the iteration does not see
        it."""
        lo = None if start is None else _key(start)
        hi = None if end is None else _key(end)
        pending = sorted(
            (k, v)
            for k, v in self._pending.items()
            if (lo is None or k >= lo) and (hi is None or k < hi)
        )
        decode = self.codec.decode
        stored = ((k, v, 1) for k, v in self.engine.items(lo, hi))
        buffered = ((k, v, 0) for k, v in pending)
        last = None
        for k, v, _source in heapq.merge(buffered, stored, key=lambda item: (item[0], item[2])):
            if k == last:
                continue  # the engine's older value of a key the buffer wrote
            last = k
            if v is not _DELETED:
                yield k.decode("utf-8"), decode(v)

    def all(self) -> Iterator[tuple[str, V]]:
        """Every entry in key order (`range()` without bounds)."""
        return self.range()

    def approximate_count(self) -> int:
        """About how many keys the store holds (the engine's estimate plus the buffered new keys
        minus the buffered deletes)."""
        count = self.engine.approximate_count()
        for key, value in self._pending.items():
            there = self.engine.get(key) is not None
            if value is _DELETED:
                count -= there
            else:
                count += not there
        return max(count, 0)

    # -- writes ---------------------------------------------------------------------------------
    def put(self, key: str, value: V) -> None:
        """Set `key` to `value` (None deletes it, as in Kafka Streams)."""
        # Encoded now: a failure belongs to the record that wrote it, and a value the caller
        # changes afterwards does not change what is stored.
        self._write(_key(key), _DELETED if value is None else self.codec.encode(value))

    def _write(self, key: bytes, value: Any) -> None:
        pending = self._pending
        if self.journal is not None:
            self.journal.append(_Undo(pending, key, pending.get(key, _MISSING)))
        pending[key] = value

    def put_all(self, items: Iterable[tuple[str, V]]) -> None:
        """`put` each (key, value)."""
        for key, value in items:
            self.put(key, value)

    def delete(self, key: str) -> V | None:
        """Remove `key`; returns the value it had (None when absent)."""
        old = self.get(key)
        self._write(_key(key), _DELETED)
        return old

    # -- the checkpoint (the processor's side) ------------------------------------------------
    @property
    def dirty(self) -> bool:
        """True when writes are buffered since the last checkpoint."""
        return bool(self._pending)

    def changes(self) -> dict[bytes, bytes | None]:
        """The buffered writes as engine changes: encoded key -> encoded value, None deletes."""
        return {key: None if value is _DELETED else value for key, value in self._pending.items()}

    def flush(self, changes: Mapping[bytes, bytes | None], checkpoint: bytes) -> None:
        """Write `changes` (from `changes()`) and the checkpoint to the engine in one atomic write,
        then empty the buffer."""
        self.engine.write(changes, checkpoint)
        self._pending.clear()

    def discard(self) -> None:
        """Drop the buffered writes (a rewind to the last checkpoint)."""
        self._pending.clear()

    def __repr__(self) -> str:
        return f"KeyValueStore({self.name!r}, {type(self.engine).__name__})"
