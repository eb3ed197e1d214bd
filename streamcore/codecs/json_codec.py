"""`JsonCodec`: plain JSON values as compact UTF-8, for humans and non-Avro consumers.

The bytes are those of `json.dumps(value, separators=(",", ":"), ensure_ascii=False,
allow_nan=False)` encoded as UTF-8, and must stay so: state-store keys, changelogs and window keys
are built from them, so a changed byte would orphan stored state after an upgrade. msgspec writes
and reads JSON 5-10x faster than the standard library; it is used where its bytes (and values) are
provably the same, the standard library everywhere else (see `_msgspec_writes_as_json`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import msgspec

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

_fast_encode: Callable[[Any], bytes] = msgspec.json.Encoder().encode
_fast_decode: Callable[[bytes], Any] = msgspec.json.Decoder().decode

_MAX_DEPTH = 32  # deeper values (and values that contain themselves) go to the standard library


def _msgspec_writes_as_json(value: Any, depth: int = 0) -> bool:
    """True when msgspec's bytes for `value` are exactly `_encoder`'s: every container an exact
    dict with str keys, list or tuple, every scalar an exact str, int, bool, None or a finite float
    written without an exponent. False means "let the standard library decide" (it may still
    write the value). Exact types only: msgspec writes an Enum as its value, a UUID, datetime or
    Decimal as a string, a set as an array and a dataclass as an object, all of which `json`
    refuses, and json turns int/float/bool/None keys into text its own way. The dict loop is
    inlined because it runs once per encoded record (a call per field would double its cost)."""
    kind = type(value)
    if kind is dict:
        if depth == _MAX_DEPTH:
            return False
        for key, item in value.items():
            if type(key) is not str:
                return False
            kind = type(item)
            if kind is str or kind is int or kind is bool or item is None:
                continue
            if kind is float:
                # repr() writes an exponent below 1e-4 and from 1e16 ("1e-05", "1e+16"), msgspec
                # another ("0.00001", "1e16"); between them both write the shortest digits.
                if not (1e-4 <= abs(item) < 1e16 or item == 0.0):
                    return False
            elif not _msgspec_writes_as_json(item, depth + 1):
                return False
        return True
    if kind is list or kind is tuple:
        if depth == _MAX_DEPTH:
            return False
        return all(_msgspec_writes_as_json(item, depth + 1) for item in value)
    if kind is float:
        return bool(1e-4 <= abs(value) < 1e16 or value == 0.0)
    return kind is str or kind is int or kind is bool or value is None


class JsonCodec(Codec[Any]):
    """Any JSON value <-> compact UTF-8 JSON text (no NaN/Infinity: they are not JSON)."""

    name = "json"

    def encode(self, message: Any) -> bytes:
        if _msgspec_writes_as_json(message):
            try:
                return _fast_encode(message)
            except Exception:  # a lone surrogate, an int too long: json says why
                pass
        try:
            # An int past 4,300 digits raises ValueError here, as inside a dict (it escaped as a
            # bare ValueError while ints took a shortcut of their own before msgspec).
            return _encoder.encode(message).encode("utf-8")
        except Exception as exc:  # TypeError (not serialisable), ValueError (NaN, cycles) ...
            raise self.error(
                f"cannot encode as JSON: {describe_failure(exc, reading=False)}"
            ) from exc

    def decode(self, data: bytes) -> Any:
        # msgspec reads the JSON `json` reads, to the same values (ints of any length included);
        # what it refuses (NaN, Infinity, 1e400, lone surrogates, a BOM, bad UTF-8, errors) goes
        # the standard library's way, for its value or its error message.
        if type(data) is bytes:
            try:
                return _fast_decode(data)
            except Exception:  # the standard library decides below
                pass
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
