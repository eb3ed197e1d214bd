"""The streams DSL: chains of operators on streams a `TopologyBuilder` reads, compiled into
computations when the builder builds (Kafka Streams' `StreamsBuilder.stream` + `KStream`).

    builder = Topology.builder()
    orders = builder.stream("shop/orders", codec="json")
    big, small = orders.filter(lambda k, v: v["qty"] > 0).map_values(enrich).branch(
        lambda k, v: v["total"] >= 100, lambda k, v: True
    )
    big.to("shop/big-orders")
    small.to("shop/small-orders")
    topology = builder.build()

Semantics (Kafka Streams' `KStream`):
- `filter(pred)`, `map(fn)`, `flat_map(fn)`, `select_key(fn)`, `peek(fn)` and branch predicates
  take `(key, value)`; `map_values(fn)` and `flat_map_values(fn)` take `value`. `map` returns a
  `(key, value)` pair, `flat_map` an iterable of pairs, `flat_map_values` an iterable of values,
  `select_key` the new key. Keys are `str` (the Record envelope's key); values are decoded by the
  stream's value codec (see `dsl_values`).
- A key changed by `map`, `flat_map` or `select_key` does not move the record to the partition
  of its new key: Kafka Streams marks such a stream for repartitioning before its next stateful
  step, here `through("x")` is that step, written out.
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

`merge(other)`: one stream of the records of both. Chains are fused per source, so the chain
after a merge is compiled into the computation of *each* source that reaches it: a record of
`a` runs in `a`'s computation, one of `b` in `b`'s, and each writes to the merged chain's sinks.
No computation reads both streams, so they need not be co-partitioned (a stateless merge never
does), and each keeps its consumer group and concurrency. Merging two chains of one source
(e.g. two branches) stays inside that source's computation. A `process` step with state stores
after a merge of two sources is refused (each computation would hold half of a key's state):
write the merged stream `through(...)` first. Both streams must use the same value codec; the
merged stream keeps it.

`process(supplier, stores=[...])`: a processor API `Processor` as a step of the chain (Kafka
Streams 3.3's `KStream.process`). Each compiled chain makes one instance (`supplier()`), `init`s
it with a `ProcessorContext` whenever the computation is initialised (again after a rebalance)
and `close`s it on stop. `process(key, value)` gets every record of the chain; what it
`context.forward(key, value)`s goes on down the chain at once (in the call), with the input
record's watermark. `process` returns a `Stream` but may end a chain: a step with nothing after
it is terminal, its forwards go nowhere (it works through its stores or side effects).
`context.get_state_store(name)` reaches the stores the step declared: they are declared on the
compiled computation as `add_processor(stores=)` does, one per task, with changelogs and
restore (docs/state.md), and a failed attempt's writes are undone before the retry. Steps of one
computation declaring the same name share one store. As in Kafka Streams, `process` does not
repartition: after a key change, put `through(...)` before a step keeping state per key.
`context.schedule` punctuates as for `add_processor` (wall clock, or each task's stream time);
what `punctuate` forwards also runs down the chain. `send` to a named stream and `forward(to=)`
raise: the chain's sinks decide where records go.

Computation names: `<source>-dsl` for a namespaced source (`shop/orders-dsl`), `<source>_dsl`
for a global one, `-2`/`_2`... when one build holds several computations reading the same
stream; `name=` on `builder.stream` or `through` overrides it. The name is also the consumer
group, so keep it stable once the topology runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from streamcore.computation.dsl_aggregate import GroupedStream, Table, to_table
from streamcore.computation.dsl_functions import callable_name, require_callable
from streamcore.computation.dsl_graph import (
    OperatorNode,
    SinkInfo,
    SourceInfo,
    SubTopology,
    computation_name_of,
    subtopologies,
)
from streamcore.computation.dsl_join import (
    JoinWindows,
    ValueJoiner,
    stream_stream_join,
    stream_table_join,
)
from streamcore.computation.dsl_values import ValueCodecSpec, resolve_value_codec
from streamcore.computation.errors import DslDefinitionError, NotCallableError
from streamcore.computation.processor import Processor
from streamcore.errors import InvalidNameError, TopologyError
from streamcore.names import Name
from streamcore.state.spec import StoreSpec

if TYPE_CHECKING:
    from streamcore.codecs import Codec

__all__ = ["Stream", "compile_streams", "source"]

Predicate = Callable[[str, Any], bool]
KeyValueMapper = Callable[[str, Any], tuple[str, Any]]
ValueMapper = Callable[[Any], Any]
FlatMapper = Callable[[str, Any], Iterable[tuple[str, Any]]]
ValuesMapper = Callable[[Any], Iterable[Any]]
KeySelector = Callable[[str, Any], str]
Action = Callable[[str, Any], object]


def _check_callable(fn: Any, operator: str, node: OperatorNode) -> None:
    require_callable(fn, f"{node.chain()}.{operator}(...)", "lambda key, value: ...")


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
        label = f".{operator}({callable_name(fn)})"
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

    def flat_map_values(self, mapper: ValuesMapper) -> Stream:
        """Each record replaced by one record per value `mapper(value)` yields, all with the
        record's key (none if it yields nothing)."""
        return self._then("flat_map_values", "flat_map_values", mapper)

    def peek(self, action: Action) -> Stream:
        """The records unchanged, after calling `action(key, value)` on each for its side effect
        (its result is ignored). A retried record is peeked again."""
        return self._then("peek", "peek", action)

    def select_key(self, selector: KeySelector) -> Stream:
        """Each record with the key `selector(key, value)` returns (a `str`), value kept. The
        record stays in its partition: follow with `through(...)` to move it to its new key's
        partition before a step that keeps state per key."""
        return self._then("select_key", "select_key", selector)

    def merge(self, other: Stream) -> Stream:
        """The records of this stream and of `other`, in one stream (each record once per path
        that reaches the merge). See the module doc for how it compiles."""
        where = f"{self._node.chain()}.merge(...)"
        if not isinstance(other, Stream):
            raise DslDefinitionError(
                f"{where}: expected a Stream, got {type(other).__name__} {other!r}; pass a "
                "stream made by builder.stream(...) or an operator of one"
            )
        mine, theirs = self._node.codec, other._node.codec
        if mine is not theirs and (type(mine), mine.name) != (type(theirs), theirs.name):
            raise DslDefinitionError(
                f"{where}: this stream's values use the codec {mine.name!r}, those of "
                f"{other._node.chain()} {theirs.name!r}; merge streams of one value codec "
                "(write one of them .through(..., codec=...) to convert it)"
            )
        label = f"{self._node.chain()}.merge({other._node.chain()})"
        node = OperatorNode("merge", self._node, mine, label, payload=other._node)
        other._node.children.append(node)
        return Stream(node)

    def process(
        self,
        processor: Callable[[], Processor],
        *,
        stores: Sequence[str | StoreSpec] = (),
    ) -> Stream:
        """Run the `Processor` that `processor()` makes (a `Processor` subclass or a function
        returning one) on each record; what it `context.forward`s continues down the returned
        stream, which may also be left without a sink (a terminal step). `stores`: the state
        stores it reaches with `context.get_state_store(name)` (names of JSON stores, or
        `StoreSpec`s), declared on the computation as `add_processor(stores=)` does."""
        node = self._node
        if not callable(processor):
            raise NotCallableError(
                f"{node.chain()}.process(...): expected a Processor subclass or a function "
                f"returning one, got {type(processor).__name__} {processor!r}"
            )
        label = f".process({callable_name(processor)})"
        where = f"{node.chain()}{label}"
        if isinstance(processor, type) and not issubclass(processor, Processor):
            raise DslDefinitionError(
                f"{where}: {processor.__name__} is not a Processor subclass; subclass "
                "streamcore.computation.Processor (init, process, close)"
            )
        if isinstance(stores, str | StoreSpec):
            stores = [stores]
        try:
            specs = tuple(StoreSpec.of(s) for s in stores)
        except TopologyError as exc:
            raise DslDefinitionError(f"{where}: {exc}") from None
        names = [spec.name for spec in specs]
        if len(set(names)) != len(names):
            raise DslDefinitionError(
                f"{where}: stores={names} declares a store twice; give each store its own name"
            )
        return self._step(processor, specs, label)

    def _step(
        self, processor: Callable[[], Processor], specs: tuple[StoreSpec, ...], label: str
    ) -> Stream:
        """A `process` node written `label` in the chain (the DSL's stateful operators are
        process steps of their own processors)."""
        node = self._node
        return Stream(OperatorNode("process", node, node.codec, label, processor, specs))

    def group_by_key(self) -> GroupedStream:
        """The records grouped by their key, to aggregate (`count`, `reduce`, `aggregate`: see
        docs/aggregations.md). No repartition: put `through(...)` first after a key change."""
        return GroupedStream(self)

    def group_by(self, selector: KeySelector, *, name: str | None = None) -> GroupedStream:
        """The records grouped by the key `selector(key, value)` returns (Kafka Streams'
        `groupBy`): each record is re-keyed, written to the internal stream
        `<computation>-repartition` (`<computation>-<name>-repartition` with `name=`), which is
        partitioned by the new key and has the input stream's partition count, and grouped by
        key in a new computation reading it (docs/aggregations.md, "Repartitioning")."""
        node = self._node
        _check_callable(selector, "group_by", node)
        label = f".group_by({callable_name(selector)})"
        where = f"{node.chain()}{label}"
        computation = computation_name_of(node)
        if name is not None and (not isinstance(name, str) or not name.isidentifier()):
            raise DslDefinitionError(
                f"{where}: name={name!r} must be a word (letters, digits, _), used in the "
                "repartition stream's name <computation>-<name>-repartition"
            )
        suffix = "" if name is None else f"-{name}"
        urn = _stream_name(f"{computation}{suffix}-repartition", where)
        origin = node
        while origin.kind != "source":
            assert origin.parent is not None
            origin = origin.parent
        keyed = Stream(OperatorNode("select_key", node, node.codec, label, selector))
        return keyed._through(
            urn, node.codec, None, f".repartition({urn!r})", origin.payload.stream
        ).group_by_key()

    def join(
        self,
        other: Table | Stream,
        joiner: ValueJoiner,
        *,
        windows: JoinWindows | None = None,
        store: str | StoreSpec | None = None,
        late: str | None = None,
    ) -> Stream:
        """With a `Table`: each record with a value in the table for its key, as
        `joiner(value, table_value)`; records whose key has none are dropped. With a `Stream`
        and `windows=JoinWindows(...)`: `joiner(left, right)` for each pair of records of one
        key within the join window. The two streams must be co-partitioned; see
        docs/aggregations.md, "Joins" (`store=`, `late=`: the windowed join's store and late
        stream)."""
        return self._join(other, joiner, windows, store, late, "join")

    def left_join(
        self,
        other: Table | Stream,
        joiner: ValueJoiner,
        *,
        windows: JoinWindows | None = None,
        store: str | StoreSpec | None = None,
        late: str | None = None,
    ) -> Stream:
        """`join`, and each record of this stream without a match as `joiner(value, None)` (for
        a windowed join: once its window closed)."""
        return self._join(other, joiner, windows, store, late, "left_join")

    def outer_join(
        self,
        other: Stream,
        joiner: ValueJoiner,
        *,
        windows: JoinWindows,
        store: str | StoreSpec | None = None,
        late: str | None = None,
    ) -> Stream:
        """A windowed `left_join` that also emits each record of `other` without a match, as
        `joiner(None, value)`, once its window closed."""
        return self._join(other, joiner, windows, store, late, "outer_join")

    def _join(
        self,
        other: Any,
        joiner: ValueJoiner,
        windows: JoinWindows | None,
        store: str | StoreSpec | None,
        late: str | None,
        kind: str,
    ) -> Stream:
        if isinstance(other, Stream):
            if windows is None:
                raise DslDefinitionError(
                    f"{self._node.chain()}.{kind}({other._node.chain()}, ...): a stream-stream "
                    "join needs windows=JoinWindows(before_ms, after_ms, grace_ms=...)"
                )
            return stream_stream_join(
                self, other, joiner, windows, kind=kind, store=store, late=late
            )
        if windows is not None or store is not None or late is not None or kind == "outer_join":
            raise DslDefinitionError(
                f"{self._node.chain()}.{kind}(...): windows=, store= and late= (and outer_join) "
                "are for stream-stream joins; a stream-table join reads the table's store"
            )
        return stream_table_join(self, other, joiner, left=kind == "left_join")

    def to_table(self, *, store: str | StoreSpec | None = None) -> Table:
        """The latest value per key, kept in the state store `store` (default `table`); None
        deletes the key."""
        return to_table(self, store)

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
        names = ", ".join(callable_name(p) for p in predicates)
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
        return self._through(urn, value_codec, _computation_name(name, label), label, None)

    def _through(
        self, urn: str, codec: Codec[Any], name: str | None, label: str, copies: str | None
    ) -> Stream:
        """A sink to `urn` ending this chain, and the source of the computation reading it."""
        source = OperatorNode(
            "source",
            None,
            codec,
            f"{self._node.chain()}{label}",
            payload=SourceInfo(urn, name, None, copies),
        )
        sink = OperatorNode("sink", self._node, codec, label, payload=SinkInfo(urn, source))
        source.payload = SourceInfo(urn, name, sink, copies)
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
