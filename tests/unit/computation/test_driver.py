"""Computation semantics through the TopologyTestDriver, which runs the processor's runner code in
one thread with a virtual clock: outputs, timers, batches, filters, flags and every failure
policy (retries, dead-letter, skip, skip_first_failures, termination)."""

from __future__ import annotations

import pytest

from streamcore.computation import (
    BatchComputation,
    Computation,
    ComputationPolicy,
    DeadLetter,
    RecordFilter,
    Settings,
    Topology,
    TopologyTestDriver,
)
from streamcore.errors import ComputationError, StreamcoreError, TopologyError
from streamcore.record import Flag, Record
from streamcore.watermark import Watermark

IN, OUT, DLQ = "app/in", "app/out", "app/dlq"


class Upper(Computation):
    """Upper-cases data; fails on data starting with b"bad" for as many attempts as its count
    (b"bad" alone: always)."""

    def __init__(self, name: str = "upper", ask: bool = True) -> None:
        super().__init__(name, 1, 1)
        self.ask = ask
        self.attempts: dict[str, int] = {}
        self.retries = 0

    def process_record(self, context, input_stream, record) -> None:
        context.produce_record("o1", record.key, record.data.upper())
        if record.data.startswith(b"bad"):
            tries = self.attempts[record.key] = self.attempts.get(record.key, 0) + 1
            limit = int(record.data[3:] or 1_000_000)
            if tries <= limit:
                raise ValueError(f"bad record {record.key}")
        if self.ask:
            context.ask_for_checkpoint()

    def process_retry(self, context, failure) -> None:
        self.retries += 1


def driver_for(policy: ComputationPolicy | None = None, **kwargs) -> TopologyTestDriver:
    topology = Topology.builder().add_computation(
        lambda: Upper(**kwargs), [f"i1:{IN}", f"o1:{OUT}"]
    )
    settings = Settings()
    if policy is not None:
        settings.set_policy("upper", policy)
    return TopologyTestDriver(topology.build(), settings, start_ms=1_000_000)


def datas(records: list[Record]) -> list[bytes]:
    return [r.data for r in records]


def test_outputs_are_read_once_and_get_the_input_watermark() -> None:
    with driver_for() as driver:
        driver.pipe(IN, "k1", b"hello", timestamp_ms=123_456)
        out = driver.read_output(OUT)
        assert datas(out) == [b"HELLO"]
        assert out[0].key == "k1" and out[0].timestamp == 123_456  # stamped at checkpoint
        assert driver.read_output(OUT) == []
        assert driver.lag("upper").lag == 0


def test_nothing_is_appended_or_committed_without_a_checkpoint() -> None:
    with driver_for(ask=False) as driver:
        driver.pipe(IN, "k1", b"a")
        assert driver.read_output(OUT) == []
        assert driver.lag("upper").lag == 1
        driver.pipe(IN, "k2", b"b", flags=Flag.COMMIT)  # COMMIT flag: checkpoint now
        assert datas(driver.read_output(OUT)) == [b"A", b"B"]
        assert driver.lag("upper").lag == 0


def test_retry_discards_the_output_of_failed_attempts_and_backs_off() -> None:
    policy = ComputationPolicy(max_retries=5, delay=1.0, max_delay=60.0)
    with driver_for(policy) as driver:
        start = driver.now_ms
        driver.pipe(IN, "k1", b"bad2")  # fails twice, then succeeds
        assert datas(driver.read_output(OUT)) == [b"BAD2"]  # one output, not three
        stats = driver.stats("upper")
        assert (stats.retried, stats.failed, stats.processed) == (2, 0, 1)
        assert driver.now_ms - start == 1000 + 2000  # backoff 1 s then 2 s (virtual)


def test_dead_letter_keeps_the_record_and_the_failure_metadata() -> None:
    policy = ComputationPolicy(max_retries=2, delay=0.5, dlq=DLQ)
    with driver_for(policy) as driver:
        driver.pipe(IN, "k0", b"ok")
        driver.pipe(IN, "k1", b"bad", timestamp_ms=42_000)
        driver.pipe(IN, "k2", b"fine")
        assert datas(driver.read_output(OUT)) == [b"OK", b"FINE"]
        raw = driver.read_dlq(DLQ)
        assert [(r.key, r.data) for r in raw] == [("k1", b"bad")]
        letter = DeadLetter.of(raw[0])
        assert letter.computation == "upper" and letter.stream == IN
        assert (letter.partition, letter.offset, letter.attempts) == (0, 1, 3)
        assert letter.error_type == "ValueError" and letter.error == "bad record k1"
        assert letter.record.timestamp == 42_000 and letter.record.trace_context is None
        assert letter.undecodable is False
        stats = driver.stats("upper")
        assert (stats.failed, stats.dead_lettered, stats.retried) == (1, 1, 2)
        assert driver.lag("upper").lag == 0


def test_dead_letter_record_replays_as_the_original() -> None:
    with driver_for(ComputationPolicy.NONE.with_(dlq=DLQ)) as driver:
        original = Record("k1", b"bad", Watermark.of(5000, 3).value, Flag.USER1, b"trace")
        driver.pipe_record(IN, original)
        letter = driver.read_dead_letters(DLQ)[0]
        assert letter.original_record == original


def test_not_a_dead_letter_record_is_reported() -> None:
    with pytest.raises(StreamcoreError, match="not a streamcore dead-letter record"):
        DeadLetter.of(Record("k", b"x"))


def test_skip_continues_after_the_retries() -> None:
    policy = ComputationPolicy(max_retries=1, delay=0.1, continue_on_failure=True)
    with driver_for(policy) as driver:
        driver.pipe_records(IN, [Record.of("k1", b"bad"), Record.of("k2", b"x")])
        assert datas(driver.read_output(OUT)) == [b"X"]
        stats = driver.stats("upper")
        assert (stats.skipped, stats.failed, stats.retried) == (1, 1, 1)
        assert driver.lag("upper").lag == 0


def test_skip_first_failures_skips_that_many_then_terminates() -> None:
    policy = ComputationPolicy(max_retries=0, delay=0.0, max_delay=0.0, skip_first_failures=1)
    with driver_for(policy) as driver:
        driver.pipe(IN, "k1", b"bad")
        driver.pipe(IN, "k2", b"x")
        assert datas(driver.read_output(OUT)) == [b"X"]
        assert driver.stats("upper").skipped == 1
        driver.pipe(IN, "k3", b"bad")
        assert driver.is_terminated("upper")
        assert "bad record k3" in (driver.stats("upper").failure or "")
        driver.pipe(IN, "k4", b"y")  # a terminated unit reads no more
        assert driver.read_output(OUT) == []
        assert driver.lag("upper").lag == 2  # the failed record stays uncommitted


def test_terminate_leaves_the_failed_record_uncommitted_and_others_running() -> None:
    topology = (
        Topology.builder()
        .add_computation(Upper, [f"i1:{IN}", f"o1:{OUT}"])
        .add_computation(lambda: Upper("other"), [f"i1:{IN}", "o1:app/other"])
        .build()
    )
    settings = Settings().set_policy("upper", ComputationPolicy.NONE)
    settings.set_policy("other", ComputationPolicy.NONE.with_(continue_on_failure=True))
    with TopologyTestDriver(topology, settings) as driver:
        driver.pipe_records(
            IN, [Record.of("k1", b"a"), Record.of("k2", b"bad"), Record.of("k3", b"c")]
        )
        assert driver.is_terminated("upper") and not driver.is_terminated("other")
        assert datas(driver.read_output(OUT)) == [b"A"]
        assert datas(driver.read_output("app/other")) == [b"A", b"C"]
        lag = driver.lag("upper")
        assert (lag.pos, lag.lag) == (1, 2)


def test_undecodable_bytes_are_dead_lettered_without_retries() -> None:
    with driver_for(ComputationPolicy(max_retries=5, dlq=DLQ)) as driver:
        driver.manager.appender(IN).append("k1", b"\x00not a record")
        driver.pipe(IN, "k2", b"x")
        assert datas(driver.read_output(OUT)) == [b"X"]
        letter = driver.read_dead_letters(DLQ)[0]
        assert letter.undecodable and letter.record.data == b"\x00not a record"
        assert letter.error_type == "CodecError" and letter.attempts == 1
        assert driver.stats("upper").retried == 0
        driver.manager.appender(IN).append("k3", b"\x00garbage, last of its batch")
        driver.advance_time(0)
        assert [r.key for r in driver.read_dlq(DLQ)] == ["k3"]
        assert driver.lag("upper").lag == 0


def test_poison_pill_checkpoints_and_stops() -> None:
    with driver_for(ask=False) as driver:
        driver.pipe_records(
            IN,
            [
                Record.of("k1", b"a"),
                Record.of("k2", b"b", flags=Flag.POISON_PILL),
                Record.of("k3", b"c"),
            ],
        )
        assert datas(driver.read_output(OUT)) == [b"A", b"B"]
        assert driver.stats("upper").state == "stopped"
        lag = driver.lag("upper")
        assert (lag.pos, lag.lag) == (2, 1)


class Timed(Computation):
    def __init__(self) -> None:
        super().__init__("timed", 1, 1)

    def process_record(self, context, input_stream, record) -> None:
        when = context.now_ms() + int(record.data)
        context.set_timer(record.key, when)
        context.ask_for_checkpoint()

    def process_timer(self, context, key, timestamp_ms) -> None:
        context.produce_record("o1", key, str(timestamp_ms).encode())
        if key == "stop":
            context.ask_for_termination()
        context.ask_for_checkpoint()


def test_timers_fire_in_time_order_and_can_be_replaced() -> None:
    topology = Topology.builder().add_computation(Timed, [f"i1:{IN}", f"o1:{OUT}"]).build()
    with TopologyTestDriver(topology, start_ms=10_000) as driver:
        driver.pipe(IN, "b", b"300")
        driver.pipe(IN, "a", b"200")
        driver.pipe(IN, "c", b"900")
        driver.pipe(IN, "c", b"500")  # replaces c's timer
        driver.advance_time(199)
        assert driver.read_output(OUT) == []
        driver.advance_time(400)
        out = driver.read_output(OUT)
        assert [(r.key, r.data) for r in out] == [("a", b"10200"), ("b", b"10300"), ("c", b"10500")]
        assert driver.stats("timed").timers == 3
        driver.pipe(IN, "stop", b"1")
        driver.advance_time(1)
        assert [r.key for r in driver.read_output(OUT)] == ["stop"]
        assert driver.stats("timed").state == "stopped"
        with pytest.raises(ValueError, match="time only moves forward"):
            driver.advance_time(-1)


class Collect(BatchComputation):
    def __init__(self, fail_on: bytes | None = None) -> None:
        super().__init__("collect", 2, 1)
        self.fail_on = fail_on

    def batch_process(self, context, input_stream, records) -> None:
        if self.fail_on is not None and any(r.data == self.fail_on for r in records):
            raise RuntimeError("batch failed")
        joined = b",".join(r.data for r in records)
        context.produce_record("o1", input_stream, joined)


def batch_driver(policy: ComputationPolicy, fail_on: bytes | None = None) -> TopologyTestDriver:
    topology = (
        Topology.builder()
        .add_computation(lambda: Collect(fail_on), ["i1:app/left", "i2:app/right", f"o1:{OUT}"])
        .build()
    )
    return TopologyTestDriver(topology, Settings().set_policy("collect", policy), start_ms=0)


def test_batch_flushes_on_capacity_threshold_and_input_change() -> None:
    with batch_driver(ComputationPolicy(batch_capacity=3, batch_threshold=2.0)) as driver:
        for i in range(4):
            driver.pipe("app/left", f"k{i}", str(i).encode())
        assert [(r.key, r.data) for r in driver.read_output(OUT)] == [("i1", b"0,1,2")]
        assert driver.lag("collect").lag == 1  # record 3 waits in the batch, uncommitted
        driver.pipe("app/right", "r", b"R")  # input change flushes the left batch
        assert [(r.key, r.data) for r in driver.read_output(OUT)] == [("i1", b"3")]
        driver.advance_time(2000)  # threshold timer
        assert [(r.key, r.data) for r in driver.read_output(OUT)] == [("i2", b"R")]
        assert driver.lag("collect").lag == 0


def test_failed_batch_goes_to_the_dead_letter_stream_whole() -> None:
    policy = ComputationPolicy(max_retries=1, delay=0.0, batch_capacity=3, dlq=DLQ)
    with batch_driver(policy, fail_on=b"2") as driver:
        for i in range(3):
            driver.pipe("app/left", f"k{i}", str(i).encode())
        assert driver.read_output(OUT) == []
        assert sorted(r.key for r in driver.read_dlq(DLQ)) == ["k0", "k1", "k2"]
        assert driver.stats("collect").dead_lettered == 3
        driver.pipe_records("app/left", [Record.of(f"n{i}", b"n") for i in range(3)])
        assert [r.data for r in driver.read_output(OUT)] == [b"n,n,n"]
        assert driver.lag("collect").lag == 0


def test_batch_retry_does_not_duplicate_the_triggering_record() -> None:
    class Flaky(Collect):
        failures = 1

        def batch_process(self, context, input_stream, records) -> None:
            if Flaky.failures:
                Flaky.failures -= 1
                raise RuntimeError("transient")
            super().batch_process(context, input_stream, records)

    topology = Topology.builder().add_computation(
        Flaky, ["i1:app/left", "i2:app/right", f"o1:{OUT}"]
    )
    settings = Settings().set_policy(
        "collect", ComputationPolicy(max_retries=2, delay=0.0, batch_capacity=2)
    )
    with TopologyTestDriver(topology.build(), settings) as driver:
        driver.pipe_records("app/left", [Record.of("a", b"a"), Record.of("b", b"b")])
        assert [r.data for r in driver.read_output(OUT)] == [b"a,b"]


class Redact(RecordFilter):
    def after_read(self, record, offset):
        return None if record.key.startswith("drop") else record

    def before_append(self, record):
        if record.data == b"SECRET":
            return None
        return record.with_data(record.data + b"!")


def test_filters_drop_and_change_records() -> None:
    topology = Topology.builder().add_computation(Upper, [f"i1:{IN}", f"o1:{OUT}"]).build()
    settings = Settings().add_filter(IN, Redact()).add_filter(OUT, Redact())
    with TopologyTestDriver(topology, settings) as driver:
        driver.pipe_records(
            IN, [Record.of("k1", b"a"), Record.of("drop-me", b"b"), Record.of("k2", b"secret")]
        )
        assert datas(driver.read_output(OUT)) == [b"A!"]
        assert driver.lag("upper").lag == 0  # a dropped record still counts as done


def test_producing_to_an_unknown_stream_fails_the_record() -> None:
    class Wrong(Computation):
        def __init__(self) -> None:
            super().__init__("wrong", 1, 1)

        def process_record(self, context, input_stream, record) -> None:
            context.produce_record("o7", record)

    topology = Topology.builder().add_computation(Wrong, [f"i1:{IN}", f"o1:{OUT}"]).build()
    settings = Settings().set_policy("wrong", ComputationPolicy.NONE)
    with TopologyTestDriver(topology, settings) as driver:
        driver.pipe(IN, "k", b"x")
        assert driver.is_terminated("wrong")
        assert "no output stream 'o7'" in (driver.stats("wrong").failure or "")


def test_context_exposes_offset_policy_and_name() -> None:
    seen = []

    class Look(Computation):
        def __init__(self) -> None:
            super().__init__("look", 1, 0)

        def process_record(self, context, input_stream, record) -> None:
            seen.append((input_stream, str(context.last_offset), context.computation_name))
            seen.append(context.policy.max_retries)

    topology = Topology.builder().add_computation(Look, [f"i1:{IN}"]).build()
    with TopologyTestDriver(topology) as driver:
        driver.pipe(IN, "k", b"x")
    assert seen == [("i1", "app-in-00:+0", "look"), 20]


def test_driver_errors() -> None:
    driver = driver_for()
    with pytest.raises(TopologyError, match="not part of the topology"):
        driver.pipe("app/nope", "k", b"x")
    driver.close()
    with pytest.raises(ComputationError, match="closed"):
        driver.pipe(IN, "k", b"x")


class Ticker(Computation):
    """A source: no input, produces one record per second from a timer; the third tick fails."""

    def __init__(self) -> None:
        super().__init__("ticker", 0, 1)
        self.ticks = 0

    def init(self, context) -> None:
        context.set_timer("tick", context.now_ms() + 1000)

    def process_record(self, context, input_stream, record) -> None:
        raise AssertionError("a source reads no record")

    def process_timer(self, context, key, timestamp_ms) -> None:
        self.ticks += 1
        context.set_timer("tick", timestamp_ms + 1000)
        if self.ticks == 3:
            raise RuntimeError("tick failed")
        context.produce_record("o1", Record(f"t{self.ticks}", b"", timestamp_ms << 17))
        context.set_source_low_watermark(timestamp_ms << 17)
        context.ask_for_checkpoint()


def test_a_source_produces_from_timers_and_timer_failures_follow_the_policy() -> None:
    topology = Topology.builder().add_computation(Ticker, [f"o1:{OUT}"]).build()
    settings = Settings().set_policy(
        "ticker", ComputationPolicy.NONE.with_(continue_on_failure=True)
    )
    with TopologyTestDriver(topology, settings, start_ms=0) as driver:
        driver.advance_time(4000)
        assert [(r.key, r.timestamp) for r in driver.read_output(OUT)] == [
            ("t1", 1000),
            ("t2", 2000),
            ("t4", 4000),
        ]
        stats = driver.stats("ticker")
        assert (stats.timers, stats.failed, stats.skipped) == (4, 1, 0)


def test_checkpoint_in_the_middle_of_a_read_batch_commits_up_to_the_ask() -> None:
    with batch_driver(ComputationPolicy(batch_capacity=3, batch_threshold=5.0)) as driver:
        driver.pipe_records("app/left", [Record.of(f"k{i}", b"%d" % i) for i in range(7)])
        assert [r.data for r in driver.read_output(OUT)] == [b"0,1,2", b"3,4,5"]
        lag = driver.lag("collect")
        assert (lag.pos, lag.lag) == (6, 1)  # k6 is buffered in the batch, not committed
        driver.advance_time(5000)
        assert [r.data for r in driver.read_output(OUT)] == [b"6"]
        assert driver.lag("collect").lag == 0


def test_the_processing_guarantee_is_accepted_and_makes_no_difference_in_memory() -> None:
    """Production Settings (exactly_once) can be shared with tests: the driver runs in memory,
    where a checkpoint is atomic anyway, so both guarantees give the same results."""

    def run(guarantee: str) -> tuple[object, ...]:
        topology = Topology.builder().add_computation(Upper, [f"i1:{IN}", f"o1:{OUT}"]).build()
        settings = Settings(processing_guarantee=guarantee, instance_id="test")
        settings.set_policy("upper", ComputationPolicy(max_retries=1, delay=0.5, dlq=DLQ))
        with TopologyTestDriver(topology, settings, start_ms=1_000_000) as driver:
            for key, data in [("k1", b"a"), ("k2", b"bad1"), ("k3", b"bad"), ("k4", b"b")]:
                driver.pipe(IN, key, data)
            stats = driver.stats("upper")
            return (
                [(r.key, r.data) for r in driver.read_output(OUT)],
                [d.record.key for d in driver.read_dead_letters(DLQ)],
                (stats.processed, stats.retried, stats.failed),
                driver.lag("upper").lag,
                driver.now_ms,
            )

    exactly_once = run("exactly_once")
    assert exactly_once == run("at_least_once")
    assert exactly_once[0] == [("k1", b"A"), ("k2", b"BAD1"), ("k4", b"B")]
    assert exactly_once[1] == ["k3"]
