"""`ParsedSchema`: one Avro schema, parsed once, with its canonical form and fingerprint.

Parsing and fingerprinting cost far more than encoding one message, so every codec, store and
registry passes these objects around instead of raw JSON.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastavro import parse_schema
from fastavro.schema import to_parsing_canonical_form

from streamcore.codecs.fingerprint import crc64_avro, format_fingerprint
from streamcore.errors import CodecError

__all__ = ["NAMED_TYPES", "ParsedSchema", "load_schema", "strip_fastavro_keys"]

logger = logging.getLogger(__name__)

NAMED_TYPES = ("record", "error", "enum", "fixed")
_FASTAVRO_KEYS = ("__fastavro_parsed", "__named_schemas")


@dataclass(frozen=True, eq=False)
class ParsedSchema:
    """An Avro schema as JSON (`raw`), as fastavro parsed it (`parsed`), and its identity."""

    raw: Any
    parsed: Any
    named: dict[str, Any] = field(repr=False)
    canonical: str = field(repr=False)
    fingerprint: int = 0
    fullname: str | None = None
    source: str | None = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ParsedSchema) and other.canonical == self.canonical

    def __hash__(self) -> int:
        return hash(self.canonical)

    @property
    def label(self) -> str:
        """`org.example.Item (0x...)`, for messages."""
        name = self.fullname or self.canonical[:60]
        return f"{name} ({format_fingerprint(self.fingerprint)})"

    def to_json(self) -> str:
        """The schema as JSON text, docs and defaults included (what registries store)."""
        return json.dumps(self.raw, separators=(",", ":"), sort_keys=False)


def strip_fastavro_keys(schema: Any) -> Any:
    """A copy of a fastavro-parsed schema without fastavro's private bookkeeping keys."""
    if isinstance(schema, dict):
        return {k: strip_fastavro_keys(v) for k, v in schema.items() if k not in _FASTAVRO_KEYS}
    if isinstance(schema, list):
        return [strip_fastavro_keys(v) for v in schema]
    return schema


def _read_json(path: Path, codec: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CodecError(codec, f"cannot read schema file {path}: {exc.strerror or exc}") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise CodecError(
            codec, f"schema file {path} is not valid JSON ({exc}); fix the .avsc syntax"
        ) from exc


def _raw_of(schema: Any, codec: str) -> tuple[Any, str | None]:
    """(JSON object, source path or None) for each accepted way of naming a schema."""
    if isinstance(schema, Path):
        return _read_json(schema, codec), str(schema)
    if isinstance(schema, str):
        text = schema.strip()
        if text[:1] in ("{", "[", '"'):
            try:
                return json.loads(text), None
            except ValueError as exc:
                raise CodecError(codec, f"schema text is not valid JSON: {exc}") from exc
        if text.endswith(".avsc") or "/" in text:
            return _read_json(Path(text), codec), text
        return text, None  # a primitive type name such as "string"
    if isinstance(schema, (dict, list)):
        return strip_fastavro_keys(schema), None
    raise CodecError(
        codec,
        f"cannot use {type(schema).__name__} as an Avro schema; pass a dict, JSON text, "
        "a path to an .avsc file, or a full name known to the schema store",
    )


def load_schema(schema: Any, *, codec: str = "avro", source: str | None = None) -> ParsedSchema:
    """Parse a schema given as dict/list, JSON text, `.avsc` path, type name or `ParsedSchema`.

    Each schema is parsed on its own (named types must be defined inline, as Avro's canonical
    form requires), so two versions of one record name never clash.
    """
    if isinstance(schema, ParsedSchema):
        return schema
    raw, path = _raw_of(schema, codec)
    where = f"schema file {source or path}" if (source or path) else "schema"
    named: dict[str, Any] = {}
    try:
        parsed = parse_schema(raw, named_schemas=named)
        canonical = to_parsing_canonical_form(raw)
    except Exception as exc:  # fastavro raises many types for bad schemas
        raise CodecError(
            codec, f"{where} is not a valid Avro schema: {type(exc).__name__}: {exc}"
        ) from exc
    fullname = None
    if isinstance(parsed, dict) and parsed.get("type") in NAMED_TYPES:
        fullname = parsed.get("name")
    return ParsedSchema(
        raw=raw,
        parsed=parsed,
        named=named,
        canonical=canonical,
        fingerprint=crc64_avro(canonical.encode("utf-8")),
        fullname=fullname,
        source=source or path,
    )
