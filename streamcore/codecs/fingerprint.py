"""CRC-64-AVRO, the 64-bit Rabin fingerprint of a schema's Parsing Canonical Form.

The fingerprint names the writer schema inside every Avro single-object message (`C3 01` + the
fingerprint as 8 little-endian bytes), so it must be bit-identical to what Avro Java
(`SchemaNormalization.parsingFingerprint64`, used by Nuxeo) computes. We compute it ourselves with
the table-driven algorithm of the Avro specification instead of asking fastavro for a hex string,
because the codecs need the integer and the wire bytes on every lookup.
"""

from __future__ import annotations

import json
from typing import Any

from fastavro.schema import to_parsing_canonical_form

__all__ = [
    "EMPTY",
    "canonical_form",
    "crc64_avro",
    "fingerprint",
    "fingerprint_bytes",
    "format_fingerprint",
]

EMPTY = 0xC15D213AA4D7A795
"""The Avro spec's seed, which is also the fingerprint of zero bytes."""


def _make_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        fp = byte
        for _ in range(8):
            fp = (fp >> 1) ^ (EMPTY & -(fp & 1))
        table.append(fp)
    return tuple(table)


_TABLE = _make_table()


def crc64_avro(data: bytes) -> int:
    """The CRC-64-AVRO of raw bytes, as an unsigned 64-bit integer."""
    fp = EMPTY
    table = _TABLE
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


def _as_schema_object(schema: Any) -> Any:
    """JSON text → Python object; anything else (dict, list, type name, parsed schema) unchanged."""
    if isinstance(schema, str):
        text = schema.strip()
        if text[:1] in ("{", "[", '"'):
            return json.loads(text)
    return schema


def canonical_form(schema: Any) -> str:
    """The Parsing Canonical Form of a schema given as a dict, list, JSON text, or parsed schema."""
    return to_parsing_canonical_form(_as_schema_object(schema))


def fingerprint(schema: Any) -> int:
    """CRC-64-AVRO of the schema's Parsing Canonical Form, as an unsigned 64-bit integer.

    Two schemas that differ only in docs, defaults, aliases or field order of JSON attributes get
    the same fingerprint; that is what lets a reader find the writer schema from the fingerprint.
    """
    return crc64_avro(canonical_form(schema).encode("utf-8"))


def fingerprint_bytes(fp: int) -> bytes:
    """The 8 bytes a single-object message carries after `C3 01` (little-endian, per the spec)."""
    return fp.to_bytes(8, "little")


def format_fingerprint(fp: int) -> str:
    """`0x469564fd3f71bfd3` -- the form used in error messages and logs (Java's `Long.toHexString`).

    fastavro's `schema.fingerprint(..., "CRC-64-AVRO")` prints the wire bytes instead
    (`d3bf713ffd649546`): the same value, little-endian.
    """
    return f"0x{fp:016x}"
