"""DSL topologies and processors run by the real StreamProcessor on every log backend (memory,
local, and Kafka on the local broker through the `manager` fixture)."""

from __future__ import annotations

import json
import time

import pytest

from streamcore.codecs import get_codec
from streamcore.computation import (
    ComputationPolicy,
    Processor,
    Settings,
    StreamProcessor,
    Topology,
)
from streamcore.computation.dlq import DeadLetter
from streamcore.log import LogManager
from streamcore.record import Record

RECORDS = get_codec("avro")
N = 300


def fill(manager: LogManager, stream: str, items: list[tuple[str, object]], partitions=2) -> None:
    manager.create(stream, partitions)
    with manager.appender(stream, RECORDS) as appender:
        appender.append_batch(
            [(key, Record.of(key, json.dumps(value).encode())) for key, value in items]
        )


def read_all(manager: LogManager, stream: str, expected: int) -> list[Record]:
    """Every record of `stream` (waits up to 20 s for `expected` of them, then for no more)."""
    out: list[Record] = []
    with manager.tailer("test/reader", stream, RECORDS) as tailer:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            item = tailer.read(timeout=0.5 if len(out) >= expected else 2.0)
            if item is None:
                if len(out) >= expected:
                    break
                continue
            out.append(item.message)
    return out


def settings() -> Settings:
    return Settings(default_partitions=2, read_batch=50, drain_quiet=0.2)


def test_a_dsl_topology_with_through_on_every_backend(manager):
    orders = [(f"o{i}", {"customer": f"c{i % 7}", "qty": i % 4, "price": i}) for i in range(N)]
    fill(manager, "test/orders", orders)
    builder = Topology.builder()
    source = builder.stream("test/orders", codec="json")
    big, small = (
        source.filter(lambda k, v: v["qty"] > 0)
        .map_values(lambda v: {**v, "total": v["qty"] * v["price"]})
        .branch(lambda k, v: v["total"] >= 300, lambda k, v: True)
    )
    big.to("test/big")
    small.through("test/small").map(lambda k, v: (v["customer"], v)).to("test/by-customer")
    processor = StreamProcessor(manager, builder.build(), settings())
    processor.start()
    assert processor.drain_and_stop(60)

    kept = [(k, v) for k, v in orders if v["qty"] > 0]
    expect_big = {k for k, v in kept if v["qty"] * v["price"] >= 300}
    expect_small = {k for k, _ in kept} - expect_big
    big_out = read_all(manager, "test/big", len(expect_big))
    assert {r.key for r in big_out} == expect_big
    assert len(big_out) == len(expect_big)
    by_customer = read_all(manager, "test/by-customer", len(expect_small))
    assert len(by_customer) == len(expect_small)
    for record in by_customer:
        value = json.loads(record.data)
        assert record.key == value["customer"]
        assert value["total"] == value["qty"] * value["price"] < 300
    for group, stream in (("test/orders-dsl", "test/orders"), ("test/small-dsl", "test/small")):
        assert manager.lag(stream, group).lag == 0


class CountPerKey(Processor):
    """Counts records per key in memory; emits the counts and commits on each punctuation."""

    interval_ms = 100

    def init(self, context) -> None:
        self.context = context
        self.counts: dict[str, int] = {}
        context.schedule(self.interval_ms)

    def process(self, key, value) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1

    def punctuate(self, timestamp) -> None:
        for key, count in sorted(self.counts.items()):
            self.context.forward(key, {"count": count})
        self.counts.clear()
        self.context.commit()


class CountPerKeyHourly(CountPerKey):
    interval_ms = 3_600_000


def counting_topology(processor: type[Processor]) -> Topology:
    return (
        Topology.builder()
        .add_processor(
            "test/counter",
            processor,
            inputs=["test/clicks"],
            outputs=["test/counts"],
            codec="json",
            auto_commit=False,
        )
        .build()
    )


@pytest.mark.parametrize("backend", ["memory", "local"], indirect=True)
def test_a_processor_commits_only_what_it_emitted_and_a_restart_recounts_the_rest(manager):
    clicks = [(f"user{i % 5}", {"n": i}) for i in range(N)]
    fill(manager, "test/clicks", clicks)

    first = StreamProcessor(manager, counting_topology(CountPerKeyHourly), settings())
    first.start()
    deadline = time.monotonic() + 30
    while sum(s.processed for s in first.unit_stats()) < N and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sum(s.processed for s in first.unit_stats()) == N
    assert first.stop(30)
    # Counted in memory but never emitted, so never committed: everything is still to do.
    assert manager.lag("test/clicks", "test/counter").lag == N
    assert read_all(manager, "test/counts", 0) == []

    second = StreamProcessor(manager, counting_topology(CountPerKey), settings())
    second.start()
    assert second.drain_and_stop(60)
    totals: dict[str, int] = {}
    for record in read_all(manager, "test/counts", 5):
        totals[record.key] = totals.get(record.key, 0) + json.loads(record.data)["count"]
    assert totals == {f"user{u}": N // 5 for u in range(5)}
    assert manager.lag("test/clicks", "test/counter").lag == 0


def test_bad_records_of_a_dsl_chain_are_dead_lettered_on_every_backend(manager):
    items = [(f"k{i}", {"n": i}) for i in range(20)]
    fill(manager, "test/numbers", items, partitions=1)
    with manager.appender("test/numbers", RECORDS) as appender:
        appender.append("bad", Record.of("bad", b"{not json"))
        appender.append("zero", Record.of("zero", b'{"n": 0}'))
        appender.append("last", Record.of("last", b'{"n": 5}'))
    builder = Topology.builder()
    source = builder.stream("test/numbers", codec="json")
    source.filter(lambda k, v: k != "k0").map_values(lambda v: {"inverse": 1 / v["n"]}).to(
        "test/inverses"
    )
    policy = ComputationPolicy(max_retries=1, delay=0.01, max_delay=0.01, dlq="test/dlq")
    processor = StreamProcessor(
        manager, builder.build(), settings().set_policy("test/numbers-dsl", policy)
    )
    processor.start()
    assert processor.drain_and_stop(60)
    assert len(read_all(manager, "test/inverses", 20)) == 20
    dead = [DeadLetter.of(r) for r in read_all(manager, "test/dlq", 2)]
    assert [(d.record.key, d.error_type, d.attempts) for d in dead] == [
        ("bad", "CodecError", 2),
        ("zero", "ZeroDivisionError", 2),
    ]
    assert {d.stream for d in dead} == {"test/numbers"}
    assert manager.lag("test/numbers", "test/numbers-dsl").lag == 0


@pytest.mark.parametrize("backend", ["memory", "local"], indirect=True)
def test_a_dsl_computation_with_two_threads_processes_every_record_once(manager):
    items = [(f"k{i}", i) for i in range(N)]
    fill(manager, "test/in", items, partitions=4)
    builder = Topology.builder()
    source = builder.stream("test/in", codec="json")
    source.map_values(lambda v: v * 10).to("test/out")
    processor = StreamProcessor(
        manager, builder.build(), settings().set_concurrency("test/in-dsl", 2)
    )
    processor.start()
    assert processor.drain_and_stop(60)
    out = read_all(manager, "test/out", N)
    assert sorted(json.loads(r.data) for r in out) == [i * 10 for i in range(N)]
    assert len(processor.unit_stats("test/in-dsl")) == 2


class StoreCount(Processor):
    """Counts records per key in the store `counts` and forwards the new count."""

    def init(self, context) -> None:
        self.context = context

    def process(self, key, value) -> None:
        store = self.context.get_state_store("counts")
        count = (store.get(key) or 0) + 1
        store.put(key, count)
        self.context.forward(key, count)


def store_count_topology() -> Topology:
    builder = Topology.builder()
    (
        builder.stream("test/clicks", codec="json")
        .select_key(lambda k, v: f"user{v['n'] % 5}")
        .through("test/by-user")
        .process(StoreCount, stores=["counts"])
        .map_values(lambda count: {"count": count})
        .to("test/counts")
    )
    return builder.build()


@pytest.mark.parametrize("backend", ["memory", "local"], indirect=True)
def test_a_process_step_counts_in_its_store_and_a_second_run_goes_on_from_it(manager, tmp_path):
    fill(manager, "test/clicks", [(f"c{i}", {"n": i}) for i in range(N)])
    run_settings = Settings(
        default_partitions=2, read_batch=50, drain_quiet=0.2, state_dir=tmp_path / "state"
    )
    first = StreamProcessor(manager, store_count_topology(), run_settings)
    first.start()
    assert first.drain_and_stop(60)
    with manager.appender("test/clicks", RECORDS) as appender:
        appender.append_batch(
            [(f"d{i}", Record.of(f"d{i}", json.dumps({"n": i}).encode())) for i in range(50)]
        )
    second = StreamProcessor(manager, store_count_topology(), run_settings)
    second.start()
    assert second.drain_and_stop(60)

    last: dict[str, int] = {}
    seen: dict[str, list[int]] = {}
    for record in read_all(manager, "test/counts", N + 50):
        count = json.loads(record.data)["count"]
        seen.setdefault(record.key, []).append(count)
        last[record.key] = max(last.get(record.key, 0), count)
    assert last == {f"user{u}": (N + 50) // 5 for u in range(5)}
    # Every count 1..n once per key: none lost, none counted twice, across the restart.
    assert {key: sorted(counts) for key, counts in seen.items()} == {
        key: list(range(1, n + 1)) for key, n in last.items()
    }
    assert manager.lag("test/by-user", "test/by-user-dsl").lag == 0
