"""`JsonCodec`: plain JSON values as compact UTF-8, for humans and non-Avro consumers."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from streamcore.codecs.avro import as_bytes
from streamcore.codecs.base import Codec, describe_failure

__all__ = ["JsonCodec"]

logger = logging.getLogger(__name__)

_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
# The decoder's scanner, called directly: `json.loads` adds three Python calls and two regex
# matches around it, most of the cost of decoding a small value (a state store's count). Text it
# does not take whole (surrounding whitespace, errors) goes through `json.loads` for its result or
# its error message.
_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


class JsonCodec(Codec[Any]):
    """Any JSON value <-> compact UTF-8 JSON text (no NaN/Infinity: they are not JSON)."""

    name = "json"

    def encode(self, message: Any) -> bytes:
        try:
            if type(message) is int:  # the text json writes for an int, without an encoder
                return str(message).encode()
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
            value, end = _scan(text, 0)
            if end == len(text):
                return value
        except Exception:  # StopIteration (leading space, empty), JSONDecodeError: see below
            pass
        try:
            return json.loads(text)
        except Exception as exc:  # JSONDecodeError, RecursionError on absurd nesting ...
            raise self.error(f"not valid JSON: {describe_failure(exc)}") from exc
