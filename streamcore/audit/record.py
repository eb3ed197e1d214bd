"""What an audit entry is on the stream `audit/entries`: a `Record` whose data is the entry in
Avro single-object encoding (`AuditEntry.avsc`), like every stream of docs/design.md.

- key: the document id, or the event id for an event about no document. The stream has one
  partition, so the key places nothing today; if it ever had more, keying by document would keep
  each document's history in order, which is the question asked of an audit trail. Duplicates are
  told apart by the event id inside the data, not by the key.
- watermark: the event date (sequence 0), so lag and latency tools and computations see when the
  events happened, not when the relay appended them.

Both the outbox relay and computations write records made by `audit_record`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamcore.audit.encoding import Written
from streamcore.audit.entry import AuditEntry, entry_codec, write_entry
from streamcore.record import Record
from streamcore.watermark import Watermark

__all__ = ["STREAM", "audit_record", "decode_entry", "record_of"]


STREAM = "audit/entries"


def audit_record(entry: AuditEntry | Mapping[str, Any]) -> Record:
    """The Record of `entry` for `audit/entries`, checked first (`InvalidAuditEntryError`).

    A computation appends audit entries itself with it: map an output to `audit/entries` (one
    partition, the default Record codec) and `context.produce_record("o1", audit_record(entry))`.
    """
    return record_of(write_entry(entry))


def record_of(written: Written) -> Record:
    """The Record of an entry `write_entry` wrote."""
    key = written.doc_id if written.doc_id is not None else written.event_id
    return Record(key, written.data, Watermark.of(written.event_date_ms).value)


def decode_entry(data: bytes) -> AuditEntry:
    """The entry in the data of an `audit/entries` Record (any AuditEntry schema version the
    schema store knows, resolved to the current one)."""
    return AuditEntry.from_dict(entry_codec().decode(data))
