"""Stream-table joins in the streams DSL (Kafka Streams' `KStream.join(KTable)` and
`leftJoin(KTable)`): each stream record looks up the table's current value for its key.

    customers = builder.table("shop/customers", codec="json")
    orders = builder.stream("shop/orders", codec="json")
    orders.join(customers, lambda order, customer: {**order, "name": customer["name"]}).to(...)

- `join`: a record whose key has no value in the table is dropped; `left_join` calls
  `joiner(value, None)` for it. Stream records whose value is None are dropped, as in Kafka
  Streams. Only the stream side emits: a table update changes what later records see, never
  re-emits earlier joins.
- The table is the store of a `Table` (`builder.table`, `to_table()`, an aggregation). The join
  step reads that store in the task of the record's key, so the stream's source and the table's
  source are compiled into **one computation** reading both streams (`dsl_graph`, "join"); the
  two streams must be co-partitioned (same partition count, same key partitioner), which the
  topology checks when the driver or the processor starts (`tasks.check_copartitioned`).
- Which side comes first: the task hands records of its two partitions in timestamp order
  (stream time synchronization, `stream_time.StreamSynchronizer`), so a table update with a
  timestamp at or before a stream record's is applied before the record is joined.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streamcore.computation.dsl_aggregate import Table
from streamcore.computation.dsl_graph import OperatorNode, TableLookup
from streamcore.computation.errors import DslDefinitionError, NotCallableError
from streamcore.computation.processor import Processor, ProcessorContext

if TYPE_CHECKING:
    from streamcore.computation.dsl import Stream

__all__ = ["ValueJoiner", "stream_table_join"]

ValueJoiner = Callable[[Any, Any], Any]


class _StreamTableJoin(Processor):
    """`joiner(value, table value)` per stream record, the table value read from `store`."""

    def __init__(self, store: str, joiner: ValueJoiner, left: bool) -> None:
        self.store_name = store
        self.joiner = joiner
        self.left = left

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, key: str, value: Any) -> None:
        if value is None:
            return
        current = self.context.get_state_store(self.store_name).get(key)
        if current is None and not self.left:
            return
        self.context.forward(key, self.joiner(value, current))


def _name(fn: Any) -> str:
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return name.rsplit("<locals>.", 1)[-1] if isinstance(name, str) else type(fn).__name__


def stream_table_join(stream: Stream, table: Table, joiner: ValueJoiner, *, left: bool) -> Stream:
    """`stream` joined with `table` (`Stream.join` / `Stream.left_join`)."""
    from streamcore.computation.dsl import Stream  # dsl imports this module

    node = stream._node
    operator = "left_join" if left else "join"
    where = f"{node.chain()}.{operator}(...)"
    if not isinstance(table, Table):
        raise DslDefinitionError(
            f"{where}: expected a Table (builder.table(...), stream.to_table() or an "
            f"aggregation), got {type(table).__name__} {table!r}"
        )
    if not callable(joiner):
        raise NotCallableError(
            f"{where}: expected a function, got {type(joiner).__name__} {joiner!r}; pass a "
            "callable such as `lambda value, table_value: ...`"
        )
    step: OperatorNode = table._stream._node
    specs = [spec for spec in step.payload or () if spec.name == table.store_name]
    if step.kind != "process" or not specs:
        raise DslDefinitionError(
            f"{where}: the table {step.chain()} is not the one its store "
            f"{table.store_name!r} holds (a filtered, mapped or windowed table); materialize "
            "it first: table.to_stream().to_table(store='<name>')"
        )
    label = f".{operator}({step.chain()}, {_name(joiner)})"
    spec = specs[0]

    def make() -> Processor:
        return _StreamTableJoin(spec.name, joiner, left)

    return Stream(OperatorNode("join", node, node.codec, label, make, TableLookup(spec, step)))
