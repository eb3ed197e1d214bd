"""Computation faults: a batch held across an input change then a stop, a failed batch sent to the
dead-letter stream, a computation that rarely checkpoints, and retries past attempt 1024. Each
test checks one promise of docs/computations.md (commits, dead-letter metadata, low watermark,
retries)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import pytest

from streamcore.codecs import get_codec
from streamcore.computation import (
    BatchComputation,
    Computation,
    ComputationPolicy,
    Settings,
    StreamProcessor,
    Topology,
    TopologyTestDriver,
)
from streamcore.errors import TopologyError
from streamcore.log import LogManager
from streamcore.record import Flag, Record
from streamcore.watermark import Watermark

LEFT, RIGHT, OUT, DLQ = "app/left", "app/right", "app/out", "app/dlq"
CODEC = get_codec("avro")


class Collect(BatchComputation):
    """Joins the data of a batch into one output record keyed by the logical input stream; a
    batch holding `fail_on` always fails."""

    def __init__(self, fail_on: bytes | None = None) -> None:
        super().__init__("collect", 2, 1)
        self.fail_on = fail_on

    def batch_process(self, context, input_stream, records) -> None:
        if self.fail_on is not None and any(r.data == self.fail_on for r in records):
            raise RuntimeError("batch failed")
        context.produce_record("o1", input_stream, b",".join(r.data for r in records))


def collect_topology(fail_on: bytes | None = None) -> Topology:
    wiring = [f"i1:{LEFT}", f"i2:{RIGHT}", f"o1:{OUT}"]
    return Topology.builder().add_computation(lambda: Collect(fail_on), wiring).build()


def collect_driver(policy: ComputationPolicy, fail_on: bytes | None = None) -> TopologyTestDriver:
    settings = Settings().set_policy("collect", policy)
    return TopologyTestDriver(collect_topology(fail_on), settings, start_ms=0)


def outputs(records: list[Record]) -> list[tuple[str, bytes]]:
    return [(r.key, r.data) for r in records]


def wait_until(condition: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


# -- 1. a batch computation never commits a record it still buffers ----------------------------
def test_input_change_keeps_the_new_record_uncommitted_until_its_batch_runs() -> None:
    with collect_driver(ComputationPolicy(batch_capacity=3, batch_threshold=2.0)) as driver:
        for i in range(4):
            driver.pipe(LEFT, f"k{i}", str(i).encode())
        driver.pipe(RIGHT, "r", b"R")  # flushes the left batch [3]; R starts the next batch
        assert outputs(driver.read_output(OUT)) == [("i1", b"0,1,2"), ("i1", b"3")]
        assert driver.manager.lag(LEFT, "collect").lag == 0
        assert driver.manager.lag(RIGHT, "collect").lag == 1  # R lives only in memory
        driver.advance_time(2000)  # the threshold flushes R
        assert outputs(driver.read_output(OUT)) == [("i2", b"R")]
        assert driver.lag("collect").lag == 0


def test_input_change_in_the_middle_of_a_read_batch_commits_only_flushed_records() -> None:
    with collect_driver(ComputationPolicy(batch_capacity=10, batch_threshold=5.0)) as driver:
        driver.manager.appender(LEFT, CODEC).append_batch(
            [(f"a{i}", Record.of(f"a{i}", b"a")) for i in range(2)]
        )
        driver.manager.appender(RIGHT, CODEC).append_batch([("r", Record.of("r", b"r"))])
        driver.advance_time(0)  # one read batch holds both streams, in some order
        flushed = driver.read_output(OUT)
        assert len(flushed) == 1
        held = 1 if flushed[0].data == b"a,a" else 2  # what the second batch buffers
        assert driver.lag("collect").lag == held
        driver.advance_time(5000)
        assert len(driver.read_output(OUT)) == 1
        assert driver.lag("collect").lag == 0


def test_buffered_record_is_delivered_again_after_a_stop(
    local_manager_factory: Callable[..., LogManager],
) -> None:
    first = local_manager_factory()
    for stream in (LEFT, RIGHT, OUT):
        first.create(stream, 1)
    first.appender(LEFT, CODEC).append_batch(
        [(f"k{i}", Record.of(f"k{i}", str(i).encode())) for i in range(4)]
    )

    def produced(manager: LogManager) -> list[tuple[str, bytes]]:
        with manager.tailer("test/reader", OUT, CODEC) as tailer:
            return outputs([rec.message for rec in tailer])

    slow = ComputationPolicy(batch_capacity=3, batch_threshold=600.0)
    processor = StreamProcessor(
        first, collect_topology(), Settings().set_policy("collect", slow)
    ).start()
    try:
        assert wait_until(lambda: produced(first) == [("i1", b"0,1,2")])
        first.appender(RIGHT, CODEC).append_batch([("r", Record.of("r", b"R"))])
        assert wait_until(lambda: len(produced(first)) == 2)
        assert wait_until(lambda: first.lag(LEFT, "collect").lag == 0)
        assert first.lag(RIGHT, "collect").lag == 1  # R waits for its batch, uncommitted
    finally:
        assert processor.stop(10)
        first.close()  # the process ends: its partitions are free for the next one

    second = local_manager_factory()  # a restart on the same folder
    quick = ComputationPolicy(batch_capacity=3, batch_threshold=0.1)
    settings = Settings(drain_quiet=0.2).set_policy("collect", quick)
    restarted = StreamProcessor(second, collect_topology(), settings).start()
    assert restarted.drain_and_stop(30)
    assert produced(second) == [("i1", b"0,1,2"), ("i1", b"3"), ("i2", b"R")]


def test_an_undecodable_record_does_not_commit_the_batch_held_before_it() -> None:
    policy = ComputationPolicy(batch_capacity=3, batch_threshold=60.0, dlq=DLQ)
    with collect_driver(policy) as driver:
        driver.pipe(LEFT, "k0", b"0")
        driver.manager.appender(LEFT).append_batch([("junk", b"\x01not a record")])
        driver.advance_time(0)
        assert [d.record.key for d in driver.read_dead_letters(DLQ)] == ["junk"]
        assert driver.lag("collect").lag == 2  # k0 is held: nothing past it is committed
        driver.advance_time(60_000)
        assert outputs(driver.read_output(OUT)) == [("i1", b"0")]
        assert driver.lag("collect").lag == 0


class Ticking(Collect):
    """A batch computation with a timer of its own that asks for checkpoints."""

    def init(self, context) -> None:
        super().init(context)
        context.set_timer("tick", context.now_ms() + 100)

    def process_timer(self, context, key, timestamp_ms) -> None:
        super().process_timer(context, key, timestamp_ms)
        if key == "tick":
            context.ask_for_checkpoint()
            context.set_timer("tick", timestamp_ms + 100)


def test_a_timer_that_asks_does_not_commit_the_held_batch() -> None:
    wiring = [f"i1:{LEFT}", f"i2:{RIGHT}", f"o1:{OUT}"]
    topology = Topology.builder().add_computation(Ticking, wiring).build()
    policy = ComputationPolicy(batch_capacity=3, batch_threshold=60.0)
    settings = Settings().set_policy("collect", policy)
    with TopologyTestDriver(topology, settings, start_ms=0) as driver:
        driver.pipe(LEFT, "k0", b"0")
        driver.advance_time(250)  # two ticks ask for a checkpoint while k0 waits
        assert driver.stats("collect").timers >= 2
        assert driver.lag("collect").lag == 1
        driver.advance_time(60_000)
        assert outputs(driver.read_output(OUT)) == [("i1", b"0")]
        assert driver.lag("collect").lag == 0


def test_a_poison_pill_flushes_the_batch_before_the_unit_stops() -> None:
    with collect_driver(ComputationPolicy(batch_capacity=10, batch_threshold=60.0)) as driver:
        driver.pipe(LEFT, "k0", b"0")
        driver.pipe(LEFT, "k1", b"1")
        driver.pipe(LEFT, "pill", b"", flags=Flag.POISON_PILL)
        assert outputs(driver.read_output(OUT)) == [("i1", b"0,1,")]
        assert driver.stats("collect").state == "stopped"
        assert driver.lag("collect").lag == 0


# -- 2. each dead-lettered record of a failed batch names its own origin ------------------------
def test_failed_batch_dead_letters_keep_their_own_offsets() -> None:
    policy = ComputationPolicy(max_retries=1, delay=0.0, batch_capacity=3, dlq=DLQ)
    with collect_driver(policy, fail_on=b"2") as driver:
        for i in range(3):
            driver.pipe(LEFT, f"k{i}", str(i).encode())
        letters = sorted(driver.read_dead_letters(DLQ), key=lambda d: d.record.key)
        assert [(d.record.key, d.stream, d.partition, d.offset) for d in letters] == [
            ("k0", LEFT, 0, 0),
            ("k1", LEFT, 0, 1),
            ("k2", LEFT, 0, 2),
        ]


def test_batch_failed_on_input_change_dead_letters_its_own_records_only() -> None:
    policy = ComputationPolicy(
        max_retries=1, delay=0.0, batch_capacity=3, batch_threshold=1.0, dlq=DLQ
    )
    with collect_driver(policy, fail_on=b"3") as driver:
        for i in range(4):
            driver.pipe(LEFT, f"k{i}", str(i).encode())
        driver.pipe(RIGHT, "r", b"R")  # flushes the left batch [3], which fails for good
        letters = driver.read_dead_letters(DLQ)
        assert [(d.record.key, d.stream, d.offset) for d in letters] == [("k3", LEFT, 3)]
        assert driver.manager.lag(RIGHT, "collect").lag == 1  # R did not fail: still held
        driver.advance_time(1000)
        assert outputs(driver.read_output(OUT)) == [("i1", b"0,1,2"), ("i2", b"R")]
        assert driver.manager.lag(RIGHT, "collect").lag == 0


def test_a_skipped_batch_does_not_skip_the_record_of_the_other_input_that_flushed_it() -> None:
    policy = ComputationPolicy(
        max_retries=0, batch_capacity=3, batch_threshold=1.0, continue_on_failure=True
    )
    with collect_driver(policy, fail_on=b"3") as driver:
        for i in range(4):
            driver.pipe(LEFT, f"k{i}", str(i).encode())
        driver.pipe(RIGHT, "r", b"R")
        driver.advance_time(1000)
        assert outputs(driver.read_output(OUT)) == [("i1", b"0,1,2"), ("i2", b"R")]
        assert driver.manager.lag(LEFT, "collect").lag == 0
        assert driver.manager.lag(RIGHT, "collect").lag == 0


def test_batch_failed_in_its_threshold_timer_dead_letters_keep_their_offsets() -> None:
    policy = ComputationPolicy(
        max_retries=1, delay=0.0, batch_capacity=10, batch_threshold=1.0, dlq=DLQ
    )
    with collect_driver(policy, fail_on=b"1") as driver:
        for i in range(2):
            driver.pipe(LEFT, f"k{i}", str(i).encode())
        driver.advance_time(1000)
        letters = sorted(driver.read_dead_letters(DLQ), key=lambda d: d.record.key)
        assert [(d.record.key, d.stream, d.offset) for d in letters] == [
            ("k0", LEFT, 0),
            ("k1", LEFT, 1),
        ]
        assert driver.lag("collect").lag == 0


# -- 3. the low watermark is the oldest record not committed ------------------------------------
class AskEvery(Computation):
    """Produces one unstamped record and checkpoints only every `every` records."""

    def __init__(self, every: int) -> None:
        super().__init__("rare", 1, 1)
        self.every = every
        self.seen = 0

    def process_record(self, context, input_stream, record) -> None:
        self.seen += 1
        if self.seen % self.every == 0:
            context.produce_record("o1", Record(record.key, b"", watermark=0))
            context.ask_for_checkpoint()


def test_low_watermark_stays_on_the_oldest_record_after_many_uncommitted_batches() -> None:
    every = 40
    topology = Topology.builder().add_computation(
        lambda: AskEvery(every), ["i1:app/in", f"o1:{OUT}"]
    )
    with TopologyTestDriver(topology.build(), start_ms=0) as driver:
        for i in range(every - 1):  # one read batch each, none asks
            driver.pipe("app/in", f"k{i}", timestamp_ms=1000 + i)
        assert driver.low_watermark("rare") == Watermark.of(1000).value
        assert driver.lag("rare").lag == every - 1
        driver.pipe("app/in", "last", timestamp_ms=1000 + every - 1)
        (out,) = driver.read_output(OUT)
        assert out.watermark == Watermark.of(1000).value  # stamped with the oldest it covers
        driver.pipe("app/in", "next", timestamp_ms=5000)
        assert driver.low_watermark("rare") == Watermark.of(5000).value


# -- 4. retries past attempt 1024 and the bounds of a policy ------------------------------------
def test_retry_delay_is_capped_for_any_attempt() -> None:
    policy = ComputationPolicy(max_retries=5000)
    assert [policy.retry_delay(n) for n in (1, 2, 7)] == [1.0, 2.0, 60.0]
    assert policy.retry_delay(1025) == policy.retry_delay(5000) == 60.0
    assert ComputationPolicy.NONE.retry_delay(5000) == 0.0


class FailsFor(Computation):
    def __init__(self, failures: int) -> None:
        super().__init__("flaky", 1, 1)
        self.failures = failures

    def process_record(self, context, input_stream, record) -> None:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("not yet")
        context.produce_record("o1", record)
        context.ask_for_checkpoint()


def test_a_record_retried_more_than_1024_times_is_processed() -> None:
    topology = Topology.builder().add_computation(
        lambda: FailsFor(1100), ["i1:app/in", f"o1:{OUT}"]
    )
    settings = Settings().set_policy(
        "flaky", ComputationPolicy(max_retries=1100, delay=0.001, max_delay=0.002)
    )
    with TopologyTestDriver(topology.build(), settings, start_ms=0) as driver:
        driver.pipe("app/in", "k", b"x")
        assert [r.key for r in driver.read_output(OUT)] == ["k"]
        assert driver.stats("flaky").retried == 1100
        assert not driver.is_terminated("flaky")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max_retries": 10_001}, "max_retries must be an integer from 0 to 10000"),
        ({"max_retries": 2.5}, "max_retries must be an integer from 0 to 10000"),
        ({"max_retries": True}, "max_retries must be an integer from 0 to 10000"),
        ({"delay": math.nan}, "finite"),
        ({"max_delay": math.inf}, "finite"),
    ],
)
def test_policy_refuses_unbounded_retries(changes: dict[str, object], message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        ComputationPolicy(**changes)  # type: ignore[arg-type]
    assert ComputationPolicy(max_retries=0).max_retries == 0  # 0 = no retry, still valid
    assert ComputationPolicy(max_retries=10_000).max_retries == 10_000
