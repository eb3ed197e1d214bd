"""`KafkaAppender`: produces to one topic through the manager's pooled idempotent producer and
waits for the delivery reports (`_Batch`), so every append returns where its records landed."""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from streamcore.errors import (
    ArgumentTypeError,
    LogClosedError,
    PartitionNotFoundError,
    RecordTooLargeError,
)
from streamcore.log.api import LogAppender
from streamcore.log.append_checks import check_keys_encode, check_timestamps
from streamcore.log.kafka.client import _POOL
from streamcore.log.kafka.partitioner import kafka_partition_for_key
from streamcore.log.values import AppendedOffsets, LogOffset
from streamcore.names import Name

if TYPE_CHECKING:
    from streamcore.codecs import Codec
    from streamcore.log.kafka.manager import KafkaLogManager

__all__ = ["KafkaAppender"]


def _no_offset_error() -> KafkaError:
    return KafkaError(
        KafkaError._INCONSISTENT,
        "the broker acknowledged the record without an offset (a retried batch taken for a "
        "duplicate); it may be missing from the log: append it again",
    )


class _Batch:
    """Delivery reports of one append call, filled by librdkafka's callbacks.

    Why no lock: on a fatal error (a fenced transactional producer, say) confluent-kafka sets
    its KafkaException inside the poll and then goes on serving the purged records' reports
    with that exception pending, so a C call in a report raises SystemError, after it took
    effect. A report that took a lock that way never released it, and the next report of the
    batch waited for it forever inside the poll. So a report changes the batch only by list
    item stores and appends (atomic under the GIL, whichever thread polls the shared producer)
    and keeps the fatal error a call met for `_send` to raise."""

    __slots__ = ("count", "errors", "fatal", "offsets", "partitions", "reported")

    def __init__(self, count: int) -> None:
        self.count = count
        self.partitions = [0] * count
        self.offsets = [-1] * count
        self.errors: list[tuple[int, KafkaError]] = []
        self.reported: list[int] = []  # appended last: the waiting thread then reads the fields
        self.fatal: KafkaException | None = None

    @property
    def pending(self) -> int:
        return self.count - len(self.reported)

    def done(self, index: int, error: KafkaError | None, msg: Any) -> None:
        try:
            if error is None:
                offset = msg.offset()
                if offset is not None:
                    self.partitions[index] = msg.partition()
                    self.offsets[index] = offset
                else:
                    # Acknowledged without an offset: a retried batch the broker answered as a
                    # duplicate. Whether it is in the log is unknown, so the append fails (the
                    # caller may append again: at-least-once).
                    self.errors.append((index, _no_offset_error()))
            else:
                self.errors.append((index, error))
        except SystemError as exc:
            self.take(exc)
        try:
            self.reported.append(index)
        except SystemError as exc:
            self.take(exc)

    def take(self, exc: BaseException) -> None:
        """Keep the producer's fatal error that `exc` (a SystemError, or flush's) carries;
        re-raise `exc` when it carries none."""
        found: BaseException | None = exc
        while found is not None and not isinstance(found, KafkaException):
            found = found.__cause__ or found.__context__
        if found is None:
            raise exc
        if self.fatal is None:
            self.fatal = found


class KafkaAppender(LogAppender[Any]):
    """Produces to one topic through the manager's (pooled) idempotent producer and waits for the
    delivery reports, so every append returns where its records landed. Thread-safe.

    `producer`: another producer to append through instead of the pooled one (a transaction's,
    `streamcore.log.kafka.transaction`: the same checks, encoding and delivery reports)."""

    def __init__(
        self,
        manager: KafkaLogManager,
        name: Name,
        codec: Codec[Any] | None,
        size: int,
        producer: Producer | None = None,
    ) -> None:
        self.manager = manager
        self._producer = producer
        self.name = name
        self.codec = codec
        self.topic = manager.topic(name)
        self._size = size
        self._closed = False

    @property
    def size(self) -> int:
        return self._size

    @property
    def closed(self) -> bool:
        return self._closed

    def partition_for(self, key: str) -> int:
        """The partition `append(key, ...)` uses: Kafka's murmur2 partitioner (not Nuxeo's)."""
        return kafka_partition_for_key(key, self._size)

    def _check(self, partition: int | None) -> None:
        if self._closed:
            raise LogClosedError(f"appender of {self.name} is closed")
        if partition is not None and not 0 <= partition < self._size:
            raise PartitionNotFoundError(
                f"{self.name} has partitions 0..{self._size - 1}, not {partition}"
            )

    def _encode(self, key: Any, message: Any) -> tuple[bytes, bytes]:
        if not isinstance(key, str):
            raise ArgumentTypeError(f"log keys must be str, got {type(key).__name__}")
        value = message if self.codec is None else self.codec.encode(message)
        if not isinstance(value, bytes | bytearray | memoryview):
            raise ArgumentTypeError(
                f"log values must be bytes, got {type(value).__name__}; pass a codec to the "
                "appender to encode messages"
            )
        return key.encode("utf-8"), bytes(value) if not isinstance(value, bytes) else value

    def _encode_all(self, items: Sequence[tuple[str, Any]]) -> list[tuple[bytes, bytes]]:
        """`_encode` of every item; str keys and codecs that return bytes (the usual case) skip
        its checks, the rest go through them (and their errors)."""
        encode = None if self.codec is None else self.codec.encode
        out = []
        for key, message in items:
            if key.__class__ is str:
                value = message if encode is None else encode(message)
                if value.__class__ is bytes:
                    out.append((key.encode(), value))  # UTF-8, strict
                    continue
            out.append(self._encode(key, message))
        return out

    def _produce_when_room(
        self,
        producer: Producer,
        batch: _Batch,
        index: int,
        key: bytes,
        value: bytes,
        target: int,
        timestamps: Sequence[int] | None,
        deadline: float,
    ) -> None:
        """Produce item `index` once the producer's local queue has room (deliveries drain it),
        until `deadline`; a fatal error met meanwhile is kept in `batch` (see `_Batch`)."""
        clients = self.manager.clients
        kwargs: dict[str, Any] = {"on_delivery": functools.partial(batch.done, index)}
        if timestamps is not None:
            kwargs["timestamp"] = int(timestamps[index])
        while True:
            try:
                producer.poll(0.05)
            except (KafkaException, SystemError) as exc:
                batch.take(exc)  # a fatal error (see `_Batch`)
                return
            if time.monotonic() > deadline:
                raise clients.unavailable(
                    f"cannot append to {self.name}", "the producer queue stayed full"
                ) from None
            try:
                producer.produce(self.topic, value or None, key, target, **kwargs)
                return
            except BufferError:
                continue
            except KafkaException as exc:
                raise clients.translate(exc, f"cannot append to {self.name}", self.topic) from exc

    def append(self, key: str, message: Any) -> LogOffset:
        return self._send([(key, message)], None, None)[0]

    def append_to(self, partition: int, key: str, message: Any) -> LogOffset:
        self._check(partition)
        return self._send([(key, message)], partition, None)[0]

    def append_batch(
        self,
        items: Sequence[tuple[str, Any]],
        *,
        partition: int | None = None,
        timestamps: Sequence[int] | None = None,
    ) -> Sequence[LogOffset]:
        """Produce every item, then flush once and collect the delivery reports; offsets come
        back in input order. All or nothing as far as Kafka allows: every key and value is
        checked and encoded before the first record is produced, so a bad item writes nothing;
        but if the broker rejects or times out some records, those already acknowledged stay
        (Kafka has no multi-partition atomic append outside transactions), and the error says
        how many landed."""
        checked = check_timestamps(timestamps, len(items))
        self._check(partition)
        if not items:
            return AppendedOffsets(self.name, (), ())
        return self._send(items, partition, None if checked is None else checked.tolist())

    def _send(
        self,
        items: Sequence[tuple[str, Any]],
        partition: int | None,
        timestamps: Sequence[int] | None,
    ) -> AppendedOffsets:
        self._check(partition)
        try:
            encoded = self._encode_all(items)
        except UnicodeEncodeError:
            check_keys_encode([k for k, _ in items])  # names the key, if a key it is
            raise
        clients = self.manager.clients
        producer = self._producer or clients.producer()
        batch = _Batch(len(encoded))
        deadline = time.monotonic() + clients.timeout
        target = -1 if partition is None else partition
        topic = self.topic
        produce, done, partial = producer.produce, batch.done, functools.partial
        for i, (key, value) in enumerate(encoded):
            try:
                # An empty value goes as null, Kafka's tombstone: on a compacted topic it
                # deletes the key, as it does in a compacted local log. Readers get b"".
                if timestamps is None:
                    produce(topic, value or None, key, target, on_delivery=partial(done, i))
                else:
                    produce(
                        topic,
                        value or None,
                        key,
                        target,
                        on_delivery=partial(done, i),
                        timestamp=int(timestamps[i]),
                    )
            except BufferError:  # local queue full: let deliveries drain it
                self._produce_when_room(
                    producer, batch, i, key, value, target, timestamps, deadline
                )
            except KafkaException as exc:
                raise clients.translate(exc, f"cannot append to {self.name}", topic) from exc
            if batch.fatal is not None:
                break
        while batch.pending and batch.fatal is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                producer.flush(min(remaining, 1.0))
            except (KafkaException, SystemError) as exc:
                # A fatal error raised in the poll (see `_Batch`): flush fails with it, or with
                # a SystemError once a report took it over.
                if batch.fatal is None:
                    batch.take(exc)
        if batch.fatal is not None:
            _POOL.discard_producer(producer)
            raise clients.translate(
                batch.fatal, f"cannot append to {self.name}", topic
            ) from batch.fatal
        if batch.pending or batch.errors:
            self._fail(batch, len(encoded), producer)
        return AppendedOffsets(self.name, batch.partitions, batch.offsets)

    def _fail(self, batch: _Batch, count: int, producer: Any) -> None:
        clients = self.manager.clients
        landed = count - batch.pending - len(batch.errors)
        what = f"append to {self.name}: {landed} of {count} records landed"
        if not batch.errors:
            raise clients.unavailable(what, "no delivery report in time")
        _, error = min(batch.errors, key=lambda e: e[0])
        if error.fatal():
            _POOL.discard_producer(producer)
        if error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
            raise RecordTooLargeError(
                f"{what}: a record is larger than the broker or topic accepts "
                "(max.message.bytes); split it or raise the limit"
            )
        if error.code() == KafkaError._UNKNOWN_PARTITION:
            raise PartitionNotFoundError(f"{what}: {error.str()}")
        raise clients.translate(error, what, self.topic)

    def wait_for(self, offset: LogOffset, group: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        manager = self.manager
        tp = [TopicPartition(manager.topic(offset.partition.name), offset.partition.partition)]
        group_id = manager.group_id(group)
        while True:
            (committed,) = manager.clients.group_offsets(group_id, tp)
            if committed is not None and committed > offset.offset:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    def flush(self) -> None:
        (self._producer or self.manager.clients.producer()).flush(self.manager.timeout)

    def close(self) -> None:
        self._closed = True
