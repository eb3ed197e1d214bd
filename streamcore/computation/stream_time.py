"""Stream time (docs/state.md, "Stream time"): timestamp extractors, the two punctuation types,
and the stream synchronization of a task that reads several partitions (KIP-28).

A record's timestamp comes from the computation's extractor (`Settings.set_timestamp_extractor`):
the Record watermark by default (`WatermarkTimestamp`), the log's append time
(`LogAppendTimestamp`), a field of the decoded value (`FieldTimestamp`) or a function of the
Record and its `LogRecord`. A task's stream time is the largest timestamp it has processed, so it
never goes back. When a task reads partition p of several inputs, `StreamSynchronizer` hands the
runner, among the records buffered per partition, the one with the smallest timestamp first, and
waits up to `max_task_idle_ms` for a partition with nothing buffered (Kafka Streams'
`max.task.idle.ms`); the order within one partition is never changed.
"""

from __future__ import annotations

import abc
import enum
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

from streamcore.computation.errors import InvalidTimestampError
from streamcore.errors import CodecError, TopologyError
from streamcore.log import LogPartition, LogRecord
from streamcore.record import Record

if TYPE_CHECKING:
    from streamcore.computation.computation import Computation
    from streamcore.computation.dsl_values import ValueCodecSpec

__all__ = [
    "FieldTimestamp",
    "LogAppendTimestamp",
    "PunctuationType",
    "StreamSynchronizer",
    "TimestampExtractor",
    "TimestampFunction",
    "WatermarkTimestamp",
    "extractor_of",
]

UNKNOWN = -1  # the stream time of a task that has processed no record yet (as Kafka Streams)

TimestampFunction: TypeAlias = Callable[[Record, LogRecord[Any]], int]
"""`(record, log_record) -> epoch milliseconds`: the form every extractor is bound to."""


class PunctuationType(enum.Enum):
    """What drives a processor's punctuation (Kafka Streams' `PunctuationType`)."""

    WALL_CLOCK_TIME = "wall_clock_time"
    """The processor's clock (the test driver's virtual clock): fires with or without records."""
    STREAM_TIME = "stream_time"
    """A task's stream time: fires only when records of the task move it past a boundary."""


class TimestampExtractor(abc.ABC):
    """Where a record's event time is read. `bind` gives the function the runner calls per record
    of one input of one computation."""

    @abc.abstractmethod
    def bind(self, computation: Computation, logical_input: str) -> TimestampFunction: ...

    def describe(self) -> str:
        return type(self).__name__


class WatermarkTimestamp(TimestampExtractor):
    """The Record watermark's timestamp (the default): the event time the producer stamped."""

    def bind(self, computation: Computation, logical_input: str) -> TimestampFunction:
        return _watermark_ms

    def describe(self) -> str:
        return "the Record watermark"


class LogAppendTimestamp(TimestampExtractor):
    """The time the log appended the record (Kafka's `LogAppendTime` / the local log's)."""

    def bind(self, computation: Computation, logical_input: str) -> TimestampFunction:
        return _log_time_ms

    def describe(self) -> str:
        return "the log append time"


class FieldTimestamp(TimestampExtractor):
    """The int field `name` (epoch milliseconds) of the record's value, a JSON object or an Avro
    record. The value is decoded with `codec` (a value codec spec: "json", an Avro mode with
    `schema`, a Codec); left out, with the codec of the processor's input stream (processors
    only)."""

    def __init__(self, name: str, codec: ValueCodecSpec | None = None, schema: Any = None) -> None:
        if not isinstance(name, str) or not name:
            raise TopologyError(f"FieldTimestamp needs a field name, got {name!r}")
        self.name = name
        self.codec = codec
        self.schema = schema

    def describe(self) -> str:
        return f"the value field {self.name!r}"

    def bind(self, computation: Computation, logical_input: str) -> TimestampFunction:
        decode = self._decoder(computation, logical_input)
        name, where = self.name, computation.metadata.name

        def extract(record: Record, rec: LogRecord[Any]) -> int:
            try:
                value = decode(record.data)
            except Exception as exc:
                raise InvalidTimestampError(
                    f"computation {where!r}: cannot read the timestamp field {name!r} of record "
                    f"{record.key!r} at {rec.log_offset}: its value does not decode "
                    f"({type(exc).__name__}: {exc})"
                ) from exc
            found = value.get(name) if isinstance(value, dict) else None
            if found is None:
                raise InvalidTimestampError(
                    f"computation {where!r}: record {record.key!r} at {rec.log_offset} has no "
                    f"timestamp field {name!r} (an int of epoch milliseconds) in its value"
                )
            return _checked(found, f"field {name!r}", where, record, rec)

        return extract

    def _decoder(self, computation: Computation, logical_input: str) -> Callable[[bytes], Any]:
        from streamcore.computation.dsl_values import resolve_value_codec
        from streamcore.computation.processor import ProcessorComputation

        where = f"timestamp field {self.name!r} of computation {computation.metadata.name!r}"
        if self.codec is not None:
            return resolve_value_codec(self.codec, self.schema, where=where).decode
        if isinstance(computation, ProcessorComputation):
            return computation.value_decoder(logical_input)
        raise TopologyError(
            f"{where}: give the codec of the values (FieldTimestamp({self.name!r}, codec='json')"
            "); only a processor's own codec is known without it"
        )


class _FunctionTimestamp(TimestampExtractor):
    def __init__(self, function: TimestampFunction) -> None:
        self.function = function

    def describe(self) -> str:
        return f"the function {getattr(self.function, '__qualname__', self.function)!r}"

    def bind(self, computation: Computation, logical_input: str) -> TimestampFunction:
        function, where = self.function, computation.metadata.name

        def extract(record: Record, rec: LogRecord[Any]) -> int:
            return _checked(function(record, rec), "the extractor function", where, record, rec)

        return extract


def extractor_of(extractor: TimestampExtractor | TimestampFunction) -> TimestampExtractor:
    """`extractor` as a `TimestampExtractor` (a function `(record, log_record) -> int ms` is
    wrapped)."""
    if isinstance(extractor, TimestampExtractor):
        return extractor
    if callable(extractor):
        return _FunctionTimestamp(extractor)
    raise TopologyError(
        "a timestamp extractor is a TimestampExtractor (WatermarkTimestamp, LogAppendTimestamp, "
        f"FieldTimestamp) or a function (record, log_record) -> int ms, got "
        f"{type(extractor).__name__}"
    )


def _watermark_ms(record: Record, rec: LogRecord[Any]) -> int:
    return record.watermark >> 17


def _log_time_ms(record: Record, rec: LogRecord[Any]) -> int:
    return rec.timestamp


def _checked(value: Any, what: str, where: str, record: Record, rec: LogRecord[Any]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidTimestampError(
            f"computation {where!r}: {what} gave {value!r} for record {record.key!r} at "
            f"{rec.log_offset}; a timestamp is an int of epoch milliseconds >= 0"
        )
    return value


# -- stream synchronization --------------------------------------------------------------------
_Buffered: TypeAlias = tuple[int, LogRecord[Any], "Record | CodecError"]


class StreamSynchronizer:
    """Buffers the records read per partition and releases them task by task, smallest timestamp
    first (KIP-28). Only made for a computation with several inputs: with one, a task is one
    partition and the read order is already the order of its records.

    A task whose partitions all have records buffered releases them merged by timestamp until one
    runs empty. Then, with `idle_ms` 0, the others go on at once; otherwise the task waits up to
    `idle_ms` (the runner's clock) for the empty partition before releasing the others, as Kafka
    Streams' `max.task.idle.ms` does. Each record is decoded once here; the runner takes the
    decoded Record (or the CodecError) with it."""

    def __init__(
        self,
        decoders: dict[Any, Callable[[bytes], Record]],
        timestamps: dict[Any, TimestampFunction],
        idle_ms: int,
    ) -> None:
        self._decoders = decoders  # per stream Name
        self._timestamps = timestamps
        self.idle_ms = idle_ms
        self._queues: dict[LogPartition, deque[_Buffered]] = {}
        self._waiting: dict[int, int] = {}  # task -> clock when it started waiting
        self.buffered = 0

    def add(self, batch: list[LogRecord[Any]]) -> None:
        queues = self._queues
        for rec in batch:
            name = rec.partition.name
            record: Record | CodecError
            try:
                record = self._decoders[name](rec.message)
                ts = self._timestamps[name](record, rec)
            except CodecError as exc:
                record, ts = exc, UNKNOWN  # first out: the runner applies the policy to it
            except Exception:
                ts = UNKNOWN  # a bad timestamp: the runner's extraction fails again, loudly
            queue = queues.get(rec.partition)
            if queue is None:
                queue = queues[rec.partition] = deque()
            queue.append((ts, rec, record))
        self.buffered += len(batch)

    def wait_ms(self, now_ms: int) -> int | None:
        """How long until a waiting task may go on without its empty partition (None: none
        waits)."""
        if not self._waiting:
            return None
        return max(0, min(self._waiting.values()) + self.idle_ms - now_ms)

    def release(
        self, assignments: list[LogPartition], now_ms: int
    ) -> tuple[list[LogRecord[Any]], list[Record | CodecError]]:
        """The records that may be processed now, in processing order, with their decoded
        Records."""
        tasks: dict[int, list[LogPartition]] = {}
        for partition in assignments:
            tasks.setdefault(partition.partition, []).append(partition)
        out: list[LogRecord[Any]] = []
        decoded: list[Record | CodecError] = []
        queues, waiting = self._queues, self._waiting
        for task, partitions in tasks.items():
            mine = [queues.setdefault(p, deque()) for p in partitions]
            while True:
                full = [q for q in mine if q]
                if not full:
                    waiting.pop(task, None)
                    break
                if len(full) < len(mine) and self.idle_ms > 0:
                    since = waiting.setdefault(task, now_ms)
                    if now_ms - since < self.idle_ms:
                        break
                else:
                    waiting.pop(task, None)
                if len(full) == 1:
                    queue, until = full[0], None
                else:
                    queue = min(full, key=_head_time)  # ties: the first partition
                    until = min(q[0][0] for q in full if q is not queue)
                # A run: the queue's records up to the others' smallest head come next anyway.
                while True:
                    _, rec, record = queue.popleft()
                    out.append(rec)
                    decoded.append(record)
                    if not queue or (until is not None and queue[0][0] >= until):
                        break
        self.buffered -= len(out)
        return out, decoded

    def low_watermark(self) -> int:
        """The lowest watermark of the buffered records (0: none). Safe from another thread:
        `list()` copies the containers in one step under the GIL."""
        low = 0
        for queue in list(self._queues.values()):
            for _, _, record in list(queue):
                mark = record.watermark if isinstance(record, Record) else 0
                if mark and (not low or mark < low):
                    low = mark
        return low

    def clear(self) -> None:
        """Forget every buffered record (a rewind reads them again from the committed
        positions)."""
        self._queues.clear()
        self._waiting.clear()
        self.buffered = 0


def _head_time(queue: deque[_Buffered]) -> int:
    return queue[0][0]
