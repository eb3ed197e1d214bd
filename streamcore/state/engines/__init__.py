"""The engines under key-value stores: `memory` (tests, the `TopologyTestDriver`) and `rocksdb`,
the persistent one on local disk (bench/RESULTS.md says why RocksDB). `open_engine` opens one by
the name a store or `[state] engine` gives; it imports the persistent engine's module, and so its
library, only when asked for it, so the memory engine and `import streamcore.state` stay cheap."""

from __future__ import annotations

from pathlib import Path

from streamcore.errors import InvalidArgumentError
from streamcore.state.engine import StoreEngine

__all__ = ["ENGINES", "open_engine"]

ENGINES = ("memory", "rocksdb")


def open_engine(kind: str, path: Path | None, lock_timeout: float) -> StoreEngine:
    """A new engine of `kind` ("memory" or "rocksdb"). The persistent one keeps its store in
    directory `path` (`STREAMCORE_HOME/state/<computation>/<task>/<store>`, created if missing)
    and waits up to `lock_timeout` seconds for another process to release it; the memory engine
    ignores both."""
    if kind == "memory":
        from streamcore.state.engines.memory import MemoryEngine

        return MemoryEngine()
    if kind == "rocksdb":
        if path is None:
            raise InvalidArgumentError(
                "the rocksdb state engine keeps its store on disk: give it the store's directory"
            )
        from streamcore.state.engines.rocksdb import RocksDBEngine

        return RocksDBEngine(path, lock_timeout)
    raise InvalidArgumentError(
        f"unknown state store engine {kind!r}: the engines are {', '.join(map(repr, ENGINES))}"
    )
