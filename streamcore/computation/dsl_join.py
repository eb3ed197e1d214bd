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

Windowed stream-stream joins (`join` / `left_join` / `outer_join` of two streams with
`windows=JoinWindows(before_ms, after_ms, grace_ms=)`, Kafka Streams' `KStream.join(KStream)`):
a record of the left stream at `t` joins the records of the right stream with its key and a
timestamp in `[t - before_ms, t + after_ms]` (a right record at `t` those of the left in
`[t - after_ms, t + before_ms]`), whichever arrives second emitting `joiner(left, right)`. Both
sides buffer their records in one store (`_JoinSide`), so the two streams run in one computation
as for a table join. On **stream time**: a record's window closes at `t + after_ms + grace_ms`
(a right record's at `t + before_ms + grace_ms`); a record arriving after that is late and goes
to `<computation>-late` (counted, logged at WARNING at most every 10 s), never dropped silently.
`left_join` emits a left record that found no match, as `joiner(left, None)`, once its window
closed (`outer_join` also a right one, as `joiner(None, right)`), while a later record of the task
is processed (with that record's timestamp). A buffered record is deleted once stream time passes
`t + before_ms + after_ms + grace_ms`, so the store stays bounded.

Store layout (a `"bytes"` key-value store, default name `join`; `esc` and `T` as in
`streamcore.state.windows.store`, side `l` or `r`, `n` a per-store sequence number):
`d` side esc(key) T(t) T(n) -> the encoded value; `x` T(expiry) side esc(key) T(t) T(n) -> the
expiry index; `u` T(close) side esc(key) T(t) T(n) -> an unmatched record of a side that emits
them, until it is matched or emitted; `m` -> stream time and the next sequence number.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamcore.computation.dsl_aggregate import Table
from streamcore.computation.dsl_functions import callable_name
from streamcore.computation.dsl_graph import OperatorNode, TableLookup, computation_name_of
from streamcore.computation.dsl_late import LateLog, route_late
from streamcore.computation.errors import DslDefinitionError, NotCallableError
from streamcore.computation.processor import Processor, ProcessorContext
from streamcore.errors import InvalidArgumentError
from streamcore.state.spec import StoreSpec
from streamcore.state.windows.keys import TIME_WIDTH, escape_key, time_of, time_text

if TYPE_CHECKING:
    from streamcore.codecs import Codec
    from streamcore.computation.dsl import Stream

__all__ = ["JoinWindows", "ValueJoiner", "stream_stream_join", "stream_table_join"]

logger = logging.getLogger(__name__)

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
    label = f".{operator}({step.chain()}, {callable_name(joiner)})"
    spec = specs[0]

    def make() -> Processor:
        return _StreamTableJoin(spec.name, joiner, left)

    return Stream(OperatorNode("join", node, node.codec, label, make, TableLookup(spec, step)))


@dataclass(frozen=True)
class JoinWindows:
    """How far apart in event time two records of a stream-stream join may be: a left record at
    `t` joins right records in `[t - before_ms, t + after_ms]`; `grace_ms` (required, no hidden
    default) is how long after that window a record is still accepted."""

    before_ms: int
    after_ms: int
    grace_ms: int

    def __init__(self, before_ms: int, after_ms: int | None = None, *, grace_ms: int) -> None:
        after = before_ms if after_ms is None else after_ms
        for label, ms in (("before_ms", before_ms), ("after_ms", after), ("grace_ms", grace_ms)):
            if type(ms) is not int or ms < 0:
                raise InvalidArgumentError(
                    f"JoinWindows: {label}={ms!r}; give an int of milliseconds >= 0"
                )
        object.__setattr__(self, "before_ms", before_ms)
        object.__setattr__(self, "after_ms", after)
        object.__setattr__(self, "grace_ms", grace_ms)


_MARKS = struct.Struct(">qq")  # stream time, next sequence number
_NO_TIME = -(1 << 63)
_INDEX = b"\x01"


def _parse(rest: str) -> tuple[str, str, int]:
    """Side, key and timestamp of an entry key without its first character and time prefix."""
    stop = rest.index("\x00\x00", 1)
    key = rest[1:stop].replace("\x00\x01", "\x00")
    return rest[0], key, time_of(rest[stop + 2 : stop + 2 + TIME_WIDTH])


class _JoinSide(Processor):
    """One side (`l` or `r`) of a windowed stream-stream join: joins each record with the other
    side's buffered records, buffers it, and emits the closed unmatched records and expires the
    old ones as stream time passes (module doc)."""

    def __init__(
        self,
        store: str,
        side: str,
        windows: JoinWindows,
        joiner: ValueJoiner,
        unmatched: str,  # the sides whose unmatched records are emitted: "", "l" or "lr"
        codec: Codec[Any],
        where: str,
    ) -> None:
        self.store_name = store
        self.side, self.other = side, "r" if side == "l" else "l"
        grace = windows.grace_ms
        # How far the other side's matches reach before and after a record of this side.
        before, after = windows.before_ms, windows.after_ms
        self.reach = (before, after) if side == "l" else (after, before)
        self.close_lag = {"l": after + grace, "r": before + grace}
        self.expiry_lag = before + after + grace
        self.joiner = joiner
        self.unmatched = unmatched
        self.codec = codec
        self.where = where
        self.late = LateLog(where)

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def _join(self, mine: Any, theirs: Any) -> Any:
        return self.joiner(mine, theirs) if self.side == "l" else self.joiner(theirs, mine)

    def process(self, key: str, value: Any) -> None:
        if value is None:
            return
        context = self.context
        timestamp = context.timestamp
        assert timestamp is not None  # process runs for a record
        kv = context.get_state_store(self.store_name)
        raw = kv.get("m")
        kept, seq = (_NO_TIME, 0) if raw is None else _MARKS.unpack(raw)
        now = max(kept, context.stream_time, timestamp)
        if timestamp + self.close_lag[self.side] < now:
            kv.put("m", _MARKS.pack(now, seq))
            why = f"at {timestamp}, its join window closed (stream time {now})"
            self.late.send(self.context.forward, self.context, key, value, why)
            self._advance(kv, now)
            return
        esc = escape_key(key)
        before, after = self.reach
        other = "d" + self.other + esc
        matched = False
        decode = self.codec.decode
        for data_key, stored in kv.range(
            other + time_text(timestamp - before), other + time_text(timestamp + after + 1)
        ):
            matched = True
            context.forward(key, self._join(value, decode(stored)))
            if self.other in self.unmatched:
                _, _, ts = _parse(data_key[1:])
                kv.put("u" + time_text(ts + self.close_lag[self.other]) + data_key[1:], None)
        entry = self.side + esc + time_text(timestamp) + time_text(seq)
        kv.put("d" + entry, self.codec.encode(value))
        kv.put("x" + time_text(timestamp + self.expiry_lag) + entry, _INDEX)
        if self.side in self.unmatched and not matched:
            kv.put("u" + time_text(timestamp + self.close_lag[self.side]) + entry, _INDEX)
        kv.put("m", _MARKS.pack(now, seq + 1))
        self._advance(kv, now)

    def _advance(self, kv: Any, now: int) -> None:
        """Emit the unmatched records whose window closed before `now`, then delete the records
        whose retention passed."""
        forward = self.context.forward
        for index_key, _ in list(kv.range("u", "u" + time_text(now))):
            entry = index_key[1 + TIME_WIDTH :]
            side, key, _ts = _parse(entry)
            stored = kv.get("d" + entry)
            kv.put(index_key, None)
            if stored is not None:
                value = self.codec.decode(stored)
                forward(key, self.joiner(value, None) if side == "l" else self.joiner(None, value))
        for index_key, _ in list(kv.range("x", "x" + time_text(now))):
            kv.put("d" + index_key[1 + TIME_WIDTH :], None)
            kv.put(index_key, None)


def stream_stream_join(
    left: Stream,
    right: Stream,
    joiner: ValueJoiner,
    windows: JoinWindows,
    *,
    kind: str,
    store: str | StoreSpec | None = None,
    late: str | None = None,
) -> Stream:
    """`left` joined with `right` within `windows` (`kind`: join, left_join or outer_join)."""
    from streamcore.computation.dsl import Stream  # dsl imports this module

    lnode, rnode = left._node, right._node
    where = f"{lnode.chain()}.{kind}({rnode.chain()}, ...)"
    if not callable(joiner):
        raise NotCallableError(
            f"{where}: expected a function, got {type(joiner).__name__} {joiner!r}; pass a "
            "callable such as `lambda left, right: ...`"
        )
    if not isinstance(windows, JoinWindows):
        raise DslDefinitionError(
            f"{where}: windows= takes JoinWindows(before_ms, after_ms, grace_ms=...), got "
            f"{type(windows).__name__} {windows!r}"
        )
    codec = lnode.codec
    theirs = rnode.codec
    if codec is not theirs and (type(codec), codec.name) != (type(theirs), theirs.name):
        raise DslDefinitionError(
            f"{where}: the two streams' values use the codecs {codec.name!r} and "
            f"{theirs.name!r}; join streams of one value codec (write one .through(..., "
            "codec=...) first)"
        )
    if store is None:
        store = "join"
    if isinstance(store, str):
        store = StoreSpec.of(store)
    if not isinstance(store, StoreSpec):
        raise DslDefinitionError(
            f"{where}: store= takes a store name or a StoreSpec, got {type(store).__name__}"
        )
    spec = StoreSpec(store.name, "bytes", None, store.engine, store.cache)
    unmatched = {"join": "", "left_join": "l", "outer_join": "lr"}[kind]
    late_stream = late or f"{computation_name_of(lnode)}-late"

    def side(name: str) -> Callable[[], Processor]:
        def make() -> Processor:
            return _JoinSide(spec.name, name, windows, joiner, unmatched, codec, where)

        return make

    label = f".{kind}({rnode.chain()}, {callable_name(joiner)}, {windows!r})"
    right_step = OperatorNode("process", rnode, codec, f"{label}[right]", side("r"), (spec,))
    left_step = OperatorNode(
        "join", lnode, codec, f"{label}[left]", side("l"), TableLookup(spec, right_step)
    )
    merged = OperatorNode("merge", left_step, codec, f"{lnode.chain()}{label}", payload=right_step)
    right_step.children.append(merged)
    results = route_late(Stream(merged), late_stream)
    return results
