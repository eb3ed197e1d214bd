"""`AuditEntry`: one audit event, as `include/schemas/AuditEntry.avsc` describes it.

Entries come as this dataclass or as a mapping of the same field names. The dataclass is for
code that builds entries (a type checker sees the fields, a missing required one is caught before
the code runs); the mapping is for entries that arrive as data (JSON from a request, a row),
where the field names are those of the schema and of the `audit` table. Both are checked
against the schema when the entry is made, so an `AuditEntry` that exists is a valid one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from streamcore.audit.checks import (
    EPOCH,
    MILLISECOND,
    Check,
    FieldRule,
    check_names,
    compile_check,
    field_rules,
)
from streamcore.audit.encoding import Written, entry_writer
from streamcore.audit.errors import InvalidAuditEntryError
from streamcore.audit.rules import publish_rules
from streamcore.codecs import AvroCodec, ParsedSchema
from streamcore.codecs.avro import default_store
from streamcore.codecs.framing import single_object_header

__all__ = ["SCHEMA_NAME", "AuditEntry", "entry_codec", "rules", "schema", "write_entry"]


SCHEMA_NAME = "org.streamcore.audit.AuditEntry"


def schema() -> ParsedSchema:
    """The current AuditEntry schema, from the schema store (`include/schemas`)."""
    return default_store().by_name(SCHEMA_NAME)


@functools.cache
def rules() -> tuple[FieldRule, ...]:
    """The field rules of the current schema, built once (patterns compiled once)."""
    return field_rules(schema().raw)


@functools.cache
def _checks() -> tuple[tuple[str, Check], ...]:
    """(field name, its compiled check) of every field, in schema order."""
    return tuple((rule.name, compile_check(rule)) for rule in rules())


@functools.cache
def _names() -> frozenset[str]:
    return frozenset(rule.name for rule in rules())


# The fields without a default in the dataclass (and the schema).
_REQUIRED = frozenset({"event_id", "event_type", "event_date"})


@functools.cache
def entry_codec() -> AvroCodec:
    """The Avro single-object codec of AuditEntry datums, which reads entries back (any schema
    version the store knows); entries are written by `write_entry`."""
    return AvroCodec(schema(), "avro", default_store())


@functools.cache
def _writer() -> Callable[[Any, bool], Written]:
    return entry_writer(rules(), single_object_header(schema().fingerprint))


def write_entry(entry: AuditEntry | Mapping[str, Any]) -> Written:
    """`entry` in Avro single-object encoding (`C3 01`, the schema fingerprint, the body; as
    `entry_codec().encode(entry.to_datum())` writes it, several times faster), with its event
    id, document id and event date. A mapping is checked as `AuditEntry.from_dict` checks it,
    while it is written; then either is checked against the audit job's rules on whole entries
    (`streamcore.audit.rules`), which depend on the configuration and the clock and so are not
    checked when an `AuditEntry` is made (`InvalidAuditEntryError`)."""
    if isinstance(entry, AuditEntry):
        written = _writer()(entry, False)
        get: Callable[[str], Any] = functools.partial(getattr, entry)
    elif isinstance(entry, Mapping):
        _check_known(entry)
        written = _writer()(entry, True)
        get = entry.get
    else:
        raise _not_an_entry(entry)
    millis = written.event_date_ms
    publish_rules().check(
        lambda name: millis if name == "event_date" else get(name),
        f"audit entry {written.event_id!r}",
    )
    return written


def _check_known(data: Mapping[str, Any]) -> None:
    """InvalidAuditEntryError if `data` has names that are not fields."""
    if not _names().issuperset(data):
        event_id = data.get("event_id")
        names = tuple(rule.name for rule in rules())
        check_names(data, names, f"audit entry {event_id!r}" if event_id else "audit entry")


def _not_an_entry(entry: object) -> InvalidAuditEntryError:
    return InvalidAuditEntryError(
        f"an audit entry is an AuditEntry or a mapping of its fields, not "
        f"{type(entry).__name__}; build one with AuditEntry(event_id=..., ...)",
        None,
    )


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
        for name, check in _checks():
            value = getattr(self, name)
            checked = check(value, label)
            if checked is not value:
                object.__setattr__(self, name, checked)
            if name == "event_id":
                label = f"audit entry {checked!r}"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AuditEntry:
        """An entry from a mapping of field names (those of the schema); a missing required
        field, an unknown one or a bad value raises `InvalidAuditEntryError`."""
        _check_known(data)
        if data.keys() >= _REQUIRED:
            return cls(**data)
        # A missing required field is left to the checks, which name it, not to a TypeError.
        return cls(**{**dict.fromkeys(_REQUIRED), **data})

    @property
    def event_date_ms(self) -> int:
        """`event_date` in epoch milliseconds."""
        assert isinstance(self.event_date, datetime)  # made so by __post_init__
        return (self.event_date - EPOCH) // MILLISECOND

    def to_datum(self) -> dict[str, Any]:
        """The Avro datum of the entry (event date in epoch milliseconds)."""
        datum = {name: getattr(self, name) for name in _FIELDS}
        datum["event_date"] = self.event_date_ms
        return datum


_FIELDS = tuple(f.name for f in fields(AuditEntry))
