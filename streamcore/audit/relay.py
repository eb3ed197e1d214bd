"""`relay`: append published audit entries to `audit/entries`, in batches.

The relay is the outbox's own relay run as a batch consumer of the audit queue: the outbox's
workers claim up to `batch_capacity` entries (in put order: the queue is ordered) once that many
are ready or the oldest has waited `batch_threshold` seconds, append them with one
`append_batch`, and mark their jobs done only after the append is acknowledged. A failed append
puts the batch's jobs in error; the retry poller retries them after the queue's backoff, oldest
first, and nothing put later overtakes them. A crash between the append and the jobs' `done`
appends the batch again once the hung timeout hands it to another worker: at-least-once, the
duplicates removed by the Delta MERGE on the event id (docs/audit.md).
"""

from __future__ import annotations

from typing import Any

from streamcore.audit.errors import AuditError
from streamcore.audit.publish import QUEUE
from streamcore.audit.record import STREAM
from streamcore.codecs import get_codec
from streamcore.errors import LogExistsError
from streamcore.log import LogManager
from streamcore.outbox import QueueSpec, Registry, default_registry
from streamcore.outbox import relay as outbox_relay
from streamcore.record import Record

__all__ = ["DEFAULT_BATCH_CAPACITY", "DEFAULT_BATCH_THRESHOLD", "relay"]


DEFAULT_BATCH_CAPACITY = 25
DEFAULT_BATCH_THRESHOLD = 0.5


def _key(record: Record) -> str:
    return record.key


def _message(_key: str, record: Record) -> Record:
    return record


def relay(
    manager: LogManager,
    *,
    batch_capacity: int | None = DEFAULT_BATCH_CAPACITY,
    batch_threshold: float = DEFAULT_BATCH_THRESHOLD,
    registry: Registry | None = None,
    **options: Any,
) -> QueueSpec:
    """Make the outbox relay the audit queue to `audit/entries` in `manager` (created with one
    partition if missing: one partition is the total order of the audit trail). Start an
    `Outbox` on the same registry to run it.

    :param batch_capacity: entries per append (Nuxeo's audit batch size). None: one append per
        entry, with no threshold.
    :param batch_threshold: seconds a partial batch waits for more entries (Nuxeo's batch
        threshold), counted from its oldest entry's publish.
    :param options: other outbox queue options (`error_backoff`, `hung_timeout`, ...).
    """
    try:
        manager.create(STREAM, 1)
    except LogExistsError as exc:
        raise AuditError(
            f"{STREAM} exists with {manager.size(STREAM)} partitions; the audit trail needs 1 "
            f"for its total order: recreate the stream with one partition (or route {STREAM} to "
            "a log that has one)"
        ) from exc
    if batch_capacity is not None:
        options.update(batch_capacity=batch_capacity, batch_threshold=batch_threshold)
    record_codec = get_codec("avro")  # jobs and log records are both Records
    return outbox_relay(
        QUEUE,
        STREAM,
        manager=manager,
        key=_key,
        codec=record_codec,
        message=_message,
        log_codec=record_codec,
        registry=registry or default_registry,
        **options,
    )
