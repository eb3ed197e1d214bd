"""Partitioned append-only logs behind one API (see `streamcore.log.api`).

`open_log_manager()` is the entry point for applications: a `UnifiedLogManager` that sends each
log to the backend `include/streamcore.toml` routes it to (see `streamcore.log.config`).
"""

from __future__ import annotations

from streamcore.config import StreamcoreConfig
from streamcore.log.api import (
    Latency,
    LiveMember,
    LogAppender,
    LogDescription,
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
from streamcore.log.config import BackendConfig, LogConfig, MatchRule, Route
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.memory import MemoryLogManager
from streamcore.log.unified import UnifiedLogManager


def open_log_manager(
    config: StreamcoreConfig | None = None, log_config: LogConfig | None = None
) -> UnifiedLogManager:
    """The log manager of an application: every log in the backend its name routes to, per
    `config` (default: `load_config()`, i.e. include/streamcore.toml + STREAMCORE_* variables).
    Backends are built on first use; close the manager (or use it as a context manager)."""
    return UnifiedLogManager(config, log_config)


__all__ = [
    "BackendConfig",
    "Latency",
    "LiveMember",
    "LocalLogManager",
    "LogAppender",
    "LogConfig",
    "LogDescription",
    "LogInfo",
    "LogLag",
    "LogManager",
    "LogOffset",
    "LogPartition",
    "LogRecord",
    "LogTailer",
    "MatchRule",
    "MemoryLogManager",
    "Route",
    "UnifiedLogManager",
    "java_string_hash",
    "open_log_manager",
    "partition_for_key",
]
