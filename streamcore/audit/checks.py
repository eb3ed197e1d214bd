"""The rules an audit entry follows, read from `include/schemas/AuditEntry.avsc`: each field's type,
whether it may be null, and its custom attributes `pattern` and `maxLength`, the attributes the
Spark job's expectation suite is generated from. Checking them in the publishing process keeps a
bad entry out of the outbox and the log: found there, it could only be quarantined later, far
from the code that made it. The rules come from the schema so the two checks cannot drift apart.

Only what AuditEntry.avsc uses is understood (strings, nullable strings, a timestamp-millis long,
a map of strings; `pattern`, `maxLength`): a schema change that needs more fails when the rules
are built, instead of going unchecked.
"""

from __future__ import annotations

import difflib
import functools
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from streamcore.audit.errors import AuditError, InvalidAuditEntryError

__all__ = [
    "EPOCH",
    "MILLISECOND",
    "STRING",
    "STRING_MAP",
    "TIMESTAMP",
    "Check",
    "FieldRule",
    "check_names",
    "check_value",
    "compile_check",
    "field_rules",
]


STRING, TIMESTAMP, STRING_MAP = "string", "timestamp-millis", "map<string,string>"
CHECKED_ATTRIBUTES = frozenset({"pattern", "maxLength"})
# Attributes of the schema that are not rules: Avro's own and the field's documentation.
_FIELD_KEYS = frozenset({"name", "type", "default", "doc", "aliases", "order"})
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MAX_EVENT_MS = (1 << 46) - 1  # a Record watermark keeps the milliseconds in 46 bits (year 4199)
MILLISECOND = timedelta(milliseconds=1)
_HINTS = {
    "event_id": "give every entry a unique id, e.g. uuid.uuid4().hex (the audit table removes "
    "duplicates by it)",
    "event_type": "say what happened, e.g. 'documentCreated'",
    "event_date": "say when it happened: an aware datetime such as datetime.now(UTC), or epoch "
    "milliseconds",
}


@dataclass(frozen=True)
class FieldRule:
    """What one field accepts."""

    name: str
    kind: str
    nullable: bool
    pattern: re.Pattern[str] | None = None
    max_length: int | None = None
    doc: str = ""
    null_branch: int = 0  # a nullable field's union: the position of "null" (the other is 1 - it)


def _kind(name: str, avro_type: Any) -> tuple[str, bool]:
    """(kind, nullable) of a field's Avro type; AuditError for a type the rules do not know."""
    if isinstance(avro_type, list) and len(avro_type) == 2 and "null" in avro_type:
        inner = next(t for t in avro_type if t != "null")
        kind, _ = _kind(name, inner)
        if kind == STRING:
            return kind, True
    elif avro_type == "string":
        return STRING, False
    elif isinstance(avro_type, dict):
        if avro_type.get("type") == "long" and avro_type.get("logicalType") == TIMESTAMP:
            return TIMESTAMP, False
        if avro_type.get("type") == "map" and avro_type.get("values") == "string":
            return STRING_MAP, False
    raise AuditError(
        f"AuditEntry.avsc field {name!r} has type {avro_type!r}, which streamcore.audit does not "
        "check; add the type to streamcore/audit/checks.py with the schema change"
    )


def field_rules(schema: Mapping[str, Any]) -> tuple[FieldRule, ...]:
    """The rules of every field of the AuditEntry schema (its JSON), in field order."""
    rules = []
    for field in schema["fields"]:
        name = field["name"]
        unknown = set(field) - _FIELD_KEYS - CHECKED_ATTRIBUTES
        if unknown:
            raise AuditError(
                f"AuditEntry.avsc field {name!r} has attributes {sorted(unknown)} that "
                "streamcore.audit does not check; add them to streamcore/audit/checks.py"
            )
        kind, nullable = _kind(name, field["type"])
        pattern = field.get("pattern")
        max_length = field.get("maxLength")
        rules.append(
            FieldRule(
                name,
                kind,
                nullable,
                re.compile(pattern) if pattern is not None else None,
                int(max_length) if max_length is not None else None,
                field.get("doc", ""),
                field["type"].index("null") if nullable else 0,
            )
        )
    return tuple(rules)


def _refuse(label: str, field: str | None, problem: str) -> InvalidAuditEntryError:
    return InvalidAuditEntryError(f"{label}: {problem}", field)


def _shown(value: Any) -> str:
    return f"{type(value).__name__} {value!r:.80}"


def check_value(rule: FieldRule, value: Any, label: str) -> Any:
    """`value` as the entry keeps it (event dates as aware UTC datetimes at millisecond precision,
    maps copied), or InvalidAuditEntryError naming the field and the fix."""
    name = rule.name
    if value is None:
        if rule.nullable:
            return None
        raise _refuse(label, name, f"{name} is missing; {_HINTS.get(name, 'give it a value')}")
    if rule.kind == TIMESTAMP:
        return _timestamp(rule, value, label)
    if rule.kind == STRING_MAP:
        return _string_map(rule, value, label)
    if not isinstance(value, str):
        either = "a string or None" if rule.nullable else "a string"
        raise _refuse(label, name, f"{name} must be {either}, not {_shown(value)}; pass it as text")
    if rule.max_length is not None and len(value) > rule.max_length:
        raise _refuse(
            label,
            name,
            f"{name} has {len(value)} characters, more than its maxLength of {rule.max_length}; "
            "shorten it (details can go to extended)",
        )
    if rule.pattern is not None and rule.pattern.search(value) is None:
        if not value and not rule.nullable:
            raise _refuse(label, name, f"{name} is empty; {_HINTS.get(name, 'give it a value')}")
        raise _refuse(
            label,
            name,
            f"{name} {value!r:.80} does not match {rule.pattern.pattern} ({rule.doc}); fix the "
            "value" + (" or leave it out" if rule.nullable else ""),
        )
    return value


Check = Callable[[Any, str], Any]


def compile_check(rule: FieldRule) -> Check:
    """`check_value` for `rule`, as a function of (value, label) that tries the common case
    first: `publish` checks every field of every entry, and walking the generic rule cost more
    than the tests themselves. A value the rule takes as it is (a `str` within its limits, an
    aware UTC `datetime` in range, a `dict` of `str`) passes with a few comparisons; anything
    else goes to `check_value`, which converts it or words the refusal, so the result is the
    same either way."""
    slow: Check = functools.partial(check_value, rule)
    if rule.kind == TIMESTAMP:
        return _timestamp_check(slow)
    if rule.kind == STRING_MAP:
        return _string_map_check(slow)
    limit = rule.max_length if rule.max_length is not None else sys.maxsize
    nullable = rule.nullable
    if rule.pattern is None:

        def check_string(value: Any, label: str) -> Any:
            if value.__class__ is str and len(value) <= limit:
                return value
            if value is None and nullable:
                return None
            return slow(value, label)

        return check_string
    search = rule.pattern.search

    def check_matched_string(value: Any, label: str) -> Any:
        if value.__class__ is str and len(value) <= limit and search(value) is not None:
            return value
        if value is None and nullable:
            return None
        return slow(value, label)

    return check_matched_string


def _timestamp_check(slow: Check) -> Check:
    def check_timestamp(value: Any, label: str) -> Any:
        if (
            value.__class__ is datetime
            and value.tzinfo is UTC
            and 0 <= (value - EPOCH) // MILLISECOND <= MAX_EVENT_MS
        ):
            micros = value.microsecond % 1000  # below timestamp-millis precision: dropped
            return value.replace(microsecond=value.microsecond - micros) if micros else value
        return slow(value, label)

    return check_timestamp


def _string_map_check(slow: Check) -> Check:
    def check_string_map(value: Any, label: str) -> Any:
        if value.__class__ is dict:
            for key, item in value.items():
                if key.__class__ is not str or item.__class__ is not str:
                    return slow(value, label)
            return dict(value)  # a copy: the entry must not change with the caller's mapping
        return slow(value, label)

    return check_string_map


def _timestamp(rule: FieldRule, value: Any, label: str) -> datetime:
    name = rule.name
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise _refuse(
                label,
                name,
                f"{name} {value.isoformat()} is a naive datetime, which could be in any time "
                "zone; give an aware one (datetime.now(UTC), or value.replace(tzinfo=UTC) if it "
                "is UTC) or epoch milliseconds",
            )
        millis = (value - EPOCH) // timedelta(milliseconds=1)
    elif isinstance(value, int) and not isinstance(value, bool):
        millis = value
    else:
        raise _refuse(
            label,
            name,
            f"{name} must be an aware datetime or epoch milliseconds (int), not {_shown(value)}; "
            "parse text first, e.g. datetime.fromisoformat(text)",
        )
    if not 0 <= millis <= MAX_EVENT_MS:
        raise _refuse(
            label,
            name,
            f"{name} is {millis} ms since 1970-01-01 UTC, outside 0..{MAX_EVENT_MS} (1970 to "
            "year 4199, what a Record watermark holds); check its unit is milliseconds",
        )
    return EPOCH + timedelta(milliseconds=millis)


def _string_map(rule: FieldRule, value: Any, label: str) -> dict[str, str]:
    name = rule.name
    if not isinstance(value, Mapping):
        raise _refuse(
            label, name, f"{name} must be a mapping of strings to strings, not {_shown(value)}"
        )
    for key, item in value.items():
        if not isinstance(key, str):
            raise _refuse(label, name, f"{name} has a key that is not a string: {_shown(key)}")
        if not isinstance(item, str):
            raise _refuse(
                label,
                name,
                f"{name}[{key!r}] must be a string, not {_shown(item)}; extended values are text "
                "(format numbers and dates yourself)",
            )
    return dict(value)


def check_names(names: Iterable[str], known: tuple[str, ...], label: str) -> None:
    """InvalidAuditEntryError for names that are not fields, with the closest field names."""
    unknown = [name for name in names if name not in known]
    if not unknown:
        return
    guesses = []
    for name in unknown:
        close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
        guesses.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise _refuse(
        label,
        unknown[0] if len(unknown) == 1 else None,
        f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(guesses)}; the fields of "
        f"AuditEntry are {', '.join(known)}",
    )
