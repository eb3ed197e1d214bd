"""Stream time (docs/state.md, "Stream time"): timestamp extractors, a task's monotonic stream
time, the stream synchronization of a task reading two co-partitioned inputs, the idle wait, and
stream-time punctuation next to the wall-clock one. Driver tests run the runner's code; the
StreamProcessor test runs it on the memory and local logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from log_fixtures import MANAGER_FACTORIES

from streamcore.codecs import get_codec
from streamcore.computation import (
    Computation,
    ComputationPolicy,
    Processor,
    Settings,
    StreamProcessor,
    Topology,
    TopologyTestDriver,
)
from streamcore.computation.processor import PunctuationType
from streamcore.computation.stream_time import (
    FieldTimestamp,
    LogAppendTimestamp,
    WatermarkTimestamp,
)
from streamcore.errors import TopologyError
from streamcore.record import Record
from streamcore.watermark import Watermark

IN, OUT, LEFT, RIGHT = "app/in", "app/out", "app/left", "app/right"
CODEC = get_codec("avro")
T0 = 1_700_000_000_000


class Seen(Processor):
    """Keeps, per record, (stream, key, timestamp seen through the processor, stream time)."""

    def init(self, context) -> None:
        self.context = context
        self.seen: list[tuple[str, str, Any, int]] = []

    def process(self, key, value) -> None:
        ctx = self.context
        self.seen.append((ctx.stream, key, value, ctx.stream_time))


def seen(driver: TopologyTestDriver, name: str = "app/seen") -> list[tuple[str, str, Any, int]]:
    return driver._runner_of(name).computation._processor.seen  # type: ignore[attr-defined,no-any-return]


def seen_topology(inputs: list[str], codec: str = "json") -> Topology:
    return Topology.builder().add_processor("app/seen", Seen, inputs=inputs, codec=codec).build()


def record(key: str, ts: int, value: Any = None) -> Record:
    data = json.dumps(ts if value is None else value).encode()
    return Record(key, data, Watermark.of(ts).value)


# -- extractors -------------------------------------------------------------------------------
def test_the_default_extractor_reads_the_watermark_and_stream_time_never_goes_back() -> None:
    with TopologyTestDriver(seen_topology([IN])) as driver:
        for ts in (T0 + 100, T0 + 300, T0 + 200):
            driver.pipe(IN, "k", json.dumps(ts).encode(), timestamp_ms=ts)
        assert [s[3] for s in seen(driver)] == [T0 + 100, T0 + 300, T0 + 300]


def test_stream_time_is_per_task() -> None:
    settings = Settings().set_partitions(IN, 2)
    with TopologyTestDriver(seen_topology([IN]), settings) as driver:
        appender = driver.manager.appender(IN, CODEC)
        appender.append_to(0, "a", record("a", T0 + 500))
        appender.append_to(1, "b", record("b", T0 + 100))
        appender.append_to(1, "c", record("c", T0 + 200))
        driver.advance_time(0)
        times = {key: time for _, key, _, time in seen(driver)}
        assert times == {"a": T0 + 500, "b": T0 + 100, "c": T0 + 200}
        runner = driver._runner_of("app/seen")
        assert runner.stream_times == {0: T0 + 500, 1: T0 + 200}


def test_the_log_append_time_extractor() -> None:
    settings = Settings().set_timestamp_extractor("app/seen", LogAppendTimestamp())
    with TopologyTestDriver(seen_topology([IN]), settings) as driver:
        driver.pipe(IN, "k", b"1", timestamp_ms=5)  # an event time far in the past
        appended = next(iter(driver.manager.tailer("test/reader", IN, CODEC))).timestamp
        assert seen(driver)[0][3] == appended > 5


def test_a_value_field_extractor_with_the_processor_codec_and_with_its_own() -> None:
    settings = Settings().set_timestamp_extractor("app/seen", FieldTimestamp("at"))
    with TopologyTestDriver(seen_topology([IN]), settings) as driver:
        driver.pipe(IN, "k", json.dumps({"at": T0 + 7}).encode(), timestamp_ms=1)
        assert seen(driver)[0][3] == T0 + 7

    class Times(Computation):
        def __init__(self) -> None:
            super().__init__("app/times", inputs=1)
            self.times: list[int] = []

        def process_record(self, context, input_stream, record) -> None:
            self.times.append(context.stream_time_ms)

    topology = Topology.builder().add_computation(Times, ["i1:" + IN]).build()
    field = FieldTimestamp("at", codec="json")
    with TopologyTestDriver(topology, Settings().set_timestamp_extractor("default", field)) as d:
        d.pipe(IN, "k", json.dumps({"at": T0 + 9}).encode())
        assert d._runner_of("app/times").computation.times == [T0 + 9]  # type: ignore[attr-defined]
    with pytest.raises(TopologyError, match="give the codec"):
        TopologyTestDriver(
            topology, Settings().set_timestamp_extractor("default", FieldTimestamp("at"))
        )


def test_a_function_extractor() -> None:
    settings = Settings().set_timestamp_extractor(
        "app/seen", lambda rec, log_record: int(rec.data) * 1000
    )
    with TopologyTestDriver(seen_topology([IN]), settings) as driver:
        driver.pipe(IN, "k", b"42")
        assert seen(driver)[0][3] == 42_000


def test_a_bad_timestamp_follows_the_policy_and_names_the_field_and_record() -> None:
    settings = Settings().set_timestamp_extractor("app/seen", FieldTimestamp("at"))
    settings.set_policy("app/seen", ComputationPolicy(max_retries=0, dlq="app/dlq"))
    with TopologyTestDriver(seen_topology([IN]), settings) as driver:
        driver.pipe(IN, "no-field", json.dumps({"other": 1}).encode())
        driver.pipe(IN, "negative", json.dumps({"at": -5}).encode())
        driver.pipe(IN, "good", json.dumps({"at": T0}).encode())
        letters = driver.read_dead_letters("app/dlq")
        assert [letter.record.key for letter in letters] == ["no-field", "negative"]
        assert "'at'" in letters[0].error and "no-field" in letters[0].error
        assert "-5" in letters[1].error
        assert [s[1] for s in seen(driver)] == ["good"]
        assert driver.lag("app/seen").lag == 0  # the dead-lettered records are checkpointed

    settings = Settings().set_timestamp_extractor("app/seen", FieldTimestamp("at"))
    settings.set_policy("app/seen", ComputationPolicy(max_retries=0))
    with TopologyTestDriver(seen_topology([IN]), settings) as driver:
        driver.pipe(IN, "no-field", json.dumps({"other": 1}).encode())
        assert driver.is_terminated("app/seen")
        failure = driver.stats("app/seen").failure or ""
        assert "InvalidTimestampError" in failure and "'at'" in failure and "no-field" in failure


# -- stream synchronization -------------------------------------------------------------------
def append(driver_or_manager: Any, stream: str, partition: int, times: list[int]) -> None:
    manager = getattr(driver_or_manager, "manager", driver_or_manager)
    appender = manager.appender(stream, CODEC)
    for ts in times:
        key = f"{stream[4]}{ts}"
        appender.append_to(partition, key, record(key, T0 + ts))


def test_a_task_processes_its_partitions_records_smallest_timestamp_first() -> None:
    """Two co-partitioned inputs of 2 partitions, appended out of global order: each task
    processes its records by timestamp, each partition's order is kept, and everything
    processed is committed."""
    settings = Settings(default_partitions=2)
    with TopologyTestDriver(seen_topology([LEFT, RIGHT]), settings) as driver:
        append(driver, LEFT, 0, [1, 4, 5, 9])
        append(driver, RIGHT, 0, [2, 3, 6, 7])
        append(driver, LEFT, 1, [30, 10])  # out of order within a partition: kept as is
        append(driver, RIGHT, 1, [20])
        driver.advance_time(0)
        order = [key for _, key, _, _ in seen(driver)]
        task0 = [k for k in order if k in {"l1", "l4", "l5", "l9", "r2", "r3", "r6", "r7"}]
        assert task0 == ["l1", "r2", "r3", "l4", "l5", "r6", "r7", "l9"]
        assert [k for k in order if k not in task0] == ["r20", "l30", "l10"]
        assert [s[3] - T0 for s in seen(driver) if s[1] in ("r20", "l30", "l10")] == [20, 30, 30]
        assert driver.lag("app/seen").lag == 0


def test_the_idle_wait_holds_a_task_until_its_empty_partition_has_records_or_time_passes() -> None:
    settings = Settings(max_task_idle_ms=1000)
    with TopologyTestDriver(seen_topology([LEFT, RIGHT]), settings) as driver:
        append(driver, LEFT, 0, [5, 8])
        driver.advance_time(999)
        assert seen(driver) == []  # waiting for RIGHT
        assert driver.lag("app/seen").lag == 2  # read, buffered, not committed
        assert driver.low_watermark("app/seen") == Watermark.of(T0 + 5).value
        append(driver, RIGHT, 0, [3])
        driver.advance_time(0)
        # l5 waits again once RIGHT is empty: processed are r3 only
        assert [s[1] for s in seen(driver)] == ["r3"]
        assert driver.manager.lag(LEFT, "app/seen").lag == 2
        assert driver.manager.lag(RIGHT, "app/seen").lag == 0
        driver.advance_time(1000)
        assert [s[1] for s in seen(driver)] == ["r3", "l5", "l8"]
        assert driver.lag("app/seen").lag == 0

    with TopologyTestDriver(seen_topology([LEFT, RIGHT])) as driver:  # 0: no wait
        append(driver, LEFT, 0, [5, 8])
        driver.advance_time(0)
        assert [s[1] for s in seen(driver)] == ["l5", "l8"]


def test_records_processed_by_a_stream_processor_follow_the_timestamps(tmp_path: Path) -> None:
    for backend in ("memory", "local"):
        manager = MANAGER_FACTORIES[backend](tmp_path / backend)
        try:
            manager.create(LEFT, 1)
            manager.create(RIGHT, 1)
            append(manager, LEFT, 0, [1, 4, 5])
            append(manager, RIGHT, 0, [2, 3, 6])
            topology = (
                Topology.builder()
                .add_processor(
                    "app/seen", Forward, inputs=[LEFT, RIGHT], outputs=[OUT], codec="json"
                )
                .build()
            )
            settings = Settings(max_task_idle_ms=500, drain_quiet=0.2)
            with StreamProcessor(manager, topology, settings) as processor:
                assert processor.drain_and_stop(60.0)
            reader = manager.tailer("test/reader", OUT, CODEC)
            keys = [rec.key for rec in reader]
            reader.close()
            assert keys == ["l1", "r2", "r3", "l4", "l5", "r6"], backend
        finally:
            manager.close()


class Forward(Processor):
    def init(self, context) -> None:
        self.context = context

    def process(self, key, value) -> None:
        self.context.forward(key, self.context.stream_time)


# -- punctuation ------------------------------------------------------------------------------
class Punctuated(Processor):
    """Punctuates every second of `TYPE`; counts records per key in store `counts` and, in
    punctuate, notes the time and the number of keys of the punctuated task's store."""

    TYPE = PunctuationType.STREAM_TIME

    def init(self, context) -> None:
        self.context = context
        self.punctuations: list[tuple[int, int]] = []
        context.schedule(1000, self.TYPE)

    def process(self, key, value) -> None:
        store = self.context.get_state_store("counts")
        store.put(key, (store.get(key) or 0) + 1)

    def punctuate(self, timestamp) -> None:
        keys = self.context.get_state_store("counts").approximate_count()
        self.punctuations.append((timestamp, keys))


def punctuated(driver: TopologyTestDriver) -> list[tuple[int, int]]:
    return driver._runner_of("app/p").computation._processor.punctuations  # type: ignore[attr-defined,no-any-return]


def punctuated_topology(processor: type[Processor]) -> Topology:
    return (
        Topology.builder()
        .add_processor("app/p", processor, inputs=[IN], codec="json", stores=["counts"])
        .build()
    )


def test_stream_time_punctuation_fires_on_records_only_once_per_boundary_crossed() -> None:
    settings = Settings().set_partitions(IN, 2)
    with TopologyTestDriver(punctuated_topology(Punctuated), settings, start_ms=0) as driver:
        appender = driver.manager.appender(IN, CODEC)

        def pipe(partition: int, key: str, ts: int) -> None:
            appender.append_to(partition, key, record(key, ts))
            driver.advance_time(0)

        pipe(0, "a", 500)  # aligned to 0, as Kafka Streams: the first record fires it
        assert punctuated(driver) == [(500, 1)]
        driver.advance_time(60_000)  # the clock never fires it
        pipe(0, "b", 999)
        assert punctuated(driver) == [(500, 1)]
        pipe(0, "c", 1000)
        assert punctuated(driver) == [(500, 1), (1000, 3)]
        pipe(0, "d", 5500)  # jumps four boundaries: one punctuation
        pipe(0, "e", 5999)
        assert punctuated(driver)[2:] == [(5500, 4)]
        pipe(1, "x", 100)  # another task: its own stream time and store
        assert punctuated(driver)[3:] == [(100, 1)]
        pipe(0, "f", 6000)
        assert punctuated(driver)[4:] == [(6000, 6)]
        pipe(1, "y", 900)  # task 1 stays below its boundary
        assert len(punctuated(driver)) == 5


class WallPunctuated(Punctuated):
    TYPE = PunctuationType.WALL_CLOCK_TIME

    def punctuate(self, timestamp) -> None:
        self.punctuations.append((timestamp, -1))


def test_wall_clock_punctuation_is_unchanged() -> None:
    with TopologyTestDriver(punctuated_topology(WallPunctuated), start_ms=0) as driver:
        driver.pipe(IN, "a", b"1", timestamp_ms=10_000_000)  # stream time does not fire it
        assert punctuated(driver) == []
        driver.advance_time(1000)
        assert punctuated(driver) == [(1000, -1)]


def test_schedule_refuses_an_unknown_type() -> None:
    class Bad(Processor):
        def init(self, context) -> None:
            context.schedule(1000, "stream")

        def process(self, key, value) -> None:
            pass

    topology = Topology.builder().add_processor("app/p", Bad, inputs=[IN]).build()
    with pytest.raises(TopologyError, match="PunctuationType"):
        TopologyTestDriver(topology)


def test_settings_check_the_idle_time_and_extractors() -> None:
    with pytest.raises(TopologyError):
        Settings(max_task_idle_ms=-1)
    with pytest.raises(TopologyError):
        Settings().set_timestamp_extractor("app/p", 42)  # type: ignore[arg-type]
    assert isinstance(Settings().timestamp_extractor("app/p"), WatermarkTimestamp)
