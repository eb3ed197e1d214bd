"""The hot path of `publish`: the compiled checks agree with `check_value`, the hand-written
Avro writer writes the bytes fastavro writes, and an entry given as a mapping is checked while it
is written exactly as `AuditEntry` checks it."""

from __future__ import annotations

import io
import re
import types
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from audit_support import START, entry
from fastavro import parse_schema, schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamcore.audit import AuditEntry, InvalidAuditEntryError, audit_record, decode_entry
from streamcore.audit.checks import check_value, compile_check
from streamcore.audit.entry import entry_codec, rules, write_entry
from streamcore.audit.rules import KNOWN_EVENT_TYPES
from streamcore.codecs.record_binary import avro_long

RULES = {rule.name: rule for rule in rules()}


class Text(str):
    """A str subclass: the compiled checks take only `str` itself on their fast path."""


def outcome(check: Any, value: Any) -> tuple[str, Any]:
    try:
        return "value", check(value, "audit entry 'e-1'")
    except InvalidAuditEntryError as error:
        return "error", (str(error), error.field)


VALUES: dict[str, list[Any]] = {
    "event_id": ["e-1", "", "two words", 42, None, "x" * 200, "x" * 201, Text("e-2"), "é✓"],
    "event_type": ["documentCreated", "document created", "a" * 129, None, b"bytes", Text("x")],
    "category": [None, "", "c" * 128, "c" * 129, 3.5],
    "doc_id": [None, "00000000-0000-0000-0000-000000000007", "DOC", "", ["a"]],
    "doc_path": [None, "/a/b", "a/b", "/" + "p" * 4095, "/" + "p" * 4096],
    "event_date": [
        START,
        START + timedelta(microseconds=1999),  # kept at millisecond precision
        START.astimezone(timezone(timedelta(hours=5))),
        datetime(2026, 11, 24, 9, 0),  # naive
        datetime(1969, 12, 31, 23, 59, tzinfo=UTC),
        datetime(4199, 12, 31, tzinfo=UTC),
        1_795_510_800_000,
        -1,
        1 << 46,
        True,
        1.5e12,
        "2026-11-24T09:00:00Z",
        None,
    ],
    "extended": [
        {},
        {"a": "1", "b": ""},
        types.MappingProxyType({"a": "1"}),
        {"a": 1},
        {1: "a"},
        {"a": Text("x")},
        ["a"],
        None,
    ],
}


@pytest.mark.parametrize(
    ("field", "value"), [(field, value) for field, values in VALUES.items() for value in values]
)
def test_the_compiled_checks_agree_with_check_value(field: str, value: Any) -> None:
    rule = RULES[field]
    compiled = outcome(compile_check(rule), value)
    assert compiled == outcome(lambda v, label: check_value(rule, v, label), value)
    if compiled[0] == "value" and isinstance(value, dict):
        assert compiled[1] is not value  # a copy: the entry does not change with the caller's


def test_avro_longs_are_zigzag_base_128() -> None:
    cases = {0: "00", -1: "01", 1: "02", -64: "7f", 64: "8001", 8191: "fe7f", 8192: "808001"}
    for value, expected in cases.items():
        assert avro_long(value).hex() == expected, value
    for value in (1 << 46, -(1 << 63), (1 << 63) - 1, 1_795_510_800_000):
        body = io.BytesIO()
        schemaless_writer(body, parse_schema("long"), value)
        assert avro_long(value) == body.getvalue(), value


def texts(max_size: int) -> st.SearchStrategy[str]:
    # Any character that encodes (no lone surrogates), multi-byte ones included.
    return st.text(st.characters(blacklist_categories=("Cs",)), max_size=max_size)


IDS = st.from_regex(re.compile(r"[!-~é✓]{1,40}"), fullmatch=True)
OPTIONAL = st.none() | texts(80)
NOW = datetime.now(UTC)
# Entries the audit job's rules accept (streamcore.audit.rules): write_entry refuses the others.
ENTRIES = st.fixed_dictionaries(
    {
        "event_id": IDS,
        "event_type": st.sampled_from(KNOWN_EVENT_TYPES),
        "event_date": st.integers(0, int(NOW.timestamp() * 1000))
        | st.datetimes(
            min_value=datetime(1970, 1, 2),
            max_value=NOW.replace(tzinfo=None),
            timezones=st.just(UTC),
        ),
    },
    optional={
        "category": OPTIONAL,
        "doc_id": st.none() | st.uuids().map(str),
        "doc_path": st.none() | texts(300).map(lambda t: "/" + t),
        "doc_type": OPTIONAL,
        "principal": OPTIONAL,
        "comment": st.none() | texts(4096),
        "lifecycle_state": OPTIONAL,
        "repository": OPTIONAL,
        "extended": st.dictionaries(texts(20), texts(200), max_size=5),
    },
).filter(lambda given: given.get("doc_id") is None or given.get("doc_path") is not None)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ENTRIES)
def test_entries_are_written_as_fastavro_writes_them(given_entry: dict[str, Any]) -> None:
    made = AuditEntry.from_dict(given_entry)
    expected = entry_codec().encode(made.to_datum())  # fastavro, with its validation on
    from_mapping = write_entry(given_entry)
    assert from_mapping.data == expected
    assert write_entry(made).data == expected
    assert from_mapping.event_id == made.event_id
    assert from_mapping.doc_id == made.doc_id
    assert from_mapping.event_date_ms == made.event_date_ms
    assert decode_entry(expected) == made


def test_long_values_take_longer_length_prefixes() -> None:
    # 4,096 characters of two bytes each: a length past the writer's table of prefixes.
    long_entry = entry(1, comment="é" * 4096, doc_path="/" + "p" * 63, extended={"k": "v" * 64})
    made = AuditEntry.from_dict(long_entry)
    assert write_entry(long_entry).data == entry_codec().encode(made.to_datum())


@pytest.mark.parametrize("field", ["event_id", "comment", "extended"])
def test_a_string_that_is_not_unicode_is_refused_naming_the_field(field: str) -> None:
    bad = "a\ud800b"  # a lone surrogate: no pattern or length rule refuses it, UTF-8 does
    value: Any = {"k": bad} if field == "extended" else bad
    mapping = entry(1, **{field: value})
    named = "audit entry" if field == "event_id" else "audit entry 'e-00001'"
    for given_entry in (mapping, AuditEntry.from_dict(mapping)):
        with pytest.raises(InvalidAuditEntryError) as caught:
            audit_record(given_entry)
        assert caught.value.field == field
        assert str(caught.value).startswith(f"{named}: {field} is not valid Unicode text")
        assert "remove or replace the character" in str(caught.value)


class ReadOnly(Mapping[str, Any]):
    """A mapping that is not a dict."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Any:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


def test_any_mapping_is_written_and_missing_fields_take_their_defaults() -> None:
    minimal = {"event_id": "login-1", "event_type": "loginSuccess", "event_date": 5}
    written = write_entry(ReadOnly(minimal))
    made = AuditEntry.from_dict(minimal)
    assert made.extended == {} and made.doc_id is None
    assert written.data == entry_codec().encode(made.to_datum())
    assert (written.event_id, written.doc_id, written.event_date_ms) == ("login-1", None, 5)
