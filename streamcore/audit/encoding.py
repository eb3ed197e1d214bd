"""The Avro body of an entry, written field by field: the encoding step of `publish`.

fastavro's generic writer spends about 10 us an entry on per-call overhead, as much as checking
the entry. An entry's fields have only the kinds `checks` understands (a schema change that
needs another fails when the rules are built, before anything is encoded), so each field is
written as Avro's binary encoding specifies: a string as its zigzag-varint length and UTF-8
bytes, a nullable string as its union branch and then the string, the timestamp as a zigzag
varint of milliseconds, the map as one block of pairs and the empty block that ends it. The
bytes are those fastavro writes for the same datum (tests/unit/audit/test_audit_encoding.py
compares them), and any Avro reader decodes them.

An entry given as a mapping is checked while it is written, one pass over its fields with the
checks `AuditEntry` runs when it is made (`compile_check`, same order, same messages), instead
of making an `AuditEntry` first and reading it back: that took as long again as the checks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from streamcore.audit.checks import (
    EPOCH,
    MILLISECOND,
    STRING,
    STRING_MAP,
    TIMESTAMP,
    FieldRule,
    compile_check,
)
from streamcore.audit.errors import InvalidAuditEntryError
from streamcore.codecs.record_binary import avro_long

__all__ = ["Written", "entry_writer"]


class Written(NamedTuple):
    """An entry's bytes and what its Record needs besides."""

    data: bytes
    event_id: str
    doc_id: str | None
    event_date_ms: int


# Lengths up to this many bytes are looked up; fields are at most 4096 characters (maxLength).
_SIZES = tuple(avro_long(n) for n in range(4097))
_EMPTY_MAP = avro_long(0)


def _size(n: int) -> bytes:
    return _SIZES[n] if n < len(_SIZES) else avro_long(n)


def entry_writer(rules: Sequence[FieldRule], prefix: bytes = b"") -> Callable[[Any, bool], Written]:
    """`write(source, check)` for entries whose fields are `rules`: their bytes, `prefix` (the
    single-object header) then the Avro body. `source` is an `AuditEntry` (`check` False: its
    values were checked when it was made) or a mapping of field names (`check` True: each
    value is checked before it is written; a missing field is None, or `{}` for a map, as the
    dataclass defaults are). A bad value, or a string that is not valid Unicode (a lone
    surrogate, which no check refuses), raises `InvalidAuditEntryError` naming the entry and
    the field."""
    plan = []
    for rule in rules:
        # A nullable field's value goes after its union branch; null is the other branch alone.
        branch = avro_long(1 - rule.null_branch) if rule.nullable else b""
        null = avro_long(rule.null_branch)
        default: dict[str, str] | None = {} if rule.kind == STRING_MAP else None
        plan.append((rule.name, compile_check(rule), rule.kind, null, branch, default))
    fields = tuple(plan)

    def write(source: Any, check: bool) -> Written:
        parts = [prefix]
        add = parts.append
        label = "audit entry"
        event_id = ""
        doc_id = None
        millis = 0
        name = ""
        try:
            for name, checked, kind, null, branch, default in fields:
                if check:
                    value = checked(source.get(name, default), label)
                else:
                    value = getattr(source, name)
                if kind == STRING:
                    if value is None:
                        add(null)
                        continue
                    data = value.encode()
                    add(branch)
                    add(_size(len(data)))
                    add(data)
                    if name == "event_id":
                        event_id = value
                        label = f"audit entry {value!r}"
                    elif name == "doc_id":
                        doc_id = value
                elif kind == TIMESTAMP:
                    millis = (value - EPOCH) // MILLISECOND
                    add(avro_long(millis))
                elif value:  # a map of strings: one block, then the empty block
                    add(avro_long(len(value)))
                    for key, item in value.items():
                        data = key.encode()
                        add(_size(len(data)))
                        add(data)
                        data = item.encode()
                        add(_size(len(data)))
                        add(data)
                    add(_EMPTY_MAP)
                else:
                    add(_EMPTY_MAP)
        except UnicodeEncodeError as exc:
            raise InvalidAuditEntryError(
                f"{label}: {name} is not valid Unicode text ({exc.reason} at character "
                f"{exc.start}); remove or replace the character",
                name,
            ) from exc
        return Written(b"".join(parts), event_id, doc_id, millis)

    return write
