"""The processor API (Kafka Streams' KIP-28) on top of computations.

    class Dedup(Processor):
        def init(self, context):
            self.context, self.seen = context, set()
            context.schedule(60_000)            # punctuate every minute

        def process(self, key, value):
            if key not in self.seen:
                self.seen.add(key)
                self.context.forward(key, value)

        def punctuate(self, timestamp):
            self.seen.clear()
            self.context.commit()

    topology = (
        Topology.builder()
        .add_processor("shop/dedup", Dedup, inputs=["shop/orders"], outputs=["shop/unique"],
                       codec="json")
        .build()
    )

How it maps onto the computation model (`ProcessorComputation`):

| processor API | computation |
|---|---|
| `init(context)` | `Computation.init` (again after a rebalance, with a fresh context) |
| `process(key, value)` | `process_record`; the value decoded with the input stream's codec |
| `context.send(stream, key, value)` / `forward(key, value[, to])` | `produce_record` |
| `context.schedule(interval_ms)` + `punctuate(timestamp)` | `set_timer` / `process_timer` |
| `context.schedule(interval_ms, PunctuationType.STREAM_TIME)` | `set_stream_timer` per task |
| `context.stream_time` | `stream_time_ms` |
| `context.task_id` | `task_id` |
| `context.commit()` | `ask_for_checkpoint` |
| `close()` | `destroy` |

Records a processor sends are, like every produced record, appended at the next checkpoint
(at-least-once); when `process` raises, what it sent during that call is discarded before the
policy retries or dead-letters the record, so a retry leaves no duplicates. Sent records keep
the watermark of the record being processed; in `punctuate` they get the processor's low
watermark.

Punctuation runs on the processor's clock by default (`PunctuationType.WALL_CLOCK_TIME`:
wall-clock time, or the `TopologyTestDriver`'s virtual clock): every `interval_ms` after
`schedule`, with late firings not repeated. With `PunctuationType.STREAM_TIME` it runs per task on
the task's stream time (docs/state.md, "Stream time"), as Kafka Streams does: boundaries are the
multiples of `interval_ms`, the first punctuation comes with the task's first record, then one each
time a record moves the stream time to or past the next boundary (once, however many boundaries
it jumps), right after that record; `punctuate` gets the stream time, and `get_state_store` in it
is that task's store. The clock never fires it.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from streamcore.computation.computation import Computation, ComputationContext
from streamcore.computation.dsl_values import ValueCodecSpec, resolve_value_codec
from streamcore.computation.errors import (
    DslDefinitionError,
    NotCallableError,
    UnknownOutputError,
)
from streamcore.computation.stream_time import PunctuationType
from streamcore.errors import InvalidNameError, RecordFieldError
from streamcore.names import Name
from streamcore.record import Flag, Record

if TYPE_CHECKING:
    from streamcore.codecs import Codec
    from streamcore.log import LogOffset
    from streamcore.state.store import KeyValueStore

__all__ = [
    "Processor",
    "ProcessorComputation",
    "ProcessorContext",
    "PunctuationType",
    "wire_processor",
]

logger = logging.getLogger(__name__)

PUNCTUATE_TIMER = "punctuate"
STREAM_PUNCTUATE_TIMER = "punctuate-stream-time"
_CONTROL = Flag.COMMIT | Flag.POISON_PILL


class Processor(abc.ABC):
    """A record-at-a-time processor (KIP-28). One instance per thread of the computation; it is
    never called from two threads at once."""

    def init(self, context: ProcessorContext) -> None:  # noqa: B027 (optional hook)
        """Called before the first record, and again after each rebalance with a fresh context.
        Keep `context`: it is how the processor sends records, schedules and commits."""

    @abc.abstractmethod
    def process(self, key: str, value: Any) -> None:
        """Handle one record; `value` is decoded with the codec of the input stream
        (`context.stream` tells which one)."""

    def punctuate(self, timestamp: int) -> None:  # noqa: B027 (optional hook)
        """Called every `interval_ms` given to `context.schedule`; `timestamp` is the time (ms)
        the punctuation was due (wall clock), or the task's stream time (stream time)."""

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Release resources; called once when the computation stops. Records cannot be sent
        from here."""


class ProcessorContext:
    """What a `Processor` gets from the framework (KIP-28's `ProcessorContext`)."""

    def __init__(self, computation: ProcessorComputation, context: ComputationContext) -> None:
        self._computation = computation
        self._context = context
        self._record: Record | None = None
        self._stream: str | None = None

    @property
    def computation_name(self) -> str:
        return self._computation.metadata.name

    @property
    def stream(self) -> str | None:
        """The input stream of the record being processed (None in `punctuate`)."""
        return self._stream

    @property
    def key(self) -> str | None:
        """The key of the record being processed (None in `punctuate`)."""
        return self._record.key if self._record is not None else None

    @property
    def timestamp(self) -> int | None:
        """The event time (ms) of the record being processed: the timestamp the computation's
        extractor gives it (the Record watermark's by default; docs/state.md, "Stream time");
        None in `punctuate`."""
        return self._context.record_timestamp_ms if self._record is not None else None

    @property
    def stream_time(self) -> int:
        """The stream time (ms) of the current record's task (of the punctuated task in a
        stream-time `punctuate`): the largest timestamp it has processed; -1 before any."""
        return self._context.stream_time_ms

    @property
    def record_times(self) -> tuple[int, int, int] | None:
        """`(task_id, timestamp, stream_time)` of the record being processed in one call (for
        a processor that needs the three for every record); None in `punctuate`."""
        return self._context.record_times if self._record is not None else None

    @property
    def task_id(self) -> int | None:
        """The task (input partition number) of the record being processed, of the punctuated
        task in a stream-time `punctuate`; None in a wall-clock one (KIP-28's `taskId()`)."""
        return self._context.task_id

    def count_late_record(self) -> None:
        """Count a record sent to a late stream (the metric `streamcore_computation_late_total`;
        the DSL's windowed aggregations call it)."""
        self._context.count_late_record()

    @property
    def offset(self) -> LogOffset | None:
        """Where the record being processed was read (None in `punctuate`)."""
        return self._context.last_offset if self._record is not None else None

    @property
    def outputs(self) -> tuple[str, ...]:
        """The output streams, in declaration order (child index i = `outputs[i]`)."""
        return self._computation.outputs

    def send(self, stream: str, key: str, value: Any) -> None:
        """Send `(key, value)` to the output `stream` (a declared output name), the value
        encoded with that stream's codec."""
        self._computation.send(self._context, self._record, stream, key, value)

    def forward(self, key: str, value: Any, to: str | int | None = None) -> None:
        """Send to every output (`to=None`), or to one, by stream name or child index."""
        outputs = self._computation.outputs
        if to is None:
            for stream in outputs:
                self._computation.send(self._context, self._record, stream, key, value)
            return
        if isinstance(to, bool):  # an int to Python, but neither a name nor an index
            raise UnknownOutputError(
                f"processor {self.computation_name!r}: forward(to={to}); give an output stream "
                f"name or a child index of {list(outputs)}"
            )
        if isinstance(to, int):
            if not 0 <= to < len(outputs):
                raise UnknownOutputError(
                    f"processor {self.computation_name!r}: forward(to={to}) but it has "
                    f"{len(outputs)} output(s) {list(outputs)}; use an index below "
                    f"{len(outputs)} or declare more outputs"
                )
            to = outputs[to]
        self._computation.send(self._context, self._record, to, key, value)

    def schedule(
        self, interval_ms: int, type: PunctuationType = PunctuationType.WALL_CLOCK_TIME
    ) -> None:
        """Call `punctuate` every `interval_ms` from now on (again to change the interval) of
        the processor's clock, or of each task's stream time with `PunctuationType.STREAM_TIME`
        (see the module doc). One schedule per type."""
        if not isinstance(interval_ms, int) or isinstance(interval_ms, bool) or interval_ms <= 0:
            raise DslDefinitionError(
                f"processor {self.computation_name!r}: schedule({interval_ms!r}): the interval "
                "must be a positive int of milliseconds"
            )
        if not isinstance(type, PunctuationType):
            raise DslDefinitionError(
                f"processor {self.computation_name!r}: schedule(type={type!r}): use "
                "PunctuationType.WALL_CLOCK_TIME or PunctuationType.STREAM_TIME"
            )
        if type is PunctuationType.STREAM_TIME:
            self._computation.schedule_stream_time(interval_ms)
        else:
            self._computation.schedule(self._context, interval_ms)

    def commit(self) -> None:
        """Ask for a checkpoint after this record: sent records are appended and the input
        position is committed."""
        self._context.ask_for_checkpoint()

    def get_state_store(self, name: str, task: int | None = None) -> KeyValueStore[Any]:
        """The state store `name` of the current record's task (KIP-28's `getStateStore`); in a
        stream-time `punctuate`, of the punctuated task; in a wall-clock one, name the `task`
        (one of `tasks`) unless the processor owns exactly one.
        Declare it with `stores=` in `add_processor` (docs/state.md)."""
        return self._context.get_state_store(name, task)

    @property
    def tasks(self) -> tuple[int, ...]:
        """The tasks (input partition numbers) this processor instance owns now."""
        return self._context.tasks


class ProcessorComputation(Computation):
    """A `Processor` run as a computation with N inputs and M outputs (KIP-28 adapter)."""

    def __init__(
        self,
        name: str,
        processor: Callable[[], Processor],
        inputs: Sequence[str],
        outputs: Sequence[str],
        input_codecs: Sequence[Codec[Any]],
        output_codecs: Sequence[Codec[Any]],
        *,
        auto_commit: bool = True,
    ) -> None:
        super().__init__(name, inputs=len(inputs), outputs=len(outputs))
        self._auto_commit = auto_commit
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self._input = {
            f"i{i}": (stream, codec.decode)
            for i, (stream, codec) in enumerate(zip(inputs, input_codecs, strict=True), 1)
        }
        self._output = {
            stream: (f"o{i}", codec.encode)
            for i, (stream, codec) in enumerate(zip(outputs, output_codecs, strict=True), 1)
        }
        for logical, encode in list(self._output.values()):
            self._output.setdefault(logical, (logical, encode))
        self._processor = processor()
        if not isinstance(self._processor, Processor):
            raise DslDefinitionError(
                f"processor {name!r}: the supplier returned {type(self._processor).__name__}, "
                "not a Processor; pass the Processor subclass (or a function returning one)"
            )
        self._interval_ms = 0
        self._stream_interval_ms = 0
        self._stream_tasks: set[int] = set()  # tasks whose stream-time punctuation is set
        self._context: ProcessorContext | None = None

    def init(self, context: ComputationContext) -> None:
        self._stream_tasks.clear()  # the runner forgets its stream-time timers on a rebalance
        self._context = ProcessorContext(self, context)
        self._processor.init(self._context)

    def value_decoder(self, logical_input: str) -> Callable[[bytes], Any]:
        """How the values of input `logical_input` ("i1", ...) are decoded (a timestamp
        extractor reading a value field uses it)."""
        return self._input[logical_input][1]

    def send(
        self,
        context: ComputationContext,
        current: Record | None,
        stream: str,
        key: str,
        value: Any,
    ) -> None:
        target = self._output.get(stream)
        if target is None:
            raise UnknownOutputError(
                f"processor {self.metadata.name!r} sent to {stream!r}, which is not one of its "
                f"outputs {list(self.outputs)}; add it to outputs= in add_processor()"
            )
        if type(key) is not str:
            raise RecordFieldError(f"a record key must be a str, got {type(key).__name__} {key!r}")
        output, encode = target
        watermark = current.watermark if current is not None else 0
        context.produce_record(output, Record(key, encode(value), watermark))

    def schedule(self, context: ComputationContext, interval_ms: int) -> None:
        self._interval_ms = interval_ms
        context.set_timer(PUNCTUATE_TIMER, context.now_ms() + interval_ms)

    def schedule_stream_time(self, interval_ms: int) -> None:
        """Punctuate each task on its stream time (its timer is set with its next record)."""
        if interval_ms != self._stream_interval_ms:
            self._stream_interval_ms = interval_ms
            self._stream_tasks.clear()  # a new interval: aligned again from the next record

    def process_record(
        self, context: ComputationContext, input_stream: str, record: Record
    ) -> None:
        if not record.data and record.flags & _CONTROL:
            return
        assert self._context is not None
        stream, decode = self._input[input_stream]
        try:
            value = decode(record.data)
        except Exception as exc:
            exc.add_note(f"decoding a value of {stream!r} (processor {self.metadata.name})")
            raise
        pctx = self._context
        pctx._record, pctx._stream = record, stream
        try:
            self._processor.process(record.key, value)
        finally:
            pctx._record = pctx._stream = None
        if self._stream_interval_ms:
            self._start_stream_punctuation(context)
        if self._auto_commit:
            context.ask_for_checkpoint()

    def _start_stream_punctuation(self, context: ComputationContext) -> None:
        """Kafka Streams aligns stream-time punctuation to 0: due at once, it fires right after
        the task's first record, then on the multiples of the interval."""
        offset = context.last_offset
        if offset is not None and offset.partition.partition not in self._stream_tasks:
            self._stream_tasks.add(offset.partition.partition)
            context.set_stream_timer(STREAM_PUNCTUATE_TIMER, 0, offset.partition.partition)

    def process_timer(self, context: ComputationContext, key: str, timestamp_ms: int) -> None:
        if key == STREAM_PUNCTUATE_TIMER:
            self._punctuate_stream_time(context, timestamp_ms)
            return
        if key != PUNCTUATE_TIMER or not self._interval_ms:
            return
        self._processor.punctuate(timestamp_ms)
        if self._auto_commit:
            context.ask_for_checkpoint()
        now = context.now_ms()
        due = timestamp_ms + self._interval_ms
        if due <= now:  # late (a long pause): skip the missed firings instead of bursting
            due = now + self._interval_ms - (now - timestamp_ms) % self._interval_ms
            logger.info(
                "processor %s: punctuation due at %d ran at %d; skipping the %d missed firing(s)",
                self.metadata.name,
                timestamp_ms,
                now,
                (now - timestamp_ms) // self._interval_ms,
            )
        context.set_timer(PUNCTUATE_TIMER, due)

    def _punctuate_stream_time(self, context: ComputationContext, due: int) -> None:
        interval = self._stream_interval_ms
        if not interval:
            return
        now = context.stream_time_ms
        self._processor.punctuate(now)
        if self._auto_commit:
            context.ask_for_checkpoint()
        # The next boundary past `now`: boundaries jumped over fire once, not in a burst.
        context.set_stream_timer(
            STREAM_PUNCTUATE_TIMER, due + ((now - due) // interval + 1) * interval
        )

    def destroy(self) -> None:
        self._processor.close()


def _name(value: str, what: str, processor: str) -> str:
    try:
        return Name.of(value).urn
    except InvalidNameError as exc:
        raise DslDefinitionError(f"processor {processor!r}: {what}: {exc}") from None


def wire_processor(
    name: str,
    processor: Callable[[], Processor],
    *,
    inputs: Sequence[str],
    outputs: Sequence[str] = (),
    codec: ValueCodecSpec = "bytes",
    schema: Any = None,
    codecs: Mapping[str, ValueCodecSpec] | None = None,
    auto_commit: bool = True,
) -> tuple[Callable[[], ProcessorComputation], list[str]]:
    """The supplier of the `ProcessorComputation` running `processor()` and its stream mapping,
    checked: what `TopologyBuilder.add_processor` (which documents the arguments) adds."""
    name = _name(name, "name", name)
    if not callable(processor):
        raise NotCallableError(
            f"processor {name!r}: processor= must be a Processor subclass or a function "
            f"returning one, got {type(processor).__name__}"
        )
    if not inputs:
        raise DslDefinitionError(f"processor {name!r}: give at least one input stream")
    ins = [_name(s, "input", name) for s in inputs]
    outs = [_name(s, "output", name) for s in outputs]
    for streams, what in ((ins, "inputs"), (outs, "outputs")):
        if len(set(streams)) != len(streams):
            raise DslDefinitionError(f"processor {name!r}: {what} {streams} repeat a stream")
    per_stream = {Name.of(k).urn: v for k, v in (codecs or {}).items()}
    unknown = set(per_stream) - set(ins) - set(outs)
    if unknown:
        raise DslDefinitionError(
            f"processor {name!r}: codecs= names {sorted(unknown)}, which are neither inputs nor "
            "outputs"
        )
    default = resolve_value_codec(codec, schema, where=f"processor {name!r}")

    def codec_of(stream: str) -> Codec[Any]:
        spec = per_stream.get(stream)
        if spec is None:
            return default
        return resolve_value_codec(spec, where=f"processor {name!r}, stream {stream!r}")

    in_codecs = [codec_of(s) for s in ins]
    out_codecs = [codec_of(s) for s in outs]

    def supply() -> ProcessorComputation:
        return ProcessorComputation(
            name, processor, ins, outs, in_codecs, out_codecs, auto_commit=auto_commit
        )

    mapping = [f"i{i}:{s}" for i, s in enumerate(ins, 1)]
    mapping += [f"o{i}:{s}" for i, s in enumerate(outs, 1)]
    return supply, mapping
