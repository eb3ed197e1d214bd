"""Kafka's key partitioner in Python: `toPositive(murmur2(utf8(key))) % partitions`.

This is what the Java client's default partitioner and librdkafka's `murmur2_random` (the setting
`KafkaLogManager` uses) compute for a non-null key. The local and memory logs use Nuxeo's
`java_string_hash` partitioner instead, so one key may land in a different partition number on
Kafka than in a local log with the same partition count. Use this function to predict where
`append(key, ...)` puts a record on Kafka without asking the broker.
"""

from __future__ import annotations

from streamcore.errors import InvalidArgumentError

__all__ = ["kafka_partition_for_key", "murmur2"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2` as an unsigned 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    end = length - length % 4
    for i in range(0, end, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    tail = length % 4
    if tail == 3:
        h ^= data[end + 2] << 16
    if tail >= 2:
        h ^= data[end + 1] << 8
    if tail >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def kafka_partition_for_key(key: str, partitions: int) -> int:
    """The partition Kafka's default (murmur2) partitioner picks for `key` (UTF-8 encoded)."""
    if partitions < 1:
        raise InvalidArgumentError(f"partitions must be at least 1, got {partitions}")
    return (murmur2(key.encode("utf-8")) & 0x7FFFFFFF) % partitions
