"""A processor API `Processor` run as a step of a DSL chain (`Stream.process`): its instance, and
the `ProcessorContext` through which it forwards down the chain and reaches its state stores.

The context keeps `ProcessorContext`'s face (a processor written for `add_processor` runs here
unchanged as long as it does not `send` to named streams), but it has no output streams: a record
it forwards is handed to the next operator of the chain within the call, and where it ends up is
decided by the chain's sinks. Punctuation works as in `processor` (wall clock, or per task on
stream time), with one timer key per step so that several steps of a chain punctuate apart;
what `punctuate` forwards runs down the chain like a record, and its outputs are stamped like a
`ProcessorComputation`'s from `punctuate` (the computation's low watermark).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streamcore.computation.errors import (
    DslDefinitionError,
    NotProcessingError,
    UnknownOutputError,
)
from streamcore.computation.processor import Processor, ProcessorContext
from streamcore.computation.stream_time import PunctuationType
from streamcore.errors import RecordFieldError, TopologyError

if TYPE_CHECKING:
    from streamcore.computation.computation import ComputationContext
    from streamcore.computation.dsl_graph import OperatorNode
    from streamcore.record import Record
    from streamcore.state.store import KeyValueStore

__all__ = ["BuiltinStep", "DslProcessorContext", "ProcessStep", "key_type_error", "noted"]

logger = logging.getLogger(__name__)

Emit = Callable[[str, Any], None]


def noted(exc: BaseException, node: OperatorNode) -> None:
    """Name the operator that raised; an exception a step's downstream raised inside a
    `process` call already names its own operator."""
    if not any(note.startswith("in DSL operator ") for note in getattr(exc, "__notes__", ())):
        exc.add_note(f"in DSL operator {node.chain()}")


def key_type_error(key: object, node: OperatorNode) -> RecordFieldError:
    """The error of sink `node` given a key that is not a str, noted as its own."""
    exc = RecordFieldError(
        f"a record key must be a str, got {type(key).__name__} {key!r}; make the "
        "map/flat_map before it return str keys"
    )
    noted(exc, node)
    return exc


class BuiltinStep(Processor):
    """A processor of streamcore's own DSL steps (the windowed aggregations), which hands its
    context to no user code: the chain calls its `process` directly, without
    `ProcessStep.process`'s per-record set-up of a `DslProcessorContext` (the current key and
    record, and the check that `forward` runs within `process`, which only a user's processor
    needs), and without a wrapper that names the operator in an exception: its `process` does
    that itself (`noted(exc, self._node)`). It schedules no punctuation, so the chain does not
    look for its stream-time timer after each record. Before `init`, `bind` gives it the
    computation's context (the record's task and times), the rest of the chain, which it
    forwards to, and its operator."""

    _computation: ComputationContext
    _forward: Emit
    _node: OperatorNode

    def bind(self, context: ComputationContext, downstream: Emit, node: OperatorNode) -> None:
        self._computation = context
        self._forward = downstream
        self._node = node


class ProcessStep:
    """One `process(...)` node of a compiled chain: its processor instance, the operator that
    follows it (`downstream`, a no-op for a terminal step), and its current context."""

    def __init__(
        self, node: OperatorNode, computation: str, source: str, downstream: Emit, index: int
    ) -> None:
        self.node = node
        self.computation = computation
        self.source = source
        self.downstream = downstream
        self.stores = frozenset(spec.name for spec in node.payload)
        self.context: DslProcessorContext | None = None
        self.timer = f"punctuate-{index}"
        self.stream_timer = f"punctuate-stream-time-{index}"
        self.interval_ms = 0
        self.stream_interval_ms = 0
        self.stream_tasks: set[int] = set()  # tasks whose stream-time punctuation is set
        self.processor = node.fn()
        if not isinstance(self.processor, Processor):
            raise DslDefinitionError(
                f"{node.chain()}: the supplier returned {type(self.processor).__name__}, not a "
                "Processor; pass the Processor subclass (or a function returning one)"
            )

    def init(self, context: ComputationContext) -> None:
        """A fresh context for the processor, then its `init` (again after a rebalance)."""
        self.stream_tasks.clear()  # the runner forgets its stream-time timers on a rebalance
        self.context = DslProcessorContext(self, context)
        if isinstance(self.processor, BuiltinStep):
            self.processor.bind(context, self.downstream, self.node)
        self.processor.init(self.context)

    def process(self, record: Record | None, key: str, value: Any) -> None:
        """`processor.process(key, value)`; `record` is the input record (None for a record a
        punctuation upstream forwarded)."""
        context = self.context
        if context is None:
            raise NotProcessingError(f"{self.node.chain()} ran before its computation's init")
        active, context._active = context._active, True
        context._record, context._key = record, key
        context._stream = self.source if record is not None else None
        try:
            self.processor.process(key, value)
        finally:
            context._record = context._key = context._stream = None
            context._active = active

    def schedule(
        self, context: ComputationContext, interval_ms: int, kind: PunctuationType
    ) -> None:
        if kind is PunctuationType.STREAM_TIME:
            if interval_ms != self.stream_interval_ms:
                self.stream_interval_ms = interval_ms
                self.stream_tasks.clear()  # a new interval: aligned again from the next record
            return
        self.interval_ms = interval_ms
        context.set_timer(self.timer, context.now_ms() + interval_ms)

    def start_stream_punctuation(self, context: ComputationContext) -> None:
        """After a record: Kafka Streams aligns stream-time punctuation to 0, so it is due at
        once for the task's first record, then on the multiples of the interval."""
        offset = context.last_offset
        if offset is not None and offset.partition.partition not in self.stream_tasks:
            self.stream_tasks.add(offset.partition.partition)
            context.set_stream_timer(self.stream_timer, 0, offset.partition.partition)

    def on_timer(self, context: ComputationContext, key: str, timestamp_ms: int) -> bool:
        """Punctuate if `key` is one of this step's timers (and set the next one)."""
        if key == self.stream_timer:
            interval = self.stream_interval_ms
            if interval:
                now = context.stream_time_ms
                self._punctuate(context, now)
                # The next boundary past `now`: boundaries jumped over fire once, not in a burst.
                due = timestamp_ms + ((now - timestamp_ms) // interval + 1) * interval
                context.set_stream_timer(self.stream_timer, due)
            return True
        if key != self.timer:
            return False
        if not self.interval_ms:
            return True
        self._punctuate(context, timestamp_ms)
        now = context.now_ms()
        due = timestamp_ms + self.interval_ms
        if due <= now:  # late (a long pause): skip the missed firings instead of bursting
            due = now + self.interval_ms - (now - timestamp_ms) % self.interval_ms
            logger.info(
                "%s: punctuation due at %d ran at %d; skipping the %d missed firing(s)",
                self.node.chain(),
                timestamp_ms,
                now,
                (now - timestamp_ms) // self.interval_ms,
            )
        context.set_timer(self.timer, due)
        return True

    def _punctuate(self, context: ComputationContext, timestamp_ms: int) -> None:
        assert self.context is not None
        self.context._active = True
        try:
            self.processor.punctuate(timestamp_ms)
        finally:
            self.context._active = False
        context.ask_for_checkpoint()

    def close(self) -> None:
        self.processor.close()


class DslProcessorContext(ProcessorContext):
    """The `ProcessorContext` of a processor in a DSL chain: `forward` continues down the chain;
    `get_state_store` reaches the stores the step declared; there are no output streams to
    `send` to (use `add_processor` for those)."""

    def __init__(self, step: ProcessStep, context: ComputationContext) -> None:
        # Not ProcessorContext.__init__: that one is bound to a ProcessorComputation's outputs.
        self._step = step
        self._context = context
        self._record: Record | None = None
        self._stream: str | None = None
        self._key: str | None = None
        self._active = False  # in process or punctuate: forward may run the chain

    @property
    def computation_name(self) -> str:
        return self._step.computation

    @property
    def key(self) -> str | None:
        """The key the chain hands this step (changed by a `map` or `select_key` before it);
        None outside `process`."""
        return self._key

    @property
    def outputs(self) -> tuple[str, ...]:
        """None: what the processor forwards goes down the chain."""
        return ()

    def send(self, stream: str, key: str, value: Any) -> None:
        raise UnknownOutputError(
            f"{self._step.node.chain()}: send({stream!r}, ...) but a processor in a DSL chain has "
            "no output streams; forward(key, value) down the chain and end it with "
            f".to({stream!r})"
        )

    def forward(self, key: str, value: Any, to: str | int | None = None) -> None:
        """Hand `(key, value)` to the next operator of the chain (nothing, for a terminal step).
        Only from `process` or `punctuate`: the chain runs inside the record or timer."""
        if to is not None:
            raise UnknownOutputError(
                f"{self._step.node.chain()}: forward(to={to!r}) but a processor in a DSL chain "
                "has one downstream, the rest of the chain; call forward(key, value) and "
                "branch(...) after .process(...) to route records"
            )
        if not self._active:
            raise NotProcessingError(
                f"{self._step.node.chain()}: forward() outside process() and punctuate(); a "
                "processor in a DSL chain forwards only while it processes a record or a timer"
            )
        self._step.downstream(key, value)

    def schedule(
        self, interval_ms: int, type: PunctuationType = PunctuationType.WALL_CLOCK_TIME
    ) -> None:
        """Call `punctuate` every `interval_ms` of the processor's clock, or of each task's
        stream time with `PunctuationType.STREAM_TIME`, as `ProcessorContext.schedule`."""
        where = self._step.node.chain()
        if not isinstance(interval_ms, int) or isinstance(interval_ms, bool) or interval_ms <= 0:
            raise DslDefinitionError(
                f"{where}: schedule({interval_ms!r}): the interval must be a positive int of "
                "milliseconds"
            )
        if not isinstance(type, PunctuationType):
            raise DslDefinitionError(
                f"{where}: schedule(type={type!r}): use PunctuationType.WALL_CLOCK_TIME or "
                "PunctuationType.STREAM_TIME"
            )
        self._step.schedule(self._context, interval_ms, type)

    def get_state_store(self, name: str, task: int | None = None) -> KeyValueStore[Any]:
        """The state store `name` of the current record's task; the step must declare it
        (`process(..., stores=[name])`)."""
        if name not in self._step.stores:
            declared = sorted(self._step.stores)
            raise TopologyError(
                f"{self._step.node.chain()} has no state store {name!r} (it declares "
                f"{declared}); add it to stores= of .process(...)"
            )
        return self._context.get_state_store(name, task)
