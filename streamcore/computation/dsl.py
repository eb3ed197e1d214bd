"""The streams DSL: chains of stateless operators on streams a `TopologyBuilder` reads, compiled
into computations when the builder builds (Kafka Streams' `StreamsBuilder.stream` + `KStream`).

    builder = Topology.builder()
    orders = builder.stream("shop/orders", codec="json")
    big, small = orders.filter(lambda k, v: v["qty"] > 0).map_values(enrich).branch(
        lambda k, v: v["total"] >= 100, lambda k, v: True
    )
    big.to("shop/big-orders")
    small.to("shop/small-orders")
    topology = builder.build()

Semantics (Kafka Streams' `KStream`, minus state):
- `filter(pred)`, `map(fn)`, `flat_map(fn)` and branch predicates take `(key, value)`;
  `map_values(fn)` takes `value`. `map` returns a `(key, value)` pair, `flat_map` an iterable of
  pairs. Keys are `str` (the Record envelope's key); values are decoded by the stream's value
  codec (see `dsl_values`).
- Operators chained from one source are **fused** into one computation: a record goes through
  the whole chain in one call, with no intermediate stream. `through("x")` writes to the stream
  `x` and starts a new computation reading it (a new sub-topology), like Kafka's `repartition`.
- A `Stream` may be used more than once: each use receives every record (fan-out).
- `branch(p1, ..., pN)` returns N streams; a record goes to the first predicate that matches and
  is dropped if none does (add `lambda k, v: True` last for an "otherwise" branch).
- Produced records keep the watermark of the input record, so event time flows through.
- A record's outputs are produced only once the whole chain succeeded on it: when a function
  raises, the processor retries the record (or dead-letters it) without duplicate outputs.
- Records flagged COMMIT or POISON_PILL with no data are control records; the chain skips them
  (the processor still honours the flag).

Computation names: `<source>-dsl` for a namespaced source (`shop/orders-dsl`), `<source>_dsl`
for a global one, `-2`/`_2`... when one build holds several computations reading the same
stream; `name=` on `builder.stream` or `through` overrides it. The name is also the consumer
group, so keep it stable once the topology runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from streamcore.computation.dsl_graph import (
    OperatorNode,
    SinkInfo,
    SourceInfo,
    SubTopology,
    subtopologies,
)
from streamcore.computation.dsl_values import ValueCodecSpec, resolve_value_codec
from streamcore.computation.errors import DslDefinitionError, NotCallableError
from streamcore.errors import InvalidNameError
from streamcore.names import Name

if TYPE_CHECKING:
    from streamcore.codecs import Codec

__all__ = ["Stream", "compile_streams", "source"]

Predicate = Callable[[str, Any], bool]
KeyValueMapper = Callable[[str, Any], tuple[str, Any]]
ValueMapper = Callable[[Any], Any]
FlatMapper = Callable[[str, Any], Iterable[tuple[str, Any]]]


def _callable_name(fn: Any) -> str:
    """`parse`, `Enricher.enrich`, `<lambda>`: short enough to read in an error message."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if not isinstance(name, str):
        return type(fn).__name__
    return name.rsplit("<locals>.", 1)[-1]


def _check_callable(fn: Any, operator: str, node: OperatorNode) -> None:
    if not callable(fn):
        raise NotCallableError(
            f"{node.chain()}.{operator}(...): expected a function, got {type(fn).__name__} "
            f"{fn!r}; pass a callable such as `lambda key, value: ...`"
        )


def _stream_name(stream: Any, where: str) -> str:
    try:
        return Name.of(stream).urn
    except InvalidNameError as exc:
        raise DslDefinitionError(f"{where}: {exc}") from None


def _computation_name(name: Any, where: str) -> str | None:
    if name is None:
        return None
    try:
        return Name.of(name).urn
    except InvalidNameError as exc:
        raise DslDefinitionError(
            f"{where}: name={name!r} is not a valid computation name (it is also the consumer "
            f"group): {exc}"
        ) from None


class Stream:
    """A stream of (key, value) pairs in a DSL definition, made by `TopologyBuilder.stream`.
    Immutable handle: each operator returns a new `Stream`, and the one it was called on stays
    usable (fan-out)."""

    __slots__ = ("_node",)

    def __init__(self, node: OperatorNode) -> None:
        self._node = node

    @property
    def codec(self) -> Codec[Any]:
        """The value codec of this stream (inherited along the chain)."""
        return self._node.codec

    def _then(self, kind: str, operator: str, fn: Any) -> Stream:
        _check_callable(fn, operator, self._node)
        label = f".{operator}({_callable_name(fn)})"
        return Stream(OperatorNode(kind, self._node, self._node.codec, label, fn))

    def filter(self, predicate: Predicate) -> Stream:
        """The records for which `predicate(key, value)` is true."""
        return self._then("filter", "filter", predicate)

    def map(self, mapper: KeyValueMapper) -> Stream:
        """Each record replaced by the `(key, value)` pair `mapper(key, value)` returns."""
        return self._then("map", "map", mapper)

    def map_values(self, mapper: ValueMapper) -> Stream:
        """Each record's value replaced by `mapper(value)`; the key is kept."""
        return self._then("map_values", "map_values", mapper)

    def flat_map(self, mapper: FlatMapper) -> Stream:
        """Each record replaced by the zero or more `(key, value)` pairs `mapper` yields."""
        return self._then("flat_map", "flat_map", mapper)

    def branch(self, *predicates: Predicate) -> tuple[Stream, ...]:
        """One stream per predicate; a record goes to the first predicate `(key, value)` that
        matches, and is dropped if none does."""
        if not predicates:
            raise DslDefinitionError(
                f"{self._node.chain()}.branch(): give at least one predicate, e.g. "
                "branch(lambda k, v: v['ok'], lambda k, v: True)"
            )
        for predicate in predicates:
            _check_callable(predicate, "branch", self._node)
        names = ", ".join(_callable_name(p) for p in predicates)
        node = OperatorNode("branch", self._node, self._node.codec, f".branch({names})", predicates)
        return tuple(
            Stream(OperatorNode("arm", node, node.codec, f"[{i}]")) for i in range(len(predicates))
        )

    def to(self, stream: str, *, codec: ValueCodecSpec | None = None, schema: Any = None) -> None:
        """Write the records to `stream`, values encoded with `codec` (default: this stream's
        value codec). This ends the chain; the builder compiles it when it builds."""
        urn, value_codec = self._target(stream, codec, schema, "to")
        OperatorNode("sink", self._node, value_codec, f".to({urn!r})", payload=SinkInfo(urn, None))

    def through(
        self,
        stream: str,
        *,
        codec: ValueCodecSpec | None = None,
        schema: Any = None,
        name: str | None = None,
    ) -> Stream:
        """Write the records to `stream` and continue from it in a new computation (named
        `name`, or derived from `stream`)."""
        urn, value_codec = self._target(stream, codec, schema, "through")
        label = f".through({urn!r})"
        source = OperatorNode(
            "source",
            None,
            value_codec,
            f"{self._node.chain()}{label}",
            payload=SourceInfo(urn, _computation_name(name, label), None),
        )
        sink = OperatorNode("sink", self._node, value_codec, label, payload=SinkInfo(urn, source))
        source.payload = SourceInfo(urn, source.payload.name, sink)
        return Stream(source)

    def _target(
        self, stream: str, codec: ValueCodecSpec | None, schema: Any, operator: str
    ) -> tuple[str, Codec[Any]]:
        where = f"{self._node.chain()}.{operator}({stream!r})"
        urn = _stream_name(stream, where)
        if codec is None:
            if schema is not None:
                raise DslDefinitionError(f"{where}: schema= needs codec= (e.g. codec='avro')")
            return urn, self._node.codec
        return urn, resolve_value_codec(codec, schema, where=where)

    def __repr__(self) -> str:
        return self._node.chain()


def source(
    stream: str, *, codec: ValueCodecSpec = "bytes", schema: Any = None, name: str | None = None
) -> Stream:
    """A new DSL graph reading `stream`, values decoded with `codec` (`"bytes"`, `"json"`, an
    Avro mode with `schema=`, or a Codec); `name` overrides the computation name. Users call
    `TopologyBuilder.stream`, which registers the graph on the builder."""
    urn = _stream_name(stream, f"builder.stream({stream!r})")
    where = f"builder.stream({urn!r})"
    node = OperatorNode(
        "source",
        None,
        resolve_value_codec(codec, schema, where=where),
        where,
        payload=SourceInfo(urn, _computation_name(name, where), None),
    )
    return Stream(node)


def compile_streams(streams: Sequence[Stream]) -> list[SubTopology]:
    """The computations the DSL graphs of `streams` (any stream of each graph) compile to, in
    definition order. Raises `UnfinishedStreamError` for a chain without a sink."""
    return subtopologies(*(s._node for s in streams))
