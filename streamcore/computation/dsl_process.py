"""A processor API `Processor` run as a step of a DSL chain (`Stream.process`): its instance, and
the `ProcessorContext` through which it forwards down the chain and reaches its state stores.

The context keeps `ProcessorContext`'s face (a processor written for `add_processor` runs here
unchanged as long as it only forwards and uses its stores), but it has no output streams: a
record it forwards is handed to the next operator of the chain within the call, and where it ends
up is decided by the chain's sinks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streamcore.computation.errors import (
    DslDefinitionError,
    NotProcessingError,
    UnknownOutputError,
)
from streamcore.computation.processor import Processor, ProcessorContext
from streamcore.computation.stream_time import PunctuationType
from streamcore.errors import TopologyError

if TYPE_CHECKING:
    from streamcore.computation.computation import ComputationContext
    from streamcore.computation.dsl_graph import OperatorNode
    from streamcore.record import Record
    from streamcore.state.store import KeyValueStore

__all__ = ["DslProcessorContext", "ProcessStep"]

Emit = Callable[[str, Any], None]


class ProcessStep:
    """One `process(...)` node of a compiled chain: its processor instance, the operator that
    follows it (`downstream`, a no-op for a terminal step), and its current context."""

    def __init__(self, node: OperatorNode, computation: str, source: str, downstream: Emit) -> None:
        self.node = node
        self.computation = computation
        self.source = source
        self.downstream = downstream
        self.stores = frozenset(spec.name for spec in node.payload)
        self.context: DslProcessorContext | None = None
        self.processor = node.fn()
        if not isinstance(self.processor, Processor):
            raise DslDefinitionError(
                f"{node.chain()}: the supplier returned {type(self.processor).__name__}, not a "
                "Processor; pass the Processor subclass (or a function returning one)"
            )

    def init(self, context: ComputationContext) -> None:
        """A fresh context for the processor, then its `init` (again after a rebalance)."""
        self.context = DslProcessorContext(self, context)
        self.processor.init(self.context)

    def process(self, record: Record, key: str, value: Any) -> None:
        context = self.context
        if context is None:
            raise NotProcessingError(f"{self.node.chain()} ran before its computation's init")
        context._record, context._key = record, key
        context._stream = self.source
        try:
            self.processor.process(key, value)
        finally:
            context._record = context._key = context._stream = None

    def close(self) -> None:
        self.processor.close()


class DslProcessorContext(ProcessorContext):
    """The `ProcessorContext` of a processor in a DSL chain: `forward` continues down the chain;
    `get_state_store` reaches the stores the step declared; there are no output streams to
    `send` to and no punctuation (use `add_processor` for those)."""

    def __init__(self, step: ProcessStep, context: ComputationContext) -> None:
        # Not ProcessorContext.__init__: that one is bound to a ProcessorComputation's outputs.
        self._step = step
        self._context = context
        self._record: Record | None = None
        self._stream: str | None = None
        self._key: str | None = None

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
        Only from `process`: the chain runs inside the record being processed."""
        if to is not None:
            raise UnknownOutputError(
                f"{self._step.node.chain()}: forward(to={to!r}) but a processor in a DSL chain "
                "has one downstream, the rest of the chain; call forward(key, value) and "
                "branch(...) after .process(...) to route records"
            )
        if self._record is None:
            raise NotProcessingError(
                f"{self._step.node.chain()}: forward() outside process(); a processor in a DSL "
                "chain forwards only while it processes a record"
            )
        self._step.downstream(key, value)

    def schedule(
        self, interval_ms: int, type: PunctuationType = PunctuationType.WALL_CLOCK_TIME
    ) -> None:
        raise DslDefinitionError(
            f"{self._step.node.chain()}: schedule({interval_ms!r}): punctuation is not available "
            "to a processor inside a DSL chain; run it as its own computation with "
            "builder.add_processor(...) (a DSL chain can read its output stream)"
        )

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
