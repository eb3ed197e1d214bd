"""`RecordCodec`: `Record` <-> bytes in every codec, for the log tools and computations.

In the Avro modes a Record travels as the datum of `include/schemas/Record.avsc`
(`watermark`, `key`, `data`, `flagsAsByte`, `traceContext`), so streamcore and Nuxeo read each
other's logs. The binary modes use the hand-written encoder of `record_binary` while the current
Record schema is the one it implements, and fastavro (with schema resolution through the store or
registry) for Records written with any other version of the schema. In `json` a Record is
`{"watermark", "key", "data": base64, "flags": int, "traceContext": base64 | null}`.
"""

from __future__ import annotations

import base64
import binascii
import logging
from typing import Any

from streamcore.codecs.avro import AvroCodec, as_bytes
from streamcore.codecs.base import Codec, describe_failure
from streamcore.codecs.errors import RecordFormatError
from streamcore.codecs.framing import (
    CONFLUENT_HEADER_SIZE,
    SINGLE_OBJECT_HEADER_SIZE,
    confluent_header,
    read_confluent_id,
    single_object_header,
)
from streamcore.codecs.json_codec import JsonCodec
from streamcore.codecs.parsed_schema import ParsedSchema, load_schema
from streamcore.codecs.record_binary import (
    FLAGS,
    RECORD_CANONICAL,
    RECORD_FULLNAME,
    RECORD_SCHEMA,
    decode_record,
    encode_record,
    record_problem,
)
from streamcore.codecs.registry import SchemaRegistry
from streamcore.codecs.schema_store import SchemaStore
from streamcore.errors import CodecError
from streamcore.record import Record

__all__ = ["RECORD_CODEC_NAMES", "RecordCodec", "record_from_datum", "record_to_datum"]

logger = logging.getLogger(__name__)

RECORD_CODEC_NAMES = ("json", "avro", "avro-binary", "avro-json", "avro-confluent")


def record_to_datum(record: Record) -> dict[str, Any]:
    """The Record.avsc datum of a Record."""
    return {
        "watermark": record.watermark,
        "key": record.key,
        "data": record.data,
        "flagsAsByte": int(record.flags),
        "traceContext": record.trace_context,
    }


def record_from_datum(datum: dict[str, Any]) -> Record:
    """A Record from a Record.avsc datum (any version: missing traceContext means None).

    `flagsAsByte` may be negative: Java writes its signed byte (USER2 set gives -128).
    """
    flags = datum["flagsAsByte"]
    if not isinstance(flags, int) or not -128 <= flags <= 255:
        raise RecordFormatError(f"flagsAsByte {flags!r} is not a byte")
    return Record(
        datum["key"],
        datum["data"],
        datum["watermark"],
        FLAGS[flags & 0xFF],
        datum.get("traceContext"),
    )


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode("ascii")


def _unb64(value: Any, field: str) -> bytes:
    if not isinstance(value, str):
        raise RecordFormatError(f"{field} must be a base64 string, got {type(value).__name__}")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error as exc:
        raise RecordFormatError(f"{field} is not valid base64: {exc}") from exc


def record_to_json_value(record: Record) -> dict[str, Any]:
    """The `json` codec's object for a Record (bytes as standard base64)."""
    return {
        "watermark": record.watermark,
        "key": record.key,
        "data": _b64(bytes(record.data)),
        "flags": int(record.flags),
        "traceContext": _b64(record.trace_context),
    }


def record_from_json_value(value: Any) -> Record:
    """A Record from the `json` codec's object; `RecordFormatError` (a ValueError) says what is
    missing or wrong."""
    if not isinstance(value, dict):
        raise RecordFormatError(f"expected a JSON object, got {type(value).__name__}")
    missing = [k for k in ("watermark", "key", "data", "flags") if k not in value]
    if missing:
        raise RecordFormatError(f"missing field(s) {', '.join(missing)}")
    watermark, key, flags = value["watermark"], value["key"], value["flags"]
    if isinstance(watermark, bool) or not isinstance(watermark, int):
        raise RecordFormatError(f"watermark must be an integer, got {watermark!r}")
    if not -(1 << 63) <= watermark < (1 << 63):
        raise RecordFormatError(f"watermark {watermark} does not fit in a signed 64-bit long")
    if not isinstance(key, str):
        raise RecordFormatError(f"key must be a string, got {type(key).__name__}")
    if isinstance(flags, bool) or not isinstance(flags, int) or not 0 <= flags <= 255:
        raise RecordFormatError(f"flags must be an integer in 0..255, got {flags!r}")
    trace = value.get("traceContext")
    return Record(
        key,
        _unb64(value["data"], "data"),
        watermark,
        FLAGS[flags],
        None if trace is None else _unb64(trace, "traceContext"),
    )


class RecordCodec(Codec[Record]):
    """Records in one of `RECORD_CODEC_NAMES`; the Avro modes use the current Record schema.

    `store` (default: include/schemas) finds the writer schema of Records written with another
    Record schema version; `registry` (default: `open_registry()`) serves `avro-confluent`.
    """

    def __init__(
        self,
        inner_name: str = "avro",
        *,
        store: SchemaStore | None = None,
        registry: SchemaRegistry | None = None,
    ) -> None:
        if inner_name not in RECORD_CODEC_NAMES:
            raise CodecError(
                inner_name, f"unknown codec; use one of {', '.join(RECORD_CODEC_NAMES)}"
            )
        self.name = inner_name
        self._json = JsonCodec()
        self._avro: AvroCodec | None = None
        self.fast = False
        self._fast_ids: dict[int, bool] = {}
        self._prefix = b""
        if inner_name != "json":
            schema = self._current_schema(store)
            self._avro = AvroCodec(schema, inner_name, store, registry)
            self.fast = schema.canonical == RECORD_CANONICAL
            if not self.fast:
                logger.warning(
                    "Record schema %s differs from the layout of the fast Record encoder; "
                    "Records go through fastavro (slower)",
                    schema.label,
                )
            if inner_name == "avro":
                self._prefix = single_object_header(schema.fingerprint)
            # The hot paths skip the mode dispatch of encode/decode (a few hundred ns a call).
            if self.fast and inner_name in ("avro", "avro-binary"):
                self.encode = self._encode_fast  # type: ignore[method-assign]
                self.decode = (  # type: ignore[method-assign]
                    self._decode_single_object if inner_name == "avro" else self._decode_binary
                )

    @staticmethod
    def _current_schema(store: SchemaStore | None) -> ParsedSchema:
        if store is None:
            from streamcore.codecs.avro import default_store

            store = default_store()
        current = store.get(RECORD_FULLNAME)
        if current is None:
            logger.debug("no %s in %r; using the built-in Record schema", RECORD_FULLNAME, store)
            current = load_schema(RECORD_SCHEMA)
        return current

    @property
    def schema(self) -> ParsedSchema | None:
        """The Record schema the Avro modes write (None for `json`)."""
        return self._avro.schema if self._avro else None

    def __repr__(self) -> str:
        return f"RecordCodec({self.name!r}, fast={self.fast})"

    # -- encode ----------------------------------------------------------------------------

    def _encode_fast(self, message: Record) -> bytes:
        try:
            return encode_record(message, self._prefix)
        except Exception as exc:
            raise self.error(f"cannot encode Record: {record_problem(message) or exc}") from exc

    def encode(self, message: Record) -> bytes:
        """The bytes of one Record."""
        name = self.name
        if self.fast and name != "avro-json":
            if name == "avro-confluent" and not self._prefix:
                self._prefix = confluent_header(self._avro.schema_id)  # type: ignore[union-attr]
            try:
                return encode_record(message, self._prefix)
            except Exception as exc:
                raise self.error(f"cannot encode Record: {record_problem(message) or exc}") from exc
        problem = record_problem(message)
        if problem:
            raise self.error(f"cannot encode Record: {problem}")
        if name == "json":
            return self._json.encode(record_to_json_value(message))
        return self._avro.encode(record_to_datum(message))  # type: ignore[union-attr]

    # -- decode ----------------------------------------------------------------------------

    def _decode_single_object(self, data: bytes) -> Record:
        if type(data) is bytes and data[:SINGLE_OBJECT_HEADER_SIZE] == self._prefix:
            try:
                return decode_record(data, SINGLE_OBJECT_HEADER_SIZE)
            except Exception as exc:
                raise self._body_error(exc) from exc
        return RecordCodec.decode(self, data)  # other writer schema, or not bytes

    def _decode_binary(self, data: bytes) -> Record:
        if type(data) is not bytes:
            data = as_bytes(data, self.name)
        try:
            return decode_record(data, 0)
        except Exception as exc:
            raise self._body_error(exc) from exc

    def decode(self, data: bytes) -> Record:
        """The Record in `data`; `CodecError` if the bytes are anything else."""
        if type(data) is not bytes:
            data = as_bytes(data, self.name)
        name = self.name
        if name == "avro":
            if self.fast and data[:SINGLE_OBJECT_HEADER_SIZE] == self._prefix:
                return self._fast_decode(data, SINGLE_OBJECT_HEADER_SIZE)
        elif name == "avro-binary":
            if self.fast:
                return self._fast_decode(data, 0)
        elif name == "avro-confluent":
            schema_id = read_confluent_id(data, name)
            fast = self._fast_ids.get(schema_id)
            if fast is None:
                writer = self._avro.writer_by_id(schema_id)  # type: ignore[union-attr]
                fast = self._fast_ids[schema_id] = (
                    self.fast and writer.canonical == RECORD_CANONICAL
                )
            if fast:
                return self._fast_decode(data, CONFLUENT_HEADER_SIZE)
        elif name == "json":
            value = self._json.decode(data)
            try:
                return record_from_json_value(value)
            except ValueError as exc:
                raise self.error(f"not a Record in JSON form: {exc}") from exc
        datum = self._avro.decode(data)  # type: ignore[union-attr]
        try:
            return record_from_datum(datum)
        except Exception as exc:
            raise self.error(f"decoded datum is not a Record: {describe_failure(exc)}") from exc

    def _fast_decode(self, data: bytes, offset: int) -> Record:
        try:
            return decode_record(data, offset)
        except Exception as exc:
            raise self._body_error(exc) from exc

    def _body_error(self, exc: Exception) -> CodecError:
        reason = str(exc) if isinstance(exc, RecordFormatError) else describe_failure(exc)
        return self.error(f"not a Record body: {reason}")
