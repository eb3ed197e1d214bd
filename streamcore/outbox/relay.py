"""The relay: a built-in consumer that appends each job's payload to a streamcore log.

It is how an application publishes to a log in the same transaction as its business write: put
the event on a relay queue inside the transaction; after commit, the relay appends it to the
stream and marks the job done only once the append is acknowledged (Kafka: the delivery report;
local log: written per its fsync setting). If the append fails (broker down), the job goes to
error and is retried after the backoff; the queue is ordered, so nothing behind it overtakes it:
the order of jobs, hence the order per key, is the put order. Delivery is at-least-once: a
retry after a lost acknowledgement can append a record twice.

By default the log record is a `Record` whose key is the job key and whose data is the payload
in the queue's encoding (e.g. an Avro single-object AuditEntry), as the streams of the catalog
carry (docs/design.md, "The catalog"), written with the default Record codec (`get_codec("avro")`).

With `batch_capacity` the relay is a batch consumer: one `append_batch` for up to that many jobs
(waiting up to `batch_threshold` seconds for a batch to fill), all marked done once the batch
append is acknowledged, all in error if it fails (`streamcore.audit` relays this way).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from streamcore.codecs import get_codec
from streamcore.log import LogAppender, LogManager, LogOffset
from streamcore.outbox.consumers import QueueSpec, Registry, default_registry, resolve_codec
from streamcore.record import Record

__all__ = ["KeyOf", "relay"]


logger = logging.getLogger(__name__)

KeyOf = Callable[[Any], str]


def _key_function(key: str | KeyOf | None, queue: str) -> KeyOf:
    if key is None:
        return lambda _payload: queue
    if callable(key):
        return key
    field = key
    return lambda payload: str(payload[field])


class RelayConsumer:
    """Appends payloads of one queue to `stream` through `manager` (thread-safe)."""

    def __init__(
        self,
        manager: LogManager,
        stream: str,
        key_of: KeyOf,
        to_message: Callable[[str, Any], Any],
        log_codec: Any = None,
    ) -> None:
        self.manager = manager
        self.stream = stream
        self.key_of = key_of
        self.to_message = to_message
        self.log_codec = log_codec
        self._appender: LogAppender[Any] | None = None
        self._lock = threading.Lock()

    def appender(self) -> LogAppender[Any]:
        with self._lock:
            if self._appender is None or self._appender.closed:
                self._appender = self.manager.appender(self.stream, self.log_codec)
            return self._appender

    def __call__(self, payload: Any) -> str:
        key = self.key_of(payload)
        offset = self.appender().append(key, self.to_message(key, payload))
        return str(offset)

    def append_batch(self, payloads: list[Any]) -> Sequence[LogOffset]:
        """The batch consumer: one append for every payload, in order; returns where each went."""
        keys = [self.key_of(payload) for payload in payloads]
        items = [(k, self.to_message(k, p)) for k, p in zip(keys, payloads, strict=True)]
        appender = self.appender()
        # Every key of a one-partition stream (the audit trail) goes to partition 0: naming it
        # spares the appender hashing the keys, which on the local log cost as much as writing
        # a batch of 25.
        return appender.append_batch(items, partition=0 if appender.size == 1 else None)


def relay(
    queue: str,
    stream: str,
    *,
    manager: LogManager,
    key: str | KeyOf | None = None,
    codec: Any = None,
    schema: Any = None,
    message: Callable[[str, Any], Any] | None = None,
    log_codec: Any = None,
    partitions: int | None = None,
    registry: Registry | None = None,
    **options: Any,
) -> QueueSpec:
    """Register `queue` as a relay to the log `stream` (created if missing).

    :param key: the record key: a payload field name, a function of the payload, or None for
        the queue name (one key: total order).
    :param codec: the queue's payload codec (default JSON); `schema` for Avro codecs.
    :param message: `(key, payload) -> message` to append. Default - `Record(key, data=payload
        encoded by the queue codec)`, for the log's default Record codec.
    :param log_codec: the appender's codec. Default - the Record codec `get_codec("avro")`
        with the default `message`, else raw bytes (no codec).
    :param options: other `QueueSpec` options (max_retries, error_backoff, ...); with
        `batch_capacity` (and `batch_threshold`) the payloads go in batch appends.
    """
    payload_codec = resolve_codec(codec, schema)

    def record_of(record_key: str, payload: Any) -> Record:
        return Record.of(record_key, payload_codec.encode(payload))

    if message is None and log_codec is None:
        log_codec = get_codec("avro")
    manager.create(stream, partitions)
    consumer = RelayConsumer(
        manager, stream, _key_function(key, queue), message or record_of, log_codec
    )
    batched = options.get("batch_capacity") is not None
    return (registry or default_registry).register(
        queue,
        consumer.append_batch if batched else consumer,
        codec=payload_codec,
        ordered=True,
        **options,
    )
