"""Window and session stores over a `KeyValueStore`, so they get its changelog, checkpoint,
restore and rewind for free (docs/state.md, "Windows").

The key-value store is declared with the `"bytes"` codec: a window store lays out its own keys
and values, and encodes aggregates with the codec it is given. Three kinds of entries, told apart
by their first character (so each kind is one contiguous range of the store):

- Tumbling and hopping windows: `w` + `T(start)` + `esc(key)` -> 8-byte big-endian largest
  record timestamp + the encoded aggregate. Every window has the same length, so by start is by
  end: closing and expiry walk them from the oldest without an index, and a key's windows are
  point reads at the multiples of the advance.
- Sliding windows and sessions: `w` + `esc(key)` + `T(start)` + `T(end)` -> the same value: the
  windows of a record key are together, ordered by start (a key's sessions never overlap, so by
  end too), what a sliding aggregation and a session lookup read per record; and
  `x` + `T(end)` + `esc(key)` + `T(start)` -> one byte: the same windows by end, what closing and
  expiry walk from the oldest, without scanning the open ones.
- `m` -> 16 bytes: the stream times of the last `take_closed` and `expire` that looked.
  They are part of the store's checkpoint, so after a restart or a rewind a window reported or
  deleted before stays closed, whatever the restarted task's stream time.

`esc(key)` writes every U+0000 of the key as U+0000 U+0001 and ends the key with U+0000
U+0000. In UTF-8 U+0000 is the byte 0x00 and no other character holds a 0x00 byte, so the
terminator sorts below any escaped content: `esc(a) < esc(b)` exactly when `a < b` by UTF-8
bytes, and no escaped key is a prefix of another's. `T(t)` is `t + 2**63` as 16 lowercase hex
digits, fixed width, so ASCII order is numeric order (negative starts included).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Generic, NamedTuple, TypeVar

from streamcore.codecs import Codec
from streamcore.errors import ArgumentTypeError, InvalidArgumentError
from streamcore.state.store import KeyValueStore
from streamcore.state.windows.keys import (
    TIME_WIDTH,
    escape_key,
    time_of,
    time_text,
    unescape_key,
)
from streamcore.state.windows.specs import (
    SessionWindows,
    SlidingWindows,
    TimeWindowSpec,
    Window,
    WindowSpec,
)

__all__ = ["SessionStore", "TimeWindowStore", "WindowedValue"]

V = TypeVar("V")

_META = "m"
_STAMP = struct.Struct(">q")
_MARKS = struct.Struct(">qq")
_INDEXED = b"\x01"
_NO_TIME = -(1 << 63)
_NEVER = 1 << 64
# A fetch of one key's tumbling or hopping windows reads up to this many windows one by one;
# a longer time range is scanned (every key's windows in it), which costs less then.
_POINT_READS = 64


class WindowedValue(NamedTuple, Generic[V]):
    """A window's aggregate for a record key; `timestamp` is the largest record timestamp in it
    (the timestamp of the windowed result record). A named tuple, as `Window`."""

    key: str
    window: Window
    value: V
    timestamp: int


class _WindowedStore(Generic[V]):
    def __init__(self, store: KeyValueStore[bytes], spec: WindowSpec, codec: Codec[V]) -> None:
        if getattr(store.codec, "name", None) != "bytes":
            raise InvalidArgumentError(
                f"store {store.name!r} uses the {getattr(store.codec, 'name', store.codec)!r} "
                "codec; a window store keeps its own layout: declare the store with "
                "codec='bytes' (StoreSpec(name, codec='bytes')) and give the aggregate's codec "
                "to the window store"
            )
        self.store = store
        self.spec = spec
        self.codec = codec
        # Close and expiry times are a window's end plus a lag of the spec's.
        sample = Window(0, 0) if isinstance(spec, SessionWindows) else spec.window_at(0)  # type: ignore[attr-defined]
        self._close_lag = spec.close_time(sample) - sample.end
        self._expiry_lag = spec.expiry_time(sample) - sample.end
        self.expires_at_close = self._close_lag == self._expiry_lag  # retention = size + grace
        # Hints, in memory only: (the marks entry when computed, the next close or expiry time).
        # Until stream time reaches it, `take_closed` or `expire` has nothing to do and skips
        # the scan (a range read costs as much as the store's buffered writes). A new window
        # lowers them; a rewind that drops a scan's effects restores an older marks entry, which
        # voids them.
        self._close_hint: tuple[bytes | None, int] | None = None
        self._expiry_hint: tuple[bytes | None, int] | None = None
        # Tumbling and hopping windows are laid out by start (see the module doc): all have the
        # same length, so by start is by end, and no index is needed.
        self._by_start = isinstance(spec, TimeWindowSpec)
        self._length = sample.end - sample.start
        self._escaped = ("", escape_key(""))
        self._last = ("", Window(0, 0), "")

    # -- entries --------------------------------------------------------------------------------
    def _esc(self, key: str) -> str:
        last, escaped = self._escaped
        if key is not last:
            escaped = escape_key(key)
            self._escaped = (key, escaped)
        return escaped

    def _data_key(self, key: str, window: Window) -> str:
        last_key, last_window, data_key = self._last
        if key is not last_key or window is not last_window:  # an aggregation reads, then writes
            if self._by_start:
                data_key = "w" + time_text(window.start) + self._esc(key)
            else:
                data_key = "w" + self._esc(key) + time_text(window.start) + time_text(window.end)
            self._last = (key, window, data_key)
        return data_key

    def entry(self, key: str, window: Window) -> WindowedValue[V] | None:
        """`key`'s `window` with its aggregate and largest record timestamp, None when absent."""
        raw = self.store.get(self._data_key(key, window))
        return None if raw is None else self._decode(key, window, raw)

    def _decode(self, key: str, window: Window, raw: bytes) -> WindowedValue[V]:
        return WindowedValue(key, window, self.codec.decode(raw[8:]), _STAMP.unpack_from(raw)[0])

    def write(self, key: str, window: Window, value: V, timestamp: int, *, new: bool) -> None:
        """Set `key`'s `window` to `value` with its largest record `timestamp`; `new` says the
        window is not in the store yet (so it is indexed by end): the caller has just read it,
        as the aggregation does."""
        self.store.put(
            self._data_key(key, window), _STAMP.pack(timestamp) + self.codec.encode(value)
        )
        if new:
            if not self._by_start:
                self.store.put(
                    "x" + time_text(window.end) + self._esc(key) + time_text(window.start),
                    _INDEXED,
                )
            self._indexed(window)

    def write_all(self, window: Window, items: list[tuple[str, V, int, bool]]) -> None:
        """`write` for many keys of one window: (key, value, timestamp, new) each. Laid out by
        start (the window cache's checkpoint), the window's part of the keys is made once and
        the keys are put in one call."""
        if not self._by_start:
            for key, value, timestamp, new in items:
                self.write(key, window, value, timestamp, new=new)
            return
        prefix = "w" + time_text(window.start)
        encode, pack = self.codec.encode, _STAMP.pack
        self.store.put_raw_all(
            [
                (prefix + escape_key(key), pack(timestamp) + encode(value))
                for key, value, timestamp, _ in items
            ]
        )
        if any(new for *_, new in items):
            self._indexed(window)

    def _indexed(self, window: Window) -> None:
        """A new window was written: the next close and expiry times may come sooner."""
        if self._close_hint is not None:
            marks, upcoming = self._close_hint
            self._close_hint = (marks, min(upcoming, window.end + self._close_lag))
        if self._expiry_hint is not None:
            marks, upcoming = self._expiry_hint
            self._expiry_hint = (marks, min(upcoming, window.end + self._expiry_lag))

    def _delete(self, key: str, window: Window) -> WindowedValue[V] | None:
        old = self.store.delete(self._data_key(key, window))
        if old is None:
            return None
        if not self._by_start:
            self.store.delete(
                "x" + time_text(window.end) + escape_key(key) + time_text(window.start)
            )
        return self._decode(key, window, old)

    def _scan(self, key: str, lo: int, hi: int) -> Iterator[WindowedValue[V]]:
        """A key's windows with `lo <= start < hi`, by start (laid out by key)."""
        prefix = "w" + escape_key(key)
        size = len(prefix)
        for text, raw in self.store.range(prefix + time_text(lo), prefix + time_text(hi)):
            window = Window(
                time_of(text[size : size + TIME_WIDTH]), time_of(text[size + TIME_WIDTH :])
            )
            yield self._decode(key, window, raw)

    def _by_end(
        self, lo: int, before: int | None = None
    ) -> Iterator[tuple[str, Window, str, bytes | None]]:
        """The windows with `lo <= end` (laid out by start: and `start < before`, when given)
        as (key, window, data key, stored value or None when not read yet), by end, then key
        (UTF-8 bytes), then start."""
        if self._by_start:
            length = self._length
            hi = "x" if before is None else "w" + time_text(before)
            for text, raw in self.store.range("w" + time_text(max(lo - length, _NO_TIME)), hi):
                start = time_of(text[1 : 1 + TIME_WIDTH])
                key, _at = unescape_key(text, 1 + TIME_WIDTH)
                yield key, Window(start, start + length), text, raw
            return
        for text, _ in self.store.range("x" + time_text(max(lo, _NO_TIME)), "y"):
            key, at = unescape_key(text, 1 + TIME_WIDTH)
            end = text[1 : 1 + TIME_WIDTH]
            data_key = "w" + text[1 + TIME_WIDTH : at] + text[at:] + end
            yield key, Window(time_of(text[at:]), time_of(end)), data_key, None

    # -- stream time ----------------------------------------------------------------------------
    def _marks(self) -> tuple[bytes | None, int, int]:
        raw = self.store.get(_META)
        closed_at, expired_at = (_NO_TIME, _NO_TIME) if raw is None else _MARKS.unpack(raw)
        return raw, closed_at, expired_at

    def _set_marks(self, old: bytes | None, closed_at: int, expired_at: int) -> bytes:
        raw = _MARKS.pack(closed_at, expired_at)
        self.store.put(_META, raw)
        # The other hint stays valid: closing and expiring only remove what it counted.
        for name in ("_close_hint", "_expiry_hint"):
            hint = getattr(self, name)
            if hint is not None and hint[0] == old:
                setattr(self, name, (raw, hint[1]))
        return raw

    def stream_time(self, stream_time: int) -> int:
        """`stream_time`, or the stream time of the last `take_closed` or `expire` that looked
        for windows when it is larger (a restarted task's stream time starts again from its
        first record; the store's does not go back)."""
        _raw, closed_at, expired_at = self._marks()
        return max(stream_time, closed_at, expired_at)

    def take_closed(self, stream_time: int) -> list[WindowedValue[V]]:
        """The windows that closed at `stream_time` and were not returned by an earlier call, by
        end, then key (UTF-8 bytes), then start: what `emit="final"` sends, once per window.
        The store remembers (in its checkpointed state) what it returned: a rewind before the
        next checkpoint returns them again."""
        raw, closed_at, expired_at = self._marks()
        hint = self._close_hint
        if hint is not None and hint[0] == raw and stream_time < hint[1]:
            return []
        # Every close time is the end plus the spec's lag: the windows not returned yet are
        # those with an end above closed_at - lag, and the closed ones among them come first.
        found, _keys, upcoming = self._closed(closed_at - self._close_lag + 1, stream_time)
        if stream_time > closed_at:
            raw = self._set_marks(raw, stream_time, expired_at)
        self._close_hint = (raw, upcoming)
        return found

    def expire(self, stream_time: int) -> int:
        """Delete the windows whose retention has passed at `stream_time` (tombstones in the
        changelog, which compaction then drops); returns how many. It does not return them:
        with `emit="final"`, call `take_closed` first."""
        raw, closed_at, expired_at = self._marks()
        hint = self._expiry_hint
        if hint is not None and hint[0] == raw and stream_time < hint[1]:
            return 0
        lag, gone, upcoming = self._expiry_lag, [], _NEVER
        for _key, window, data_key, _stored in self._by_end(_NO_TIME):
            if window.end + lag > stream_time:
                upcoming = window.end + lag
                break
            gone.append(data_key)
        self._delete_all(gone)
        if stream_time > expired_at:
            raw = self._set_marks(raw, closed_at, stream_time)
        self._expiry_hint = (raw, upcoming)
        return len(gone)

    def take_closed_and_expire(
        self, stream_time: int, before: int | None = None, later_close: int = _NEVER
    ) -> list[WindowedValue[V]]:
        """`take_closed(stream_time)` then `expire(stream_time)`, in one scan of the index when a
        window expires as it closes (retention = size + grace, the default): `emit="final"`'s
        step, once per record that reaches a close time. `before` (tumbling and hopping windows,
        expiring as they close): only the windows starting before it are looked at; the caller
        holds all the later ones (the window cache), takes and deletes those closed at
        `stream_time` itself and sends them after these, which keeps the order; `later_close`
        is the earliest close time of the ones it keeps."""
        if before is not None and not (self._by_start and self.expires_at_close):
            raise InvalidArgumentError(
                f"{self!r}: take_closed_and_expire(before=...) is for tumbling and hopping "
                "windows that expire as they close"
            )
        if not self.expires_at_close:
            found = self.take_closed(stream_time)
            self.expire(stream_time)
            return found
        raw, closed_at, expired_at = self._marks()
        hint = self._expiry_hint
        if before is None and hint is not None and hint[0] == raw and stream_time < hint[1]:
            return []
        # Nothing closed stays in the store past this call, so the scan starts at the oldest.
        found, gone, upcoming = self._closed(_NO_TIME, stream_time, before)
        if before is not None and later_close < upcoming:
            upcoming = later_close  # the windows from `before` on, not looked at
        self._delete_all(gone)
        if stream_time > closed_at or stream_time > expired_at:
            raw = self._set_marks(raw, max(stream_time, closed_at), max(stream_time, expired_at))
        self._close_hint = self._expiry_hint = (raw, upcoming)
        return found

    def _closed(
        self, lo: int, stream_time: int, before: int | None = None
    ) -> tuple[list[WindowedValue[V]], list[str], int]:
        """The windows with `lo <= end` (and `start < before`) closed at `stream_time` (by end,
        then key, then start), their data keys, and the close time of the next window
        (`_NEVER`: none)."""
        lag = self._close_lag
        found: list[WindowedValue[V]] = []
        data_keys: list[str] = []
        get = self.store.get
        for key, window, data_key, stored in self._by_end(lo, before):
            if window.end + lag > stream_time:
                return found, data_keys, window.end + lag
            if stored is None:
                stored = get(data_key)
            if stored is not None:
                found.append(self._decode(key, window, stored))
            data_keys.append(data_key)
        return found, data_keys, _NEVER

    def forget(self, window: Window, keys: list[str]) -> None:
        """Delete `keys`' `window` (laid out by start), which the caller knows the store holds,
        without reading it: the window cache's closed windows, taken from the cache."""
        prefix = "w" + time_text(window.start)
        self._delete_all([prefix + escape_key(key) for key in keys])

    def _delete_all(self, data_keys: list[str]) -> None:
        """Delete windows by data key, with their index entries, without reading them."""
        if self._by_start:
            self.store.delete_all(data_keys)
            return
        # The index entry is the data key's parts in another order.
        self.store.delete_all(
            key
            for data_key in data_keys
            for key in (data_key, "x" + data_key[-TIME_WIDTH:] + data_key[1:-TIME_WIDTH])
        )

    def next_close_time(self) -> int | None:
        """The stream time from which `take_closed` returns something: the close time of the
        oldest window it has not returned; None when there is none."""
        raw, closed_at, _expired_at = self._marks()
        hint = self._close_hint
        if hint is None or hint[0] != raw:
            first = next(self._by_end(closed_at - self._close_lag + 1), None)
            hint = self._close_hint = (
                raw,
                _NEVER if first is None else first[1].end + self._close_lag,
            )
        return None if hint[1] == _NEVER else hint[1]

    def next_expiry_time(self) -> int | None:
        """The stream time from which `expire` deletes something: the expiry time of the oldest
        window; None when the store holds none."""
        raw = self._marks()[0]
        hint = self._expiry_hint
        if hint is None or hint[0] != raw:
            first = next(self._by_end(_NO_TIME), None)
            hint = self._expiry_hint = (
                raw,
                _NEVER if first is None else first[1].end + self._expiry_lag,
            )
        return None if hint[1] == _NEVER else hint[1]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.store.name!r}, {self.spec!r})"


class TimeWindowStore(_WindowedStore[V]):
    """The windows of tumbling, hopping or sliding windows per record key (Kafka Streams'
    `WindowStore`): a window is named by its key and start, its end follows from the spec."""

    spec: TimeWindowSpec | SlidingWindows

    def __init__(
        self,
        store: KeyValueStore[bytes],
        spec: TimeWindowSpec | SlidingWindows,
        codec: Codec[V],
    ) -> None:
        if not isinstance(spec, TimeWindowSpec | SlidingWindows):
            raise ArgumentTypeError(
                f"TimeWindowStore takes tumbling, hopping or sliding windows, got "
                f"{type(spec).__name__}; use SessionStore for SessionWindows"
            )
        super().__init__(store, spec, codec)

    def get(self, key: str, start: int) -> V | None:
        """The aggregate of `key`'s window starting at `start`, None when absent."""
        entry = self.entry(key, self.spec.window_at(start))
        return None if entry is None else entry.value

    def get_entry(self, key: str, start: int) -> WindowedValue[V] | None:
        """`get` with the window and its largest record timestamp."""
        return self.entry(key, self.spec.window_at(start))

    def put(self, key: str, start: int, value: V, timestamp: int | None = None) -> None:
        """Set the aggregate of `key`'s window starting at `start` (None deletes it);
        `timestamp` is the window's largest record timestamp (None: keep it, or the start for
        a new window)."""
        window = self.spec.window_at(start)
        old = self.entry(key, window)
        if value is None:
            self._delete(key, window)
            return
        if timestamp is None:
            timestamp = start if old is None else old.timestamp
        self.write(key, window, value, timestamp, new=old is None)

    def delete(self, key: str, start: int) -> V | None:
        """Remove `key`'s window starting at `start`; returns its aggregate (None: absent)."""
        entry = self._delete(key, self.spec.window_at(start))
        return None if entry is None else entry.value

    def fetch(self, key: str, time_from: int, time_to: int) -> Iterator[WindowedValue[V]]:
        """`key`'s windows with `time_from <= start <= time_to`, by start."""
        if not self._by_start:
            return self._scan(key, time_from, time_to + 1)
        # Laid out by start: the key's windows are at the multiples of the advance in the range
        # (read one by one), unless there are more of those than windows in the range.
        advance = self.spec.advance  # type: ignore[union-attr]
        first = -(-time_from // advance) * advance
        if (time_to - first) // advance < _POINT_READS:
            found = (
                self.entry(key, self.spec.window_at(t)) for t in range(first, time_to + 1, advance)
            )
            return (entry for entry in found if entry is not None)
        return (entry for entry in self.fetch_all(time_from, time_to) if entry.key == key)

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[WindowedValue[V]]:
        """Every key's windows with `time_from <= start <= time_to`, by start, then key (UTF-8
        bytes): windows of one spec all have the same length, so the index by end is in that
        order."""
        length = self._length
        if self._by_start:
            lo, hi = "w" + time_text(time_from), "w" + time_text(time_to + 1)
            for text, raw in self.store.range(lo, hi):
                start = time_of(text[1 : 1 + TIME_WIDTH])
                key, _at = unescape_key(text, 1 + TIME_WIDTH)
                yield self._decode(key, Window(start, start + length), raw)
            return
        lo, hi = "x" + time_text(time_from + length), "x" + time_text(time_to + length + 1)
        for text, _ in self.store.range(lo, hi):
            key, at = unescape_key(text, 1 + TIME_WIDTH)
            entry = self.entry(key, self.spec.window_at(time_of(text[at:])))
            if entry is not None:
                yield entry


class SessionStore(_WindowedStore[V]):
    """The sessions of `SessionWindows` per record key (Kafka Streams' `SessionStore`): a session
    is named by its key and its window `[start, end]`."""

    spec: SessionWindows

    def __init__(self, store: KeyValueStore[bytes], spec: SessionWindows, codec: Codec[V]) -> None:
        if not isinstance(spec, SessionWindows):
            raise ArgumentTypeError(
                f"SessionStore takes SessionWindows, got {type(spec).__name__}; use "
                "TimeWindowStore for tumbling, hopping or sliding windows"
            )
        super().__init__(store, spec, codec)

    def get(self, key: str, window: Window) -> V | None:
        """The aggregate of `key`'s session `window`, None when absent."""
        entry = self.entry(key, window)
        return None if entry is None else entry.value

    def put(self, key: str, window: Window, value: V, timestamp: int | None = None) -> None:
        """Set the aggregate of `key`'s session `window` (None removes it); `timestamp` is its
        largest record timestamp (None: the window's end)."""
        if value is None:
            self._delete(key, window)
            return
        new = self.store.get(self._data_key(key, window)) is None
        self.write(key, window, value, window.end if timestamp is None else timestamp, new=new)

    def remove(self, key: str, window: Window) -> WindowedValue[V] | None:
        """Remove `key`'s session `window` (merged into another); returns it, None when absent."""
        return self._delete(key, window)

    def find_sessions(
        self, key: str, earliest_end: int, latest_start: int
    ) -> list[WindowedValue[V]]:
        """`key`'s sessions with `end >= earliest_end` and `start <= latest_start`, by start: the
        sessions a record at t with gap g reaches are `find_sessions(key, t - g, t + g)`."""
        return [
            entry
            for entry in self._scan(key, _NO_TIME, latest_start + 1)
            if entry.window.end >= earliest_end
        ]

    def fetch(self, key: str) -> list[WindowedValue[V]]:
        """Every session of `key`, by start."""
        return list(self._scan(key, _NO_TIME, -_NO_TIME - 1))
