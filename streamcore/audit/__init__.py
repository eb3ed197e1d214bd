"""Audit entries: published in the application's transaction, appended to `audit/entries` in
batches by the outbox relay, landed into the Delta table `audit` by the Spark job (docs/audit.md).

- `publish(conn, entry)` puts an entry in the outbox in the caller's transaction, after checking
  it against `include/schemas/AuditEntry.avsc`.
- `relay(manager)` makes an `Outbox` append the published entries to `audit/entries`, up to 25
  per append or after 500 ms.
- `audit_record(entry)` is the Record of an entry, for computations that append entries themselves;
  `decode_entry(record.data)` reads one back.
- `AuditEntry` is an entry; a mapping of the same field names is accepted too.
"""

from __future__ import annotations

from streamcore.audit.entry import SCHEMA_NAME, AuditEntry
from streamcore.audit.errors import AuditError, InvalidAuditEntryError
from streamcore.audit.publish import QUEUE, publish
from streamcore.audit.record import STREAM, audit_record, decode_entry
from streamcore.audit.relay import DEFAULT_BATCH_CAPACITY, DEFAULT_BATCH_THRESHOLD, relay

__all__ = [
    "DEFAULT_BATCH_CAPACITY",
    "DEFAULT_BATCH_THRESHOLD",
    "QUEUE",
    "SCHEMA_NAME",
    "STREAM",
    "AuditEntry",
    "AuditError",
    "InvalidAuditEntryError",
    "audit_record",
    "decode_entry",
    "publish",
    "relay",
]
