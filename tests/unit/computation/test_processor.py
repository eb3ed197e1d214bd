"""The KIP-28 processor API adapter, run through the TopologyTestDriver."""

from __future__ import annotations

import json

import pytest

from streamcore.computation import (
    ComputationPolicy,
    Processor,
    Settings,
    Topology,
    TopologyTestDriver,
)
from streamcore.computation.dlq import DeadLetter
from streamcore.computation.errors import (
    DslDefinitionError,
    NotCallableError,
    UnknownOutputError,
)

DLQ = "app/dlq"


def js(value) -> bytes:
    return json.dumps(value).encode()


class Recorder(Processor):
    """Forwards every record as the test says, and remembers what the framework told it."""

    instances: list[Recorder] = []

    def __init__(self) -> None:
        self.seen: list[tuple] = []
        self.punctuations: list[int] = []
        self.inits = 0
        self.closed = False
        Recorder.instances.append(self)

    def init(self, context) -> None:
        self.context = context
        self.inits += 1

    def process(self, key, value) -> None:
        ctx = self.context
        self.seen.append((ctx.stream, key, value, ctx.timestamp, ctx.offset.offset))
        action = value.get("do") if isinstance(value, dict) else None
        if action == "all":
            ctx.forward(key, value)
        elif action == "index":
            ctx.forward(key, value, to=1)
        elif action == "name":
            ctx.send("app/b", key.upper(), value)
        elif action == "unknown":
            ctx.send("app/nowhere", key, value)
        elif action == "bad-index":
            ctx.forward(key, value, to=5)

    def punctuate(self, timestamp) -> None:
        self.punctuations.append(timestamp)
        self.context.send("app/a", "tick", {"at": timestamp})

    def close(self) -> None:
        self.closed = True


@pytest.fixture(autouse=True)
def _forget_instances():
    Recorder.instances.clear()


def topology(processor=Recorder, **options) -> Topology:
    options.setdefault("codec", "json")
    builder = Topology.builder().add_processor(
        "app/recorder",
        processor,
        inputs=["app/in", "app/other"],
        outputs=["app/a", "app/b"],
        **options,
    )
    return builder.build()


def driver_for(top: Topology, settings: Settings | None = None) -> TopologyTestDriver:
    return TopologyTestDriver(top, settings)


def the_processor() -> Recorder:
    live = [p for p in Recorder.instances if p.inits]
    assert len(live) == 1
    return live[0]


def test_process_sees_decoded_values_and_the_record_context():
    driver = driver_for(topology())
    driver.pipe("app/in", "k1", js({"n": 1}), timestamp_ms=1_600_000_000_000)
    driver.pipe("app/other", "k2", js({"n": 2}), timestamp_ms=1_600_000_000_500)
    proc = the_processor()
    assert proc.seen == [
        ("app/in", "k1", {"n": 1}, 1_600_000_000_000, 0),
        ("app/other", "k2", {"n": 2}, 1_600_000_000_500, 0),
    ]
    driver.close()
    assert proc.closed


def test_forward_to_all_to_an_index_and_send_to_a_named_stream():
    driver = driver_for(topology())
    driver.pipe("app/in", "x", js({"do": "all"}))
    driver.pipe("app/in", "y", js({"do": "index"}))
    driver.pipe("app/in", "z", js({"do": "name"}))
    a = driver.read_output("app/a")
    b = driver.read_output("app/b")
    assert [r.key for r in a] == ["x"]
    assert [r.key for r in b] == ["x", "y", "Z"]
    assert json.loads(b[2].data) == {"do": "name"}
    driver.close()


def test_per_stream_codecs():
    class Echo(Processor):
        def init(self, context) -> None:
            self.context = context

        def process(self, key, value) -> None:
            if self.context.stream == "app/other":
                assert isinstance(value, bytes)
                value = value.decode()
            self.context.send("app/a", key, {"got": value})
            self.context.send("app/b", key, json.dumps({"got": value}))

    builder = Topology.builder().add_processor(
        "app/echo",
        Echo,
        inputs=["app/in", "app/other"],
        outputs=["app/a", "app/b"],
        codec="json",
        codecs={"app/other": "bytes", "app/b": "bytes"},
    )
    driver = driver_for(builder.build())
    driver.pipe("app/in", "j", js([1, 2]))
    driver.pipe("app/other", "r", b"raw-bytes")
    assert [json.loads(r.data) for r in driver.read_output("app/a")] == [
        {"got": [1, 2]},
        {"got": "raw-bytes"},
    ]
    assert [r.data for r in driver.read_output("app/b")] == [
        b'{"got": [1, 2]}',
        b'{"got": "raw-bytes"}',
    ]
    driver.close()


def test_schedule_calls_punctuate_on_the_clock_without_repeating_missed_firings(caplog):
    class Ticker(Recorder):
        def init(self, context) -> None:
            super().init(context)
            context.schedule(1000)

    driver = driver_for(topology(Ticker))
    proc = the_processor()
    driver.advance_time(999)
    assert proc.punctuations == []
    driver.advance_time(1)
    assert len(proc.punctuations) == 1
    first = proc.punctuations[0]
    driver.advance_time(1000)
    assert proc.punctuations == [first, first + 1000]
    caplog.set_level("INFO", logger="streamcore.computation.processor")
    driver.advance_time(3500)  # one late firing, then back on the 1 s grid
    assert proc.punctuations == [first, first + 1000, first + 2000]
    assert "skipping the 2 missed firing(s)" in caplog.text
    driver.advance_time(500)
    assert proc.punctuations[-1] == first + 5000
    ticks = [json.loads(r.data)["at"] for r in driver.read_output("app/a")]
    assert ticks == proc.punctuations
    driver.close()


def test_sending_to_an_undeclared_output_fails_the_record_into_the_dead_letter_stream():
    policy = ComputationPolicy(max_retries=0, delay=0.0, max_delay=0.0, dlq=DLQ)
    driver = driver_for(topology(), Settings().set_policy("app/recorder", policy))
    driver.pipe("app/in", "u", js({"do": "unknown"}))
    driver.pipe("app/in", "i", js({"do": "bad-index"}))
    driver.pipe("app/in", "ok", js({"do": "all"}))
    dead = [DeadLetter.of(r) for r in driver.read_dlq(DLQ)]
    assert [(d.record.key, d.error_type) for d in dead] == [
        ("u", "UnknownOutputError"),
        ("i", "UnknownOutputError"),
    ]
    assert "add it to outputs=" in dead[0].error
    assert [r.key for r in driver.read_output("app/a")] == ["ok"]
    driver.close()


def test_unknown_output_error_is_a_lookup_error():
    assert issubclass(UnknownOutputError, LookupError)


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"inputs": []}, DslDefinitionError, "at least one input"),
        ({"inputs": ["app/in", "app/in"]}, DslDefinitionError, "repeat a stream"),
        ({"inputs": ["app/in"], "codecs": {"app/x": "json"}}, DslDefinitionError, "neither"),
        ({"inputs": ["bad name"]}, DslDefinitionError, "input"),
        ({"inputs": ["app/in"], "codec": "toml"}, DslDefinitionError, "unknown value codec"),
    ],
)
def test_add_processor_checks_its_arguments(options, error, match):
    with pytest.raises(error, match=match):
        Topology.builder().add_processor("app/p", Recorder, **options)


def test_add_processor_needs_a_processor():
    with pytest.raises(NotCallableError, match="Processor subclass"):
        Topology.builder().add_processor("app/p", 3, inputs=["app/in"])
    with pytest.raises(DslDefinitionError, match="not a Processor"):
        Topology.builder().add_processor("app/p", dict, inputs=["app/in"])


def test_schedule_needs_a_positive_interval():
    class Bad(Recorder):
        def init(self, context) -> None:
            super().init(context)
            context.schedule(0)

    with pytest.raises(DslDefinitionError, match="positive int"):
        TopologyTestDriver(topology(Bad)).pipe("app/in", "k", js({}))


def test_a_retried_record_leaves_no_duplicate_sends():
    class Flaky(Processor):
        failed = False

        def init(self, context) -> None:
            self.context = context

        def process(self, key, value) -> None:
            self.context.forward(key, value)
            if key == "flaky" and not Flaky.failed:
                Flaky.failed = True
                raise RuntimeError("transient")

    policy = ComputationPolicy(max_retries=2, delay=0.0, max_delay=0.0)
    builder = Topology.builder().add_processor(
        "app/flaky", Flaky, inputs=["app/in"], outputs=["app/a"]
    )
    driver = driver_for(builder.build(), Settings().set_policy("app/flaky", policy))
    for key in ("ok", "flaky", "after"):
        driver.pipe("app/in", key, b"v")
    assert [r.key for r in driver.read_output("app/a")] == ["ok", "flaky", "after"]
    assert Flaky.failed
    assert driver.stats("app/flaky").retried == 1
    driver.close()


def test_task_id_is_the_partition_of_the_record_being_processed():
    seen: list[tuple[int | None, int]] = []

    class Tasks(Processor):
        def init(self, context) -> None:
            self.context = context

        def process(self, key, value) -> None:
            seen.append((self.context.task_id, self.context.offset.partition.partition))

    builder = Topology.builder().add_processor(
        "app/tasks", Tasks, inputs=["app/in"], outputs=["app/a"], codec="json"
    )
    driver = driver_for(builder.build(), Settings().set_partitions("app/in", 3))
    for i in range(30):
        driver.pipe("app/in", f"k{i}", js(i))
    driver.close()
    assert len(seen) == 30
    assert all(task == partition for task, partition in seen)
    assert {partition for _task, partition in seen} == {0, 1, 2}
