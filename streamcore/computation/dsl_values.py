"""Value codecs of the DSL and the processor API: how `Record.data` becomes the Python value a
user function sees, and back.

A stream's Records are envelopes (`Record.key` is always a `str`); the *value* inside `data` is
read and written with the value codec of the stream:

- `"bytes"` (default): functions see the raw `bytes`; they may return `bytes`, `bytearray`,
  `memoryview`, or a `str` (written as UTF-8).
- `"json"`: any JSON value (`dict`, `list`, `str`, ...), written as compact UTF-8 JSON.
- `"avro"`, `"avro-binary"`, `"avro-json"`, `"avro-confluent"` with `schema=` (an .avsc path, a
  dict, JSON text, or a full name from include/schemas): `dict` datums of that schema.
- a `streamcore.codecs.Codec` instance: whatever it decodes and encodes.

Bytes that do not decode raise `CodecError` inside the computation, so they follow the
computation's policy (retries, then dead-letter stream, skip or termination) like any failure.
"""

from __future__ import annotations

from typing import Any

from streamcore.codecs import AVRO_MODES, Codec, JsonCodec, get_codec
from streamcore.codecs.named import custom_codec
from streamcore.computation.errors import DslDefinitionError
from streamcore.errors import CodecError

__all__ = ["BytesCodec", "ValueCodecSpec", "resolve_value_codec"]

ValueCodecSpec = str | Codec[Any]
"""`"bytes"`, `"json"`, an Avro mode name (with a schema), or a `Codec` instance."""

VALUE_CODEC_NAMES = ("bytes", "json", *AVRO_MODES)


class BytesCodec(Codec[bytes]):
    """The identity: user functions see and return the raw `Record.data`."""

    name = "bytes"

    def encode(self, message: Any) -> bytes:
        if type(message) is bytes:
            return message
        if isinstance(message, bytearray | memoryview):
            return bytes(message)
        if isinstance(message, str):
            return message.encode("utf-8")
        raise self.error(
            f"a value of a 'bytes' stream must be bytes or str, got {type(message).__name__}; "
            "return bytes, or give the stream a codec (codec='json', or codec='avro' with schema=)"
        )

    def decode(self, data: bytes) -> bytes:
        return data


_BYTES = BytesCodec()
_JSON = JsonCodec()


def resolve_value_codec(spec: ValueCodecSpec, schema: Any = None, *, where: str) -> Codec[Any]:
    """The codec named by `spec` (see the module table); `where` names the stream in errors."""
    if isinstance(spec, Codec):
        if schema is not None:
            raise DslDefinitionError(
                f"{where}: schema= is only used with a codec name; pass the schema to "
                "get_codec() yourself or pass codec='avro', schema=..."
            )
        return spec
    if isinstance(spec, str) and spec not in VALUE_CODEC_NAMES:
        custom = custom_codec(spec)
        if custom is not None:
            if schema is not None:
                raise DslDefinitionError(f"{where}: the custom codec {spec!r} takes no schema=")
            return custom
    if not isinstance(spec, str) or spec not in VALUE_CODEC_NAMES:
        raise DslDefinitionError(
            f"{where}: unknown value codec {spec!r}; use one of {', '.join(VALUE_CODEC_NAMES)}, "
            "a registered custom codec (docs/codecs.md) or a streamcore.codecs.Codec instance"
        )
    if spec in AVRO_MODES:
        if schema is None:
            raise DslDefinitionError(
                f"{where}: codec {spec!r} needs the value schema: pass schema= (an .avsc path, "
                "a dict, JSON text, or a full name from include/schemas)"
            )
        try:
            return get_codec(spec, schema)
        except CodecError as exc:
            raise DslDefinitionError(f"{where}: {exc}") from exc
    if schema is not None:
        raise DslDefinitionError(f"{where}: codec {spec!r} takes no schema; remove schema=")
    return _JSON if spec == "json" else _BYTES
