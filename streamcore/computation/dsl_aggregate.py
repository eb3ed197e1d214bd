"""Grouping, aggregations and tables in the streams DSL (Kafka Streams' `KGroupedStream` and
`KTable`), built on `Stream.process` and the state stores of `streamcore.state`.

    counts = builder.stream("shop/orders", codec="json").group_by_key().count()
    counts.to_stream().to("shop/order-counts")

- `group_by_key()` groups by the record key: the records of one key are in one partition, so the
  aggregation runs in the computation of the chain, in the task of that partition, with no
  repartition. (`select_key` before it does not move records: follow it with `through(...)`.)
- `count()`, `reduce(reducer)` and `aggregate(initializer, aggregator)` keep one value per key in
  a state store (changelog, restore, no double count after a crash: docs/state.md) and return a
  `Table`. Records whose value is None are ignored, as in Kafka Streams. Every update is emitted
  downstream as `(key, new value)` (Kafka Streams' default without caching); an aggregate of None
  deletes the key and emits `(key, None)`, a tombstone.
- A `Table` is the stream of its updates plus the store that holds its current values:
  `to_stream()` turns it back into a `Stream`; `filter(predicate)` emits `(key, None)` for an
  update that fails the predicate (the key leaves the filtered table) and `map_values(fn)` maps
  each non-None value, as `KTable.filter` / `mapValues` do.
- `Stream.to_table()` keeps the latest value per key in a store (None deletes).

Store names. Each aggregation's store is named after the operator (`count`, `reduce`, `aggregate`,
`table`) unless `store=` names it (a name, or a `StoreSpec` for another codec or engine); the
changelog is then `<computation>-<store>-changelog`, so keep names stable once deployed. Two
aggregations in one computation need distinct names: the DSL refuses two steps declaring one
store name (give one of them `store=`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streamcore.computation.dsl_functions import Reduced, callable_name, plus_one, require_callable
from streamcore.computation.errors import DslDefinitionError
from streamcore.computation.processor import Processor, ProcessorContext
from streamcore.state.spec import StoreSpec

if TYPE_CHECKING:
    from streamcore.computation.dsl_windowed import WindowedGroupedStream
    from streamcore.state.windows import WindowSpec

__all__ = ["GroupedStream", "Table", "store_spec", "to_table"]

Initializer = Callable[[], Any]
Aggregator = Callable[[str, Any, Any], Any]
Reducer = Callable[[Any, Any], Any]


def store_spec(store: str | StoreSpec | None, default: str, where: str) -> StoreSpec:
    """The spec of `store=` (a name, a StoreSpec, or None for `default`)."""
    if store is None:
        return StoreSpec(default)
    if isinstance(store, (str, StoreSpec)):
        return StoreSpec.of(store)
    raise DslDefinitionError(
        f"{where}: store= takes a store name or a StoreSpec, got {type(store).__name__} {store!r}"
    )


class _Aggregate(Processor):
    """The value of each key in the store `store`: `initializer()` for a new key, then
    `aggregator(key, value, aggregate)` per record; every update forwarded."""

    def __init__(self, store: str, initializer: Initializer, aggregator: Aggregator) -> None:
        self.store_name = store
        self.initializer = initializer
        self.aggregator = aggregator

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, key: str, value: Any) -> None:
        if value is None:
            return
        store = self.context.get_state_store(self.store_name)
        current = store.get(key)
        if current is None:
            current = self.initializer()
        updated = self.aggregator(key, value, current)
        store.put(key, updated)
        self.context.forward(key, updated)


class _Latest(Processor):
    """The latest value of each key (None deletes it); every update forwarded."""

    def __init__(self, store: str) -> None:
        self.store_name = store

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, key: str, value: Any) -> None:
        self.context.get_state_store(self.store_name).put(key, value)
        self.context.forward(key, value)


class GroupedStream:
    """A stream grouped by key (`Stream.group_by_key()`), ready to aggregate."""

    __slots__ = ("_stream",)

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def _where(self, operator: str) -> str:
        return f"{self._stream._node.chain()}.group_by_key().{operator}(...)"

    def windowed_by(self, windows: WindowSpec) -> WindowedGroupedStream:
        """The groups cut into `windows` (`TumblingWindows`, `HoppingWindows`, `SlidingWindows`,
        `SessionWindows` of `streamcore.state.windows`), to aggregate per key and window
        (`streamcore.computation.dsl_windowed`)."""
        # Imported here: the windowed module builds on this one (its results are Tables).
        from streamcore.computation.dsl_windowed import WindowedGroupedStream

        return WindowedGroupedStream(self._stream, windows)

    def count(self, *, store: str | StoreSpec | None = None) -> Table:
        """The number of records (with a non-None value) per key."""
        spec = store_spec(store, "count", self._where("count"))

        def make() -> Processor:
            return _Aggregate(spec.name, int, plus_one)

        return self._table(make, spec, "count()")

    def reduce(self, reducer: Reducer, *, store: str | StoreSpec | None = None) -> Table:
        """Per key: the first value, then `reducer(aggregate, value)` for each next one."""
        where = self._where("reduce")
        require_callable(reducer, where, "lambda aggregate, value: aggregate + value")
        spec = store_spec(store, "reduce", where)

        reduced = Reduced(reducer)

        def make() -> Processor:
            return _Aggregate(spec.name, reduced.initial, reduced.aggregate)

        return self._table(make, spec, f"reduce({callable_name(reducer)})")

    def aggregate(
        self,
        initializer: Initializer,
        aggregator: Aggregator,
        *,
        store: str | StoreSpec | None = None,
    ) -> Table:
        """Per key: `initializer()` for its first record, then `aggregator(key, value,
        aggregate)` for each record. The aggregate goes through the store's codec (JSON unless
        `store=StoreSpec(..., codec=...)`)."""
        where = self._where("aggregate")
        require_callable(initializer, where, "lambda: 0")
        require_callable(aggregator, where, "lambda key, value, aggregate: aggregate + value")
        spec = store_spec(store, "aggregate", where)

        def make() -> Processor:
            return _Aggregate(spec.name, initializer, aggregator)

        return self._table(
            make, spec, f"aggregate({callable_name(initializer)}, {callable_name(aggregator)})"
        )

    def _table(self, make: Callable[[], Processor], spec: StoreSpec, label: str) -> Table:
        return Table(self._stream._step(make, (spec,), f".group_by_key().{label}"), spec.name)


class Table:
    """A changelog stream of (key, value) updates whose latest value per key is kept in the state
    store `store_name` (Kafka Streams' `KTable`)."""

    __slots__ = ("_stream", "store_name")

    def __init__(self, stream: Any, store_name: str) -> None:
        self._stream = stream
        self.store_name = store_name

    def to_stream(self) -> Any:
        """The table's updates as a `Stream` of (key, value); a deleted key comes as (key, None)."""
        return self._stream

    def filter(self, predicate: Callable[[str, Any], bool]) -> Table:
        """The table of the entries for which `predicate(key, value)` is true: an update that
        fails it is emitted as (key, None), removing the key downstream."""
        require_callable(
            predicate, f"{self._stream._node.chain()}.filter(...)", "lambda key, value: ..."
        )

        def keep(key: str, value: Any) -> tuple[str, Any]:
            return key, value if value is not None and predicate(key, value) else None

        keep.__qualname__ = f"table_filter({callable_name(predicate)})"
        return Table(self._stream.map(keep), self.store_name)

    def map_values(self, mapper: Callable[[Any], Any]) -> Table:
        """The table with each value replaced by `mapper(value)` (a deleted key stays deleted)."""
        require_callable(
            mapper, f"{self._stream._node.chain()}.map_values(...)", "lambda value: ..."
        )

        def mapped(value: Any) -> Any:
            return None if value is None else mapper(value)

        mapped.__qualname__ = f"table_map_values({callable_name(mapper)})"
        return Table(self._stream.map_values(mapped), self.store_name)


def to_table(stream: Any, store: str | StoreSpec | None = None) -> Table:
    """`stream` as a table: the latest value per key in a store (`Stream.to_table`)."""
    spec = store_spec(store, "table", f"{stream._node.chain()}.to_table(...)")

    def make() -> Processor:
        return _Latest(spec.name)

    return Table(stream._step(make, (spec,), ".to_table()"), spec.name)
