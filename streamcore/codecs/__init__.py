"""Codecs: how streamcore turns Records and Avro datums into bytes and back.

`get_codec("avro")` is the Record codec every log uses by default; `get_codec("avro", schema)`
is a codec for dict datums of your own schema. Decoding never raises anything but `CodecError`.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamcore.codecs.avro import AVRO_MODES, AvroCodec, default_store
from streamcore.codecs.base import Codec
from streamcore.codecs.fingerprint import canonical_form, fingerprint, format_fingerprint
from streamcore.codecs.json_codec import JsonCodec
from streamcore.codecs.named import custom_codec, custom_codec_names, register_codec
from streamcore.codecs.parsed_schema import ParsedSchema, load_schema
from streamcore.codecs.record_codec import RecordCodec
from streamcore.codecs.registry import (
    ConfluentSchemaRegistry,
    FileSchemaRegistry,
    SchemaRegistry,
    open_registry,
)
from streamcore.codecs.schema_store import SchemaStore
from streamcore.errors import CodecError, SchemaNotFoundError

if TYPE_CHECKING:
    from streamcore.config import StreamcoreConfig

__all__ = [
    "AVRO_MODES",
    "CODEC_NAMES",
    "AvroCodec",
    "Codec",
    "CodecError",
    "ConfluentSchemaRegistry",
    "FileSchemaRegistry",
    "JsonCodec",
    "ParsedSchema",
    "RecordCodec",
    "SchemaNotFoundError",
    "SchemaRegistry",
    "SchemaStore",
    "canonical_form",
    "clear_codec_cache",
    "fingerprint",
    "format_fingerprint",
    "get_codec",
    "load_schema",
    "register_codec",
]

logger = logging.getLogger(__name__)

CODEC_NAMES = ("json", "avro", "avro-binary", "avro-json", "avro-confluent")

_cache: dict[tuple[Any, ...], Codec[Any]] = {}
_cache_lock = threading.Lock()
_stores: dict[Path, SchemaStore] = {}


def _store_for(config: StreamcoreConfig | None) -> SchemaStore:
    if config is None:
        return default_store()
    store = _stores.get(config.schemas_dir)
    if store is None:
        store = _stores[config.schemas_dir] = SchemaStore(config.schemas_dir)
    return store


def _resolve_schema(schema: Any, store: SchemaStore, name: str) -> ParsedSchema:
    """A dict, JSON text, .avsc path, ParsedSchema, or a full name known to the store."""
    if isinstance(schema, str):
        text = schema.strip()
        looks_like_path = text.endswith(".avsc") or "/" in text
        if text[:1] not in ("{", "[", '"') and not looks_like_path:
            known = store.get(text)
            if known is not None:
                return known
            if "." in text:  # a full name, not a primitive type name such as "string"
                return store.by_name(text, codec=name)
    return load_schema(schema, codec=name)


def get_codec(
    name: str,
    schema: Any = None,
    *,
    store: SchemaStore | None = None,
    config: StreamcoreConfig | None = None,
) -> Codec[Any]:
    """The codec called `name` (one of `CODEC_NAMES`), cached per (name, schema fingerprint).

    Without a schema: the `RecordCodec` of that name. With a schema (dict, JSON text, path of an
    .avsc file, or full name known to the store): an `AvroCodec` over dict datums, or a
    `JsonCodec` for "json". `config` picks the schema directory and registry (default:
    `load_config()`); `store` overrides the schema directory.
    """
    if name not in CODEC_NAMES:
        custom = custom_codec(name, config)
        if custom is None:
            known = ", ".join((*CODEC_NAMES, *custom_codec_names(config)))
            raise CodecError(
                name, f"unknown codec; use one of {known}, or register it (register_codec)"
            )
        if schema is not None:
            raise CodecError(name, "a custom codec takes no schema= (its factory has its own)")
        return custom
    if store is None:
        store = _store_for(config)
    parsed = None
    if schema is not None and name != "json":
        parsed = _resolve_schema(schema, store, name)
    key = (name, parsed.fingerprint if parsed else None, id(store), config)
    codec = _cache.get(key)
    if codec is not None:
        return codec
    with _cache_lock:
        codec = _cache.get(key)
        if codec is None:
            registry = open_registry(config) if name == "avro-confluent" else None
            if name == "json" and schema is not None:
                codec = JsonCodec()
            elif parsed is None:
                codec = RecordCodec(name, store=store, registry=registry)
            else:
                codec = AvroCodec(parsed, name, store, registry)
            # The codec holds `store`, so id(store) stays unique while the entry lives.
            _cache[key] = codec
            logger.debug("created %r", codec)
    return codec


def clear_codec_cache() -> None:
    """Forget every cached codec and store (tests, or after editing include/schemas)."""
    import streamcore.codecs.avro as avro_module

    with _cache_lock:
        _cache.clear()
        _stores.clear()
        avro_module._default_store = None
