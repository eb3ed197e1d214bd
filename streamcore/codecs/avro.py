"""`AvroCodec`: dict datums <-> Avro bytes, in the four Avro framings streamcore speaks.

The codec's schema is the READER schema: a message written with another version of the schema is
decoded with Avro schema resolution (added fields take their default, removed fields are
dropped), its writer schema found by fingerprint (`avro`, in the `SchemaStore`) or by registry id
(`avro-confluent`). Schemas are parsed once and writer->reader resolutions are cached per
fingerprint/id, so the per-message cost is fastavro's own.
"""

from __future__ import annotations

import io
import json
import logging
from dataclasses import dataclass
from typing import Any

from fastavro import json_reader, json_writer, schemaless_reader, schemaless_writer
from fastavro.read import SchemaResolutionError
from fastavro.validation import validate

from streamcore.codecs.base import Codec, describe_failure
from streamcore.codecs.binary_guard import MAX_DATUM_DEPTH, BinaryGuard, nesting_exceeds
from streamcore.codecs.errors import GuardError
from streamcore.codecs.framing import (
    CONFLUENT_HEADER_SIZE,
    SINGLE_OBJECT_HEADER_SIZE,
    confluent_header,
    read_confluent_id,
    read_single_object_fingerprint,
    single_object_header,
)
from streamcore.codecs.parsed_schema import ParsedSchema, load_schema
from streamcore.codecs.registry import SchemaRegistry
from streamcore.codecs.schema_store import SchemaStore
from streamcore.errors import CodecError

__all__ = ["AVRO_MODES", "AvroCodec", "as_bytes", "default_store"]

logger = logging.getLogger(__name__)

AVRO_MODES = ("avro", "avro-binary", "avro-json", "avro-confluent")

_default_store: SchemaStore | None = None


def default_store() -> SchemaStore:
    """The process-wide store of `load_config().schemas_dir`, loaded on first use."""
    global _default_store
    if _default_store is None:
        _default_store = SchemaStore()
    return _default_store


def as_bytes(data: Any, codec: str) -> bytes:
    """`data` as `bytes` (bytearray/memoryview copied), or `CodecError` for anything else."""
    if type(data) is bytes:
        return data
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise CodecError(codec, f"can only decode bytes, got {type(data).__name__}")


@dataclass(frozen=True)
class _Resolution:
    """How to read bodies written with one writer schema into the codec's reader schema."""

    writer: ParsedSchema
    reader_parsed: Any  # None when writer == reader (no resolution needed)
    guard: BinaryGuard | None

    def read(self, data: bytes, offset: int) -> Any:
        if self.guard is not None:
            self.guard.check(data, offset)
        buffer = io.BytesIO(data)
        buffer.seek(offset)
        datum = schemaless_reader(buffer, self.writer.parsed, self.reader_parsed)
        if buffer.tell() != len(data):
            raise GuardError(
                f"{len(data) - buffer.tell()} bytes left over after the datum; the bytes do not "
                f"match writer schema {self.writer.label}"
            )
        return datum


class AvroCodec(Codec[dict[str, Any]]):
    """Avro datums (dicts for records) in one of `AVRO_MODES`; the schema is the reader schema.

    * `avro`: single-object encoding, `C3 01` + 8-byte LE fingerprint + body (Nuxeo's format).
    * `avro-binary`: the bare body; writer and reader schema must be the same.
    * `avro-json`: Avro's JSON encoding, UTF-8, one line.
    * `avro-confluent`: `00` + 4-byte BE registry id + body.

    `validate=True` (the default) checks every datum against the schema before writing, because
    fastavro alone writes 1.5 as the int 1 and 2**40 into an int field without a word; pass
    False when the data is known good and throughput matters.
    """

    def __init__(
        self,
        schema: Any,
        mode: str = "avro",
        store: SchemaStore | None = None,
        registry: SchemaRegistry | None = None,
        *,
        subject: str | None = None,
        validate: bool = True,
    ) -> None:
        if mode not in AVRO_MODES:
            raise CodecError(mode, f"unknown Avro mode; use one of {', '.join(AVRO_MODES)}")
        self.name = mode
        self.schema = load_schema(schema, codec=mode)
        self._store = store
        self._registry = registry
        self.subject = subject or self.schema.fullname or f"schema-{self.schema.fingerprint:016x}"
        self._validate = validate
        self._prefix = single_object_header(self.schema.fingerprint) if mode == "avro" else b""
        self._own = _Resolution(
            self.schema, None, BinaryGuard.for_schema(self.schema.parsed, self.schema.named)
        )
        self._resolutions: dict[int, _Resolution] = {}  # by fingerprint or by registry id
        self._schema_id: int | None = None
        if mode == "avro":
            self._resolutions[self.schema.fingerprint] = self._own

    def __repr__(self) -> str:
        return f"AvroCodec({self.schema.label}, {self.name!r})"

    @property
    def store(self) -> SchemaStore:
        if self._store is None:
            self._store = default_store()
        return self._store

    @property
    def registry(self) -> SchemaRegistry:
        if self._registry is None:
            from streamcore.codecs.registry import open_registry

            self._registry = open_registry()
        return self._registry

    @property
    def schema_id(self) -> int:
        """The registry id of the codec's schema (`avro-confluent`), registered on first use."""
        if self._schema_id is None:
            self._schema_id = self.registry.register(self.subject, self.schema)
            self._prefix = confluent_header(self._schema_id)
        return self._schema_id

    # -- resolution ------------------------------------------------------------------------

    def _resolution_for(self, writer: ParsedSchema) -> _Resolution:
        if writer.canonical == self.schema.canonical:
            return self._own
        logger.debug("resolving writer %s to reader %s", writer.label, self.schema.label)
        return _Resolution(
            writer, self.schema.parsed, BinaryGuard.for_schema(writer.parsed, writer.named)
        )

    def _by_fingerprint(self, fp: int) -> _Resolution:
        found = self._resolutions.get(fp)
        if found is None:
            found = self._resolution_for(self.store.by_fingerprint(fp, codec=self.name))
            self._resolutions[fp] = found
        return found

    def _by_schema_id(self, schema_id: int) -> _Resolution:
        found = self._resolutions.get(schema_id)
        if found is None:
            found = self._resolution_for(self.registry.get(schema_id))
            self._resolutions[schema_id] = found
        return found

    def writer_by_id(self, schema_id: int) -> ParsedSchema:
        """The writer schema of a registry id (`avro-confluent`), fetched once."""
        return self._by_schema_id(schema_id).writer

    # -- encode ----------------------------------------------------------------------------

    def _check(self, message: Any) -> None:
        if self._own.guard is not None and nesting_exceeds(message):
            raise self.error(
                f"datum nests deeper than {MAX_DATUM_DEPTH} levels (or contains itself); "
                f"schema {self.schema.label} could not decode it back"
            )
        # A quiet pass first: with raise_errors=True fastavro builds (and JSON-dumps) an error
        # object for every union branch that does not match, several times the cost of the
        # check itself; the raising pass runs only to explain a datum already known to be bad.
        if self._validate:
            try:
                if not validate(message, self.schema.parsed, raise_errors=False):
                    validate(message, self.schema.parsed, raise_errors=True)
            except Exception as exc:
                raise self.error(
                    f"datum does not match schema {self.schema.label}: {_one_line(exc)}"
                ) from exc

    def encode(self, message: dict[str, Any]) -> bytes:
        """The Avro bytes of one datum, framed as this codec's mode says."""
        self._check(message)
        if self.name == "avro-json":
            return self._encode_json(message)
        if self.name == "avro-confluent":
            self.schema_id  # noqa: B018 -- registers on first use and sets the prefix
        buffer = io.BytesIO()
        buffer.write(self._prefix)
        try:
            schemaless_writer(buffer, self.schema.parsed, message, strict_allow_default=True)
        except Exception as exc:
            raise self.error(
                f"cannot encode datum with schema {self.schema.label}: "
                f"{describe_failure(exc, reading=False)}"
            ) from exc
        data = buffer.getvalue()
        if self._own.guard is not None:
            # Never write what decode would refuse (nesting, zero-byte item limits).
            try:
                self._own.guard.check(data, len(self._prefix))
            except GuardError as exc:
                raise self.error(f"datum exceeds the decoding limits: {exc}") from exc
        return data

    def _encode_json(self, message: Any) -> bytes:
        text = io.StringIO()
        try:
            json_writer(text, self.schema.parsed, [message], strict_allow_default=True)
            return text.getvalue().rstrip("\n").encode("utf-8")
        except Exception as exc:
            raise self.error(
                f"cannot encode datum as Avro JSON with schema {self.schema.label}: "
                f"{describe_failure(exc, reading=False)}"
            ) from exc

    # -- decode ----------------------------------------------------------------------------

    def decode(self, data: bytes) -> dict[str, Any]:
        """The datum in `data`, resolved to this codec's schema; `CodecError` on any problem."""
        data = as_bytes(data, self.name)
        datum: dict[str, Any]  # a record's datum (see the class docstring)
        if self.name == "avro-json":
            datum = self._decode_json(data)
            return datum
        if self.name == "avro":
            fp = read_single_object_fingerprint(data, self.name)
            resolution = self._by_fingerprint(fp)
            offset = SINGLE_OBJECT_HEADER_SIZE
        elif self.name == "avro-confluent":
            resolution = self._by_schema_id(read_confluent_id(data, self.name))
            offset = CONFLUENT_HEADER_SIZE
        else:
            resolution, offset = self._own, 0
        datum = self.read_body(resolution, data, offset)
        return datum

    def read_body(self, resolution: _Resolution, data: bytes, offset: int) -> Any:
        try:
            return resolution.read(data, offset)
        except CodecError:
            raise
        except GuardError as exc:
            raise self.error(f"{exc}; writer schema {resolution.writer.label}") from exc
        except Exception as exc:
            raise self.error(_read_failure(exc, resolution, self.schema)) from exc

    def _decode_json(self, data: bytes) -> Any:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(f"Avro JSON must be UTF-8: {exc}") from exc
        try:
            value = json.loads(text)
            # fastavro's JSON reader wants one value per line; re-serialise to allow pretty JSON.
            line = json.dumps(value, separators=(",", ":"))
            datums = list(json_reader(io.StringIO(line), self.schema.parsed))
        except Exception as exc:
            raise self.error(
                f"not Avro JSON of schema {self.schema.label}: {describe_failure(exc)}"
            ) from exc
        if len(datums) != 1:
            raise self.error(f"expected one Avro JSON value, found {len(datums)}")
        datum = datums[0]
        try:
            validate(datum, self.schema.parsed, raise_errors=True)
        except Exception as exc:
            raise self.error(
                f"Avro JSON value does not match schema {self.schema.label}: {_one_line(exc)}"
            ) from exc
        return datum


def _one_line(exc: BaseException) -> str:
    """`exc` on one line, to keep messages short: fastavro's ValidationError prints a JSON list of
    its errors over several lines."""
    errors = getattr(exc, "errors", None)
    if errors:
        return "; ".join(str(e) for e in errors)
    return " ".join(str(exc).split()) or type(exc).__name__


def _read_failure(exc: Exception, resolution: _Resolution, reader: ParsedSchema) -> str:
    if isinstance(exc, SchemaResolutionError):
        return (
            f"writer schema {resolution.writer.label} cannot be read as "
            f"{reader.label}: {exc}; the change is not backward compatible"
        )
    return f"{describe_failure(exc)}; writer schema {resolution.writer.label}"
