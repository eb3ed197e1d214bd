"""Partitioned append-only logs behind one API (see `streamcore.log.api`)."""

from streamcore.log.api import (
    Latency,
    LogAppender,
    LogInfo,
    LogLag,
    LogManager,
    LogOffset,
    LogPartition,
    LogRecord,
    LogTailer,
    java_string_hash,
    partition_for_key,
)
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.memory import MemoryLogManager

__all__ = [
    "Latency",
    "LocalLogManager",
    "LogAppender",
    "LogInfo",
    "LogLag",
    "LogManager",
    "LogOffset",
    "LogPartition",
    "LogRecord",
    "LogTailer",
    "MemoryLogManager",
    "java_string_hash",
    "partition_for_key",
]
