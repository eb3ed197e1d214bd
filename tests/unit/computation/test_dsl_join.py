"""Stream-table joins in the DSL (`Stream.join` / `left_join`, streamcore.computation.dsl_join)
on the TopologyTestDriver, against a reference computed in plain Python over the same input:
records before and after the table's value arrives, table updates and deletes, a table from an
aggregation, the co-partitioning check and the definitions refused."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from log_fixtures import make_config

from streamcore.codecs import get_codec
from streamcore.computation import Settings, StreamProcessor, Topology, TopologyTestDriver
from streamcore.computation.errors import DslDefinitionError, NotCallableError
from streamcore.errors import TopologyError
from streamcore.log.local.manager import LocalLogManager
from streamcore.record import Record
from streamcore.watermark import Watermark

ORDERS, CUSTOMERS, OUT = "shop/orders", "shop/customers", "shop/enriched"


def js(value: Any) -> bytes:
    return json.dumps(value).encode()


def events(n: int, seed: int = 28) -> list[tuple[str, str, Any]]:
    """(stream, key, value): orders and customer updates (None deletes) of 6 customers."""
    rng = random.Random(seed)
    out: list[tuple[str, str, Any]] = []
    for i in range(n):
        key = f"c{rng.randrange(6)}"
        if rng.random() < 0.3:
            value = None if rng.random() < 0.25 else {"name": f"n{i}"}
            out.append((CUSTOMERS, key, value))
        else:
            out.append((ORDERS, key, {"order": i}))
    return out


def joiner(order: dict[str, Any], customer: dict[str, Any] | None) -> dict[str, Any]:
    return {**order, "name": None if customer is None else customer["name"]}


def reference(items: list[tuple[str, str, Any]], left: bool) -> list[tuple[str, Any]]:
    table: dict[str, Any] = {}
    out: list[tuple[str, Any]] = []
    for stream, key, value in items:
        if stream == CUSTOMERS:
            table[key] = value
        elif key in table and table[key] is not None:
            out.append((key, joiner(value, table[key])))
        elif left:
            out.append((key, joiner(value, None)))
    return out


def join_topology(left: bool) -> Topology:
    builder = Topology.builder()
    customers = builder.table(CUSTOMERS, codec="json")
    orders = builder.stream(ORDERS, codec="json")
    joined = orders.left_join(customers, joiner) if left else orders.join(customers, joiner)
    joined.to(OUT)
    return builder.build()


def settings(orders: int = 3, customers: int = 3) -> Settings:
    return Settings().set_partitions(ORDERS, orders).set_partitions(CUSTOMERS, customers)


def run(topology: Topology, items: list[tuple[str, str, Any]]) -> list[tuple[str, Any]]:
    with TopologyTestDriver(topology, settings()) as driver:
        for t, (stream, key, value) in enumerate(items):
            driver.pipe(stream, key, js(value), timestamp_ms=1_000 + t)
        return [(r.key, json.loads(r.data)) for r in driver.read_output(OUT)]


@pytest.mark.parametrize("left", [False, True], ids=["join", "left_join"])
def test_a_stream_table_join_equals_the_reference(left: bool) -> None:
    items = events(400)
    assert run(join_topology(left), items) == reference(items, left)


def test_records_before_and_after_the_table_value_updates_and_deletes() -> None:
    items = [
        (ORDERS, "c1", {"order": 1}),  # no customer yet: dropped / joined with None
        (CUSTOMERS, "c1", {"name": "Ada"}),
        (ORDERS, "c1", {"order": 2}),
        (CUSTOMERS, "c1", {"name": "Ada L."}),  # an update: later orders see it
        (ORDERS, "c1", {"order": 3}),
        (CUSTOMERS, "c1", None),  # a delete
        (ORDERS, "c1", {"order": 4}),
        (ORDERS, "c2", None),  # a None stream value: never joined
    ]
    assert run(join_topology(False), items) == [
        ("c1", {"order": 2, "name": "Ada"}),
        ("c1", {"order": 3, "name": "Ada L."}),
    ]
    assert run(join_topology(True), items) == [
        ("c1", {"order": 1, "name": None}),
        ("c1", {"order": 2, "name": "Ada"}),
        ("c1", {"order": 3, "name": "Ada L."}),
        ("c1", {"order": 4, "name": None}),
    ]


def test_the_stream_and_the_table_run_in_one_computation_reading_both() -> None:
    topology = join_topology(False)
    assert topology.computation_names() == ["shop/orders-dsl"]
    assert topology.input_streams("shop/orders-dsl") == [ORDERS, CUSTOMERS]
    assert [spec.name for spec in topology.stores("shop/orders-dsl")] == ["table"]


def test_a_join_with_an_aggregated_table() -> None:
    clicks = "shop/clicks"
    builder = Topology.builder()
    counts = builder.stream(clicks, codec="json").group_by_key().count()
    builder.stream(ORDERS, codec="json").join(counts, lambda order, n: {**order, "clicks": n}).to(
        OUT
    )
    topology = builder.build()
    expected = []
    seen: dict[str, int] = {}
    rng = random.Random(7)
    with TopologyTestDriver(topology, settings().set_partitions(clicks, 3)) as driver:
        for t in range(300):
            key = f"c{rng.randrange(5)}"
            if rng.random() < 0.5:
                driver.pipe(clicks, key, js({"page": t}), timestamp_ms=t)
                seen[key] = seen.get(key, 0) + 1
            else:
                driver.pipe(ORDERS, key, js({"order": t}), timestamp_ms=t)
                if key in seen:
                    expected.append((key, {"order": t, "clicks": seen[key]}))
        assert [(r.key, json.loads(r.data)) for r in driver.read_output(OUT)] == expected


def test_the_joined_streams_must_be_co_partitioned() -> None:
    with pytest.raises(TopologyError) as raised:
        TopologyTestDriver(join_topology(False), settings(orders=3, customers=2))
    message = str(raised.value)
    assert "shop/orders has 3" in message and "shop/customers has 2" in message
    assert "group_by" in message and "through" in message


def test_definitions_refused_name_the_fix() -> None:
    builder = Topology.builder()
    customers = builder.table(CUSTOMERS, codec="json")
    orders = builder.stream(ORDERS, codec="json")
    with pytest.raises(DslDefinitionError, match="expected a Table"):
        orders.join("shop/customers", joiner)  # type: ignore[arg-type]
    with pytest.raises(NotCallableError, match="join"):
        orders.join(customers, "name")  # type: ignore[arg-type]
    with pytest.raises(DslDefinitionError, match=r"to_table\(store="):
        orders.join(customers.map_values(lambda v: v), joiner)
    builder = Topology.builder()
    named = builder.table(CUSTOMERS, codec="json", name="shop/customers-table")
    builder.stream(ORDERS, codec="json").join(named, joiner).to(OUT)
    with pytest.raises(DslDefinitionError, match="is not used"):
        builder.build()
    builder = Topology.builder()
    table = builder.table(CUSTOMERS, codec="json")
    builder.stream(ORDERS, codec="json").join(table, joiner).to(OUT)
    builder.stream("shop/returns", codec="json").join(table, joiner).to(OUT)
    with pytest.raises(DslDefinitionError, match="two computations"):
        builder.build()


def test_both_sides_are_taken_in_timestamp_order() -> None:
    """The order and then an older customer update are both in the log when the task reads:
    stream time synchronization applies the update (timestamp 1000) before it joins the order
    (timestamp 2000), though the order was appended first."""
    from streamcore.codecs import get_codec

    with TopologyTestDriver(join_topology(False), settings(1, 1)) as driver:
        codec = get_codec(driver.settings.codec(ORDERS))
        for stream, value, ts in (
            (ORDERS, {"order": 1}, 2_000),
            (CUSTOMERS, {"name": "Ada"}, 1_000),
        ):
            with driver.manager.appender(stream, codec) as appender:
                record = Record("c1", js(value), Watermark.of(ts).value)
                appender.append_batch([("c1", record)])
        driver.advance_time(0)
        assert [json.loads(r.data) for r in driver.read_output(OUT)] == [
            {"order": 1, "name": "Ada"}
        ]


def test_a_join_on_the_stream_processor_on_the_local_log(tmp_path: Path) -> None:
    """The two-input DSL computation on the real processor: the table is built by a first run
    (its store checkpointed, its changelog written), restored by a second one that joins."""
    manager = LocalLogManager(tmp_path / "log", config=make_config(tmp_path))
    codec = get_codec("avro")
    settings = Settings(drain_quiet=0.3, state_dir=tmp_path / "state")
    topology = join_topology(True)
    manager.create(ORDERS, 2)
    manager.create(CUSTOMERS, 2)
    table = {f"c{i}": {"name": f"n{i}"} for i in range(0, 6, 2)}
    with manager.appender(CUSTOMERS, codec) as appender:
        appender.append_batch([(k, Record(k, js(v))) for k, v in table.items()])
    with StreamProcessor(manager, topology, settings) as first:
        assert first.drain_and_stop(60)
    orders = [(f"c{i % 6}", {"order": i}) for i in range(60)]
    with manager.appender(ORDERS, codec) as appender:
        appender.append_batch([(k, Record(k, js(v))) for k, v in orders])
    with StreamProcessor(manager, topology, settings) as second:
        assert second.drain_and_stop(60)
    with manager.tailer("test/reader", OUT, codec) as tailer:
        out = [(item.message.key, json.loads(item.message.data)) for item in tailer]
    expected = [(k, joiner(v, table.get(k))) for k, v in orders]
    assert sorted(out, key=repr) == sorted(expected, key=repr)
    manager.close()
