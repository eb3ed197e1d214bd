"""`JsonCodec`: plain JSON values as compact UTF-8, for humans and non-Avro consumers."""

from __future__ import annotations

import json
import logging
from typing import Any

from streamcore.codecs.avro import as_bytes
from streamcore.codecs.base import Codec, describe_failure

__all__ = ["JsonCodec"]

logger = logging.getLogger(__name__)

_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class JsonCodec(Codec[Any]):
    """Any JSON value <-> compact UTF-8 JSON text (no NaN/Infinity: they are not JSON)."""

    name = "json"

    def encode(self, message: Any) -> bytes:
        try:
            return _encoder.encode(message).encode("utf-8")
        except Exception as exc:  # TypeError (not serialisable), ValueError (NaN, cycles) ...
            raise self.error(
                f"cannot encode as JSON: {describe_failure(exc, reading=False)}"
            ) from exc

    def decode(self, data: bytes) -> Any:
        data = as_bytes(data, self.name)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(f"JSON must be UTF-8: {exc}") from exc
        try:
            return json.loads(text)
        except Exception as exc:  # JSONDecodeError, RecursionError on absurd nesting ...
            raise self.error(f"not valid JSON: {describe_failure(exc)}") from exc
