"""Key → partition, Nuxeo-compatible: `(java String.hashCode(key) & 0x7fffffff) % partitions`.

The scalar version serves single appends; the vectorised one hashes a whole batch of keys with numpy
(uint32 arithmetic wraps exactly like Java's int overflow), which keeps keyed batch appends fast.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import mul

import numpy as np

__all__ = [
    "java_string_hash",
    "partition_for_ascii",
    "partition_for_key",
    "partitions_for_ascii",
    "partitions_for_keys",
]

_POW31 = np.ones(1, dtype=np.uint32)
_ASCII_WEIGHTS: dict[int, tuple[int, ...]] = {}
# An ASCII key's sum c[0]*31^(n-1) + ... + c[n-1] is a base-31 numeral once each code c is
# split as 31*q + r (q <= 4 for ASCII): sum = 31 * int(q digits, 31) + int(r digits, 31), two
# translations and two conversions in C whatever the key's length (`_ascii_sum`).
_DIGITS = b"0123456789abcdefghijklmnopqrstu"
_HIGH = bytes(_DIGITS[c // 31] for c in range(128)) + bytes(128)
_LOW = bytes(_DIGITS[c % 31] for c in range(128)) + bytes(128)
# int() of a base-31 numeral is quadratic in its length, and refuses more digits than
# sys.int_max_str_digits (4,300 by default, never under 640 unless 0, no cap): longer keys take
# the weighted sum.
_NUMERAL_MAX = 640


def _weights(n: int) -> tuple[int, ...]:
    """31^(n-1-i) mod 2^32 for i in 0..n-1: the weight of each character of an n-char key."""
    weights = _ASCII_WEIGHTS.get(n)
    if weights is None:
        weights = tuple(pow(31, n - 1 - i, 1 << 32) for i in range(n))
        if n <= 256:
            _ASCII_WEIGHTS[n] = weights
    return weights


def _ascii_sum(key: bytes) -> int:
    """The sum of an ASCII key's codes weighted by powers of 31 (Java's hash before it wraps
    to 32 bits; the low bits are what callers keep)."""
    if not key:
        return 0
    if len(key) <= _NUMERAL_MAX:
        return 31 * int(key.translate(_HIGH), 31) + int(key.translate(_LOW), 31)
    total: int = sum(map(mul, key, _weights(len(key))))
    return total


def partition_for_ascii(key: bytes, partitions: int) -> int:
    """`partition_for_key` of an ASCII key given as its bytes: the single append's hot path
    (no sign fix-up: the partition needs only the low 31 bits of the sum)."""
    return (_ascii_sum(key) & 0x7FFFFFFF) % partitions


def java_string_hash(value: str) -> int:
    """Java's `String.hashCode()` as a signed 32-bit int (over UTF-16 code units)."""
    h = 0
    if value.isascii():
        h = _ascii_sum(value.encode("ascii")) & 0xFFFFFFFF
    else:
        data = value.encode("utf-16-be", "surrogatepass")  # a lone surrogate is one unit in Java
        for i in range(0, len(data), 2):
            h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def partition_for_key(key: str, partitions: int) -> int:
    return (java_string_hash(key) & 0x7FFFFFFF) % partitions


def _powers(n: int) -> np.ndarray:
    global _POW31
    if len(_POW31) < n:
        table = np.ones(n, dtype=np.uint32)
        with np.errstate(over="ignore"):
            for i in range(1, n):
                table[i] = table[i - 1] * np.uint32(31)
        _POW31 = table
    return _POW31[:n]


def partitions_for_keys(keys: Sequence[str], partitions: int) -> np.ndarray:
    """`partition_for_key` for every key, vectorised."""
    count = len(keys)
    joined = "".join(keys)
    if joined.isascii():
        units = np.frombuffer(joined.encode("ascii"), dtype=np.uint8).astype(np.uint32)
        lengths = np.fromiter(map(len, keys), dtype=np.int64, count=count)
    else:
        encoded = [k.encode("utf-16-le", "surrogatepass") for k in keys]
        units = np.frombuffer(b"".join(encoded), dtype="<u2").astype(np.uint32)
        lengths = np.fromiter((len(e) // 2 for e in encoded), dtype=np.int64, count=count)
    return _partitions(units, lengths, partitions)


def partitions_for_ascii(data: bytes, offsets: np.ndarray, partitions: int) -> np.ndarray:
    """`partition_for_key` for ASCII keys given as their joined bytes and Arrow-style offsets
    (count + 1 of them, from 0): no per-key Python work."""
    units = np.frombuffer(data, dtype=np.uint8).astype(np.uint32)
    return _partitions(units, np.diff(offsets).astype(np.int64), partitions)


def _partitions(units: np.ndarray, lengths: np.ndarray, partitions: int) -> np.ndarray:
    count = len(lengths)
    total = int(lengths.sum())
    hashes = np.zeros(count, dtype=np.uint32)
    if total and int(lengths.min()) == int(lengths.max()):
        # Keys of one length (fixed-width ids, the common case): a row of units per key.
        width = int(lengths[0])
        weights = np.ascontiguousarray(_powers(width)[::-1])
        hashes = units.reshape(count, width) @ weights  # uint32: wraps like Java's int
    elif total:
        ends = np.cumsum(lengths)
        exponents = np.repeat(ends, lengths) - 1 - np.arange(total)
        with np.errstate(over="ignore"):
            terms = units * _powers(int(lengths.max()))[exponents]
        nonempty = lengths > 0
        starts = (ends - lengths)[nonempty]
        hashes[nonempty] = np.add.reduceat(terms, starts, dtype=np.uint32)
    return (hashes & np.uint32(0x7FFFFFFF)) % np.uint32(partitions)
