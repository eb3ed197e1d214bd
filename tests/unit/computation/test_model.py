"""Topology wiring checks, Settings, ComputationPolicy and Computation metadata."""

from __future__ import annotations

import pytest

from streamcore.computation import (
    Computation,
    ComputationPolicy,
    RecordFilter,
    Settings,
    Topology,
)
from streamcore.errors import TopologyError


def comp(name: str, inputs: int = 1, outputs: int = 1) -> type[Computation]:
    class _C(Computation):
        def __init__(self) -> None:
            super().__init__(name, inputs, outputs)

        def process_record(self, context, input_stream, record) -> None:
            return None

    return _C


def test_metadata_names_logical_streams() -> None:
    c = comp("enrich", inputs=2, outputs=3)()
    assert c.metadata.inputs == ("i1", "i2")
    assert c.metadata.outputs == ("o1", "o2", "o3")
    assert c.name == "enrich"


def test_computation_name_must_be_a_group_name() -> None:
    with pytest.raises(TopologyError, match="not a valid group name"):
        comp("bad name!")()


def test_topology_lists_streams_and_mappings() -> None:
    t = (
        Topology.builder()
        .add_computation(comp("parse"), ["i1:app/raw", "o1:app/parsed"])
        .add_computation(comp("route", 1, 2), ["i1:app/parsed", "o1:app/good", "o2:app/bad"])
        .build()
    )
    assert t.computation_names() == ["parse", "route"]
    assert t.streams() == ["app/raw", "app/parsed", "app/good", "app/bad"]
    assert t.input_streams("route") == ["app/parsed"]
    assert t.output_mapping("route") == {"o1": "app/good", "o2": "app/bad"}
    assert t.readers("app/parsed") == ["route"]
    assert t.is_source("parse") is False


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        (["i1:app/in", "o2:app/out"], r"has no stream 'o2'"),
        (["i1:app/in"], r"o1 not mapped; add e.g. 'o1:namespace/stream'"),
        (["i1:app/in", "o1:app/out", "o1:app/other"], "mapped twice"),
        (["i1=app/in", "o1:app/out"], "bad mapping entry"),
        (["i1:app/in", "o1:bad name"], "not a valid stream name"),
        ("i1:app/in", "wrap it in a list"),
    ],
)
def test_bad_mappings_say_what_to_fix(mapping, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        Topology.builder().add_computation(comp("c"), mapping)


def test_duplicate_names_are_rejected() -> None:
    builder = Topology.builder().add_computation(comp("c"), ["i1:a/x", "o1:a/y"])
    with pytest.raises(TopologyError, match="duplicate computation name 'c'"):
        builder.add_computation(comp("c"), ["i1:a/y", "o1:a/z"])


def test_cycles_are_rejected_with_the_loop() -> None:
    builder = (
        Topology.builder()
        .add_computation(comp("a"), ["i1:x/one", "o1:x/two"])
        .add_computation(comp("b"), ["i1:x/two", "o1:x/three"])
        .add_computation(comp("c"), ["i1:x/three", "o1:x/one"])
    )
    with pytest.raises(TopologyError, match="cycle: a -> b -> c -> a"):
        builder.build()


def test_self_loop_is_a_cycle() -> None:
    with pytest.raises(TopologyError, match="cycle: a -> a"):
        Topology.builder().add_computation(comp("a"), ["i1:x/s", "o1:x/s"]).build()


def test_empty_topology_and_bad_supplier() -> None:
    with pytest.raises(TopologyError, match="at least one computation"):
        Topology.builder().build()
    with pytest.raises(TopologyError, match="not a Computation"):
        Topology.builder().add_computation(lambda: "nope", ["i1:a/b"])  # type: ignore[arg-type,return-value]
    t = Topology.builder().add_computation(comp("a"), ["i1:x/s", "o1:x/t"]).build()
    with pytest.raises(TopologyError, match="no computation 'zz'"):
        t.metadata("zz")


def test_mermaid_export_shows_wiring_settings_and_dlq() -> None:
    t = Topology.builder().add_computation(comp("a"), ["i1:x/in", "o1:x/out"]).build()
    settings = Settings().set_partitions("x/in", 4).set_concurrency("a", 2)
    settings.set_policy("a", ComputationPolicy(dlq="x/dlq-a"))
    text = t.to_mermaid(settings)
    assert text.startswith("flowchart LR\n")
    assert '(["x/in<br/>partitions: 4"])' in text
    assert '["a<br/>concurrency: 2"]' in text
    assert "-->|i1|" in text and "-->|o1|" in text and "-.->|dlq|" in text
    assert "partitions" not in t.to_mermaid()


def test_settings_defaults_and_overrides() -> None:
    s = Settings(default_partitions=2, default_concurrency=3)
    s.set_partitions("app/in", 8).set_codec("app/in", "json").set_concurrency("c", 1)
    policy = ComputationPolicy(max_retries=1)
    s.set_policy("c", policy)
    assert (s.partitions("app/in"), s.partitions("app/other")) == (8, 2)
    assert (s.codec("app/in"), s.codec("app/other")) == ("json", "avro")
    assert (s.concurrency("c"), s.concurrency("d")) == (1, 3)
    assert s.policy("c") is policy and s.policy("d") == ComputationPolicy()
    s.set_concurrency("default", 5).set_partitions("default", 6)
    assert (s.concurrency("d"), s.partitions("app/other")) == (5, 6)
    assert s.filter("app/in") is None
    f1, f2 = RecordFilter(), RecordFilter()
    s.add_filter("app/in", f1)
    assert s.filter("app/in") is f1
    s.add_filter("default", f2)
    assert s.filter("app/in").filters == (f2, f1)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: s.set_partitions("a/b", 0), "partitions of a/b must be a positive integer"),
        (lambda s: s.set_codec("a/b", "pickle"), "unknown codec 'pickle'"),
        (lambda s: s.set_concurrency("c", -1), "concurrency of c"),
        (lambda s: s.set_policy("c", {"max_retries": 1}), "must be a ComputationPolicy"),
        (lambda s: s.add_filter("a/b", object()), "must be a RecordFilter"),
    ],
)
def test_bad_settings_are_rejected(call, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        call(Settings())


def test_policy_backoff_doubles_up_to_max_delay() -> None:
    policy = ComputationPolicy(max_retries=8, delay=1.0, max_delay=60.0)
    assert [policy.retry_delay(i) for i in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert ComputationPolicy().max_retries == 20  # Nuxeo's default: ~15 minutes of trouble


def test_policy_fallback_order() -> None:
    assert ComputationPolicy().fallback == "terminate"
    none = ComputationPolicy.NONE
    assert none.fallback == "terminate" and none.max_retries == 0
    assert ComputationPolicy(continue_on_failure=True).fallback == "skip"
    assert ComputationPolicy(skip_first_failures=1).fallback == "skip_first"
    assert ComputationPolicy(dlq="a/dlq", continue_on_failure=True).fallback == "dead_letter"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_retries": -1}, "max_retries must be an integer from 0 to 10000"),
        ({"delay": 5.0, "max_delay": 1.0}, "need 0 <= delay <= max_delay"),
        ({"batch_capacity": 0}, "batch_capacity must be >= 1"),
        ({"batch_threshold": 0}, "batch_threshold must be > 0"),
        ({"dlq": "not valid!"}, "is not a valid stream name"),
        ({"skip_first_failures": -2}, "skip_first_failures must be >= 0"),
    ],
)
def test_bad_policies_are_rejected(kwargs, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        ComputationPolicy(**kwargs)
