"""Hand-written Avro binary encoder/decoder for the fixed `Record` schema (the hot path).

Every message that crosses a log is a `Record`, so its codec sets the ceiling of the whole
system. fastavro's generic writer costs several microseconds per Record in call overhead alone;
this module writes the five fields of `include/schemas/Record.avsc` directly (zigzag varints,
length-prefixed bytes, the `["null","bytes"]` union) with lookup tables for the common lengths and
a cache for the slowly-changing high bits of watermarks. The output is byte-for-byte what fastavro
writes for the same datum (tests/unit/test_codecs.py checks that with hypothesis).

It is only valid for exactly `RECORD_CANONICAL`; `RecordCodec` checks the current Record schema's
fingerprint and falls back to fastavro if the schema file ever changes.
"""

from __future__ import annotations

import struct
from typing import Any

from streamcore.codecs.errors import RecordFormatError, RecordTruncatedError
from streamcore.codecs.fingerprint import crc64_avro
from streamcore.record import Flag, Record

__all__ = [
    "FLAGS",
    "RECORD_CANONICAL",
    "RECORD_FINGERPRINT",
    "RECORD_FULLNAME",
    "RECORD_SCHEMA",
    "decode_record",
    "encode_record",
    "record_problem",
]

RECORD_FULLNAME = "org.nuxeo.lib.stream.computation.Record"

RECORD_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Record",
    "namespace": "org.nuxeo.lib.stream.computation",
    "fields": [
        {"name": "watermark", "type": "long"},
        {"name": "key", "type": "string"},
        {"name": "data", "type": "bytes"},
        {"name": "flagsAsByte", "type": "int"},
        {"name": "traceContext", "type": ["null", "bytes"], "default": None},
    ],
}
"""The layout this module implements (same canonical form as include/schemas/Record.avsc)."""

RECORD_CANONICAL = (
    '{"name":"org.nuxeo.lib.stream.computation.Record","type":"record","fields":['
    '{"name":"watermark","type":"long"},{"name":"key","type":"string"},'
    '{"name":"data","type":"bytes"},{"name":"flagsAsByte","type":"int"},'
    '{"name":"traceContext","type":["null","bytes"]}]}'
)
RECORD_FINGERPRINT = crc64_avro(RECORD_CANONICAL.encode("utf-8"))

FLAGS: tuple[Flag, ...] = tuple(Flag(i) for i in range(256))
"""`Flag` of every byte value, so decoding never constructs an IntFlag."""

_read_u32 = struct.Struct("<I").unpack_from
_new_tuple = tuple.__new__  # builds a Record without its checks (see decode_record)
_LONG_MIN = -(1 << 63)
_LONG_MAX = (1 << 63) - 1


def _varint(n: int) -> bytes:
    """Unsigned LEB128 of an already zigzag-encoded value."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def avro_long(value: int) -> bytes:
    """An Avro long: zigzag, then unsigned LEB128."""
    return _varint((value << 1) ^ (value >> 63))


_LENGTHS = tuple(_varint(n << 1) for n in range(4096))  # zigzag varint of lengths 0..4095
_FLAG_BYTES = {n: _varint(n << 1) for n in range(256)}  # flagsAsByte 0..255
# Two varint bytes (both with the continuation bit) for each 14-bit group.
_PAIRS = tuple(bytes(((v & 0x7F) | 0x80, (v >> 7) | 0x80)) for v in range(1 << 14))
# Inverse: the 14 payload bits of two varint bytes read as a little-endian 16-bit int.
_UNPAIR = tuple((v & 0x7F) | ((v >> 8) & 0x7F) << 7 for v in range(1 << 16))
# Flags from the zigzag byte of a one-byte flagsAsByte (-64..63, masked as Java's byte).
_FLAGS_BY_ZIGZAG = tuple(FLAGS[((z >> 1) ^ -(z & 1)) & 0xFF] for z in range(128))

# Watermarks of neighbouring records share their high bits (timestamp >> 10, about a second),
# so the varint bytes of `zigzag >> 28` are cached on both sides.
_CACHE_LIMIT = 4096
_high_bytes: dict[int, bytes] = {}
_high_values: dict[bytes, tuple[int, int]] = {}


def _high_tail(high: int) -> bytes:
    tail = _varint(high)
    if len(_high_bytes) >= _CACHE_LIMIT:
        _high_bytes.clear()
    _high_bytes[high] = tail
    return tail


def _coerce_long(value: Any) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise RecordFormatError(f"watermark must be an int, got {type(value).__name__}")
    index: int = value.__index__()
    return index


def _coerce_bytes(value: Any, field: str) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise RecordFormatError(f"{field} must be bytes, got {type(value).__name__}")


def encode_record(record: Record, prefix: bytes = b"") -> bytes:
    """`prefix` + the Avro binary body of `record` under `RECORD_SCHEMA`.

    Raises `RecordFormatError` (or AttributeError/TypeError for non-Records, which the codec
    turns into a `CodecError` after finding out which field is wrong).
    """
    if record.__class__ is Record:  # a named tuple: unpacking beats five attribute reads
        key, data, wm, flags, trace = record
    else:
        key, data, wm = record.key, record.data, record.watermark
        flags, trace = record.flags, record.trace_context
    if wm.__class__ is not int:
        wm = _coerce_long(wm)
    zz = (wm << 1) ^ (wm >> 63)
    if zz >= 0x10000000:
        if zz >> 64:
            raise RecordFormatError(f"watermark {wm} does not fit in a signed 64-bit long")
        high = zz >> 28
        tail = _high_bytes.get(high)
        if tail is None:
            tail = _high_tail(high)
        wm_bytes = _PAIRS[zz & 0x3FFF] + _PAIRS[(zz >> 14) & 0x3FFF] + tail
    else:
        wm_bytes = _varint(zz)
    key_bytes = key.encode()  # UTF-8, strict
    if data.__class__ is not bytes:
        data = _coerce_bytes(data, "data")
    flag_byte = _FLAG_BYTES.get(flags)
    if flag_byte is None:
        raise RecordFormatError(f"flags must be a Flag or an int in 0..255, got {flags!r}")
    if trace is None:
        trace_bytes = b"\x00"
    else:
        if trace.__class__ is not bytes:
            trace = _coerce_bytes(trace, "trace_context")
        size = len(trace)
        trace_bytes = b"\x02" + (_LENGTHS[size] if size < 4096 else _varint(size << 1)) + trace
    size = len(key_bytes)
    key_len = _LENGTHS[size] if size < 4096 else _varint(size << 1)
    size = len(data)
    data_len = _LENGTHS[size] if size < 4096 else _varint(size << 1)
    return b"".join((prefix, wm_bytes, key_len, key_bytes, data_len, data, flag_byte, trace_bytes))


def _read_raw(data: bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint (still zigzag-encoded) at `pos` -> (raw value, next position)."""
    byte = data[pos]
    value = byte & 0x7F
    shift = 7
    pos += 1
    while byte & 0x80:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if shift > 70:
            raise RecordFormatError("a varint is longer than 10 bytes")
    if value >> 64:
        raise RecordFormatError("a varint does not fit in 64 bits")
    return value, pos


def _read_length(data: bytes, pos: int, what: str) -> tuple[int, int]:
    raw, pos = _read_raw(data, pos)
    if raw & 1:
        raise RecordFormatError(f"negative {what} length {(raw >> 1) ^ -1}")
    return raw >> 1, pos


def decode_record(data: bytes, pos: int = 0) -> Record:
    """The `Record` whose Avro body starts at `pos` and ends exactly at the end of `data`.

    Raises `RecordFormatError`, `IndexError` (truncated: `RecordTruncatedError` or Python's own)
    or `UnicodeDecodeError` (bad key);
    the codec turns each into a `CodecError`.
    """
    end = len(data)
    # watermark: fast when the first four varint bytes all carry the continuation bit
    low = _read_u32(data, pos)[0] if pos + 4 <= end else 0
    if low & 0x80808080 == 0x80808080:
        high_key = data[pos + 4 : pos + 9]
        cached = _high_values.get(high_key)
        if cached is None:
            high, stop = _read_raw(data, pos + 4)
            if stop - pos > 10:
                raise RecordFormatError("a varint is longer than 10 bytes")
            cached = (high << 28, stop - pos)
            if stop - pos <= 9:  # the varint ended inside high_key: the key determines it
                if len(_high_values) >= _CACHE_LIMIT:
                    _high_values.clear()
                _high_values[high_key] = cached
        zz = cached[0] | _UNPAIR[low & 0xFFFF] | _UNPAIR[low >> 16] << 14
        if zz >> 64:
            raise RecordFormatError("watermark does not fit in 64 bits")
        pos += cached[1]
    else:
        zz, pos = _read_raw(data, pos)
    # key
    n = data[pos]
    if n < 0x80:
        pos += 1
    elif data[pos + 1] < 0x80:
        n = (n & 0x7F) | data[pos + 1] << 7
        pos += 2
    else:
        n, pos = _read_raw(data, pos)
    if n & 1:
        raise RecordFormatError(f"negative key length {(n >> 1) ^ -1}")
    stop = pos + (n >> 1)
    if stop > end:
        raise RecordTruncatedError(f"key of {n >> 1} bytes, only {end - pos} left")
    key = data[pos:stop].decode()  # UTF-8, strict; no argument is the fastest call
    # data
    n = data[stop]
    if n < 0x80:
        stop += 1
    elif data[stop + 1] < 0x80:
        n = (n & 0x7F) | data[stop + 1] << 7
        stop += 2
    else:
        n, stop = _read_raw(data, stop)
    if n & 1:
        raise RecordFormatError(f"negative data length {(n >> 1) ^ -1}")
    pos = stop + (n >> 1)
    if pos > end:
        raise RecordTruncatedError(f"data of {n >> 1} bytes, only {end - stop} left")
    payload = data[stop:pos]
    # flagsAsByte
    n = data[pos]
    if n < 0x80:
        flags = _FLAGS_BY_ZIGZAG[n]
        pos += 1
    else:
        n, pos = _read_raw(data, pos)
        value = (n >> 1) ^ -(n & 1)
        if not -128 <= value <= 255:
            raise RecordFormatError(f"flagsAsByte {value} is not a byte")
        flags = FLAGS[value & 0xFF]
    # traceContext
    branch = data[pos]
    pos += 1
    if branch == 0:
        trace = None
    elif branch == 2:
        n, pos = _read_length(data, pos, "traceContext")
        stop = pos + n
        if stop > end:
            raise RecordTruncatedError(f"traceContext of {n} bytes, only {end - pos} left")
        trace = data[pos:stop]
        pos = stop
    else:
        raise RecordFormatError(f"traceContext union branch byte {branch:#04x} is not 00 or 02")
    if pos != end:
        raise RecordFormatError(f"{end - pos} bytes left over after the Record")
    # Every field is valid by construction here (a strict UTF-8 key, bytes, a 64-bit watermark,
    # a Flag), so the Record's own checks are skipped: they would cost a quarter of the decode.
    return _new_tuple(Record, (key, payload, (zz >> 1) ^ -(zz & 1), flags, trace))


def record_problem(record: Any) -> str | None:
    """Why `record` cannot be encoded as a Record (which field is wrong), or None if it can."""
    if not isinstance(record, Record):
        return f"expected a Record, got {type(record).__name__}"
    if not isinstance(record.key, str):
        return f"key must be str, got {type(record.key).__name__}"
    try:
        record.key.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"key is not encodable as UTF-8 ({exc})"
    wm = record.watermark
    if isinstance(wm, bool) or not isinstance(wm, int) or not _LONG_MIN <= wm <= _LONG_MAX:
        return f"watermark must be an int in the signed 64-bit range, got {wm!r}"
    if not isinstance(record.data, (bytes, bytearray, memoryview)):
        return f"data must be bytes, got {type(record.data).__name__}"
    if record.flags not in _FLAG_BYTES:
        return f"flags must be a Flag or an int in 0..255, got {record.flags!r}"
    trace = record.trace_context
    if trace is not None and not isinstance(trace, (bytes, bytearray, memoryview)):
        return f"trace_context must be bytes or None, got {type(trace).__name__}"
    return None
