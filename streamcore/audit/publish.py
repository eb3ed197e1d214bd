"""`publish`: put an audit entry in the outbox, in the caller's transaction.

This is Nuxeo's "collect in the business transaction, write after commit" with the outbox doing
the collecting: the entry is a job of the queue `audit/entries` written by the same transaction as
the business change, so the entry exists exactly when the change does (a rollback takes both
away), and the relay (`streamcore.audit.relay`) appends it to the stream after the commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamcore.audit.entry import AuditEntry, write_entry
from streamcore.audit.errors import AuditError
from streamcore.audit.record import record_of
from streamcore.codecs import RecordCodec, get_codec
from streamcore.outbox import QueueSpec, Registry, default_registry, put

__all__ = ["QUEUE", "publish"]


QUEUE = "audit/entries"


def queue_spec(registry: Registry) -> QueueSpec:
    """The audit queue of `registry`, defined on first use: a process that only publishes needs
    no set-up. Its jobs are Records in the default Record codec, in put order."""
    spec = registry.find(QUEUE)
    if spec is None:
        return registry.define_queue(QUEUE, codec=get_codec("avro"), ordered=True)
    if not isinstance(spec.codec, RecordCodec):
        raise AuditError(
            f"queue {QUEUE} is registered with {spec.codec!r}, not the Record codec audit "
            "entries are put with; let streamcore.audit define it (publish, relay) instead of "
            "registering it yourself"
        )
    return spec


def publish(
    conn: Any, entry: AuditEntry | Mapping[str, Any], *, registry: Registry | None = None
) -> str:
    """Put `entry` in the outbox in the transaction of `conn` (the SQLAlchemy Connection or
    Session of your business write); returns its event id, which is also its job id.

    The entry is checked first: `InvalidAuditEntryError` (naming the field and the fix), and
    nothing is written. An event id still in the outbox (not purged) raises
    `DuplicateJobError`: ids are unique, and on PostgreSQL the transaction stays usable.
    """
    written = write_entry(entry)
    registry = registry or default_registry
    queue_spec(registry)
    return put(conn, QUEUE, record_of(written), id=written.event_id, registry=registry)
