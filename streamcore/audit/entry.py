"""`AuditEntry`: one audit event, as `include/schemas/AuditEntry.avsc` describes it.

Entries come as this dataclass or as a mapping of the same field names. The dataclass is for
code that builds entries (a type checker sees the fields, a missing required one is caught before
the code runs); the mapping is for entries that arrive as data (JSON from a request, a row),
where the field names are those of the schema and of the `audit` table. Both are checked
against the schema when the entry is made, so an `AuditEntry` that exists is a valid one.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any

from streamcore.audit.checks import EPOCH, FieldRule, check_names, check_value, field_rules
from streamcore.audit.errors import InvalidAuditEntryError
from streamcore.codecs import AvroCodec, ParsedSchema
from streamcore.codecs.avro import default_store

SCHEMA_NAME = "org.streamcore.audit.AuditEntry"


def schema() -> ParsedSchema:
    """The current AuditEntry schema, from the schema store (`include/schemas`)."""
    return default_store().by_name(SCHEMA_NAME)


@functools.cache
def rules() -> tuple[FieldRule, ...]:
    """The field rules of the current schema, built once (patterns compiled once)."""
    return field_rules(schema().raw)


@functools.cache
def entry_codec() -> AvroCodec:
    """The Avro single-object codec of AuditEntry datums. Datums come from checked entries
    only, so fastavro's own validation, which would double the cost of an encode, is off."""
    return AvroCodec(schema(), "avro", default_store(), validate=False)


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditEntry:
    """One audit event. Made with keywords; checked when made (`InvalidAuditEntryError` names
    the field and the fix).

    `event_date` is an aware datetime or epoch milliseconds; the entry keeps it as an aware UTC
    datetime at millisecond precision (Avro timestamp-millis), refusing naive datetimes: the
    time zone they meant is a guess, and an audit trail hours off is worse than an error.
    """

    event_id: str
    event_type: str
    category: str | None = None
    doc_id: str | None = None
    doc_path: str | None = None
    doc_type: str | None = None
    principal: str | None = None
    event_date: datetime | int
    comment: str | None = None
    lifecycle_state: str | None = None
    repository: str | None = None
    extended: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        label = "audit entry"
        for rule in rules():
            value = getattr(self, rule.name)
            checked = check_value(rule, value, label)
            if checked is not value:
                object.__setattr__(self, rule.name, checked)
            if rule.name == "event_id":
                label = f"audit entry {checked!r}"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AuditEntry:
        """An entry from a mapping of field names (those of the schema); a missing required
        field, an unknown one or a bad value raises `InvalidAuditEntryError`."""
        names = tuple(rule.name for rule in rules())
        event_id = data.get("event_id")
        check_names(data, names, f"audit entry {event_id!r}" if event_id else "audit entry")
        return cls(**{"event_id": None, "event_type": None, "event_date": None, **data})

    @property
    def event_date_ms(self) -> int:
        """`event_date` in epoch milliseconds."""
        assert isinstance(self.event_date, datetime)  # made so by __post_init__
        return (self.event_date - EPOCH) // timedelta(milliseconds=1)

    def to_datum(self) -> dict[str, Any]:
        """The Avro datum of the entry (event date in epoch milliseconds)."""
        datum = {name: getattr(self, name) for name in _FIELDS}
        datum["event_date"] = self.event_date_ms
        return datum


_FIELDS = tuple(f.name for f in fields(AuditEntry))


def as_entry(entry: AuditEntry | Mapping[str, Any]) -> AuditEntry:
    """`entry` as an `AuditEntry` (a mapping is checked and converted)."""
    if isinstance(entry, AuditEntry):
        return entry
    if isinstance(entry, Mapping):
        return AuditEntry.from_dict(entry)
    raise InvalidAuditEntryError(
        f"an audit entry is an AuditEntry or a mapping of its fields, not "
        f"{type(entry).__name__}; build one with AuditEntry(event_id=..., ...)",
        None,
    )
