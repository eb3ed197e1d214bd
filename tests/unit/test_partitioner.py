from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamcore.log.partitioner import (
    java_string_hash,
    partition_for_ascii,
    partition_for_key,
    partitions_for_ascii,
    partitions_for_keys,
)

INT_MIN = -(2**31)


def reference_hash(value: str) -> int:
    """Java's String.hashCode written independently: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code
    units, in 32-bit two's complement."""
    units: list[int] = []
    for ch in value:
        cp = ord(ch)
        if cp >= 0x10000:
            cp -= 0x10000
            units += [0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)]
        else:
            units.append(cp)
    h = 0
    for unit in units:
        h = h * 31 + unit
    h %= 2**32
    return h - 2**32 if h >= 2**31 else h


# Any code point, lone surrogates included (Java strings may hold them).
any_text = st.text(
    alphabet=st.one_of(st.characters(), st.characters(categories=["Cs"])), max_size=40
)
# Keys as found in logs: no lone surrogates (they cannot be UTF-8 encoded into a segment).
key_text = st.text(max_size=40)


class TestJavaStringHash:
    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            ("", 0),
            ("a", 97),
            ("abc", 96354),
            ("hello", 99162322),
            ("Hello", 69609650),
            ("Aa", 2112),
            ("BB", 2112),
            ("polygenelubricants", INT_MIN),
        ],
    )
    def test_known_java_values(self, value: str, expected: int) -> None:
        assert java_string_hash(value) == expected

    def test_non_bmp_character_hashes_its_surrogate_pair(self) -> None:
        # U+1F600 is the UTF-16 pair D83D DE00: 31 * 0xD83D + 0xDE00
        assert java_string_hash("\U0001f600") == 31 * 0xD83D + 0xDE00 == 1772899
        assert java_string_hash("a\U0001f600") == reference_hash("a\U0001f600")

    def test_lone_surrogate_is_one_code_unit_like_java(self) -> None:
        assert java_string_hash("\ud800") == 0xD800
        assert java_string_hash("x\udfff") == 31 * ord("x") + 0xDFFF

    @pytest.mark.parametrize(
        "value",
        [
            "é",
            "naïve café",
            "日本語のキー",
            "\uffff\u0000\u0080",
            "mixed ascii and \U0010ffff end",
            "x" * 1000,
            "doc-00000000-0000-0000-0000-000000000000",
        ],
    )
    def test_matches_reference_formula(self, value: str) -> None:
        assert java_string_hash(value) == reference_hash(value)

    @given(any_text)
    def test_matches_reference_for_any_text(self, value: str) -> None:
        result = java_string_hash(value)
        assert result == reference_hash(value)
        assert INT_MIN <= result < 2**31


class TestPartitionForKey:
    def test_uses_the_non_negative_hash_modulo(self) -> None:
        assert partition_for_key("hello", 7) == 99162322 % 7
        assert partition_for_key("polygenelubricants", 5) == 0  # MIN_VALUE & 0x7fffffff == 0
        assert partition_for_key("anything", 1) == 0

    def test_negative_hash_is_masked_not_negated(self) -> None:
        key = next(k for k in (f"key-{i}" for i in range(1000)) if java_string_hash(k) < 0)
        assert partition_for_key(key, 10) == (java_string_hash(key) & 0x7FFFFFFF) % 10
        # "polygenelubricants" is the case where abs() would stay negative in Java
        assert partition_for_key("polygenelubricants", 3) == 0

    @given(key_text, st.integers(min_value=1, max_value=1000))
    def test_in_range(self, key: str, partitions: int) -> None:
        assert 0 <= partition_for_key(key, partitions) < partitions


class TestPartitionsForKeys:
    def test_empty_batch(self) -> None:
        result = partitions_for_keys([], 4)
        assert len(result) == 0

    def test_known_keys(self) -> None:
        keys = ["hello", "", "Aa", "BB", "polygenelubricants", "\U0001f600"]
        assert partitions_for_keys(keys, 13).tolist() == [
            99162322 % 13,
            0,
            2112 % 13,
            2112 % 13,
            0,
            1772899 % 13,
        ]

    def test_long_keys_wrap_like_java(self) -> None:
        keys = ["x" * 500, "y" * 3, "é" * 300, ""]
        assert partitions_for_keys(keys, 1000).tolist() == [
            (reference_hash(k) & 0x7FFFFFFF) % 1000 for k in keys
        ]

    def test_returns_integer_array(self) -> None:
        result = partitions_for_keys(["a", "b"], 4)
        assert isinstance(result, np.ndarray)
        assert np.issubdtype(result.dtype, np.integer)

    @settings(max_examples=300)
    @given(st.lists(key_text, max_size=30), st.integers(min_value=1, max_value=1000))
    def test_vectorised_equals_scalar(self, keys: list[str], partitions: int) -> None:
        expected = [partition_for_key(k, partitions) for k in keys]
        assert partitions_for_keys(keys, partitions).tolist() == expected

    @given(st.lists(any_text, max_size=10), st.integers(min_value=1, max_value=64))
    def test_vectorised_equals_reference_with_surrogates(
        self, keys: list[str], partitions: int
    ) -> None:
        expected = [(reference_hash(k) & 0x7FFFFFFF) % partitions for k in keys]
        assert partitions_for_keys(keys, partitions).tolist() == expected

    @given(st.lists(st.from_regex(r"[ -~]{0,20}", fullmatch=True), max_size=30))
    def test_ascii_fast_path_equals_scalar(self, keys: list[str]) -> None:
        assert partitions_for_keys(keys, 7).tolist() == [partition_for_key(k, 7) for k in keys]

    @given(st.integers(min_value=0, max_value=40), st.integers(min_value=1, max_value=60))
    def test_keys_of_one_length_equal_scalar(self, width: int, count: int) -> None:
        # One length takes the matrix-product path; long keys wrap like Java's int.
        keys = [f"{i:0{width}d}"[-width:] if width else "" for i in range(count)]
        assert partitions_for_keys(keys, 11).tolist() == [partition_for_key(k, 11) for k in keys]


class TestPartitionsForAscii:
    @given(
        st.lists(st.from_regex(r"[ -~]{0,20}", fullmatch=True), max_size=30),
        st.integers(min_value=1, max_value=1000),
    )
    def test_equals_scalar(self, keys: list[str], partitions: int) -> None:
        offsets = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum([len(k) for k in keys], out=offsets[1:])
        data = "".join(keys).encode("ascii")
        assert partitions_for_ascii(data, offsets, partitions).tolist() == [
            partition_for_key(k, partitions) for k in keys
        ]


class TestPartitionForAscii:
    """The single append's scalar path: base-31 numerals up to 640 bytes, weights beyond."""

    @given(
        st.from_regex(r"[\x00-\x7f]{0,100}", fullmatch=True),
        st.integers(min_value=1, max_value=1000),
    )
    def test_equals_reference(self, key: str, partitions: int) -> None:
        expected = (reference_hash(key) & 0x7FFFFFFF) % partitions
        assert partition_for_ascii(key.encode("ascii"), partitions) == expected

    @pytest.mark.parametrize("length", [0, 1, 64, 639, 640, 641, 5000])
    def test_at_the_numeral_bound(self, length: int) -> None:
        key = "".join(chr(0x7F - i % 0x60) for i in range(length))
        assert partition_for_ascii(key.encode("ascii"), 997) == partition_for_key(key, 997)

    def test_known_values(self) -> None:
        assert partition_for_ascii(b"hello", 7) == 99162322 % 7
        assert partition_for_ascii(b"polygenelubricants", 5) == 0

    def test_every_ascii_code(self) -> None:
        # Codes at both ends of each base-31 digit split (31 * q + r): 0, 30, 31, 126, 127.
        key = bytes(range(128)).decode("ascii")
        assert partition_for_ascii(key.encode("ascii"), 1009) == (
            (reference_hash(key) & 0x7FFFFFFF) % 1009
        )
        assert java_string_hash(key) == reference_hash(key)

    def test_under_the_lowest_digit_limit(self) -> None:
        # sys.int_max_str_digits can be lowered to 640, not below: keys up to that still hash.
        import sys

        before = sys.get_int_max_str_digits()
        sys.set_int_max_str_digits(640)
        try:
            key = "k" * 640
            assert partition_for_ascii(key.encode("ascii"), 97) == partition_for_key(key, 97)
            assert partition_for_ascii(b"k" * 641, 97) == partition_for_key("k" * 641, 97)
        finally:
            sys.set_int_max_str_digits(before)
