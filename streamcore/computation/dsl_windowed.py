"""Windowed aggregations in the streams DSL (Kafka Streams' `TimeWindowedKStream` and
`SessionWindowedKStream`), on the window stores of `streamcore.state.windows`.

    counts = (
        builder.stream("shop/clicks", codec="json")
        .group_by_key()
        .windowed_by(TumblingWindows(60_000, grace_ms=10_000))
        .count(emit="final")
    )
    counts.to_stream().to("shop/clicks-per-minute", codec="json")

- Windows follow the **stream time** of the task (the largest record timestamp it has processed,
  from the computation's timestamp extractor), never the wall clock: a replay or a backfill of the
  same records gives the same windows.
- `emit="update"` (default, as Kafka Streams) forwards every window a record updates;
  `emit="final"` forwards each window once, when it closes (`end + grace` reached by stream
  time), so a sink sees one record per window and key.
- A result record has the group key as its key and the value `{"start": ms, "end": ms, "value":
  aggregate}` (docs/state.md, "Windows", for the Avro form); a session merged into another is
  forwarded (update mode) as its window with `"value": None`.
- A **late** record (every window it belongs to closed) is never dropped silently: it goes,
  unchanged, to the side stream `late=` (default `<computation>-late`, the computation's name
  being its source's `name=` or `<source>-dsl`), counts in the metric
  `streamcore_computation_late_total`, and is logged at WARNING at most every 10 s per step.
- Windows are deleted once their retention (size + grace by default) has passed: the store holds
  the windows not yet expired, whatever the run's length.

The window store scans for closed and expired windows only when stream time reaches the next
close or expiry time it knows (lowered by each window written), not at every record.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import Any, Literal

from streamcore.codecs import Codec
from streamcore.computation.dsl_aggregate import Aggregator, Initializer, Reducer, Table, store_spec
from streamcore.computation.dsl_functions import Reduced, plus_one, require_callable, sum_counts
from streamcore.computation.dsl_graph import computation_name_of
from streamcore.computation.dsl_late import LateLog, route_late
from streamcore.computation.dsl_process import BuiltinStep, noted
from streamcore.computation.dsl_values import resolve_value_codec
from streamcore.computation.errors import DslDefinitionError
from streamcore.computation.processor import Processor, ProcessorContext
from streamcore.state.spec import StoreSpec
from streamcore.state.windows import (
    LateRecord,
    SessionStore,
    SessionWindows,
    TimeWindowSpec,
    TimeWindowStore,
    WindowCache,
    WindowedValue,
    WindowSpec,
    aggregate_session,
    aggregate_windowed,
)

__all__ = ["WindowedGroupedStream"]

logger = logging.getLogger(__name__)

Emit = Literal["update", "final"]
Merger = Callable[[str, Any, Any], Any]
# The task's stream time in the window store's key-value store: a key of its own kind ("t"),
# beside the window store's "w", "x" and "m" entries (docs/state.md, "Windows").
_STREAM_TIME = "t"
_TIME = struct.Struct(">q")
_UNKNOWN = -(1 << 63)


def _result(update: WindowedValue[Any], value: Any) -> dict[str, Any]:
    return {"start": update.window.start, "end": update.window.end, "value": value}


class _TaskWindows:
    """What the step keeps per task (per key-value store): its window store, the window cache
    (tumbling and hopping windows) and the task's stream time. A restarted task's stream time
    starts again from its first record, so without the stored one a record late before a crash
    could count after it, and a replay would not give the live run's windows: it is written to
    the store at each checkpoint (with the windows, so a restart goes on from the checkpoint's)
    and read back after a rewind."""

    def __init__(self, kv: Any, windows: WindowSpec, codec: Codec[Any]) -> None:
        self.kv = kv
        self.store: TimeWindowStore[Any] | SessionStore[Any]
        self.cache: WindowCache | None = None
        self.time = self.written = self._stored_time()
        if isinstance(windows, SessionWindows):
            self.store = SessionStore(kv, windows, codec)
        else:
            self.store = TimeWindowStore(kv, windows, codec)  # type: ignore[arg-type]
            if isinstance(windows, TimeWindowSpec):
                self.cache = WindowCache(self.store, self.time)
        kv.before_checkpoint.append(self.write_time)
        kv.on_discard.append(self.reload_time)

    def _stored_time(self) -> int:
        raw = self.kv.get(_STREAM_TIME)
        return _UNKNOWN if raw is None else int(_TIME.unpack(raw)[0])

    def write_time(self) -> None:
        if self.time > self.written:
            self.kv.put(_STREAM_TIME, _TIME.pack(self.time))
            self.written = self.time

    def reload_time(self) -> None:
        self.time = self.written = self._stored_time()

    def detach(self) -> None:
        """Unhook from the key-value store (the step made a new one for it)."""
        self.kv.before_checkpoint.remove(self.write_time)
        self.kv.on_discard.remove(self.reload_time)
        if self.cache is not None:
            self.cache.detach()


class _WindowedStep(BuiltinStep):
    """Aggregates each record into its windows (see the module doc); one instance per unit, one
    window store per task. Called directly by the chain (`BuiltinStep`): it reads the record's
    times from the computation's context and forwards to the rest of the chain."""

    def __init__(
        self,
        store: str,
        windows: WindowSpec,
        codec: Codec[Any],
        initializer: Initializer,
        aggregator: Aggregator,
        merger: Merger | None,
        emit: Emit,
        where: str,
    ) -> None:
        self.store_name = store
        self.windows = windows
        self.codec = codec
        self.initializer = initializer
        self.aggregator = aggregator
        self.merger = merger
        self._updates = emit == "update"  # else "final"
        self.where = where
        self.late = LateLog(where)

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        for task in getattr(self, "_tasks", {}).values():  # init again: after a rebalance
            task.detach()
        self._tasks: dict[int, _TaskWindows] = {}

    def _open_task(self, task_id: int) -> _TaskWindows:
        """The windows of a task met for the first time since `init`: by task id, as a task's
        store changes only in a rebalance, after which `init` starts again."""
        kv = self.context.get_state_store(self.store_name)
        task = self._tasks[task_id] = _TaskWindows(kv, self.windows, self.codec)
        return task

    def process(self, key: str, value: Any) -> None:
        if value is None:
            return
        try:  # the chain calls this directly: name the operator in what it raises (BuiltinStep)
            context = self._computation
            times = context.record_times
            assert times is not None  # process runs for a record
            task_id, timestamp, now = times
            task = self._tasks.get(task_id) or self._open_task(task_id)
            if timestamp > now:
                now = timestamp
            if now > task.time:
                task.time = now
            else:
                now = task.time
            cache = task.cache
            if cache is None:
                self._uncached(task, key, value, timestamp, now)
                return
            updates = self._updates
            windows = cache.aggregate(
                key, value, timestamp, now, self.initializer, self.aggregator, updates
            )
            if not windows and now < cache.due_at:  # a LateRecord is true
                return  # the common case: nothing to forward, nothing closes or expires yet
            forward = self._forward
            if windows.__class__ is LateRecord:
                self.late.send(forward, context, key, value, windows.reason)
                return
            if updates:
                for update in windows:  # type: ignore[union-attr]
                    forward(key, _result(update, update.value))
            if now < cache.due_at or now < cache.due():
                return  # nothing closes or expires yet
            if updates:
                cache.flush_closed(now)  # expiry reads the store
                task.store.expire(now)
                return
            for closed in cache.take_closed(now):
                forward(closed.key, _result(closed, closed.value))
        except Exception as exc:
            noted(exc, self._node)
            raise

    def _uncached(self, task: _TaskWindows, key: str, value: Any, timestamp: int, now: int) -> None:
        """`process` for sliding and session windows, which go to the store at every record."""
        context, forward = self._computation, self._forward
        store = task.store
        written: list[WindowedValue[Any]]
        if isinstance(store, SessionStore):
            assert self.merger is not None
            session = aggregate_session(
                store, key, value, timestamp, now, self.initializer, self.aggregator, self.merger
            )
            if isinstance(session, LateRecord):
                self.late.send(forward, context, key, value, session.reason)
                return
            written = [session.session]
            if self._updates:
                for merged in session.merged:
                    forward(key, _result(merged, None))
        else:
            windows = aggregate_windowed(
                store, key, value, timestamp, now, self.initializer, self.aggregator
            )
            if isinstance(windows, LateRecord):
                self.late.send(forward, context, key, value, windows.reason)
                return
            written = windows
        if self._updates:
            for update in written:
                forward(key, _result(update, update.value))
        # Both skip their scan until stream time reaches the store's next close or expiry time.
        self._close(store, now)

    def _close(self, store: TimeWindowStore[Any] | SessionStore[Any], now: int) -> None:
        """Send the windows closed at `now` (`emit="final"`) and delete the expired ones."""
        if self._updates:
            store.expire(now)
            return
        forward = self._forward
        for closed in store.take_closed_and_expire(now):
            forward(closed.key, _result(closed, closed.value))


class WindowedGroupedStream:
    """A grouped stream cut into windows (`group_by_key().windowed_by(windows)`), ready to
    aggregate per key and window."""

    __slots__ = ("_stream", "_windows")

    def __init__(self, stream: Any, windows: WindowSpec) -> None:
        if not isinstance(windows, WindowSpec):
            raise DslDefinitionError(
                f"{stream._node.chain()}.group_by_key().windowed_by({windows!r}): expected "
                "TumblingWindows, HoppingWindows, SlidingWindows or SessionWindows (from "
                "streamcore.state.windows), each with its grace_ms"
            )
        self._stream = stream
        self._windows = windows

    def _where(self, operator: str) -> str:
        return (
            f"{self._stream._node.chain()}.group_by_key().windowed_by({self._windows!r})"
            f".{operator}(...)"
        )

    def count(
        self,
        *,
        emit: Emit = "update",
        store: str | StoreSpec | None = None,
        late: str | None = None,
    ) -> Table:
        """The number of records (with a non-None value) per key and window."""
        return self._aggregate(int, plus_one, sum_counts, emit, store, late, "count")

    def reduce(
        self,
        reducer: Reducer,
        *,
        emit: Emit = "update",
        store: str | StoreSpec | None = None,
        late: str | None = None,
    ) -> Table:
        """Per key and window: the first value, then `reducer(aggregate, value)` for each next
        one (sessions merge with `reducer` too)."""
        require_callable(
            reducer, self._where("reduce"), "lambda aggregate, value: aggregate + value"
        )
        reduced = Reduced(reducer)
        return self._aggregate(
            reduced.initial, reduced.aggregate, reduced.merge, emit, store, late, "reduce"
        )

    def aggregate(
        self,
        initializer: Initializer,
        aggregator: Aggregator,
        *,
        merger: Merger | None = None,
        emit: Emit = "update",
        store: str | StoreSpec | None = None,
        late: str | None = None,
    ) -> Table:
        """Per key and window: `initializer()`, then `aggregator(key, value, aggregate)` per
        record. Session windows need `merger(key, aggregate, other)` to merge two sessions a
        record bridges."""
        where = self._where("aggregate")
        require_callable(initializer, where, "lambda: 0")
        require_callable(aggregator, where, "lambda key, value, aggregate: aggregate + value")
        if isinstance(self._windows, SessionWindows):
            if merger is None:
                raise DslDefinitionError(
                    f"{where}: session windows merge when a record bridges two sessions: give "
                    "merger=lambda key, aggregate, other: ... (for a sum: aggregate + other)"
                )
            require_callable(merger, where, "lambda key, aggregate, other: aggregate + other")
        return self._aggregate(initializer, aggregator, merger, emit, store, late, "aggregate")

    def _aggregate(
        self,
        initializer: Initializer,
        aggregator: Aggregator,
        merger: Merger | None,
        emit: Any,
        store: str | StoreSpec | None,
        late: str | None,
        operator: str,
    ) -> Table:
        where = self._where(operator)
        if emit not in ("update", "final"):
            raise DslDefinitionError(
                f"{where}: emit={emit!r}; use emit='update' (every change) or emit='final' (one "
                "record per window, when it closes)"
            )
        spec, codec = self._store(store, f"windowed_{operator}", where)
        windows = self._windows
        stream = self._stream
        late_stream = late or f"{computation_name_of(stream._node)}-late"

        def make() -> Processor:
            return _WindowedStep(
                spec.name, windows, codec, initializer, aggregator, merger, emit, where
            )

        label = f".group_by_key().windowed_by({windows!r}).{operator}(emit={emit!r})"
        step = stream._step(make, (spec,), label)
        return Table(route_late(step, late_stream), spec.name)

    @staticmethod
    def _store(
        store: str | StoreSpec | None, default: str, where: str
    ) -> tuple[StoreSpec, Codec[Any]]:
        """The key-value store the window store lays out (bytes) and the aggregate's codec (the
        given StoreSpec's, JSON by default)."""
        spec = store_spec(store, default, where)
        codec = resolve_value_codec(spec.codec, spec.schema, where=where)
        return StoreSpec(spec.name, "bytes", None, spec.engine, spec.cache), codec
