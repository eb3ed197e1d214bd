"""`KeyValueStore`: the state store a computation reads and writes (Kafka Streams'
`KeyValueStore`), one per task and store name.

Keys are `str` (a Record's key type), ordered by their UTF-8 bytes; values go through the store's
codec (`"json"`, an Avro mode with a schema, `"bytes"` or a `Codec`: never pickle). Writes are
buffered in the store until the processor's next checkpoint, where they are appended to the
changelog and then written to the engine in one atomic write with the changelog position
(`docs/state.md`, "Checkpoints"); reads see the buffered writes. A rewind (the task's partitions
moved, or its checkpoint failed) drops the buffer, so the engine only ever holds checkpointed
state.

Reads are cached (Kafka Streams' caching store, for reads): the last `cache` keys read or written
(a full cache drops its oldest tenth) keep their decoded value, or their absence, when it is
immutable (a number, a string, a bool), so a hot key's `get` reaches neither the engine nor the
codec. Lists and dicts are decoded at every `get`: a caller changing the object it got must not
change the store behind its back. A written value is cached as given only when it decodes back
to itself: a scalar with the JSON codec, `bytes` with the bytes codec; with other codecs (Avro's
32-bit floats, a codec of the user's) the next read decodes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import islice
from typing import Any, Generic, TypeVar

from streamcore.codecs import Codec
from streamcore.codecs.json_codec import JsonCodec
from streamcore.errors import ArgumentTypeError
from streamcore.state.engine import StoreEngine

__all__ = ["KeyValueStore"]

V = TypeVar("V")

_DELETED = object()
_MISSING = object()
# Decoded values safe to hand out twice: nobody can change them.
_IMMUTABLE = frozenset({int, float, str, bool, bytes})
_RAW = frozenset({bytes})  # the bytes codec's: bytes in, the same bytes out


class _UndoLog(list[tuple[bytes, Any]]):
    """A store's (key, previous buffered value) per write since its last checkpoint. The log is
    itself the entry each write adds to the runner's journal of what a record did: the journal
    drops a failed attempt's effects before its retry by calling `pop()` once per entry
    (`UnitContext._rollback`), which undoes the store's latest write. One shared object instead of
    an undo object per write: a put is on every record's path."""

    def __init__(self, store: KeyValueStore[Any]) -> None:
        super().__init__()
        self.store = store

    def pop(self) -> None:  # type: ignore[override]
        key, old = super().pop()
        store = self.store
        store._cache.clear()  # a rare path (a failed record): the cache refills from reads
        if old is _MISSING:
            store._pending.pop(key, None)
        else:
            store._pending[key] = old


def _bad_key(key: Any) -> ArgumentTypeError:
    return ArgumentTypeError(
        f"a state store key must be a str (a Record key), got {type(key).__name__} {key!r}"
    )


def _key(key: Any) -> bytes:
    if type(key) is not str:
        raise _bad_key(key)
    return key.encode("utf-8")


class KeyValueStore(Generic[V]):
    """A task's key-value store (see the module doc). Not thread-safe: use it from the calls the
    processor makes to its computation."""

    def __init__(
        self, name: str, engine: StoreEngine, codec: Codec[V], cache: int = 100_000
    ) -> None:
        self.name = name
        self.engine = engine
        self.codec = codec
        self._pending: dict[bytes, Any] = {}  # key -> encoded value, or _DELETED
        # key -> decoded immutable value, None when absent; oldest first, at most `cache` keys.
        self._cache: dict[str, Any] = {}
        self._cache_size = cache
        # The types of written values that decode back to themselves, so cached as written.
        self._exact: frozenset[type] = (
            _IMMUTABLE
            if type(codec) is JsonCodec
            else _RAW
            if getattr(codec, "name", None) == "bytes"
            else frozenset()
        )
        # Where each write records how to undo it (the runner's journal), when set.
        self.journal: list[Any] | None = None
        self._undo = _UndoLog(self)
        # A layer above that keeps writes of its own (the DSL's window cache) writes them here
        # before a checkpoint takes the buffered writes, and drops them with the buffer.
        self.before_checkpoint: list[Callable[[], None]] = []
        self.on_discard: list[Callable[[], None]] = []

    # -- reads ----------------------------------------------------------------------------------
    def get(self, key: str) -> V | None:
        """The value of `key`, None when absent."""
        if type(key) is not str:
            raise _bad_key(key)
        value = self._cache.get(key, _MISSING)
        if value is not _MISSING:
            return value  # type: ignore[no-any-return]
        raw = key.encode("utf-8")
        stored = self._pending.get(raw)
        if stored is None:
            stored = self.engine.get(raw)
        elif stored is _DELETED:
            stored = None
        value = None if stored is None else self.codec.decode(stored)
        if value is None or type(value) in _IMMUTABLE:
            self._remember(key, value)
        return value  # type: ignore[no-any-return]

    def _remember(self, key: str, value: Any) -> None:
        cache = self._cache
        cache[key] = value
        if len(cache) > self._cache_size:
            self._trim()

    def _trim(self) -> None:
        # The oldest tenth goes at once, into a new dict: deleting a dict's first entries one at
        # a time leaves a run of dead slots that every `next(iter(...))` walks again.
        cache = self._cache
        drop = len(cache) - self._cache_size + self._cache_size // 10
        self._cache = dict(islice(cache.items(), drop, None))

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
        at, count = 0, len(pending)
        for k, v in self.engine.items(lo, hi):
            while at < count and pending[at][0] <= k:
                key, value = pending[at]
                at += 1
                if value is not _DELETED:
                    yield key.decode("utf-8"), decode(value)
                if key == k:
                    break  # the buffer's value replaces the engine's
            else:
                yield k.decode("utf-8"), decode(v)
        for key, value in pending[at:]:
            if value is not _DELETED:
                yield key.decode("utf-8"), decode(value)

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
        if type(key) is not str:
            raise _bad_key(key)
        # Encoded now: a failure belongs to the record that wrote it, and a value the caller
        # changes afterwards does not change what is stored.
        self._write(key.encode("utf-8"), _DELETED if value is None else self.codec.encode(value))
        if value is None or type(value) in self._exact:
            self._remember(key, value)
        else:
            self._cache.pop(key, None)

    def _write(self, key: bytes, value: Any) -> None:
        pending = self._pending
        journal = self.journal
        if journal is not None:
            undo = self._undo
            undo.append((key, pending.get(key, _MISSING)))
            journal.append(undo)
        pending[key] = value

    def put_all(self, items: Iterable[tuple[str, V]]) -> None:
        """`put` each (key, value)."""
        for key, value in items:
            self.put(key, value)

    def put_raw_all(self, items: Iterable[tuple[str, bytes]]) -> None:
        """`put` each (key, value) of a store with the `bytes` codec, whose values are the bytes
        given, in one call: a window store's checkpoint writes thousands at once. The read cache
        forgets these keys instead of keeping the values: the layer above that writes this way
        keeps them itself (the window cache), and thousands of keys a second would push the
        keys read out of the cache (each trim copies it)."""
        if self._exact is not _RAW:
            raise ArgumentTypeError(
                f"put_raw_all writes raw bytes; store {self.name!r} encodes its values with "
                f"{getattr(self.codec, 'name', self.codec)!r}: use put_all"
            )
        write, cache = self._write, self._cache
        for key, value in items:
            if type(key) is not str:
                raise _bad_key(key)
            if type(value) is not bytes:
                raise ArgumentTypeError(
                    f"store {self.name!r}: put_raw_all takes bytes values, got "
                    f"{type(value).__name__} for key {key!r}"
                )
            write(key.encode("utf-8"), value)
            cache.pop(key, None)

    def delete_all(self, keys: Iterable[str]) -> None:
        """Delete each key without reading it first (`put(key, None)`), in one call; the read
        cache forgets them (as `put_raw_all`): a window store's closed windows, never read
        again."""
        write, cache = self._write, self._cache
        for key in keys:
            if type(key) is not str:
                raise _bad_key(key)
            write(key.encode("utf-8"), _DELETED)
            cache.pop(key, None)

    def delete(self, key: str) -> V | None:
        """Remove `key`; returns the value it had (None when absent)."""
        old = self.get(key)
        self._write(_key(key), _DELETED)
        self._remember(key, None)
        return old

    # -- the checkpoint (the processor's side) ------------------------------------------------
    def prepare_checkpoint(self) -> None:
        """Let the layers above write what they keep (`before_checkpoint`), before the
        checkpoint looks at `dirty` and takes `changes()`."""
        for hook in self.before_checkpoint:
            hook()

    @property
    def dirty(self) -> bool:
        """True when writes are buffered since the last checkpoint."""
        return bool(self._pending)

    def changes(self, held: int = 0) -> dict[bytes, bytes | None]:
        """The buffered writes as engine changes: encoded key -> encoded value, None deletes;
        without the last `held` writes, made by records beyond the checkpoint (a computation
        that asked for it before the end of its batch), which stay buffered for the next one."""
        pending = self._pending
        if held:
            pending = dict(pending)
            for key, old in reversed(self._undo[-held:]):
                if old is _MISSING:
                    pending.pop(key, None)
                else:
                    pending[key] = old
        return {key: None if value is _DELETED else value for key, value in pending.items()}

    def held_writes(self, journal_tail: list[Any]) -> int:
        """How many of this store's writes are in `journal_tail` (the runner's journal entries
        of records beyond the checkpoint)."""
        undo = self._undo
        return sum(1 for entry in journal_tail if entry is undo)

    def flush(
        self, changes: Mapping[bytes, bytes | None], checkpoint: bytes, held: int = 0
    ) -> None:
        """Write `changes` (from `changes(held)`) and the checkpoint to the engine in one atomic
        write, then empty the buffer but for the keys of the last `held` writes."""
        self.engine.write(changes, checkpoint)
        undo = self._undo
        if held:
            kept = {key for key, _old in undo[-held:]}
            self._pending = {key: value for key, value in self._pending.items() if key in kept}
            # Kept: a checkpoint retried after a later step failed asks for `changes(held)` again.
            del undo[:-held]
        else:
            self._pending.clear()
            undo.clear()

    def discard(self) -> None:
        """Drop the buffered writes (a rewind to the last checkpoint) and the cache, which may
        hold them."""
        self._pending.clear()
        self._undo.clear()
        self._cache.clear()
        for hook in self.on_discard:
            hook()

    def __repr__(self) -> str:
        return f"KeyValueStore({self.name!r}, {type(self.engine).__name__})"
