"""`WindowCache`: the aggregates of a task's tumbling or hopping windows kept decoded in memory and
written to their `TimeWindowStore` once per checkpoint, not once per record (Kafka Streams'
caching window store). A window updated by every record of its key costs two dict lookups and an
update per record; its key text, encoding and store write come once per checkpoint, and its store
read once in its life (or once after a restart).

How it stays exact:
- **Reads.** A window not cached is read from the store, unless it starts after the stream time
  of the store's checkpoint (`stored_until`; after a rewind or once the cache was emptied, the
  largest stream time seen): no record could have written it, so it is new.
- **Checkpoint.** It registers with the key-value store under the window store
  (`KeyValueStore.before_checkpoint`): the processor's checkpoint writes every changed window into
  the store before taking the store's buffered writes, so the changelog and the store's
  checkpoint hold them with the input positions, as if written at once. The written windows stay
  cached (clean) while open; above `limit` cached windows, the checkpoint forgets them all.
- **Failed records.** Each update puts an undo entry in the runner's journal (the store's
  `journal`), as the store's own writes do: a record that raises and is retried leaves no trace.
- **Rewinds.** It registers `KeyValueStore.on_discard`: a rewind to the last checkpoint drops
  every cached window with the store's buffered writes.
- **Closing and expiry** read the store: `due()` (kept in `due_at`) says when `take_closed` or
  `expire` would find something (the store's next close and expiry times, lowered by the windows
  created in the cache), and the caller calls `flush_closed(stream_time)` before calling them
  then. It writes
  the closed windows and forgets them (a closed window takes no more records); that write is in
  the journal too, so a record that fails after it restores the cache as it was.
- **Mutable aggregates** are not cached: an aggregator may change the aggregate it is given, which
  would change the undo entry's copy. A window whose aggregate is not an int, float, str, bool or
  bytes is written through to the store at once (which encodes it), as without the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from streamcore.codecs.json_codec import JsonCodec
from streamcore.errors import ArgumentTypeError
from streamcore.state.windows.aggregate import LateRecord, late_reason
from streamcore.state.windows.specs import TimeWindowSpec, Window
from streamcore.state.windows.store import TimeWindowStore, WindowedValue

__all__ = ["WindowCache"]

_SCALARS = frozenset({int, float, str, bool, bytes})
_NEVER = 1 << 63
_UNKNOWN = -1 << 63
# What `aggregate` returns when it updated nothing or was not asked for the updates: one shared
# empty list instead of a new one per record (the caller only iterates it).
_NONE: list[Any] = []

# A cached window of one key: (aggregate, largest record timestamp, state): the state says
# whether the store has it as cached (clean), not (dirty) or not at all (new, so dirty too).
_Entry = tuple[Any, int, int]
_CLEAN, _DIRTY, _NEW = 0, 1, 2


class _Group:
    """The cached windows starting at one time: one per key, and whether any changed since the
    last write (a flag, not a set of keys: the entries say which, and a write walks them all,
    where a set cost a hash insert per record)."""

    __slots__ = ("close", "dirty", "entries", "through", "window")

    def __init__(self, window: Window, close: int) -> None:
        self.window = window
        self.close = close
        self.entries: dict[str, _Entry] = {}
        self.dirty = False
        self.through = False  # some of its windows were written through: in the store only


class _Undo(list[Any]):
    """The cache's window start, key and previous entry per update, three items in a row;
    itself the runner's journal entry of each update (see `streamcore.state.store._UndoLog`).
    Emptied at each checkpoint, which the journal's entries do not outlive. Flat, not a tuple
    per update: a tuple per record that lives until the checkpoint had the garbage collector
    run a third more full collections in the windowed count of bench/window_bench.py."""

    def __init__(self, cache: WindowCache) -> None:
        super().__init__()
        self.cache = cache

    def pop(self) -> None:  # type: ignore[override]
        pop = super().pop
        old, key, start = pop(), pop(), pop()
        group = self.cache._groups[start]  # an evicted group is back: its _Unflush came later
        if old is None:
            group.entries.pop(key, None)
        else:
            group.entries[key] = old  # clean: as in the store; else written at the next write


class _Unflush:
    """The journal entry of a `flush_closed`: undoing it puts the closed windows back in the
    cache as they were (the store's writes it made are undone by the store's own entries, which
    come after it in the journal)."""

    __slots__ = ("cache", "groups")

    def __init__(self, cache: WindowCache, groups: list[tuple[_Group, bool, dict[str, _Entry]]]):
        self.cache = cache
        self.groups = groups

    def pop(self) -> None:
        cache = self.cache
        for group, dirty, entries in self.groups:
            group.dirty = dirty
            group.entries = entries
            cache._groups[group.window.start] = group
        # Back in the cache, closed, maybe with windows the store does not have: due at once.
        closes = [cache._new_due] + [group.close for group, _dirty, _entries in self.groups]
        cache._due_changed(min(closes))


class WindowCache:
    """The cached windows of one task's `TimeWindowStore` of tumbling or hopping windows; at most
    about `limit` of them are kept past a checkpoint."""

    def __init__(
        self, store: TimeWindowStore[Any], stored_until: int, limit: int = 100_000
    ) -> None:
        if not isinstance(store.spec, TimeWindowSpec):
            raise ArgumentTypeError(
                f"WindowCache caches tumbling and hopping windows, got {type(store.spec).__name__}"
            )
        self.store = store
        self.spec: TimeWindowSpec = store.spec
        self.limit = limit
        self._size = store.spec.size_ms
        self._advance = store.spec.advance
        self._tumbling = self._advance == self._size
        self._lifetime = store.spec.size_ms + store.spec.grace_ms  # from start to close
        self._groups: dict[int, _Group] = {}  # window start -> its cached windows
        # No window of the store starts after this time, so a window starting later that is not
        # in the cache is new: not read from the store. The store's windows are those of records
        # up to the stream time of its checkpoint; after a rewind, up to the largest seen since.
        self._stored_until = stored_until
        self._seen_until = stored_until  # the largest stream time `aggregate` was given
        self._undo = _Undo(self)
        # Closed windows may be taken from the cache (`take_closed`) when they expire as they
        # close and the codec gives back the cached values as they are.
        self._direct = store.expires_at_close and type(store.codec) is JsonCodec
        self._store_due: int | None = None  # the store's next close or expiry time, when known
        self._new_due = _NEVER  # the earliest close time of the windows not in the store yet
        # min of both when known, else -1 (below any stream time: the caller asks `due()`)
        self.due_at = _UNKNOWN
        kv = store.store
        kv.before_checkpoint.append(self.flush)
        kv.on_discard.append(self.drop)

    def due(self) -> int:
        """The stream time from which the store's `take_closed` or `expire` finds something,
        the new windows still in the cache included: `flush_closed` before calling them then.
        Kept in `due_at` (a stream time below it needs no call), until a write or a close."""
        due = self.due_at
        if due == _UNKNOWN:
            if self._store_due is None:
                store = self.store
                times = [t for t in (store.next_close_time(), store.next_expiry_time()) if t]
                self._store_due = min(times, default=_NEVER)
            due = self.due_at = min(self._store_due, self._new_due)
        return due

    def aggregate(
        self,
        key: str,
        value: Any,
        timestamp: int,
        stream_time: int,
        initializer: Callable[[], Any],
        aggregator: Callable[[str, Any, Any], Any],
        updates: bool = True,
    ) -> list[WindowedValue[Any]] | LateRecord:
        """`aggregate_windowed` through the cache: the updated windows by start (none unless
        `updates`: emitting only final results needs none), or a `LateRecord` when none is open
        at `stream_time` (this record's included)."""
        advance, lifetime = self._advance, self._lifetime
        # The last window holding the record closes last (TimeWindowSpec.is_late).
        last = timestamp - timestamp % advance
        if last + lifetime <= stream_time:
            spec = self.spec
            return LateRecord(
                key, timestamp, stream_time, late_reason(spec, timestamp, stream_time)
            )
        # The starts are the multiples of the advance in (timestamp - size, timestamp], none
        # below 0 (TimeWindowSpec.windows_for): a tumbling window's is the last one.
        starts: tuple[int, ...] | range
        if self._tumbling:
            starts = (last,) if timestamp >= 0 else ()
        else:
            first = max(0, timestamp - self._size + advance) // advance * advance
            starts = range(first, timestamp + 1, advance)
        if stream_time > self._seen_until:
            self._seen_until = stream_time
        groups = self._groups
        journal = self.store.store.journal
        undo = self._undo
        updated: list[WindowedValue[Any]] = _NONE
        for start in starts:
            group = groups.get(start)
            if group is None:
                if start + lifetime <= stream_time:
                    continue  # closed: the record's later windows are still open
                group = groups[start] = _Group(self.spec.window_at(start), start + lifetime)
            elif group.close <= stream_time:
                continue
            entries = group.entries
            old = entries.get(key)
            if old is None:
                if start > self._stored_until and not group.through:
                    stored = None
                else:
                    stored = self.store.entry(key, group.window)
                if stored is None:
                    aggregate, latest, state = initializer(), timestamp, _NEW
                    if group.close < self._new_due:
                        self._new_due = group.close
                        if group.close < self.due_at:
                            self.due_at = group.close
                else:
                    aggregate, latest, state = stored.value, stored.timestamp, _DIRTY
            else:
                aggregate, latest, state = old
                state = state or _DIRTY
            aggregate = aggregator(key, value, aggregate)
            if timestamp > latest:
                latest = timestamp
            if type(aggregate) in _SCALARS:
                entries[key] = (aggregate, latest, state)
                group.dirty = True
            else:  # an aggregator may change this object later: the store encodes it now
                entries.pop(key, None)
                group.through = True
                self.store.write(key, group.window, aggregate, latest, new=state == _NEW)
            if journal is not None:
                undo.append(start)  # three items, not a tuple: nothing for the collector
                undo.append(key)
                undo.append(old)
                journal.append(undo)
            if updates:
                if updated is _NONE:
                    updated = []
                updated.append(WindowedValue(key, group.window, aggregate, latest))
        return updated

    def _write(self, group: _Group) -> None:
        """Write `group`'s changed windows to the store; they stay cached, clean."""
        entries = group.entries
        items = []
        for key, (aggregate, latest, state) in entries.items():
            if state:
                items.append((key, aggregate, latest, state == _NEW))
        for key, aggregate, latest, _new in items:  # after the walk: a dict changes no size in it
            entries[key] = (aggregate, latest, _CLEAN)
        self.store.write_all(group.window, items)
        group.dirty = False

    def flush(self) -> None:
        """Write every changed window to the store (the checkpoint's hook); past the checkpoint
        the journal's undo entries are gone, and so are the cached windows when more than
        `limit` are kept."""
        count = 0
        for group in self._groups.values():
            if group.dirty:
                self._write(group)
            count += len(group.entries)
        self._undo.clear()
        self._due_changed()
        if count > self.limit:
            self._groups.clear()
            self._stored_until = self._seen_until

    def flush_closed(self, stream_time: int) -> None:
        """Write the windows closed at `stream_time` to the store and forget them (they take no
        more records), before the store's `take_closed` and `expire` read it."""
        self._forget_closed(self._closed(stream_time), ())

    def take_closed(self, stream_time: int) -> list[WindowedValue[Any]]:
        """The store's `take_closed_and_expire(stream_time)` (`emit="final"`'s closing): the
        windows closed at `stream_time`, by end, then key, then start, deleted from the store
        and forgotten here. A cached window group that holds every window of its start (the
        store has none but those written from it: it starts after `stored_until`) is taken
        from the cache, its values as cached, and only its windows written before are deleted
        from the store (tombstones); the store is read only for the other closed windows,
        which start before those, after writing the cache's changes to them. The values are
        the store's too: the cache keeps only what the JSON codec gives back as it was."""
        closed = self._closed(stream_time)
        store = self.store
        if not self._direct or any(group.through for group in closed):
            self._forget_closed(closed, ())
            return store.take_closed_and_expire(stream_time)
        before = self._stored_until + 1
        direct = sorted(
            (group for group in closed if group.window.start >= before),
            key=lambda group: group.window.start,
        )
        self._forget_closed(closed, direct)
        later_close = min((group.close for group in self._groups.values()), default=_NEVER)
        found = store.take_closed_and_expire(stream_time, before, later_close)
        for group in direct:
            window, entries = group.window, group.entries
            stored = []
            for key in sorted(entries):  # str order is UTF-8 byte order, the store's
                aggregate, latest, state = entries[key]
                found.append(WindowedValue(key, window, aggregate, latest))
                if state != _NEW:
                    stored.append(key)
            store.forget(window, stored)
        return found

    def _closed(self, stream_time: int) -> list[_Group]:
        return [g for g in self._groups.values() if g.close <= stream_time]

    def _forget_closed(self, closed: list[_Group], taken: Collection[_Group]) -> None:
        """Forget the `closed` groups, writing the changes of those not `taken` to the store
        first; in the journal, so that a record failing after it restores them."""
        journal = self.store.store.journal
        if journal is not None and closed:
            journal.append(_Unflush(self, [(g, g.dirty, dict(g.entries)) for g in closed]))
        for group in closed:
            if group.dirty and group not in taken:
                self._write(group)
            del self._groups[group.window.start]
        # The dirty groups left may hold new windows: their earliest close is never too late.
        self._due_changed(min((g.close for g in self._groups.values() if g.dirty), default=_NEVER))

    def detach(self) -> None:
        """Unhook from the key-value store (its owner made a new cache for it)."""
        kv = self.store.store
        kv.before_checkpoint.remove(self.flush)
        kv.on_discard.remove(self.drop)

    def drop(self) -> None:
        """Forget every cached window (the store's buffered writes were dropped: a rewind)."""
        self._groups.clear()
        self._stored_until = self._seen_until
        self._undo.clear()
        self._due_changed()

    def _due_changed(self, new_due: int = _NEVER) -> None:
        """The store was written (or its writes dropped): `due()` asks it again; `new_due` is
        the earliest close time of the cached windows not in the store."""
        self._new_due = new_due
        self._store_due = None
        self.due_at = _UNKNOWN
