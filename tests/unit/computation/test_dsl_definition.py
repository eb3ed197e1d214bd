"""The DSL's compile step: fusion into computations, naming, wiring, and definition errors; the
one builder surface that registers DSL streams, processors and computations."""

from __future__ import annotations

import pytest

from streamcore.codecs import AvroCodec, JsonCodec
from streamcore.computation import Computation, Processor, Topology
from streamcore.computation.errors import (
    DslDefinitionError,
    NotCallableError,
    UnfinishedStreamError,
)
from streamcore.errors import TopologyError


def is_big(key, value):
    return value["total"] >= 100


def always(key, value):
    return True


def stream(*args, **options):
    """A DSL stream on a builder of its own, to check what defining it raises."""
    return Topology.builder().stream(*args, **options)


def test_a_chain_of_stateless_operators_is_fused_into_one_computation():
    builder = Topology.builder()
    source = builder.stream("shop/orders", codec="json")
    big, small = (
        source.filter(lambda k, v: v["qty"] > 0)
        .map(lambda k, v: (k, v))
        .map_values(dict)
        .flat_map(lambda k, v: [(k, v)])
        .branch(is_big, always)
    )
    big.to("shop/big")
    small.to("shop/small")
    topology = builder.build()
    assert topology.computation_names() == ["shop/orders-dsl"]
    assert topology.input_streams("shop/orders-dsl") == ["shop/orders"]
    assert topology.output_streams("shop/orders-dsl") == ["shop/big", "shop/small"]
    assert topology.metadata("shop/orders-dsl").outputs == ("o1", "o2")


def test_through_materializes_a_stream_and_starts_a_new_computation():
    builder = Topology.builder()
    tail = builder.stream("app/raw").map_values(bytes.upper).through("app/upper").filter(always)
    tail.to("app/out")
    topology = builder.build()
    assert topology.computation_names() == ["app/raw-dsl", "app/upper-dsl"]
    assert topology.output_streams("app/raw-dsl") == ["app/upper"]
    assert topology.input_streams("app/upper-dsl") == ["app/upper"]
    assert topology.output_streams("app/upper-dsl") == ["app/out"]


def names(builder) -> list[str]:
    return builder.build().computation_names()


def test_the_builder_compiles_every_graph_registered_on_it():
    builder = Topology.builder()
    builder.stream("app/raw").through("app/mid").to("app/out")
    builder.stream("app/other").to("app/out2")
    assert names(builder) == ["app/raw-dsl", "app/other-dsl", "app/mid-dsl"]


def test_fan_out_of_one_stream_to_several_sinks_dedupes_output_streams():
    builder = Topology.builder()
    source = builder.stream("app/in")
    source.to("app/a")
    source.filter(always).to("app/b")
    source.map_values(bytes).to("app/a")
    topology = builder.build()
    assert topology.output_streams("app/in-dsl") == ["app/a", "app/b"]


def test_names_are_derived_from_the_source_and_unique_per_build():
    builder = Topology.builder()
    builder.stream("app/in").to("app/a")
    builder.stream("app/in").to("app/b")
    builder.stream("events").to("out")
    assert names(builder) == [
        "app/in-dsl",
        "app/in-dsl-2",
        "events_dsl",
    ]


def test_name_overrides_the_computation_name_on_of_and_through():
    builder = Topology.builder()
    source = builder.stream("app/in", name="app/parser")
    source.through("app/mid", name="app/router").to("app/out")
    assert names(builder) == ["app/parser", "app/router"]


def test_two_computations_with_the_same_explicit_name_are_refused():
    builder = Topology.builder()
    builder.stream("app/a", name="app/same").to("app/x")
    builder.stream("app/b", name="app/same").to("app/y")
    with pytest.raises(DslDefinitionError, match=r"named 'app/same'.*distinct name="):
        builder.build()


def test_value_codecs_are_resolved_per_stream_and_inherited_along_the_chain(tmp_path):
    schema = {
        "type": "record",
        "name": "Order",
        "namespace": "test.dsl",
        "fields": [{"name": "id", "type": "long"}],
    }
    builder = Topology.builder()
    source = builder.stream("app/in", codec="json")
    assert isinstance(source.filter(always).codec, JsonCodec)
    through = source.through("app/mid", codec="avro", schema=schema)
    assert isinstance(through.codec, AvroCodec)
    assert builder.stream("app/raw").codec.name == "bytes"


class Copy(Computation):
    def __init__(self) -> None:
        super().__init__("app/copy", inputs=1, outputs=1)

    def process_record(self, context, input_stream, record) -> None:
        context.produce_record("o1", record)


class Forward(Processor):
    def init(self, context) -> None:
        self.context = context

    def process(self, key, value) -> None:
        self.context.forward(key, value)


def test_one_builder_registers_computations_processors_and_dsl_streams_in_order():
    from streamcore.computation.dsl_compile import DslComputation

    builder = Topology.builder()
    assert builder.add_computation(Copy, ["i1:app/in", "o1:app/copied"]) is builder
    source = builder.stream("app/copied")
    source.to("app/out")
    builder.stream("app/out", name="app/second").to("app/final")
    assert (
        builder.add_processor("app/forward", Forward, inputs=["app/final"], outputs=["app/end"])
        is builder
    )
    topology = builder.build()
    assert topology.computation_names() == [
        "app/copy",
        "app/copied-dsl",
        "app/second",
        "app/forward",
    ]
    assert isinstance(topology.supplier("app/second")(), DslComputation)
    assert topology.input_streams("app/forward") == ["app/final"]


def test_a_dsl_computation_named_like_another_is_refused():
    builder = Topology.builder().add_computation(Copy, ["i1:app/in", "o1:app/copied"])
    builder.stream("app/copied", name="app/copy").to("app/out")
    with pytest.raises(TopologyError, match="duplicate computation name 'app/copy'"):
        builder.build()


def test_an_empty_builder_is_refused():
    with pytest.raises(TopologyError, match="add_computation, add_processor or stream first"):
        Topology.builder().build()


@pytest.mark.parametrize(
    ("operator", "args"),
    [("filter", (42,)), ("map", ("f",)), ("map_values", (None,)), ("flat_map", ([],))],
)
def test_a_non_callable_operator_argument_is_refused_at_once(operator, args):
    with pytest.raises(NotCallableError, match=rf"\.{operator}\(\.\.\.\): expected a function"):
        getattr(stream("app/in"), operator)(*args)


def test_branch_needs_callable_predicates():
    with pytest.raises(DslDefinitionError, match="at least one predicate"):
        stream("app/in").branch()
    with pytest.raises(NotCallableError, match="branch"):
        stream("app/in").branch(always, "not a function")


def test_a_chain_without_sink_is_refused_with_its_location():
    builder = Topology.builder()
    source = builder.stream("app/in")
    keep, _drop = source.filter(always).branch(is_big, always)
    keep.to("app/big")
    with pytest.raises(UnfinishedStreamError) as info:
        builder.build()
    message = str(info.value)
    assert (
        "builder.stream('app/in').filter(always).branch(is_big, always)[1] has no sink" in message
    )
    assert ".to('<stream>')" in message


def test_a_source_without_operators_is_an_unfinished_chain():
    builder = Topology.builder()
    builder.stream("app/in")
    with pytest.raises(UnfinishedStreamError, match=r"builder.stream\('app/in'\) has no sink"):
        builder.build()


def test_a_through_stream_without_sink_is_unfinished():
    builder = Topology.builder()
    source = builder.stream("app/in")
    source.through("app/mid").filter(always)
    with pytest.raises(UnfinishedStreamError, match=r"through\('app/mid'\).filter\(always\)"):
        builder.build()


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (
            lambda: stream("bad name!"),
            r"builder.stream\('bad name!'\): invalid name",
        ),
        (lambda: stream("app/in").to("x/-y"), r"\.to\('x/-y'\): invalid name"),
        (lambda: stream("app/in", codec="yaml"), "unknown value codec 'yaml'"),
        (
            lambda: stream("app/in", codec="avro"),
            "needs the value schema: pass schema=",
        ),
        (lambda: stream("app/in", codec="json", schema={}), "takes no schema"),
        (
            lambda: stream("app/in").to("app/out", schema={}),
            "schema= needs codec=",
        ),
        (lambda: stream("app/in", name="a b"), "not a valid computation name"),
        (
            lambda: stream("app/in", codec="avro", schema="no.such.Schema"),
            "builder.stream\\('app/in'\\): codec 'avro'",
        ),
    ],
)
def test_definition_errors_name_the_place_and_the_fix(make, match):
    with pytest.raises(DslDefinitionError, match=match):
        make()


def test_a_cycle_through_streams_is_a_topology_error():
    builder = Topology.builder()
    source = builder.stream("app/a")
    source.through("app/b").to("app/a")
    with pytest.raises(TopologyError, match="cycle"):
        builder.build()


def test_definition_errors_are_topology_errors():
    assert issubclass(DslDefinitionError, TopologyError)
    assert issubclass(NotCallableError, TypeError)


def test_operators_added_after_build_do_not_change_the_built_topology():
    from streamcore.computation.dsl_compile import DslComputation

    builder = Topology.builder()

    source = builder.stream("app/in")
    source.to("app/out")
    topology = builder.build()
    source.to("app/later")
    computation = topology.supplier("app/in-dsl")()
    assert isinstance(computation, DslComputation)
    assert computation.subtopology.outputs == ("app/out",)
    assert len(computation.subtopology.root.children) == 1
