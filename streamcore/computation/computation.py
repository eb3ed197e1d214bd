"""`Computation`: the unit of processing of a topology (Nuxeo's `Computation`).

A computation reads records from its logical input streams `i1..iN`, and writes records to its
logical output streams `o1..oN` through the `ComputationContext` it is given. The topology maps
logical names to real streams, so one computation class can be wired differently.

Lifecycle, per concurrency unit (one instance per thread, made by the topology's supplier):
`init(context)` once the unit starts and again after every rebalance of its partitions, then any
number of `process_record` / `process_timer` calls from that one thread, then `destroy()`.
`signal_stop()` is the only method called from another thread.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from streamcore.computation.context import ComputationContext
from streamcore.errors import TopologyError
from streamcore.log import LogOffset
from streamcore.names import Name
from streamcore.record import Record

__all__ = [
    "BatchFunction",
    "BatchOutcome",
    "Computation",
    "ComputationContext",
    "ComputationMetadata",
    "FailedRecord",
    "Produced",
    "input_name",
    "output_name",
]


FailedRecord: TypeAlias = Record | tuple[Record, LogOffset | None]
"""What `process_failure` returns per record: the record with where it was read, or bare."""

Produced: TypeAlias = list[tuple[str, list[tuple[str, Record]]]]
"""Records produced, per logical output stream: `(output, [(key, record), ...])`."""
BatchOutcome: TypeAlias = tuple[Produced, tuple[int, Exception] | None]
"""What a batch function returns: what it produced, or ([], (index, failure))."""
BatchFunction: TypeAlias = Callable[[list[Record]], BatchOutcome]
"""See `Computation.batch_function`."""


def input_name(index: int) -> str:
    """The logical name of the input stream number `index` (1-based): `i1`, `i2`, ..."""
    return f"i{index}"


def output_name(index: int) -> str:
    """The logical name of the output stream number `index` (1-based): `o1`, `o2`, ..."""
    return f"o{index}"


@dataclass(frozen=True, slots=True)
class ComputationMetadata:
    """What a computation is called and how many streams it reads and writes (logical names)."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @classmethod
    def of(cls, name: str, inputs: int = 1, outputs: int = 0) -> ComputationMetadata:
        if inputs < 0 or outputs < 0:
            raise TopologyError(
                f"computation {name!r}: inputs and outputs must be >= 0, got {inputs} and {outputs}"
            )
        try:
            Name.of(name)  # the name is also the consumer group of the computation
        except ValueError as exc:
            raise TopologyError(
                f"computation name {name!r} is not a valid group name: {exc}"
            ) from None
        return cls(
            name,
            tuple(input_name(i) for i in range(1, inputs + 1)),
            tuple(output_name(i) for i in range(1, outputs + 1)),
        )


class Computation(abc.ABC):
    """Base class of computations. Subclasses implement `process_record` (and `process_timer`
    when they set timers).

    Example:
        class Upper(Computation):
            def __init__(self) -> None:
                super().__init__("upper", inputs=1, outputs=1)

            def process_record(self, context, input_stream, record):
                context.produce_record("o1", record.key, record.data.upper())
                context.ask_for_checkpoint()
    """

    def __init__(self, name: str, inputs: int = 1, outputs: int = 0) -> None:
        self.metadata = ComputationMetadata.of(name, inputs, outputs)

    @property
    def name(self) -> str:
        return self.metadata.name

    def init(self, context: ComputationContext) -> None:
        """Called before the first record and again after each rebalance (a new context)."""
        return None  # a hook: override it when needed

    @abc.abstractmethod
    def process_record(
        self, context: ComputationContext, input_stream: str, record: Record
    ) -> None:
        """Process one record of the logical input `input_stream` ("i1", ...). Records produced
        here are buffered and appended at the next checkpoint; ask for one with
        `context.ask_for_checkpoint()` once the record's effects are in the context. Raising
        triggers the computation's policy (retries, then dead-letter stream, skip or stop)."""

    def process_timer(self, context: ComputationContext, key: str, timestamp_ms: int) -> None:
        """A timer set with `context.set_timer(key, timestamp_ms)` is due."""
        return None  # a hook: override it when needed

    def process_retry(self, context: ComputationContext, failure: BaseException) -> None:
        """Called before the record that raised `failure` is processed again. Records produced
        by the failed attempt were already discarded."""
        return None  # a hook: override it when needed

    def process_failure(
        self, context: ComputationContext, failure: BaseException
    ) -> Sequence[FailedRecord]:
        """Called once when the retries of a record (or timer) are exhausted, before the
        policy's fallback (dead-letter, skip or termination). Returns other records the failure
        concerns (a batch computation returns its batch), which the fallback treats like the
        failed record: dead-lettered or skipped. Return each as `(record, offset)`, with the
        `context.last_offset` it was received at, so its dead letter names its own stream,
        partition and offset; a bare Record is dead-lettered with stream "" and partition and
        offset -1 (unknown). The default returns none."""
        return ()

    def batch_function(self, input_stream: str) -> BatchFunction | None:
        """A function that does for a batch of records of `input_stream` what `process_record`
        does for each in turn, or None (the default: record by record). It is given only records
        without the COMMIT or POISON_PILL flag, and has no effect but its result: per logical
        output stream, the `(key, record)` pairs the `produce_record` calls would buffer, in
        order, with a checkpoint asked for after every record. When a record fails it returns
        `([], (index, failure))` having produced nothing, `failure` being what `process_record`
        raises for the record at `index`; the runner then goes through that batch record by
        record (the calls made for its other records are made again), `failure` standing for
        the first attempt at that record. A computation that keeps state, sets timers or
        punctuates has no batch function.
        """
        return None

    def held_records(self) -> Iterable[tuple[Record, LogOffset | None]]:
        """Records received but not done yet (a batch waiting to be processed), each with the
        `context.last_offset` it was received at. Whatever triggers a checkpoint, it commits no
        partition past the first of them, and the low watermark stays at or below theirs, so a
        stop, crash or rebalance delivers them again. The default holds nothing."""
        return ()

    def destroy(self) -> None:
        """Release resources; the unit is stopping (its last checkpoint is done)."""
        return None  # a hook: override it when needed

    def signal_stop(self) -> None:
        """Called from another thread when the processor stops: interrupt long work if any."""
        return None  # a hook: override it when needed

    def __repr__(self) -> str:
        meta = self.metadata
        return f"{type(self).__name__}(name={meta.name!r}, inputs={len(meta.inputs)}, " + (
            f"outputs={len(meta.outputs)})"
        )
