"""Grouping, aggregations and tables in the DSL (streamcore.computation.dsl_aggregate), against
references computed in plain Python over the same input, through the TopologyTestDriver and on
the real StreamProcessor with a restart."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from log_fixtures import make_config

from streamcore.computation import (
    ComputationPolicy,
    Settings,
    StreamProcessor,
    Topology,
    TopologyTestDriver,
)
from streamcore.computation.errors import DslDefinitionError, NotCallableError
from streamcore.errors import TopologyError
from streamcore.log.local.manager import LocalLogManager
from streamcore.record import Record
from streamcore.state.spec import StoreSpec

IN, OUT = "shop/orders", "shop/out"


def js(value: Any) -> bytes:
    return json.dumps(value).encode()


def inputs(n: int, seed: int = 28) -> list[tuple[str, Any]]:
    rng = random.Random(seed)
    out: list[tuple[str, Any]] = []
    for _ in range(n):
        key = f"c{rng.randrange(7)}"
        out.append((key, None if rng.random() < 0.1 else {"qty": rng.randrange(1, 5)}))
    return out


def latest(records: list[Record]) -> dict[str, Any]:
    """The last value emitted per key."""
    return {r.key: json.loads(r.data) for r in records}


def piped(topology: Topology, pairs: list[tuple[str, Any]], settings: Settings | None = None):
    driver = TopologyTestDriver(topology, settings or Settings().set_partitions(IN, 3))
    driver.pipe_records(IN, [Record(k, js(v)) for k, v in pairs])
    return driver


def test_count_reduce_and_aggregate_equal_the_reference_per_key() -> None:
    pairs = inputs(300)
    builder = Topology.builder()
    grouped = builder.stream(IN, codec="json").group_by_key()
    grouped.count().to_stream().to("shop/counts")
    grouped.reduce(lambda agg, v: {"qty": agg["qty"] + v["qty"]}).to_stream().to("shop/sums")
    grouped.aggregate(
        lambda: [], lambda k, v, agg: [*agg, v["qty"]][-3:], store="last3"
    ).to_stream().to("shop/last3")
    with piped(builder.build(), pairs) as driver:
        counts: dict[str, int] = {}
        sums: dict[str, int] = {}
        last3: dict[str, list[int]] = {}
        updates = 0
        for key, value in pairs:
            if value is None:  # ignored by aggregations, as in Kafka Streams
                continue
            updates += 1
            counts[key] = counts.get(key, 0) + 1
            sums[key] = sums.get(key, 0) + value["qty"]
            last3[key] = [*last3.get(key, []), value["qty"]][-3:]
        emitted = driver.read_output("shop/counts")
        assert latest(emitted) == counts
        assert {k: v["qty"] for k, v in latest(driver.read_output("shop/sums")).items()} == sums
        assert latest(driver.read_output("shop/last3")) == last3
        assert len(emitted) == updates  # one update per record
        name = "shop/orders-dsl"
        stored = {}
        for task in range(3):
            stored.update(driver.get_key_value_store(name, "count", task).all())
        assert stored == counts


def test_table_filter_emits_tombstones_and_map_values_keeps_them() -> None:
    builder = Topology.builder()
    counts = builder.stream(IN, codec="json").group_by_key().count()
    counts.filter(lambda k, n: n % 2 == 1).map_values(lambda n: n * 10).to_stream().to(OUT)
    pairs = [("a", 1), ("a", 1), ("b", 1), ("a", 1)]
    with piped(builder.build(), pairs, Settings()) as driver:
        got = [(r.key, json.loads(r.data)) for r in driver.read_output(OUT)]
        assert got == [("a", 10), ("a", None), ("b", 10), ("a", 30)]


def test_to_table_keeps_the_latest_value_and_none_deletes() -> None:
    builder = Topology.builder()
    builder.table(IN, codec="json", store="prices").to_stream().to(OUT)
    pairs = [("a", 1), ("b", 2), ("a", 3), ("b", None)]
    with piped(builder.build(), pairs, Settings()) as driver:
        assert dict(driver.get_key_value_store("shop/orders-dsl", "prices").all()) == {"a": 3}
        assert [json.loads(r.data) for r in driver.read_output(OUT)] == [1, 2, 3, None]


def test_a_retried_record_is_aggregated_once() -> None:
    failed: set[str] = set()

    def flaky(key: str, value: Any, total: int) -> int:
        if key not in failed:
            failed.add(key)
            raise RuntimeError("once per key")
        return total + value

    builder = Topology.builder()
    builder.stream(IN, codec="json").group_by_key().aggregate(int, flaky).to_stream().to(OUT)
    settings = Settings().set_policy(
        "shop/orders-dsl", ComputationPolicy(max_retries=2, delay=0.0, max_delay=0.0)
    )
    with piped(builder.build(), [("a", 1), ("b", 2), ("a", 3)], settings) as driver:
        assert latest(driver.read_output(OUT)) == {"a": 4, "b": 2}
        assert dict(driver.get_key_value_store("shop/orders-dsl", "aggregate").all()) == {
            "a": 4,
            "b": 2,
        }


def test_bad_arguments_name_the_chain_and_the_fix() -> None:
    grouped = Topology.builder().stream(IN, codec="json").group_by_key()
    with pytest.raises(NotCallableError, match=r"group_by_key\(\).reduce"):
        grouped.reduce(42)  # type: ignore[arg-type]
    with pytest.raises(NotCallableError, match="lambda: 0"):
        grouped.aggregate("zero", lambda k, v, a: a)  # type: ignore[arg-type]
    with pytest.raises(DslDefinitionError, match="store= takes a store name or a StoreSpec"):
        grouped.count(store=3)  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="is not valid"):
        grouped.count(store="no-dash")


def test_two_aggregations_of_one_computation_need_their_own_store_names() -> None:
    builder = Topology.builder()
    grouped = builder.stream(IN, codec="json").group_by_key()
    grouped.count().to_stream().to("shop/a")
    grouped.count().to_stream().to("shop/b")
    with pytest.raises(DslDefinitionError, match="'count'"):
        builder.build()
    builder = Topology.builder()
    grouped = builder.stream(IN, codec="json").group_by_key()
    grouped.count().to_stream().to("shop/a")
    grouped.count(store="count_b").to_stream().to("shop/b")
    with piped(builder.build(), [("k", 1), ("k", 2)], Settings()) as driver:
        assert latest(driver.read_output("shop/a")) == latest(driver.read_output("shop/b"))


def test_a_count_survives_a_restart_on_the_local_log(tmp_path: Path) -> None:
    manager = LocalLogManager(tmp_path / "log", config=make_config(tmp_path))
    builder = Topology.builder()
    builder.stream(IN, codec="json").group_by_key().count(
        store=StoreSpec("count", engine="rocksdb")
    ).to_stream().to(OUT)
    topology = builder.build()
    settings = Settings(drain_quiet=0.3, state_dir=tmp_path / "state").set_partitions(IN, 2)
    pairs = inputs(200, seed=5)
    expected: dict[str, int] = {}
    for key, value in pairs:
        if value is not None:
            expected[key] = expected.get(key, 0) + 1
    manager.create(IN, 2)
    appender = manager.appender(IN, settings_codec())
    appender.append_batch([(k, Record(k, js(v))) for k, v in pairs[:100]])
    with StreamProcessor(manager, topology, settings) as first:
        assert first.drain_and_stop(60)
    appender.append_batch([(k, Record(k, js(v))) for k, v in pairs[100:]])
    with StreamProcessor(manager, topology, settings) as second:
        assert second.drain_and_stop(60)
    with manager.tailer("test/reader", OUT, settings_codec()) as tailer:
        assert latest([rec.message for rec in tailer]) == expected
    manager.close()


def settings_codec():
    from streamcore.codecs import get_codec

    return get_codec("avro")
