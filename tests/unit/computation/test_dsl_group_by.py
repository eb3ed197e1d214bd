"""`Stream.group_by`: a re-key, a repartition through `<computation>-repartition` (created with
the input's partition count) and a grouped aggregation, against a plain-Python reference on the
TopologyTestDriver and on the real StreamProcessor on the local log."""

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
from streamcore.log.local.manager import LocalLogManager
from streamcore.record import Record

IN, OUT = "shop/orders", "shop/per-customer"
REPARTITION = "shop/orders-dsl-repartition"


def orders(n: int, seed: int = 28) -> list[tuple[str, dict[str, Any]]]:
    rng = random.Random(seed)
    return [(f"o{i}", {"customer": f"c{rng.randrange(9)}"}) for i in range(n)]


def reference(pairs: list[tuple[str, dict[str, Any]]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for _, value in pairs:
        counts[value["customer"]] = counts.get(value["customer"], 0) + 1
    return counts


def latest(records: list[Record]) -> dict[str, Any]:
    return {r.key: json.loads(r.data) for r in records}


def by_customer() -> Topology:
    builder = Topology.builder()
    builder.stream(IN, codec="json").group_by(lambda k, v: v["customer"]).count().to_stream().to(
        OUT
    )
    return builder.build()


def test_a_group_by_count_equals_the_reference() -> None:
    pairs = orders(400)
    topology = by_customer()
    with TopologyTestDriver(topology, Settings().set_partitions(IN, 3)) as driver:
        driver.pipe_records(IN, [Record(k, json.dumps(v).encode()) for k, v in pairs])
        out = driver.read_output(OUT)
        assert latest(out) == reference(pairs)
        assert len(out) == len(pairs)  # one update per record
        # The records moved to their new key's partition: each key in one partition only.
        partitions: dict[str, set[int]] = {}
        for p in range(driver.manager.size(REPARTITION)):
            with driver.manager.tailer("test/check", [_part(p)], get_codec("avro")) as tailer:
                for item in tailer:
                    partitions.setdefault(item.message.key, set()).add(p)
        assert len(partitions) == 9 and all(len(ps) == 1 for ps in partitions.values())


def _part(p: int) -> Any:
    from streamcore.log import LogPartition

    return LogPartition.of(REPARTITION, p)


def test_the_repartition_stream_is_named_after_the_computation_with_the_input_count() -> None:
    topology = by_customer()
    assert topology.partitions_copied_from(REPARTITION) == IN
    assert topology.readers(REPARTITION) == [f"{REPARTITION}-dsl"]
    with TopologyTestDriver(topology, Settings().set_partitions(IN, 5)) as driver:
        assert driver.manager.size(REPARTITION) == 5
    # An explicit count for the repartition stream wins over the input's.
    settings = Settings().set_partitions(IN, 5).set_partitions(REPARTITION, 2)
    with TopologyTestDriver(topology, settings) as driver:
        assert driver.manager.size(REPARTITION) == 2
    # name= and name= of the source's computation both go into the stream's name.
    builder = Topology.builder()
    builder.stream(IN, codec="json", name="shop/enrich").group_by(
        lambda k, v: v["customer"], name="by_customer"
    ).count().to_stream().to(OUT)
    assert builder.build().partitions_copied_from("shop/enrich-by_customer-repartition") == IN


def test_two_group_bys_of_one_computation_need_names() -> None:
    builder = Topology.builder()
    source = builder.stream(IN, codec="json")
    source.group_by(lambda k, v: v["customer"]).count().to_stream().to(OUT)
    source.group_by(lambda k, v: v["shop"]).count().to_stream().to("shop/per-shop")
    with pytest.raises(DslDefinitionError, match=r"own\s+name="):
        builder.build()
    builder = Topology.builder()
    source = builder.stream(IN, codec="json")
    source.group_by(lambda k, v: v["customer"], name="customer").count().to_stream().to(OUT)
    source.group_by(lambda k, v: v["shop"], name="shop").count().to_stream().to("shop/per-shop")
    topology = builder.build()
    assert topology.partitions_copied_from("shop/orders-dsl-customer-repartition") == IN
    assert topology.partitions_copied_from("shop/orders-dsl-shop-repartition") == IN


def test_bad_group_by_arguments_name_the_chain() -> None:
    source = Topology.builder().stream(IN, codec="json")
    with pytest.raises(NotCallableError, match="group_by"):
        source.group_by("customer")  # type: ignore[arg-type]
    with pytest.raises(DslDefinitionError, match="must be a word"):
        source.group_by(lambda k, v: k, name="a/b")


def test_a_group_by_count_on_the_stream_processor_on_the_local_log(tmp_path: Path) -> None:
    manager = LocalLogManager(tmp_path / "log", config=make_config(tmp_path))
    pairs = orders(300, seed=3)
    settings = Settings(drain_quiet=0.3, state_dir=tmp_path / "state")
    manager.create(IN, 3)  # the settings' default is 1: the repartition stream copies the 3
    with manager.appender(IN, get_codec("avro")) as appender:
        appender.append_batch([(k, Record(k, json.dumps(v).encode())) for k, v in pairs])
    with StreamProcessor(manager, by_customer(), settings) as processor:
        assert processor.drain_and_stop(60)
    assert manager.size(REPARTITION) == 3
    with manager.tailer("test/reader", OUT, get_codec("avro")) as tailer:
        assert latest([item.message for item in tailer]) == reference(pairs)
    manager.close()
