"""JsonCodec writes and reads exactly what it did with the standard library alone (issue 31).

State-store keys, changelogs and window keys are built from its bytes, so msgspec may only be used
where its bytes and values are the same: every value here is encoded by the codec and by the
standard library call it made before, and every input decoded both ways.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import decimal
import enum
import json
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from streamcore.codecs import CodecError, JsonCodec

CODEC = JsonCodec()


def old_encode(value: Any) -> bytes:
    """What JsonCodec wrote before msgspec: the standard library alone."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
        "utf-8"
    )


def old_decode(data: bytes) -> Any:
    """What JsonCodec read before msgspec (the scanner fast path returns json.loads's value)."""
    return json.loads(data.decode("utf-8"))


def outcome(call: Any, value: Any) -> tuple[str, Any]:
    """("ok", the result's repr: it tells 1 from 1.0 and True) or ("error", its class)."""
    try:
        return "ok", repr(call(value))
    except Exception as exc:
        return "error", type(exc)


def assert_encodes_as_before(value: Any) -> None:
    before = outcome(old_encode, value)
    if before[0] == "ok":
        assert repr(CODEC.encode(value)) == before[1], value
    else:
        with pytest.raises(CodecError, match="cannot encode as JSON"):
            CODEC.encode(value)


def assert_decodes_as_before(data: bytes) -> None:
    before = outcome(old_decode, data)
    if before[0] == "ok":
        assert repr(CODEC.decode(data)) == before[1], data
    else:
        with pytest.raises(CodecError):
            CODEC.decode(data)


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    LOW = 1


class Name(str):
    pass


class Count(int):
    pass


class Ratio(float):
    pass


@dataclasses.dataclass
class Point:
    x: int


ODD = [
    Color.RED,
    Level.LOW,
    Name("n"),
    Count(3),
    Ratio(0.5),
    Point(1),
    uuid.UUID(int=7),
    datetime.date(2026, 1, 1),
    decimal.Decimal("1.5"),
    b"raw",
    {1, 2},
    frozenset(),
    collections.OrderedDict(a=1),
    collections.defaultdict(int, a=1),
]

# Every character, lone surrogates included (json refuses to write them as UTF-8).
TEXT = st.text(st.characters(blacklist_categories=()), max_size=12)
FLOATS = st.floats() | st.sampled_from(
    [1e-4, 9.999999999999999e-05, 1e16, 9999999999999998.0, 5e-324, -0.0, 1e-7, 1e22, 1.5e300]
)
INTS = st.integers() | st.integers(min_value=-(2**200), max_value=2**200)
SCALARS = st.none() | st.booleans() | INTS | FLOATS | TEXT | st.sampled_from(ODD)
KEYS = TEXT | st.integers() | st.floats() | st.booleans() | st.none() | st.sampled_from(ODD[:3])
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(KEYS, inner, max_size=5)
        | st.dictionaries(TEXT, inner, max_size=5)
    ),
    max_leaves=25,
)
# JSON values json writes and reads back (plain types, finite floats, no lone surrogates).
PLAIN_TEXT = st.text(max_size=12)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | INTS
    | st.floats(allow_nan=False, allow_infinity=False)
    | PLAIN_TEXT,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(PLAIN_TEXT, inner, max_size=5),
    max_leaves=25,
)
SETTINGS = settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(VALUES)
@example({"id": 1, "amount": 12.5, "user": "u1", "ok": True, "note": None})
@example(float("nan"))
@example({"x": float("inf")})
@example(10**5000)
@example([1e-05, 1e16])
def test_encode_writes_the_standard_librarys_bytes(value: Any) -> None:
    assert_encodes_as_before(value)


def test_values_that_contain_themselves_are_refused_as_before() -> None:
    looped: dict[str, Any] = {}
    looped["me"] = looped
    assert_encodes_as_before(looped)
    deep: Any = 1
    for _ in range(200):
        deep = {"d": [deep]}
    assert_encodes_as_before(deep)


@SETTINGS
@given(JSON_VALUES)
def test_round_trip(value: Any) -> None:
    assert repr(CODEC.decode(CODEC.encode(value))) == repr(value)


@SETTINGS
@given(
    JSON_VALUES | VALUES,
    st.sampled_from([{}, {"ensure_ascii": True}, {"indent": 1}, {"allow_nan": True}]),
)
def test_decode_reads_what_the_standard_library_reads(value: Any, options: dict[str, Any]) -> None:
    try:
        text = json.dumps(value, **{"allow_nan": False, **options})
    except (TypeError, ValueError):
        return
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        data = text.encode("utf-8", "surrogatepass")  # invalid UTF-8: refused both ways
    assert_decodes_as_before(data)


@SETTINGS
@given(st.binary(max_size=40) | st.binary(max_size=8).map(lambda b: b'{"a":[1,' + b))
@example(b"\xef\xbb\xbf1")
@example(b"NaN")
@example(b"-Infinity")
@example(b"1e400")
@example(b'"\\ud800"')
@example(b" 1 ")
@example(b"1" * 4301)
@example(b"18446744073709551616")
@example(b"[" * 3000 + b"]" * 3000)
def test_decode_accepts_and_refuses_as_before(data: bytes) -> None:
    assert_decodes_as_before(data)


def test_decode_of_other_buffers_and_types_as_before() -> None:
    assert CODEC.decode(bytearray(b'{"a":1}')) == {"a": 1}
    assert CODEC.decode(memoryview(b"[1]")) == [1]
    with pytest.raises(CodecError, match="can only decode bytes, got str"):
        CODEC.decode("1")  # type: ignore[arg-type]
