"""`WindowCache` against its store without a cache (`aggregate_windowed`, then the store's
`take_closed_and_expire`): the same closed windows in the same order, whether they are taken
from the cache (windows the store has none of but those written from it) or read from the store
(the windows of before a restart), across checkpoints, a restart from a checkpoint and records
undone after they closed windows."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from streamcore.codecs.json_codec import JsonCodec
from streamcore.computation.dsl_values import resolve_value_codec
from streamcore.state.engines import ENGINES, open_engine
from streamcore.state.engines.memory import MemoryEngine
from streamcore.state.store import KeyValueStore
from streamcore.state.windows import (
    HoppingWindows,
    TimeWindowSpec,
    TimeWindowStore,
    TumblingWindows,
    WindowCache,
    aggregate_windowed,
)

KEYS = ["a", "a\x00", "a\x00\x01b", "ab", "b", "é", "日本", ""]
UNKNOWN = -(1 << 63)


def plus_one(key: str, value: Any, count: int) -> int:
    return count + 1


def events(seed: int, n: int = 600) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    return [(rng.choice(KEYS), 10_000 + i * 50 + rng.randrange(-400, 400)) for i in range(n)]


def reference(spec: TimeWindowSpec, input: list[tuple[str, int]]) -> list[tuple[Any, ...]]:
    kv = KeyValueStore("ref", MemoryEngine(), resolve_value_codec("bytes", where="test"))
    store = TimeWindowStore(kv, spec, JsonCodec())
    out: list[tuple[Any, ...]] = []
    now = UNKNOWN
    for key, t in input:
        now = max(now, t)
        aggregate_windowed(store, key, 1, t, now, int, plus_one)
        out += store.take_closed_and_expire(now)
    return out


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    "spec", [TumblingWindows(1_000, grace_ms=300), HoppingWindows(1_000, 500, grace_ms=0)]
)
@pytest.mark.parametrize("seed", [1, 2])
def test_closed_windows_from_the_cache_or_the_store_are_the_uncached_ones(
    tmp_path: Path, engine: str, spec: TimeWindowSpec, seed: int
) -> None:
    rng = random.Random(seed)
    input = events(seed)
    engine_ = open_engine(engine, tmp_path / "store", 5.0)
    try:

        def open_cache(stored_until: int) -> tuple[KeyValueStore[Any], WindowCache]:
            kv = KeyValueStore("windows", engine_, resolve_value_codec("bytes", where="test"))
            kv.journal = []
            return kv, WindowCache(TimeWindowStore(kv, spec, JsonCodec()), stored_until)

        kv, cache = open_cache(UNKNOWN)
        out: list[tuple[Any, ...]] = []
        checkpoint = (0, UNKNOWN, 0)  # (next event, stream time, results sent) at the last one
        restarted = False
        i, now = 0, UNKNOWN
        while i < len(input):
            key, t = input[i]
            now = max(now, t)
            mark = len(kv.journal)  # type: ignore[arg-type]
            cache.aggregate(key, 1, t, now, int, plus_one, False)
            if now >= cache.due():
                taken = cache.take_closed(now)
                if rng.random() < 0.3:  # the record fails after closing them: undone, retried
                    journal = kv.journal
                    while len(journal) > mark:  # type: ignore[arg-type]
                        journal.pop().pop()  # type: ignore[union-attr]
                    cache.aggregate(key, 1, t, now, int, plus_one, False)
                    assert now >= cache.due()
                    assert cache.take_closed(now) == taken
                out += taken
            i += 1
            if rng.random() < 0.05:
                kv.prepare_checkpoint()
                kv.flush(kv.changes(), b"cp")
                kv.journal.clear()  # type: ignore[union-attr]
                checkpoint = (i, now, len(out))
            if not restarted and i == len(input) // 2:
                # A crash: the store as of the last checkpoint, its stream time, and the
                # records after it again; the windows sent since are sent again.
                restarted = True
                i, now, sent = checkpoint
                del out[sent:]
                kv, cache = open_cache(now)
        assert out == reference(spec, input)
        assert len(out) > 100
    finally:
        engine_.close()
