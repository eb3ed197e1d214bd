"""`KeyValueStore` over every engine: reads and ranges see the buffered writes merged with the
flushed ones, `discard` drops the buffer, `flush` writes the buffer and the checkpoint together,
keys are `str` only, and a value the codec cannot encode fails at `put`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamcore.computation.dsl_values import resolve_value_codec
from streamcore.errors import ArgumentTypeError, CodecError
from streamcore.state.engines import ENGINES, open_engine
from streamcore.state.engines.memory import MemoryEngine
from streamcore.state.store import KeyValueStore


@pytest.fixture(params=ENGINES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KeyValueStore[Any]]:
    engine = open_engine(request.param, tmp_path / "store", 5.0)
    yield KeyValueStore("counts", engine, resolve_value_codec("json", where="test"))
    engine.close()


def _checkpoint(store: KeyValueStore[Any], mark: bytes = b"cp") -> None:
    store.flush(store.changes(), mark)


def test_get_put_delete(store: KeyValueStore[Any]) -> None:
    assert store.get("a") is None
    store.put("a", {"n": 1})
    assert store.get("a") == {"n": 1}
    assert store.delete("a") == {"n": 1}
    assert store.get("a") is None
    assert store.delete("a") is None  # absent: None, no error
    store.put("b", 2)
    store.put("b", None)  # None deletes, as in Kafka Streams
    assert store.get("b") is None


def test_reads_see_flushed_and_buffered_writes(store: KeyValueStore[Any]) -> None:
    store.put_all([("a", 1), ("b", 2), ("c", 3)])
    _checkpoint(store)
    assert not store.dirty
    assert store.get("b") == 2  # from the engine
    assert store.delete("b") == 2  # a buffered delete of a flushed key
    store.put("c", 30)  # a buffered overwrite
    assert store.get("b") is None
    assert store.get("c") == 30
    assert store.engine.get(b"c") == b"3"  # the engine has not seen them yet
    assert store.dirty


def test_range_merges_buffered_writes_with_flushed_ones(store: KeyValueStore[Any]) -> None:
    store.put_all([("a", 1), ("b", 2), ("c", 3), ("e", 5)])
    _checkpoint(store)
    store.delete("b")  # buffered delete of a flushed key
    store.put("c", 30)  # buffered overwrite
    store.put("d", 4)  # buffered new key between flushed ones
    store.put("aa", 11)
    store.delete("zz")  # buffered delete of a key that never was
    expected = [("a", 1), ("aa", 11), ("c", 30), ("d", 4), ("e", 5)]
    assert list(store.range()) == expected
    assert list(store.all()) == expected
    assert list(store.range("aa", "d")) == [("aa", 11), ("c", 30)]
    assert list(store.range("b", "c")) == []  # only the deleted key was there
    assert list(store.range(None, "aa")) == [("a", 1)]
    assert list(store.range("d")) == [("d", 4), ("e", 5)]


def test_range_equals_a_model_over_random_writes_and_checkpoints(
    store: KeyValueStore[Any],
) -> None:
    import random

    rng = random.Random(7)
    model: dict[str, int] = {}
    keys = [f"k{i:02d}" for i in range(40)]
    for step in range(600):
        key = rng.choice(keys)
        if rng.random() < 0.3:
            store.put(key, None)
            model.pop(key, None)
        else:
            store.put(key, step)
            model[key] = step
        if step % 37 == 0:
            _checkpoint(store)
        if step % 11 == 0:
            lo, hi = sorted(rng.sample([*keys, "k", "kz"], 2))
            want = sorted((k, v) for k, v in model.items() if lo <= k < hi)
            assert list(store.range(lo, hi)) == want
            assert list(store.all()) == sorted(model.items())


def test_keys_are_ordered_by_their_utf8_bytes(store: KeyValueStore[Any]) -> None:
    store.put_all([("é", 1), ("z", 2), ("ab", 3), ("a", 4)])
    _checkpoint(store)
    store.put("日本", 5)
    store.put("abc", 6)
    assert [k for k, _ in store.range()] == ["a", "ab", "abc", "z", "é", "日本"]
    assert [k for k, _ in store.range("ab", "é")] == ["ab", "abc", "z"]


def test_writes_while_iterating_are_allowed_and_not_seen(store: KeyValueStore[Any]) -> None:
    store.put_all([("a", 1), ("b", 2)])
    _checkpoint(store)
    store.put("c", 3)
    seen = []
    for key, value in store.range():
        seen.append(key)
        store.put(key + "x", value)
        store.delete("c")
    assert seen == ["a", "b", "c"]
    assert [k for k, _ in store.range()] == ["a", "ax", "b", "bx", "cx"]


def test_approximate_count_counts_buffered_writes(store: KeyValueStore[Any]) -> None:
    store.put_all([("a", 1), ("b", 2), ("c", 3)])
    assert store.approximate_count() == 3  # buffered only
    _checkpoint(store)
    assert store.approximate_count() == 3
    store.delete("b")  # a flushed key deleted
    store.put("c", 33)  # overwritten: not a new key
    store.put("d", 4)  # a new key
    store.delete("never")  # a delete of an absent key changes nothing
    assert store.approximate_count() == 3


def test_discard_drops_the_buffered_writes(store: KeyValueStore[Any]) -> None:
    store.put("a", 1)
    _checkpoint(store)
    store.put("a", 2)
    store.put("b", 3)
    store.delete("a")
    store.discard()
    assert not store.dirty
    assert store.get("a") == 1
    assert store.get("b") is None
    assert list(store.range()) == [("a", 1)]


def test_flush_writes_the_changes_and_the_checkpoint(store: KeyValueStore[Any]) -> None:
    store.put("a", {"n": 1})
    store.put("b", [1, 2])
    changes = store.changes()
    assert changes == {b"a": b'{"n":1}', b"b": b"[1,2]"}
    store.flush(changes, b"checkpoint-1")
    assert store.engine.checkpoint() == b"checkpoint-1"
    assert store.engine.get(b"a") == b'{"n":1}'
    assert not store.dirty
    store.delete("a")
    assert store.changes() == {b"a": None}  # a delete is a None change
    _checkpoint(store, b"checkpoint-2")
    assert store.engine.get(b"a") is None
    assert store.engine.checkpoint() == b"checkpoint-2"
    assert list(store.range()) == [("b", [1, 2])]


@pytest.mark.parametrize("key", [1, b"a", None, ("a",), 1.5])
def test_non_str_keys_are_refused(store: KeyValueStore[Any], key: Any) -> None:
    with pytest.raises(ArgumentTypeError, match="must be a str"):
        store.put(key, 1)
    with pytest.raises(ArgumentTypeError):
        store.get(key)
    with pytest.raises(ArgumentTypeError):
        store.delete(key)
    if key is not None:  # None is "unbounded" for a range
        with pytest.raises(ArgumentTypeError):
            list(store.range(key))
    assert not store.dirty


@pytest.mark.parametrize("value", [{1, 2}, object(), float("nan")])
def test_a_value_the_codec_cannot_encode_fails_at_put(
    store: KeyValueStore[Any], value: Any
) -> None:
    with pytest.raises(CodecError, match="json"):
        store.put("a", value)
    assert not store.dirty  # nothing buffered: the checkpoint cannot fail on it later
    assert store.get("a") is None


def test_the_store_names_its_engine(store: KeyValueStore[Any]) -> None:
    kind = "MemoryEngine" if isinstance(store.engine, MemoryEngine) else "RocksDBEngine"
    assert repr(store) == f"KeyValueStore('counts', {kind})"


class _CountingEngine(MemoryEngine):
    """A memory engine that counts its reads: what the store's cache saves."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def get(self, key: bytes) -> bytes | None:
        self.reads += 1
        return super().get(key)


def test_hot_keys_are_read_from_the_cache_within_its_size() -> None:
    engine = _CountingEngine()
    engine.write({b"a": b"1", b"b": b"2", b"c": b"3"}, b"cp")
    store = KeyValueStore("counts", engine, resolve_value_codec("json", where="test"), cache=2)
    assert [store.get("zz"), store.get("zz"), store.get("a"), store.get("a")] == [None, None, 1, 1]
    assert engine.reads == 2  # the absence of "zz" is cached too
    store.put("a", 5)
    assert store.get("a") == 5 and engine.reads == 2
    store.get("b")  # a third key: the oldest one ("zz") leaves the cache
    store.get("zz")
    assert engine.reads == 4


def test_a_mutable_value_is_decoded_at_every_read(store: KeyValueStore[Any]) -> None:
    store.put("a", [1, 2])
    got = store.get("a")
    assert got == [1, 2]
    got.append(3)  # the caller's object, not the store's
    assert store.get("a") == [1, 2]
    _checkpoint(store)
    store.get("a").append(4)
    assert store.get("a") == [1, 2]


def test_a_written_value_is_read_back_through_its_codec_unless_json() -> None:
    schema = {"type": "record", "name": "Reading", "fields": [{"name": "v", "type": "float"}]}
    codec = resolve_value_codec("avro-binary", schema, where="test")
    store: KeyValueStore[Any] = KeyValueStore("readings", MemoryEngine(), codec)
    store.put("a", {"v": 0.1})
    assert store.get("a") == {"v": codec.decode(codec.encode({"v": 0.1}))["v"]} != {"v": 0.1}
    floats = KeyValueStore("f", MemoryEngine(), resolve_value_codec("bytes", where="test"))
    floats.put("a", "text")  # the bytes codec takes a str: what it stores is its UTF-8
    assert floats.get("a") == b"text"
    engine = _CountingEngine()
    raw = KeyValueStore("raw", engine, resolve_value_codec("bytes", where="test"))
    raw.put("b", b"\x00\x01")  # bytes decode to themselves: cached as written
    assert raw.get("b") == b"\x00\x01" and engine.reads == 0


def test_a_rolled_back_or_discarded_write_is_not_read_from_the_cache(
    store: KeyValueStore[Any],
) -> None:
    store.put("a", 1)
    _checkpoint(store)
    journal: list[Any] = []
    store.journal = journal
    assert store.get("a") == 1
    store.put("a", 2)
    store.put("b", 7)
    assert store.get("a") == 2
    while journal:  # what the runner does to a failed record's effects
        journal.pop().pop()
    assert (store.get("a"), store.get("b")) == (1, None)
    assert not store.dirty
    store.put("a", 3)
    assert store.get("a") == 3
    store.discard()
    assert store.get("a") == 1


def test_put_raw_all_writes_bytes_stores_only(store: KeyValueStore[Any]) -> None:
    with pytest.raises(ArgumentTypeError, match="put_all"):
        store.put_raw_all([("a", b"1")])  # a JSON store encodes its values
    raw = KeyValueStore("raw", MemoryEngine(), resolve_value_codec("bytes", where="test"))
    raw.put_raw_all([("a", b"1"), ("b", b"2")])
    assert list(raw.all()) == [("a", b"1"), ("b", b"2")]
    with pytest.raises(ArgumentTypeError, match="bytes values"):
        raw.put_raw_all([("c", "3")])  # type: ignore[list-item]


def test_delete_all_deletes_without_reading_and_is_undone_by_the_journal(
    store: KeyValueStore[Any],
) -> None:
    store.put_all([("a", 1), ("b", 2), ("c", 3)])
    store.flush(store.changes(), b"cp")
    assert store.get("a") == 1  # in the read cache
    journal: list[Any] = []
    store.journal = journal
    store.delete_all(["a", "b", "z"])
    assert (store.get("a"), store.get("b"), store.get("c"), store.get("z")) == (None, None, 3, None)
    assert store.changes() == {b"a": None, b"b": None, b"z": None}
    while journal:  # a failed record's effects undone
        journal.pop().pop()
    assert list(store.all()) == [("a", 1), ("b", 2), ("c", 3)]
    with pytest.raises(ArgumentTypeError, match="must be a str"):
        store.delete_all([1])  # type: ignore[list-item]
