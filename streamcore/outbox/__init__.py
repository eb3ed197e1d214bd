"""The transactional outbox queue (yoltq's feature set on SQLite and PostgreSQL), bridged to the
log by the relay.

- `put(conn, queue, payload)` writes a job in the caller's transaction.
- `register(queue, consumer, **options)` says how a queue's jobs run (see `QueueSpec`).
- `Outbox(url)` runs workers, the retry poller and the watcher, and offers the operations.
- `relay(queue, stream, manager=...)` makes a queue append its payloads to a log.
- `VirtualQueue(outbox)` runs jobs in a test's own thread.
"""

from __future__ import annotations

from streamcore.outbox.consumers import (
    QueueSpec,
    Registry,
    default_registry,
    define_queue,
    register,
)
from streamcore.outbox.errors import (
    ConcurrentUpdateError,
    ConsumerFailedError,
    DependencyCycleError,
    DependencyNotFoundError,
    DuplicateJobError,
    InvalidPayloadError,
    NoConsumerError,
    NoJobError,
    NotBatchQueueError,
    OutboxError,
    SchemaMissingError,
    UnknownQueueError,
)
from streamcore.outbox.harness import VirtualQueue
from streamcore.outbox.health import Health
from streamcore.outbox.outbox import Outbox
from streamcore.outbox.put import put, put_many
from streamcore.outbox.relay import relay
from streamcore.outbox.schema import DONE, ERROR, INIT, PROCESSING, create_schema
from streamcore.outbox.store import FailedJob
from streamcore.sql import create_engine, default_url

__all__ = [
    "DONE",
    "ERROR",
    "INIT",
    "PROCESSING",
    "ConcurrentUpdateError",
    "ConsumerFailedError",
    "DependencyCycleError",
    "DependencyNotFoundError",
    "DuplicateJobError",
    "FailedJob",
    "Health",
    "InvalidPayloadError",
    "NoConsumerError",
    "NoJobError",
    "NotBatchQueueError",
    "Outbox",
    "OutboxError",
    "QueueSpec",
    "Registry",
    "SchemaMissingError",
    "UnknownQueueError",
    "VirtualQueue",
    "create_engine",
    "create_schema",
    "default_registry",
    "default_url",
    "define_queue",
    "put",
    "put_many",
    "register",
    "relay",
]
