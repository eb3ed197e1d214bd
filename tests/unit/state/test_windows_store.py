"""`TimeWindowStore` and `SessionStore` over every engine: the key layout keeps a key's windows
together by start (keys with U+0000 or non-ASCII characters included), fetches, closing once in a
deterministic order, expiry keeping the store bounded, and a changelog-style round trip."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamcore.codecs.json_codec import JsonCodec
from streamcore.computation.dsl_values import resolve_value_codec
from streamcore.errors import ArgumentTypeError, InvalidArgumentError
from streamcore.state.engines import ENGINES, open_engine
from streamcore.state.engines.memory import MemoryEngine
from streamcore.state.store import KeyValueStore
from streamcore.state.windows import (
    SessionStore,
    SessionWindows,
    SlidingWindows,
    TimeWindowStore,
    TumblingWindows,
    Window,
)

KEYS = ["a", "a\x00", "a\x00\x01b", "a\x00\x00", "ab", "b", "é", "日本", ""]


@pytest.fixture(params=ENGINES)
def kv(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KeyValueStore[Any]]:
    engine = open_engine(request.param, tmp_path / "store", 5.0)
    yield KeyValueStore("windows", engine, resolve_value_codec("bytes", where="test"))
    engine.close()


def _checkpoint(kv: KeyValueStore[Any]) -> None:
    kv.flush(kv.changes(), b"cp")


def test_a_keys_windows_are_together_and_ordered_by_start(kv: KeyValueStore[Any]) -> None:
    store = TimeWindowStore(kv, TumblingWindows(10, grace_ms=0), JsonCodec())
    for i, key in enumerate(KEYS):
        for start in (30, -10, 0, 10, 1 << 40):
            store.put(key, start, [key, start], timestamp=start + i % 3)
        if i % 2:
            _checkpoint(kv)  # half flushed, half buffered
    for key in KEYS:
        got = list(store.fetch(key, -100, 1 << 41))
        assert [e.window.start for e in got] == [-10, 0, 10, 30, 1 << 40]
        assert all(e.key == key and e.value == [key, e.window.start] for e in got)
        assert [e.window.start for e in store.fetch(key, 0, 30)] == [0, 10, 30]
        assert store.get(key, 10) == [key, 10]
        assert store.get(key, 20) is None
    by_bytes = sorted(KEYS, key=lambda k: k.encode("utf-8"))
    assert [e.key for e in store.fetch_all(10, 10)] == by_bytes
    assert [(e.window.start, e.key) for e in store.fetch_all(0, 10)] == [
        (s, k) for s in (0, 10) for k in by_bytes
    ]


def test_put_none_and_delete_remove_the_window_and_its_index(kv: KeyValueStore[Any]) -> None:
    store = TimeWindowStore(kv, TumblingWindows(10, grace_ms=0), JsonCodec())
    store.put("k", 0, 1)
    store.put("k", 10, 2)
    assert store.delete("k", 0) == 1
    store.put("k", 10, None)
    assert store.delete("k", 20) is None
    assert list(kv.all()) == []


def test_take_closed_returns_each_window_once_by_end_key_start(kv: KeyValueStore[Any]) -> None:
    store = TimeWindowStore(kv, TumblingWindows(10, grace_ms=5), JsonCodec())
    for key in ("b", "a", "é"):
        for start in (20, 0, 10):
            store.put(key, start, start)
    assert store.take_closed(14) == []  # [0, 10) closes at 15
    first = store.take_closed(25)
    assert [(e.window.start, e.key) for e in first] == [
        (0, "a"),
        (0, "b"),
        (0, "é"),
        (10, "a"),
        (10, "b"),
        (10, "é"),
    ]
    assert store.take_closed(25) == []
    _checkpoint(kv)
    # A restarted task's stream time starts again lower: the store's does not.
    assert store.stream_time(3) == 25
    assert [e.window.start for e in store.take_closed(40)] == [20, 20, 20]


def test_a_rewind_returns_the_closed_windows_again(kv: KeyValueStore[Any]) -> None:
    store = TimeWindowStore(kv, TumblingWindows(10, grace_ms=0), JsonCodec())
    store.put("k", 0, 1)
    _checkpoint(kv)
    assert len(store.take_closed(10)) == 1
    kv.discard()  # the checkpoint failed: what was sent is sent again
    assert len(store.take_closed(10)) == 1


def test_expiry_keeps_the_store_bounded(kv: KeyValueStore[Any]) -> None:
    spec = TumblingWindows(10, grace_ms=3)
    store = TimeWindowStore(kv, spec, JsonCodec())
    removed = 0
    for t in range(2000):
        for key in ("x", "y", "z"):
            start = t // 10 * 10
            store.put(key, start, (store.get(key, start) or 0) + 1, timestamp=t)
        removed += store.expire(t)
        if t % 97 == 0:
            _checkpoint(kv)
    open_windows = [e for e in store.fetch_all(0, 2000) if not spec.is_closed(e.window, 1999)]
    assert len(list(store.fetch_all(0, 2000))) == len(open_windows) == 3
    assert len(list(kv.all())) == 3 + 1  # a window each (laid out by start: no index), the marks
    assert removed == 3 * 199
    _checkpoint(kv)
    assert len(list(kv.engine.items())) == 4  # the engine holds no more either


def test_the_store_survives_a_changelog_round_trip(kv: KeyValueStore[Any]) -> None:
    store = TimeWindowStore(kv, SlidingWindows(10, grace_ms=0), JsonCodec())
    for key in KEYS:
        store.put(key, 5, {"n": 1}, timestamp=12)
        store.put(key, -3, {"n": 2}, timestamp=7)
    store.take_closed(9)  # the marks travel too
    changes = kv.changes()
    _checkpoint(kv)
    replica = MemoryEngine()  # what a restore writes from the changelog's records
    replica.write(changes, b"cp")
    for engine in (kv.engine, replica):
        again = TimeWindowStore(
            KeyValueStore("windows", engine, resolve_value_codec("bytes", where="test")),
            SlidingWindows(10, grace_ms=0),
            JsonCodec(),
        )
        for key in KEYS:
            got = [(e.window, e.value, e.timestamp) for e in again.fetch(key, -100, 100)]
            assert got == [(Window(-3, 7), {"n": 2}, 7), (Window(5, 15), {"n": 1}, 12)]
        assert again.stream_time(0) == 9
        assert [e.window.start for e in again.take_closed(20)] == [5] * len(KEYS)


def test_session_store_finds_removes_and_expires(kv: KeyValueStore[Any]) -> None:
    spec = SessionWindows(5, grace_ms=0)
    store = SessionStore(kv, spec, JsonCodec())
    for key in ("k", "k\x00", "é"):
        store.put(key, Window(0, 3), 1)
        store.put(key, Window(10, 12), 2)
        store.put(key, Window(30, 30), 3)
    _checkpoint(kv)
    assert [e.window for e in store.find_sessions("k", 8, 17)] == [Window(10, 12)]
    assert [e.window for e in store.find_sessions("k", 0, 30)] == [
        Window(0, 3),
        Window(10, 12),
        Window(30, 30),
    ]
    assert store.find_sessions("k", 31, 100) == []
    assert store.remove("k", Window(10, 12)).value == 2  # type: ignore[union-attr]
    assert store.remove("k", Window(10, 12)) is None
    assert [e.window for e in store.fetch("k")] == [Window(0, 3), Window(30, 30)]
    assert store.get("é", Window(10, 12)) == 2
    # Retention 5 + 0 + 1 after the end: [0, 3] goes at 9, [10, 12] at 18.
    assert store.expire(8) == 0
    assert store.expire(9) == 3
    assert store.expire(18) == 2
    assert [e.window for e in store.fetch("k\x00")] == [Window(30, 30)]


def test_the_store_needs_the_bytes_codec_and_a_matching_spec(tmp_path: Path) -> None:
    json_kv = KeyValueStore("w", MemoryEngine(), resolve_value_codec("json", where="test"))
    with pytest.raises(InvalidArgumentError, match="codec='bytes'"):
        TimeWindowStore(json_kv, TumblingWindows(10, grace_ms=0), JsonCodec())
    kv = KeyValueStore("w", MemoryEngine(), resolve_value_codec("bytes", where="test"))
    with pytest.raises(ArgumentTypeError, match="use SessionStore"):
        TimeWindowStore(kv, SessionWindows(10, grace_ms=0), JsonCodec())  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="use TimeWindowStore"):
        SessionStore(kv, TumblingWindows(10, grace_ms=0), JsonCodec())  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="must be a str"):
        TimeWindowStore(kv, TumblingWindows(10, grace_ms=0), JsonCodec()).put(1, 0, 1)  # type: ignore[arg-type]


def test_next_close_and_expiry_times(kv: KeyValueStore[Any]) -> None:
    spec = TumblingWindows(10, grace_ms=5, retention_ms=40)
    store = TimeWindowStore(kv, spec, JsonCodec())
    assert store.next_close_time() is None and store.next_expiry_time() is None
    store.put("k", 20, 1)
    assert (store.next_close_time(), store.next_expiry_time()) == (35, 60)
    store.put("k", 10, 1)  # an older window lowers both
    assert (store.next_close_time(), store.next_expiry_time()) == (25, 50)
    _checkpoint(kv)
    assert store.take_closed(24) == []
    assert [e.window.start for e in store.take_closed(30)] == [10]
    assert (store.next_close_time(), store.next_expiry_time()) == (35, 50)
    kv.discard()  # the rewind brings [10, 20) back as not returned
    assert store.next_close_time() == 25
    assert store.expire(50) == 1
    assert store.next_expiry_time() == 60
    assert store.expire(59) == 0
    # [10, 20) expired before take_closed returned it again: emit="final" takes closed first.
    assert [e.window.start for e in store.take_closed(59)] == [20]
    assert store.next_close_time() is None
