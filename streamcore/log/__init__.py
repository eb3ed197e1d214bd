"""Partitioned append-only logs behind one API.

- `open_log_manager()` is the entry point for applications: a `UnifiedLogManager` that sends each
  log to the backend `include/streamcore.toml` routes it to (see `streamcore.log.config`).
- The contracts every backend keeps are `LogManager`, `LogAppender`, `LogTailer` and
  `RebalanceListener` (`streamcore.log.api`); the values they take and return, such as
  `LogPartition`, `LogOffset`, `LogRecord` and `LogLag`, are in `streamcore.log.values`.
- The backends are `LocalLogManager` (the embedded default), `MemoryLogManager` and
  `streamcore.log.kafka.KafkaLogManager`, each a folder of this package that
  `streamcore.log.registry` names; docs/log.md says how to add one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamcore.lazy_exports import lazy_exports

if TYPE_CHECKING:
    # What __getattr__ hands out, for type checkers ("X as X": `__all__` is computed).
    from streamcore.config import StreamcoreConfig
    from streamcore.log.api import LogAppender as LogAppender
    from streamcore.log.api import LogManager as LogManager
    from streamcore.log.api import LogTailer as LogTailer
    from streamcore.log.api import RebalanceListener as RebalanceListener
    from streamcore.log.config import BackendConfig as BackendConfig
    from streamcore.log.config import LogConfig as LogConfig
    from streamcore.log.config import MatchRule as MatchRule
    from streamcore.log.config import Route as Route
    from streamcore.log.local.manager import LocalLogManager as LocalLogManager
    from streamcore.log.memory.manager import MemoryLogManager as MemoryLogManager
    from streamcore.log.partitioner import java_string_hash as java_string_hash
    from streamcore.log.partitioner import partition_for_key as partition_for_key
    from streamcore.log.unified import UnifiedLogManager as UnifiedLogManager
    from streamcore.log.values import Latency as Latency
    from streamcore.log.values import LiveMember as LiveMember
    from streamcore.log.values import LogDescription as LogDescription
    from streamcore.log.values import LogInfo as LogInfo
    from streamcore.log.values import LogLag as LogLag
    from streamcore.log.values import LogOffset as LogOffset
    from streamcore.log.values import LogPartition as LogPartition
    from streamcore.log.values import LogRecord as LogRecord

# Exports are imported on first use (PEP 562): `streamcore.config` imports the registry's
# partition bound from this package, and a caller that needs one value object does not pay for
# the backends.
_EXPORTS = {
    "LogAppender": "api",
    "LogManager": "api",
    "LogTailer": "api",
    "RebalanceListener": "api",
    "BackendConfig": "config",
    "LogConfig": "config",
    "MatchRule": "config",
    "Route": "config",
    "LocalLogManager": "local.manager",
    "MemoryLogManager": "memory.manager",
    "java_string_hash": "partitioner",
    "partition_for_key": "partitioner",
    "UnifiedLogManager": "unified",
    "Latency": "values",
    "LiveMember": "values",
    "LogDescription": "values",
    "LogInfo": "values",
    "LogLag": "values",
    "LogOffset": "values",
    "LogPartition": "values",
    "LogRecord": "values",
}
__all__ = sorted([*_EXPORTS, "open_log_manager"])


def open_log_manager(
    config: StreamcoreConfig | None = None, log_config: LogConfig | None = None
) -> UnifiedLogManager:
    """The log manager of an application: every log in the backend its name routes to, per
    `config` (default: `load_config()`, i.e. include/streamcore.toml + STREAMCORE_* variables).
    Backends are built on first use; close the manager (or use it as a context manager)."""
    from streamcore.log.unified import UnifiedLogManager

    return UnifiedLogManager(config, log_config)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
