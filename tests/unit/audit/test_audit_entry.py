"""AuditEntry: the schema in include/schemas and its place in the schema store and the table
catalog, the checks an entry passes before it can be published, and the Record it becomes."""

from __future__ import annotations

import copy
import dataclasses
from datetime import UTC, datetime, timedelta, timezone

import pytest
from audit_support import START, entry

from streamcore.audit import (
    SCHEMA_NAME,
    AuditEntry,
    AuditError,
    InvalidAuditEntryError,
    audit_record,
    decode_entry,
)
from streamcore.audit.checks import field_rules
from streamcore.audit.entry import schema
from streamcore.codecs import SchemaStore, get_codec
from streamcore.codecs.framing import read_single_object_fingerprint
from streamcore.config import load_config
from streamcore.errors import StreamcoreError
from streamcore.tables import avro_columns, table_spec
from streamcore.watermark import Watermark


def test_the_schema_store_loads_audit_entry_by_name_and_fingerprint() -> None:
    store = SchemaStore(load_config().schemas_dir)
    parsed = store.by_name(SCHEMA_NAME)
    assert store.by_fingerprint(parsed.fingerprint) is parsed
    record = audit_record(entry(1))
    assert read_single_object_fingerprint(record.data, "avro") == parsed.fingerprint
    # Any reader with the store decodes it: the codec of the name, not only streamcore.audit's.
    assert get_codec("avro", SCHEMA_NAME).decode(record.data)["event_id"] == "e-00001"


def test_the_schema_fields_are_the_audit_table_columns_and_the_dataclass_fields() -> None:
    raw = schema().raw
    columns = {c.name: c for c in table_spec("audit", load_config()).columns}
    assert [c.name for c in avro_columns(raw)] == [*columns][:-1]  # the table adds event_day
    for column in avro_columns(raw):
        declared = columns[column.name]
        assert column.type == declared.type, column.name
        assert column.nullable <= declared.nullable, column.name  # never null where it may not
    assert [f.name for f in dataclasses.fields(AuditEntry)] == [f["name"] for f in raw["fields"]]
    required = [f["name"] for f in raw["fields"] if "default" not in f]
    assert required == ["event_id", "event_type", "event_date"]
    for field in raw["fields"]:
        assert field.get("doc"), f"{field['name']} has no doc"


def test_a_dataclass_and_a_mapping_make_the_same_entry() -> None:
    as_class = AuditEntry(
        event_id="e-1",
        event_type="documentCreated",
        event_date=START,
        doc_path="/ws/a",
        extended={"k": "v"},
    )
    as_mapping = AuditEntry.from_dict(
        {
            "event_id": "e-1",
            "event_type": "documentCreated",
            "event_date": START,
            "doc_path": "/ws/a",
            "extended": {"k": "v"},
        }
    )
    assert as_class == as_mapping
    assert audit_record(as_class).data == audit_record(as_mapping.to_datum()).data


@pytest.mark.parametrize(
    "given",
    [
        START,
        START.astimezone(timezone(timedelta(hours=-5))),  # the same instant in another zone
        int(START.timestamp() * 1000),
        START + timedelta(microseconds=999),  # below timestamp-millis precision
    ],
    ids=["utc", "other-zone", "epoch-ms", "microseconds"],
)
def test_event_dates_are_kept_as_utc_milliseconds(given: datetime | int) -> None:
    made = AuditEntry.from_dict(entry(0, event_date=given))
    assert made.event_date == START
    assert made.event_date.tzinfo == UTC
    assert made.event_date_ms == 1_795_510_800_000


def test_the_record_is_keyed_by_document_and_stamped_with_the_event_date() -> None:
    about_a_document = audit_record(entry(3))
    assert about_a_document.key == entry(3)["doc_id"]
    assert Watermark(about_a_document.watermark).timestamp == int(
        (START + timedelta(seconds=3)).timestamp() * 1000
    )
    login = audit_record(
        {"event_id": "login-1", "event_type": "loginSuccess", "event_date": 5, "principal": "ada"}
    )
    assert login.key == "login-1"  # no document: the event id
    assert Watermark(login.watermark) == Watermark.of(5)


def test_an_entry_survives_the_round_trip_through_its_record() -> None:
    original = AuditEntry.from_dict(entry(9, comment="é ✓", extended={"a": "1", "b": ""}))
    assert decode_entry(audit_record(original).data) == original


def test_an_entry_does_not_change_when_the_mapping_it_came_from_does() -> None:
    extended = {"a": "1"}
    made = AuditEntry.from_dict(entry(1, extended=extended))
    extended["a"] = "changed"
    assert made.extended == {"a": "1"}


BAD_ENTRIES = [
    # (change to a valid entry, field at fault, words of the message)
    ({"event_id": None}, "event_id", ["event_id is missing", "uuid.uuid4()"]),
    ({"event_id": ""}, "event_id", ["event_id is empty", "unique id"]),
    ({"event_id": "two words"}, "event_id", ["'two words' does not match", "fix the value"]),
    ({"event_id": 42}, "event_id", ["event_id must be a string, not int 42", "as text"]),
    ({"event_id": "x" * 201}, "event_id", ["201 characters", "maxLength of 200"]),
    ({"event_type": None}, "event_type", ["event_type is missing", "documentCreated"]),
    ({"event_type": "document created"}, "event_type", ["does not match"]),
    ({"event_date": None}, "event_date", ["event_date is missing", "datetime.now(UTC)"]),
    (
        {"event_date": datetime(2026, 11, 24, 9, 0)},
        "event_date",
        ["naive datetime", "replace(tzinfo=UTC)", "epoch milliseconds"],
    ),
    ({"event_date": "2026-11-24T09:00:00Z"}, "event_date", ["not str", "fromisoformat"]),
    ({"event_date": 1.5e12}, "event_date", ["not float"]),
    ({"event_date": True}, "event_date", ["not bool"]),
    ({"event_date": -1}, "event_date", ["-1 ms", "milliseconds"]),
    ({"event_date": 1 << 46}, "event_date", ["year 4199", "milliseconds"]),
    ({"doc_id": "doc-1"}, "doc_id", ["'doc-1' does not match", "UUID", "or leave it out"]),
    ({"doc_path": "ws/a"}, "doc_path", ["does not match ^/"]),
    ({"doc_path": 7}, "doc_path", ["must be a string or None, not int 7"]),
    ({"principal": ["ada"]}, "principal", ["not list"]),
    ({"comment": "c" * 4097}, "comment", ["4097 characters", "maxLength of 4096"]),
    ({"extended": None}, "extended", ["extended is missing"]),
    ({"extended": ["a"]}, "extended", ["mapping of strings to strings"]),
    ({"extended": {"size": 3}}, "extended", ["extended['size'] must be a string, not int 3"]),
    ({"extended": {1: "a"}}, "extended", ["key that is not a string"]),
    ({"eventId": "e-1"}, "eventId", ["unknown field 'eventId'", "did you mean 'event_id'?"]),
]


@pytest.mark.parametrize(("change", "field", "words"), BAD_ENTRIES)
def test_a_bad_entry_is_refused_naming_the_field_and_the_fix(
    change: dict, field: str, words: list[str]
) -> None:
    with pytest.raises(InvalidAuditEntryError) as caught:
        audit_record(entry(1, **change))
    error = caught.value
    assert isinstance(error, StreamcoreError)
    assert error.field == field
    for word in words:
        assert word in str(error)
    named = "audit entry 'e-00001'" if field not in ("event_id", "eventId") else "audit entry"
    assert str(error).startswith(named)


@pytest.mark.parametrize(("change", "field", "words"), BAD_ENTRIES)
def test_a_mapping_is_refused_as_the_dataclass_made_from_it(
    change: dict, field: str, words: list[str]
) -> None:
    # publish checks a mapping while it writes it, without making an AuditEntry first.
    bad = entry(1, **change)
    with pytest.raises(InvalidAuditEntryError) as as_mapping:
        audit_record(bad)
    with pytest.raises(InvalidAuditEntryError) as as_dataclass:
        AuditEntry.from_dict(bad)
    assert str(as_mapping.value) == str(as_dataclass.value)
    assert as_mapping.value.field == as_dataclass.value.field == field


def test_several_unknown_fields_are_named_together() -> None:
    with pytest.raises(InvalidAuditEntryError, match=r"unknown fields 'user', 'when'") as caught:
        AuditEntry.from_dict({**entry(1), "user": "ada", "when": 1})
    assert caught.value.field is None
    assert "the fields of AuditEntry are event_id, event_type" in str(caught.value)


def test_the_dataclass_checks_when_it_is_made() -> None:
    with pytest.raises(InvalidAuditEntryError, match="naive datetime"):
        AuditEntry(event_id="e-1", event_type="documentCreated", event_date=datetime(2026, 1, 1))
    with pytest.raises(InvalidAuditEntryError, match="event_id is missing"):
        AuditEntry(event_id=None, event_type="documentCreated", event_date=START)  # type: ignore[arg-type]


def test_only_entries_and_mappings_are_entries() -> None:
    with pytest.raises(InvalidAuditEntryError, match="not list"):
        audit_record([("event_id", "e-1")])  # type: ignore[arg-type]


def test_a_schema_change_the_checks_do_not_understand_fails_loudly() -> None:
    changed = copy.deepcopy(schema().raw)
    changed["fields"].append({"name": "size", "type": "long", "default": 0})
    with pytest.raises(AuditError, match=r"field 'size' has type 'long'.*checks.py"):
        field_rules(changed)
    changed = copy.deepcopy(schema().raw)
    changed["fields"][0]["minimum"] = 1
    with pytest.raises(AuditError, match=r"field 'event_id' has attributes \['minimum'\]"):
        field_rules(changed)
