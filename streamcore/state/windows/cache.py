"""`WindowCache`: the aggregates of a task's tumbling or hopping windows kept decoded in memory and
written to their `TimeWindowStore` once per checkpoint, not once per record (Kafka Streams'
caching window store). A window updated by every record of its key costs a dict update per
record; its key, encoding and store write come once per checkpoint.

How it stays exact:
- **Checkpoint.** It registers with the key-value store under the window store
  (`KeyValueStore.before_checkpoint`): the processor's checkpoint writes every changed window into
  the store before taking the store's buffered writes, so the changelog and the store's
  checkpoint hold them with the input positions, as if written at once.
- **Failed records.** Each update puts an undo entry in the runner's journal (the store's
  `journal`), as the store's own writes do: a record that raises and is retried leaves no trace.
- **Rewinds.** It registers `KeyValueStore.on_discard`: a rewind to the last checkpoint drops
  the cached updates with the store's buffered writes.
- **Closing and expiry** read the store: `due` says when `take_closed` or `expire` would find
  something (the store's next close and expiry times, lowered by the windows created in the
  cache), and the caller `flush`es before calling them then.
- **Mutable aggregates** are not cached: an aggregator may change the aggregate it is given, which
  would change the undo entry's copy. A window whose aggregate is not an int, float, str, bool or
  bytes is written through to the store at once (which encodes it), as without the cache.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamcore.errors import ArgumentTypeError
from streamcore.state.windows.aggregate import LateRecord, late_reason
from streamcore.state.windows.specs import TimeWindowSpec, Window
from streamcore.state.windows.store import TimeWindowStore, WindowedValue

__all__ = ["WindowCache"]

_SCALARS = frozenset({int, float, str, bool, bytes})
_NEVER = 1 << 63


class _Undo(list[tuple[tuple[str, int], Any]]):
    """The cache's (window, previous entry) per update since its last flush; itself the runner's
    journal entry of each update (see `streamcore.state.store._UndoLog`)."""

    def __init__(self, cache: WindowCache) -> None:
        super().__init__()
        self.cache = cache

    def pop(self) -> None:  # type: ignore[override]
        at, old = super().pop()
        cache = self.cache
        if old is None:
            cache._entries.pop(at, None)
            cache._dirty.discard(at)
        else:
            cache._entries[at] = old
            cache._dirty.add(at)  # written again at the flush: the same value, harmless


class WindowCache:
    """The cached windows of one task's `TimeWindowStore` of tumbling or hopping windows."""

    def __init__(self, store: TimeWindowStore[Any]) -> None:
        if not isinstance(store.spec, TimeWindowSpec):
            raise ArgumentTypeError(
                f"WindowCache caches tumbling and hopping windows, got {type(store.spec).__name__}"
            )
        self.store = store
        self.spec: TimeWindowSpec = store.spec
        # (key, window start) -> (aggregate, largest timestamp, new: not in the store yet, window)
        self._entries: dict[tuple[str, int], tuple[Any, int, bool, Window]] = {}
        self._dirty: set[tuple[str, int]] = set()
        self._undo = _Undo(self)
        self._store_due: int | None = None  # the store's next close or expiry time, when known
        self._new_due = _NEVER  # the earliest close time of the new windows in the cache
        kv = store.store
        kv.before_checkpoint.append(self.flush)
        kv.on_discard.append(self.drop)

    @property
    def due(self) -> int:
        """The stream time from which the store's `take_closed` or `expire` finds something,
        the new windows still in the cache included: `flush` before calling them then."""
        if self._store_due is None:
            store = self.store
            times = [t for t in (store.next_close_time(), store.next_expiry_time()) if t]
            self._store_due = min(times, default=_NEVER)
        return min(self._store_due, self._new_due)

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
        spec = self.spec
        if spec.is_late(timestamp, stream_time):
            reason = late_reason(spec, timestamp, stream_time)
            return LateRecord(key, timestamp, stream_time, reason)
        entries, dirty = self._entries, self._dirty
        journal = self.store.store.journal
        undo = self._undo
        updated = []
        for window in spec.windows_for(timestamp):
            if spec.is_closed(window, stream_time):
                continue
            at = (key, window.start)
            old = entries.get(at)
            if old is None:
                stored = self.store.entry(key, window)
                if stored is None:
                    aggregate, latest, new = initializer(), timestamp, True
                else:
                    aggregate, latest, new = stored.value, stored.timestamp, False
            else:
                aggregate, latest, new, _window = old
            aggregate = aggregator(key, value, aggregate)
            if timestamp > latest:
                latest = timestamp
            if type(aggregate) in _SCALARS:
                entries[at] = (aggregate, latest, new, window)
                dirty.add(at)
                if new and spec.close_time(window) < self._new_due:
                    self._new_due = spec.close_time(window)
            else:  # an aggregator may change this object later: the store encodes it now
                entries.pop(at, None)
                dirty.discard(at)
                self.store.write(key, window, aggregate, latest, new=new)
            if journal is not None:
                undo.append((at, old))
                journal.append(undo)
            if updates:
                updated.append(WindowedValue(key, window, aggregate, latest))
        return updated

    def flush(self) -> None:
        """Write every changed window to the store (the checkpoint's hook; before the store's
        closing and expiry), then forget the cached ones: the next record of a window reads it
        from the store's own read cache."""
        store = self.store
        entries = self._entries
        for at in self._dirty:
            aggregate, latest, new, window = entries[at]
            store.write(at[0], window, aggregate, latest, new=new)
        self.drop()

    def detach(self) -> None:
        """Unhook from the key-value store (its owner made a new cache for it)."""
        kv = self.store.store
        kv.before_checkpoint.remove(self.flush)
        kv.on_discard.remove(self.drop)

    def drop(self) -> None:
        """Forget every cached update (after a flush, or when the store's buffered writes were
        dropped: a rewind)."""
        self._entries.clear()
        self._dirty.clear()
        self._undo.clear()
        self._store_due = None
        self._new_due = _NEVER
