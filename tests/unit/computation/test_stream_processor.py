"""The threaded StreamProcessor on real backends: the main paths (pipeline, drain, dead-letter
stream, lag) on memory, local and Kafka; every other policy path, checkpoint failures, health,
metrics and stopping on memory and local."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, generate_latest

from streamcore.codecs import get_codec
from streamcore.computation import (
    BatchComputation,
    Computation,
    ComputationPolicy,
    DeadLetter,
    RecordFilter,
    Settings,
    StreamProcessor,
    Topology,
)
from streamcore.computation.server import MetricsServer
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.errors import ComputationError
from streamcore.log import LogManager
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.memory import MemoryLogManager
from streamcore.record import Flag, Record

CODEC = get_codec("avro")
FAST = dict(delay=0.001, max_delay=0.002)


@pytest.fixture(params=["memory", "local"])
def local_or_memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LogManager]:
    if request.param == "memory":
        manager: LogManager = MemoryLogManager()
    else:
        config = StreamcoreConfig(home=tmp_path, log=LogDefaults())
        manager = LocalLogManager(tmp_path / "log", config=config)
    yield manager
    manager.close()


class Parse(Computation):
    """Upper-cases; data b"bad" always fails; asks for a checkpoint per record."""

    def __init__(self, name: str = "parse") -> None:
        super().__init__(name, 1, 1)

    def process_record(self, context, input_stream, record) -> None:
        if record.data == b"bad":
            raise ValueError(f"cannot parse {record.key}")
        context.produce_record("o1", Record(record.key, record.data.upper()))
        context.ask_for_checkpoint()


class Route(Computation):
    def __init__(self) -> None:
        super().__init__("route", 1, 2)

    def process_record(self, context, input_stream, record) -> None:
        context.produce_record("o1" if int(record.key[1:]) % 2 == 0 else "o2", record)
        context.ask_for_checkpoint()


def feed(manager: LogManager, stream: str, records: list[Record], partitions: int = 2) -> None:
    manager.create(stream, partitions)
    manager.appender(stream, CODEC).append_batch([(r.key, r) for r in records])


def read_all(manager: LogManager, stream: str) -> list[Record]:
    with manager.tailer("test/reader", stream, CODEC) as tailer:
        return [rec.message for rec in tailer]


def two_stage() -> Topology:
    return (
        Topology.builder()
        .add_computation(Parse, ["i1:app/in", "o1:app/parsed"])
        .add_computation(Route, ["i1:app/parsed", "o1:app/even", "o2:app/odd"])
        .build()
    )


def test_pipeline_drains_on_every_backend(manager: LogManager) -> None:
    records = [Record.of(f"k{i}", b"v%d" % i) for i in range(300)]
    feed(manager, "app/in", records)
    settings = Settings(default_partitions=2, default_concurrency=2, drain_quiet=0.3)
    processor = StreamProcessor(manager, two_stage(), settings).start()
    assert processor.wait_for_assignments(20)
    assert processor.drain_and_stop(60)
    assert processor.is_terminated() and processor.failed_computations() == []
    even, odd = read_all(manager, "app/even"), read_all(manager, "app/odd")
    assert sorted(r.key for r in even + odd) == sorted(r.key for r in records)
    assert all(int(r.key[1:]) % 2 == 0 for r in even) and len(even) == 150
    assert {r.data for r in even} == {b"V%d" % i for i in range(0, 300, 2)}
    for name in ("parse", "route"):
        assert processor.lag(name).lag == 0
        assert processor.latency(name).latency_ms == 0
    assert processor.low_watermark() >= records[0].watermark
    assert sum(s.processed for s in processor.unit_stats("route")) == 300


def test_dead_letter_stream_on_every_backend(manager: LogManager) -> None:
    feed(
        manager,
        "app/in",
        [Record.of("k0", b"a"), Record.of("k1", b"bad"), Record.of("k2", b"c")],
        1,
    )
    topology = Topology.builder().add_computation(Parse, ["i1:app/in", "o1:app/out"]).build()
    settings = Settings(drain_quiet=0.3).set_policy(
        "parse", ComputationPolicy(max_retries=2, dlq="app/dlq-parse", **FAST)
    )
    processor = StreamProcessor(manager, topology, settings).start()
    assert processor.drain_and_stop(60)
    assert [r.data for r in read_all(manager, "app/out")] == [b"A", b"C"]
    letters = [DeadLetter.of(r) for r in read_all(manager, "app/dlq-parse")]
    assert [(d.record.key, d.record.data, d.attempts, d.offset) for d in letters] == [
        ("k1", b"bad", 3, 1)
    ]
    stats = processor.unit_stats("parse")[0]
    assert (stats.retried, stats.failed, stats.dead_lettered) == (2, 1, 1)


def test_skip_and_skip_first_failures(local_or_memory: LogManager) -> None:
    manager = local_or_memory
    feed(
        manager,
        "app/in",
        [Record.of(f"k{i}", b"bad" if i in (1, 3) else b"x") for i in range(5)],
        1,
    )
    topology = (
        Topology.builder()
        .add_computation(Parse, ["i1:app/in", "o1:app/skip"])
        .add_computation(lambda: Parse("first"), ["i1:app/in", "o1:app/first"])
        .build()
    )
    settings = Settings(drain_quiet=0.3)
    settings.set_policy("parse", ComputationPolicy(max_retries=1, continue_on_failure=True, **FAST))
    settings.set_policy("first", ComputationPolicy(max_retries=0, skip_first_failures=1, **FAST))
    processor = StreamProcessor(manager, topology, settings).start()
    assert processor.drain_and_stop(30) is False  # "first" terminated at its second failure
    assert [r.key for r in read_all(manager, "app/skip")] == ["k0", "k2", "k4"]
    assert [r.key for r in read_all(manager, "app/first")] == ["k0", "k2"]
    assert processor.failed_computations() == ["first"]
    assert processor.lag("parse").lag == 0
    lag = processor.lag("first")
    assert (lag.pos, lag.lag) == (3, 2)  # k3 and k4 wait for the restart
    assert processor.unit_stats("parse")[0].skipped == 2


def test_terminated_computation_shows_in_health_and_metrics(local_or_memory: LogManager) -> None:
    manager = local_or_memory
    feed(manager, "app/in", [Record.of("k0", b"bad")], 1)
    topology = (
        Topology.builder()
        .add_computation(Parse, ["i1:app/in", "o1:app/out"])
        .add_computation(lambda: Parse("healthy"), ["i1:app/other", "o1:app/out2"])
        .build()
    )
    settings = Settings().set_policy("parse", ComputationPolicy.NONE)
    processor = StreamProcessor(manager, topology, settings, health_delay=3600).start()
    deadline = time.monotonic() + 20
    while not processor.failed_computations() and time.monotonic() < deadline:
        time.sleep(0.02)
    health = processor.health()
    assert health.healthy and health.terminated == ["parse"]
    assert "1 computation(s) have been terminated after failure (parse)" in health.message
    assert "delayed by PT1H" in health.message
    assert processor.health(now=health.first_failure + 3601).healthy is False  # type: ignore[operator]
    text = generate_latest(processor.metrics).decode()
    assert 'streamcore_computation_terminated{computation="parse"} 1.0' in text
    assert 'streamcore_computation_terminated{computation="healthy"} 0.0' in text
    assert 'streamcore_computation_running_units{computation="healthy"} 1.0' in text
    assert 'streamcore_computation_failed_total{computation="parse"} 1.0' in text
    assert 'streamcore_computation_lag{computation="parse",stream="app/in"} 1.0' in text
    assert "streamcore_computation" not in generate_latest(REGISTRY).decode()
    assert processor.stop(10)


class Explode(RecordFilter):
    def before_append(self, record):
        raise OSError("disk full")


def test_checkpoint_failures_are_retried_then_terminate(local_or_memory: LogManager) -> None:
    manager = local_or_memory
    feed(manager, "app/in", [Record.of("k0", b"a")], 1)
    topology = Topology.builder().add_computation(Parse, ["i1:app/in", "o1:app/out"]).build()
    settings = Settings(checkpoint_retries=3, checkpoint_pause=0.01).add_filter(
        "app/out", Explode()
    )
    processor = StreamProcessor(manager, topology, settings).start()
    deadline = time.monotonic() + 20
    while not processor.failed_computations() and time.monotonic() < deadline:
        time.sleep(0.02)
    stats = processor.unit_stats("parse")[0]
    assert stats.state == "terminated" and stats.checkpoint_failures == 4
    assert "CheckpointError" in (stats.failure or "") and "disk full" in (stats.failure or "")
    assert processor.stop(10)
    assert manager.end_offsets("app/out") == [0]
    assert processor.lag("parse").lag == 1  # nothing committed: the record is processed again


class Slow(BatchComputation):
    def __init__(self) -> None:
        super().__init__("slow", 1, 1)

    def batch_process(self, context, input_stream, records) -> None:
        context.produce_record("o1", "batch", b"%d" % len(records))


def test_batch_threshold_timer_fires_in_real_time(local_or_memory: LogManager) -> None:
    manager = local_or_memory
    feed(manager, "app/in", [Record.of(f"k{i}", b"x") for i in range(3)], 1)
    topology = Topology.builder().add_computation(Slow, ["i1:app/in", "o1:app/out"]).build()
    settings = Settings(drain_quiet=0.2).set_policy(
        "slow", ComputationPolicy(batch_capacity=100, batch_threshold=0.1)
    )
    processor = StreamProcessor(manager, topology, settings).start()
    assert processor.drain_and_stop(30)
    assert [r.data for r in read_all(manager, "app/out")] == [b"3"]
    assert processor.unit_stats("slow")[0].timers >= 1


class NeverAsks(Computation):
    def __init__(self) -> None:
        super().__init__("lazy", 1, 0)

    def process_record(self, context, input_stream, record) -> None:
        return None


def test_drain_times_out_when_nothing_is_committed(local_or_memory: LogManager) -> None:
    manager = local_or_memory
    feed(manager, "app/in", [Record.of("k", b"x")], 1)
    topology = Topology.builder().add_computation(NeverAsks, ["i1:app/in"]).build()
    processor = StreamProcessor(manager, topology, Settings(drain_quiet=0.05)).start()
    started = time.monotonic()
    assert processor.drain_and_stop(0.5) is False
    assert time.monotonic() - started < 5
    assert processor.is_terminated() and processor.lag("lazy").lag == 1


def test_stop_checkpoints_and_poison_pill_stops_a_unit(local_or_memory: LogManager) -> None:
    manager = local_or_memory
    records = [Record.of(f"k{i}", b"x") for i in range(10)]
    records.append(Record("pill", b"", flags=Flag.POISON_PILL))
    records.append(Record.of("after", b"x"))
    feed(manager, "app/in", records, 1)
    topology = Topology.builder().add_computation(Parse, ["i1:app/in", "o1:app/out"]).build()
    processor = StreamProcessor(manager, topology).start()
    deadline = time.monotonic() + 20
    while not processor.is_terminated() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert processor.is_terminated() and processor.failed_computations() == []
    assert [r.key for r in read_all(manager, "app/out")][-1] == "pill"
    assert processor.lag("parse").lag == 1  # "after" waits for the next run
    assert processor.stop(5)


def test_units_share_partitions_and_metrics_endpoint(local_or_memory: LogManager) -> None:
    manager = local_or_memory
    feed(manager, "app/in", [Record.of(f"k{i}", b"x") for i in range(100)], 4)
    topology = Topology.builder().add_computation(Parse, ["i1:app/in", "o1:app/out"]).build()
    settings = Settings(default_partitions=4).set_concurrency("parse", 2)
    processor = StreamProcessor(manager, topology, settings).start()
    server = MetricsServer(processor, 0)
    try:
        assert processor.wait_for_assignments(20)
        deadline = time.monotonic() + 20
        while processor.lag("parse").lag and time.monotonic() < deadline:
            time.sleep(0.02)
        while time.monotonic() < deadline:
            held = [len(s.runner.tailer.assignments) for s in processor._units["parse"]]
            if sorted(held) == [2, 2]:
                break
            time.sleep(0.02)
        assert sorted(held) == [2, 2]
        with urllib.request.urlopen(server.url, timeout=5) as response:
            text = response.read().decode()
        assert 'streamcore_computation_processed_total{computation="parse"} 100.0' in text
        assert (
            'streamcore_computation_record_processing_seconds_count{computation="parse"} 100.0'
            in text
        )
        with urllib.request.urlopen(
            f"http://127.0.0.1:{server.port}/health", timeout=5
        ) as response:
            assert json.loads(response.read())["healthy"] is True
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/nope", timeout=5)
    finally:
        server.close()
        assert processor.stop(10)
    assert len(read_all(manager, "app/out")) == 100


def test_a_processor_starts_once() -> None:
    manager = MemoryLogManager()
    topology = Topology.builder().add_computation(NeverAsks, ["i1:app/in"]).build()
    with (
        StreamProcessor(manager, topology) as processor,
        pytest.raises(ComputationError, match="started already"),
    ):
        processor.start()


class Paced(Parse):
    """Parse, a little slower, so partitions move while records are in flight."""

    def process_record(self, context, input_stream, record) -> None:
        time.sleep(0.0005)
        super().process_record(context, input_stream, record)


def test_partitions_move_to_a_second_processor_without_loss(manager: LogManager) -> None:
    records = [Record.of(f"k{i}", b"x") for i in range(4000)]
    feed(manager, "app/in", records, 4)
    topology = Topology.builder().add_computation(Paced, ["i1:app/in", "o1:app/out"]).build()
    settings = Settings(default_partitions=4, read_batch=50, drain_quiet=0.3)
    first = StreamProcessor(manager, topology, settings).start()
    deadline = time.monotonic() + 20
    while not sum(s.processed for s in first.unit_stats()) and time.monotonic() < deadline:
        time.sleep(0.005)
    second = StreamProcessor(manager, topology, settings).start()
    assert second.wait_for_assignments(20)  # the first gave half of the partitions away
    assert first.drain_and_stop(60) and second.drain_and_stop(60)
    assert sum(s.processed for s in second.unit_stats()) > 0
    keys = [r.key for r in read_all(manager, "app/out")]
    assert set(keys) == {r.key for r in records}
    assert len(keys) - len(records) <= 4 * 50  # at most the uncommitted window per partition
    assert first.lag("parse").lag == 0


class Emit(Computation):
    """A source: five records, one every 50 ms, from a timer."""

    def __init__(self) -> None:
        super().__init__("emit", 0, 1)
        self.sent = 0

    def init(self, context) -> None:
        context.set_timer("next", context.now_ms() + 50)

    def process_record(self, context, input_stream, record) -> None:
        raise AssertionError("a source reads no record")

    def process_timer(self, context, key, timestamp_ms) -> None:
        self.sent += 1
        context.produce_record("o1", f"e{self.sent}", b"")
        context.ask_for_checkpoint()
        if self.sent < 5:
            context.set_timer("next", timestamp_ms + 50)


def test_a_source_drains_once_it_stops_producing(local_or_memory: LogManager) -> None:
    manager = local_or_memory
    topology = Topology.builder().add_computation(Emit, ["o1:app/out"]).build()
    processor = StreamProcessor(manager, topology, Settings(drain_quiet=0.2)).start()
    assert processor.drain_and_stop(20)
    assert [r.key for r in read_all(manager, "app/out")] == [f"e{i}" for i in range(1, 6)]
