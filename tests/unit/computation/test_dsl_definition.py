"""The DSL's compile step: fusion into computations, naming, wiring, and definition errors."""

from __future__ import annotations

import pytest

from streamcore.codecs import AvroCodec, JsonCodec
from streamcore.computation import Topology
from streamcore.computation.dsl import Stream, add_to, build, segments
from streamcore.computation.dsl_errors import (
    DslDefinitionError,
    NotCallableError,
    UnfinishedStreamError,
)
from streamcore.errors import TopologyError


def is_big(key, value):
    return value["total"] >= 100


def always(key, value):
    return True


def test_a_chain_of_stateless_operators_is_fused_into_one_computation():
    source = Stream.of("shop/orders", codec="json")
    big, small = (
        source.filter(lambda k, v: v["qty"] > 0)
        .map(lambda k, v: (k, v))
        .map_values(dict)
        .flat_map(lambda k, v: [(k, v)])
        .branch(is_big, always)
    )
    big.to("shop/big")
    small.to("shop/small")
    topology = build(source)
    assert topology.computation_names() == ["shop/orders-dsl"]
    assert topology.input_streams("shop/orders-dsl") == ["shop/orders"]
    assert topology.output_streams("shop/orders-dsl") == ["shop/big", "shop/small"]
    assert topology.metadata("shop/orders-dsl").outputs == ("o1", "o2")


def test_through_materializes_a_stream_and_starts_a_new_computation():
    tail = Stream.of("app/raw").map_values(bytes.upper).through("app/upper").filter(always)
    sink = tail.to("app/out")
    topology = build(sink)
    assert topology.computation_names() == ["app/raw-dsl", "app/upper-dsl"]
    assert topology.output_streams("app/raw-dsl") == ["app/upper"]
    assert topology.input_streams("app/upper-dsl") == ["app/upper"]
    assert topology.output_streams("app/upper-dsl") == ["app/out"]


def test_any_stream_or_sink_of_a_graph_builds_the_whole_graph():
    source = Stream.of("app/raw")
    middle = source.through("app/mid")
    sink = middle.to("app/out")
    names = [s.name for s in segments(source)]
    assert names == ["app/raw-dsl", "app/mid-dsl"]
    assert [s.name for s in segments(middle)] == names
    assert [s.name for s in segments(sink)] == names
    assert [s.name for s in segments(sink, source, middle)] == names


def test_fan_out_of_one_stream_to_several_sinks_dedupes_output_streams():
    source = Stream.of("app/in")
    source.to("app/a")
    source.filter(always).to("app/b")
    source.map_values(bytes).to("app/a")
    (subtopology,) = segments(source)
    assert subtopology.outputs == ("app/a", "app/b")


def test_names_are_derived_from_the_source_and_unique_per_build():
    first = Stream.of("app/in")
    first.to("app/a")
    second = Stream.of("app/in")
    second.to("app/b")
    plain = Stream.of("events")
    plain.to("out")
    assert [s.name for s in segments(first, second, plain)] == [
        "app/in-dsl",
        "app/in-dsl-2",
        "events_dsl",
    ]


def test_name_overrides_the_computation_name_on_of_and_through():
    source = Stream.of("app/in", name="app/parser")
    source.through("app/mid", name="app/router").to("app/out")
    assert [s.name for s in segments(source)] == ["app/parser", "app/router"]


def test_two_computations_with_the_same_explicit_name_are_refused():
    a = Stream.of("app/a", name="app/same")
    a.to("app/x")
    b = Stream.of("app/b", name="app/same")
    b.to("app/y")
    with pytest.raises(DslDefinitionError, match=r"named 'app/same'.*distinct name="):
        build(a, b)


def test_value_codecs_are_resolved_per_stream_and_inherited_along_the_chain(tmp_path):
    schema = {
        "type": "record",
        "name": "Order",
        "namespace": "test.dsl",
        "fields": [{"name": "id", "type": "long"}],
    }
    source = Stream.of("app/in", codec="json")
    assert isinstance(source.filter(always).codec, JsonCodec)
    through = source.through("app/mid", codec="avro", schema=schema)
    assert isinstance(through.codec, AvroCodec)
    assert Stream.of("app/raw").codec.name == "bytes"


def test_mixing_dsl_chains_with_hand_written_computations_in_one_builder():
    from streamcore.computation.dsl_compile import DslComputation

    source = Stream.of("app/in")
    source.to("app/out")
    builder = add_to(Topology.builder(), source)
    other = Stream.of("app/out", name="app/second")
    other.to("app/final")
    topology = add_to(builder, other).build()
    assert topology.computation_names() == ["app/in-dsl", "app/second"]
    assert isinstance(topology.supplier("app/second")(), DslComputation)


@pytest.mark.parametrize(
    ("operator", "args"),
    [("filter", (42,)), ("map", ("f",)), ("map_values", (None,)), ("flat_map", ([],))],
)
def test_a_non_callable_operator_argument_is_refused_at_once(operator, args):
    with pytest.raises(NotCallableError, match=rf"\.{operator}\(\.\.\.\): expected a function"):
        getattr(Stream.of("app/in"), operator)(*args)


def test_branch_needs_callable_predicates():
    with pytest.raises(DslDefinitionError, match="at least one predicate"):
        Stream.of("app/in").branch()
    with pytest.raises(NotCallableError, match="branch"):
        Stream.of("app/in").branch(always, "not a function")


def test_a_chain_without_sink_is_refused_with_its_location():
    source = Stream.of("app/in")
    keep, _drop = source.filter(always).branch(is_big, always)
    keep.to("app/big")
    with pytest.raises(UnfinishedStreamError) as info:
        build(source)
    message = str(info.value)
    assert "Stream.of('app/in').filter(always).branch(is_big, always)[1] has no sink" in message
    assert ".to('<stream>')" in message


def test_a_source_without_operators_is_an_unfinished_chain():
    with pytest.raises(UnfinishedStreamError, match=r"Stream.of\('app/in'\) has no sink"):
        build(Stream.of("app/in"))


def test_a_through_stream_without_sink_is_unfinished():
    source = Stream.of("app/in")
    source.through("app/mid").filter(always)
    with pytest.raises(UnfinishedStreamError, match=r"through\('app/mid'\).filter\(always\)"):
        build(source)


def test_build_needs_streams_or_sinks():
    with pytest.raises(DslDefinitionError, match="pass the streams or sinks"):
        build()
    with pytest.raises(DslDefinitionError, match=r"expected a Stream or a Sink.*str"):
        build("app/in")


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Stream.of("bad name!"), r"Stream.of\('bad name!'\): invalid name"),
        (lambda: Stream.of("app/in").to("x/-y"), r"\.to\('x/-y'\): invalid name"),
        (lambda: Stream.of("app/in", codec="yaml"), "unknown value codec 'yaml'"),
        (lambda: Stream.of("app/in", codec="avro"), "needs the value schema: pass schema="),
        (lambda: Stream.of("app/in", codec="json", schema={}), "takes no schema"),
        (lambda: Stream.of("app/in").to("app/out", schema={}), "schema= needs codec="),
        (lambda: Stream.of("app/in", name="a b"), "not a valid computation name"),
        (
            lambda: Stream.of("app/in", codec="avro", schema="no.such.Schema"),
            "Stream.of\\('app/in'\\): codec 'avro'",
        ),
    ],
)
def test_definition_errors_name_the_place_and_the_fix(make, match):
    with pytest.raises(DslDefinitionError, match=match):
        make()


def test_a_cycle_through_streams_is_a_topology_error():
    source = Stream.of("app/a")
    source.through("app/b").to("app/a")
    with pytest.raises(TopologyError, match="cycle"):
        build(source)


def test_definition_errors_are_topology_errors():
    assert issubclass(DslDefinitionError, TopologyError)
    assert issubclass(NotCallableError, TypeError)


def test_operators_added_after_build_do_not_change_the_built_topology():
    from streamcore.computation.dsl_compile import DslComputation

    source = Stream.of("app/in")
    source.to("app/out")
    topology = build(source)
    source.to("app/later")
    computation = topology.supplier("app/in-dsl")()
    assert isinstance(computation, DslComputation)
    assert computation.subtopology.outputs == ("app/out",)
    assert len(computation.subtopology.root.children) == 1
