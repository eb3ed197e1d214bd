"""DSL topologies run through the TopologyTestDriver: operator semantics, value codecs, failures."""

from __future__ import annotations

import json

import pytest

from streamcore.codecs import get_codec
from streamcore.computation import ComputationPolicy, Settings, Topology, TopologyTestDriver
from streamcore.record import Flag, Record
from streamcore.watermark import Watermark

DLQ = "app/dlq"


def js(value) -> bytes:
    return json.dumps(value).encode()


def values(records: list[Record]) -> list:
    return [json.loads(r.data) for r in records]


def dlq_settings(computation: str, max_retries: int = 0) -> Settings:
    policy = ComputationPolicy(max_retries=max_retries, delay=0.0, max_delay=0.0, dlq=DLQ)
    return Settings().set_policy(computation, policy)


@pytest.fixture
def run():
    """`run(topology, settings, [(stream, key, data), ...])` -> the driver after piping them."""
    drivers = []

    def make(topology, settings=None, inputs=()):
        driver = TopologyTestDriver(topology, settings)
        drivers.append(driver)
        for stream, key, data in inputs:
            driver.pipe(stream, key, data)
        return driver

    yield make
    for driver in drivers:
        driver.close()


def test_filter_map_map_values_and_flat_map_in_one_fused_chain(run):
    builder = Topology.builder()
    source = builder.stream("app/in", codec="json")
    (
        source.filter(lambda k, v: v["qty"] > 0)
        .map(lambda k, v: (f"{k}-{v['sku']}", v))
        .map_values(lambda v: {**v, "total": v["qty"] * v["price"]})
        .flat_map(lambda k, v: [(k, v), (f"{k}-copy", {"copy_of": v["total"]})])
        .to("app/out")
    )
    driver = run(
        builder.build(),
        inputs=[
            ("app/in", "a", js({"sku": "x", "qty": 2, "price": 5})),
            ("app/in", "b", js({"sku": "y", "qty": 0, "price": 7})),
            ("app/in", "c", js({"sku": "z", "qty": 1, "price": 3})),
        ],
    )
    out = driver.read_output("app/out")
    assert [r.key for r in out] == ["a-x", "a-x-copy", "c-z", "c-z-copy"]
    assert values(out) == [
        {"sku": "x", "qty": 2, "price": 5, "total": 10},
        {"copy_of": 10},
        {"sku": "z", "qty": 1, "price": 3, "total": 3},
        {"copy_of": 3},
    ]


def test_branch_sends_each_record_to_the_first_match_and_drops_unmatched(run):
    builder = Topology.builder()
    source = builder.stream("app/in", codec="json")
    big, medium = source.branch(lambda k, v: v >= 100, lambda k, v: v >= 10)
    big.to("app/big")
    medium.to("app/medium")
    driver = run(
        builder.build(), inputs=[("app/in", str(n), js(n)) for n in (5, 150, 50, 100, 9, 10)]
    )
    assert values(driver.read_output("app/big")) == [150, 100]
    assert values(driver.read_output("app/medium")) == [50, 10]


def test_a_stream_used_twice_fans_every_record_out(run):
    builder = Topology.builder()
    source = builder.stream("app/in")
    source.to("app/copy")
    source.map_values(bytes.upper).to("app/upper")
    driver = run(builder.build(), inputs=[("app/in", "k", b"abc"), ("app/in", "k", b"de")])
    assert [r.data for r in driver.read_output("app/copy")] == [b"abc", b"de"]
    assert [r.data for r in driver.read_output("app/upper")] == [b"ABC", b"DE"]


def test_through_feeds_a_second_computation(run):
    builder = Topology.builder()
    source = builder.stream("app/in", codec="json")
    (
        source.map_values(lambda v: v * 2)
        .through("app/doubled")
        .filter(lambda k, v: v > 4)
        .map_values(str)
        .to("app/out", codec="bytes")
    )
    driver = run(builder.build(), inputs=[("app/in", str(n), js(n)) for n in (1, 2, 3, 4)])
    assert values(driver.read_output("app/doubled")) == [2, 4, 6, 8]
    out = driver.read_output("app/out")
    assert [(r.key, r.data) for r in out] == [("3", b"6"), ("4", b"8")]


def test_outputs_keep_the_watermark_of_their_input_record(run):
    builder = Topology.builder()
    source = builder.stream("app/in")
    source.map_values(bytes.upper).to("app/out")
    driver = run(builder.build())
    watermark = Watermark.of(1_600_000_000_123, 3).value
    driver.pipe_record("app/in", Record("k", b"x", watermark))
    (out,) = driver.read_output("app/out")
    assert out.watermark == watermark
    assert out.timestamp == 1_600_000_000_123


def test_avro_values_with_a_schema(run):
    schema = {
        "type": "record",
        "name": "Reading",
        "namespace": "test.dsl",
        "fields": [{"name": "sensor", "type": "string"}, {"name": "celsius", "type": "double"}],
    }
    codec = get_codec("avro", schema)
    builder = Topology.builder()
    source = builder.stream("app/readings", codec="avro", schema=schema)
    source.map_values(lambda v: {**v, "celsius": v["celsius"] + 1.5}).to("app/out")
    driver = run(
        builder.build(),
        inputs=[("app/readings", "s1", codec.encode({"sensor": "s1", "celsius": 20.0}))],
    )
    (out,) = driver.read_output("app/out")
    assert codec.decode(out.data) == {"sensor": "s1", "celsius": 21.5}


def test_a_bytes_stream_writes_str_values_as_utf8(run):
    builder = Topology.builder()
    source = builder.stream("app/in")
    source.map_values(lambda v: v.decode() + " é").to("app/out")
    driver = run(builder.build(), inputs=[("app/in", "k", b"caf")])
    assert [r.data for r in driver.read_output("app/out")] == ["caf é".encode()]


def test_a_failing_function_sends_the_record_to_the_dead_letter_stream(run):
    builder = Topology.builder()
    source = builder.stream("app/in", codec="json")
    source.map_values(lambda v: 100 // v).to("app/out")
    driver = run(
        builder.build(),
        dlq_settings("app/in-dsl", max_retries=2),
        inputs=[("app/in", "a", js(4)), ("app/in", "b", js(0)), ("app/in", "c", js(50))],
    )
    assert values(driver.read_output("app/out")) == [25, 2]
    (dead,) = driver.read_dlq(DLQ)
    assert dead.key == "b"
    assert json.loads(dead.data) == 0


def test_a_failed_record_leaves_no_partial_outputs(run):
    """The first sink of a fan-out ran before the second raised: the retried/dead-lettered
    record must not leave that first output behind."""
    builder = Topology.builder()
    source = builder.stream("app/in", codec="json")
    source.to("app/first")
    source.map_values(lambda v: 1 // v).to("app/second")
    driver = run(
        builder.build(),
        dlq_settings("app/in-dsl", max_retries=1),
        inputs=[("app/in", "ok", js(1)), ("app/in", "bad", js(0)), ("app/in", "end", js(1))],
    )
    assert [r.key for r in driver.read_output("app/first")] == ["ok", "end"]
    assert [r.key for r in driver.read_output("app/second")] == ["ok", "end"]
    assert [r.key for r in driver.read_dlq(DLQ)] == ["bad"]


@pytest.mark.parametrize(
    ("chain", "data", "error_type"),
    [
        (lambda s: s.to("app/out"), b"{not json", "CodecError"),
        (
            lambda s: s.map(lambda k, v: (42 if v == 1 else k, v)).to("app/out"),
            b"1",
            "RecordFieldError",
        ),
        (
            lambda s: s.map_values(lambda v: object() if v == 1 else v).to("app/out"),
            b"1",
            "CodecError",
        ),
        (lambda s: s.map(lambda k, v: k if v == 1 else (k, v)).to("app/out"), b"1", "ValueError"),
        (
            lambda s: s.flat_map(lambda k, v: 7 if v == 1 else [(k, v)]).to("app/out"),
            b"1",
            "TypeError",
        ),
    ],
    ids=["bad-json-input", "non-str-key", "unencodable-value", "map-not-a-pair", "not-iterable"],
)
def test_bad_input_and_bad_function_results_go_to_the_dead_letter_stream(
    run, chain, data, error_type
):
    builder = Topology.builder()
    source = builder.stream("app/in", codec="json")
    chain(source)
    driver = run(
        builder.build(),
        dlq_settings("app/in-dsl"),
        inputs=[("app/in", "bad", data), ("app/in", "good", b"2")],
    )
    (dead,) = driver.read_dead_letters(DLQ)
    assert (dead.record.key, dead.record.data) == ("bad", data)
    assert (dead.computation, dead.stream, dead.error_type) == ("app/in-dsl", "app/in", error_type)
    assert [(r.key, r.data) for r in driver.read_output("app/out")] == [("good", b"2")]


def test_a_failure_names_the_dsl_operator_in_the_termination_log(run, caplog):
    builder = Topology.builder()
    source = builder.stream("app/in", codec="json")
    source.filter(lambda k, v: True).map_values(lambda v: v["missing"]).to("app/out")
    settings = Settings().set_policy("app/in-dsl", ComputationPolicy.NONE)
    driver = run(builder.build(), settings, inputs=[("app/in", "k", js({"a": 1}))])
    assert driver.is_terminated("app/in-dsl")
    assert "in DSL operator builder.stream('app/in').filter(<lambda>).map_values(<lambda>)" in (
        caplog.text
    )
    assert driver.read_output("app/out") == []


def test_every_record_is_checkpointed_and_control_records_skip_the_chain(run):
    builder = Topology.builder()
    source = builder.stream("app/in", codec="json")
    source.map_values(lambda v: v + 1).to("app/out")
    driver = run(builder.build(), inputs=[("app/in", "a", js(1))])
    driver.pipe("app/in", "commit", b"", flags=Flag.COMMIT)
    driver.pipe("app/in", "b", js(2))
    assert values(driver.read_output("app/out")) == [2, 3]
    assert driver.lag("app/in-dsl").lag == 0
    stats = driver.stats("app/in-dsl")
    assert (stats.processed, stats.failed) == (3, 0)
