"""The two headers that name a writer schema in front of an Avro binary body.

* Avro single-object encoding (the `avro` codec, what Nuxeo writes): `C3 01` + the writer
  schema's CRC-64-AVRO fingerprint as 8 little-endian bytes.
* Confluent wire format (`avro-confluent`): `00` + the registry's schema id as 4 big-endian bytes.

Parsing lives here, once, so every codec rejects foreign bytes with the same clear message.
"""

from __future__ import annotations

from streamcore.codecs.base import hex_prefix
from streamcore.errors import CodecError

__all__ = [
    "CONFLUENT_HEADER_SIZE",
    "CONFLUENT_MAGIC",
    "SINGLE_OBJECT_HEADER_SIZE",
    "SINGLE_OBJECT_MAGIC",
    "confluent_header",
    "read_confluent_id",
    "read_single_object_fingerprint",
    "single_object_header",
]

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
SINGLE_OBJECT_HEADER_SIZE = 10
CONFLUENT_MAGIC = b"\x00"
CONFLUENT_HEADER_SIZE = 5
MAX_SCHEMA_ID = 0xFFFFFFFF


def single_object_header(fp: int) -> bytes:
    """`C3 01` + 8-byte little-endian fingerprint."""
    return SINGLE_OBJECT_MAGIC + fp.to_bytes(8, "little")


def read_single_object_fingerprint(data: bytes, codec: str = "avro") -> int:
    """The writer fingerprint of a single-object message; `CodecError` if it is not one."""
    if data[:2] != SINGLE_OBJECT_MAGIC:
        raise CodecError(
            codec,
            f"expected magic C3 01, got {hex_prefix(data)}; "
            "these bytes are not Avro single-object encoded",
        )
    if len(data) < SINGLE_OBJECT_HEADER_SIZE:
        raise CodecError(
            codec,
            f"truncated single-object header: {len(data)} bytes, need "
            f"{SINGLE_OBJECT_HEADER_SIZE} (C3 01 + 8-byte fingerprint)",
        )
    return int.from_bytes(data[2:10], "little")


def confluent_header(schema_id: int) -> bytes:
    """`00` + 4-byte big-endian schema id."""
    return CONFLUENT_MAGIC + schema_id.to_bytes(4, "big")


def read_confluent_id(data: bytes, codec: str = "avro-confluent") -> int:
    """The schema id of a Confluent-framed message; `CodecError` if it is not one."""
    if data[:1] != CONFLUENT_MAGIC:
        raise CodecError(
            codec,
            f"expected magic byte 00, got {hex_prefix(data, 1)}; "
            "these bytes are not in the Confluent Schema Registry wire format",
        )
    if len(data) < CONFLUENT_HEADER_SIZE:
        raise CodecError(
            codec,
            f"truncated Confluent header: {len(data)} bytes, need "
            f"{CONFLUENT_HEADER_SIZE} (00 + 4-byte schema id)",
        )
    return int.from_bytes(data[1:5], "big")
