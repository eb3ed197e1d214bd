"""`Record`: the envelope that computations exchange, `{watermark, key, data, flags}`.

Its Avro schema is `include/schemas/Record.avsc` (the one Nuxeo publishes, plus the optional
`traceContext` of Nuxeo 11.1+), so records written by either system decode in the
other. `flags` is a set of `Flag`s stored as one byte, bit i = flag with ordinal i.

A Record is immutable, like Kafka Streams' `Record`: the constructor checks every field (a
`RecordFieldError` names the wrong one) and the `with_*` methods return a changed copy, so a
record handed to a computation, a filter or an appender is never changed under it. It is a named
tuple underneath rather than a frozen dataclass because the codecs build one per record read and
a frozen dataclass costs four times as much to construct (bench/codec_bench.py); equality and
hashing are by type and fields, as for a dataclass.
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

from streamcore.errors import RecordFieldError
from streamcore.watermark import Watermark

__all__ = ["TOMBSTONE", "Flag", "Record"]

_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_new = tuple.__new__


class Flag(enum.IntFlag):
    """Record flags; the bit positions are Nuxeo's ordinals and must never move."""

    DEFAULT = 1 << 0
    COMMIT = 1 << 1
    POISON_PILL = 1 << 2
    EXTERNAL_VALUE = 1 << 3
    INTERNAL1 = 1 << 4
    INTERNAL2 = 1 << 5
    USER1 = 1 << 6
    USER2 = 1 << 7


# Marks a Record that deletes its key from a key-compacted log (as does an empty `data`);
# docs/log.md, "Key compaction".
TOMBSTONE = Flag.INTERNAL1


def _key(key: Any) -> str:
    if not isinstance(key, str):
        raise RecordFieldError(f"a Record key must be a str, got {type(key).__name__} {key!r}")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RecordFieldError(f"a Record key must be encodable as UTF-8 ({exc})") from None
    return key


def _bytes(value: Any, field: str) -> bytes:
    if isinstance(value, bytearray | memoryview):
        return bytes(value)  # a copy: the record must not change with the caller's buffer
    if isinstance(value, bytes):
        return value
    raise RecordFieldError(f"a Record's {field} must be bytes, got {type(value).__name__}")


def _watermark(watermark: Any) -> int:
    if isinstance(watermark, bool) or not isinstance(watermark, int):
        raise RecordFieldError(
            f"a Record watermark must be an int, got {type(watermark).__name__} {watermark!r}"
        )
    if not _LONG_MIN <= watermark <= _LONG_MAX:
        raise RecordFieldError(
            f"a Record watermark must be in the signed 64-bit range, got {watermark}"
        )
    return int(watermark)


def _flags(flags: Any) -> Flag:
    if isinstance(flags, Flag):
        return flags
    if isinstance(flags, bool) or not isinstance(flags, int) or not 0 <= flags <= 0xFF:
        raise RecordFieldError(f"Record flags must be a Flag or an int in 0..255, got {flags!r}")
    return Flag(flags)


class _RecordFields(NamedTuple):
    key: str
    data: bytes
    watermark: int
    flags: Flag
    trace_context: bytes | None


class Record(_RecordFields):
    """A keyed payload with a watermark. `data` is opaque bytes (usually Avro single-object).

    Immutable: change a field with `with_key`, `with_data`, `with_watermark`, `with_flags` or
    `with_trace_context`, which return a new Record. `bytearray`/`memoryview` data is copied
    to `bytes`, int flags become `Flag`. The named tuple's `_make` skips the checks: it is for
    decoders whose fields are valid by construction."""

    __slots__ = ()

    def __new__(
        cls,
        key: str,
        data: bytes = b"",
        watermark: int = 0,
        flags: Flag = Flag.DEFAULT,
        trace_context: bytes | None = None,
    ) -> Record:
        # The common case (str key in ASCII, bytes, int, Flag) costs four type checks.
        if type(key) is not str or not key.isascii():
            key = _key(key)
        if type(data) is not bytes:
            data = _bytes(data, "data")
        if type(watermark) is not int or not _LONG_MIN <= watermark <= _LONG_MAX:
            watermark = _watermark(watermark)
        if type(flags) is not Flag:
            flags = _flags(flags)
        if trace_context is not None and type(trace_context) is not bytes:
            trace_context = _bytes(trace_context, "trace_context")
        return _new(cls, (key, data, watermark, flags, trace_context))

    @classmethod
    def of(cls, key: str, data: bytes | None = None, *, flags: Flag = Flag.DEFAULT) -> Record:
        """A record stamped with the current time as watermark (like Nuxeo's `Record.of`)."""
        return cls(key, data or b"", Watermark.of_now().value, flags)

    def with_key(self, key: str) -> Record:
        """This record with another key."""
        if type(key) is not str or not key.isascii():
            key = _key(key)
        return _new(type(self), (key, self[1], self[2], self[3], self[4]))

    def with_data(self, data: bytes) -> Record:
        """This record with other data."""
        if type(data) is not bytes:
            data = _bytes(data, "data")
        return _new(type(self), (self[0], data, self[2], self[3], self[4]))

    def with_watermark(self, watermark: int) -> Record:
        """This record with another watermark."""
        if type(watermark) is not int or not _LONG_MIN <= watermark <= _LONG_MAX:
            watermark = _watermark(watermark)
        return _new(type(self), (self[0], self[1], watermark, self[3], self[4]))

    def with_flags(self, flags: Flag) -> Record:
        """This record with other flags."""
        if type(flags) is not Flag:
            flags = _flags(flags)
        return _new(type(self), (self[0], self[1], self[2], flags, self[4]))

    def with_trace_context(self, trace_context: bytes | None) -> Record:
        """This record with another trace context (None for none)."""
        if trace_context is not None and type(trace_context) is not bytes:
            trace_context = _bytes(trace_context, "trace_context")
        return _new(type(self), (self[0], self[1], self[2], self[3], trace_context))

    def _replace(self, /, **changes: Any) -> Record:
        """This record with the fields in `changes` replaced, checked like the constructor."""
        return type(self)(**{**self._asdict(), **changes})

    @property
    def timestamp(self) -> int:
        """Milliseconds since the epoch, from the watermark."""
        return self.watermark >> 17

    def has(self, flag: Flag) -> bool:
        return bool(self.flags & flag)

    # A record equals only a record of its class, never a plain tuple of its fields (tuples
    # would compare themselves field by field if this returned NotImplemented).
    def __eq__(self, other: object) -> bool:
        if type(other) is type(self):
            return tuple.__eq__(self, other)
        return False if isinstance(other, tuple) else NotImplemented

    def __ne__(self, other: object) -> bool:
        if type(other) is type(self):
            return tuple.__ne__(self, other)
        return True if isinstance(other, tuple) else NotImplemented

    __hash__ = tuple.__hash__

    def __str__(self) -> str:
        preview = self.data[:127].decode("utf-8", "replace")
        preview = "".join(c if c.isprintable() else "." for c in preview)
        return (
            f"Record(key={self.key!r}, watermark={Watermark(self.watermark)}, "
            f"flags={self.flags!r}, data[{len(self.data)}]={preview!r})"
        )
