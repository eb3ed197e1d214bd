"""The log backends by type: what `type = "..."` in a `[log.configs.<name>]` table names.

Each backend is a folder of this package (`local/`, `kafka/`, `memory/`) whose `backend.py` holds
a `Backend`: the options its configs take, how to build its manager, where its logs live and the
class of its descriptions. `BUILTIN` lists them, one line each, by the module of that `Backend`,
imported on first use (loading a configuration that names Kafka does not import
confluent-kafka; opening the Kafka backend does). `register()` adds a backend from outside this
package (a plugin, a test). Adding a backend: docs/log.md, "Adding a backend".

The registry also owns the bound every backend puts on a log's partition count,
`MAX_PARTITIONS`: managers, configurations, commands and jobs check it through here.
"""

from __future__ import annotations

import abc
import builtins
import importlib
import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamcore.errors import ConfigError

if TYPE_CHECKING:
    from streamcore.config import StreamcoreConfig
    from streamcore.log.api import LogManager
    from streamcore.log.config import BackendConfig
    from streamcore.log.values import LogDescription
    from streamcore.names import Name

__all__ = [
    "BUILTIN",
    "DEFAULT_TYPE",
    "MAX_PARTITIONS",
    "Backend",
    "backend_type",
    "backend_types",
    "check_partitions",
    "description_from_json",
    "partitions_in_range",
    "register",
]

MAX_PARTITIONS = 1000
# The type of the built-in `default` config, which takes every log no rule routes elsewhere.
DEFAULT_TYPE = "local"
# type -> the module whose `BACKEND` it is; messages list the types in this order.
BUILTIN: dict[str, str] = {
    "local": "streamcore.log.local.backend",
    "kafka": "streamcore.log.kafka.backend",
    "memory": "streamcore.log.memory.backend",
}

_registered: dict[str, Backend] = {}
_lock = threading.Lock()


class Backend(abc.ABC):
    """One backend type, as the configuration and the tools see it. A subclass per backend
    folder (its `backend.py`), one instance registered under `type`.

    Nothing here imports the backend's client libraries: `open` and `description` import them
    when called, so a configuration naming the backend loads where they are not installed."""

    type: str = ""
    # The keys a `[log.configs.<name>]` table of this type may hold besides `type`.
    options: tuple[str, ...] = ()
    # Who removes old records of a log that has no `purge` (see `capabilities.Purgeable`), for
    # the retention job's summary.
    retention_by: str = "the backend applies its own retention"

    def parse_options(self, key: str, raw: Mapping[str, Any]) -> dict[str, Any]:
        """The checked options of the config table `key` (keys outside `options` were refused
        already); `ConfigError` naming the key and what to write for a bad value."""
        return {}

    def environment(self, environ: Mapping[str, str]) -> None:
        """Check the environment variables this backend reads, at every configuration load
        (whether or not a config of this type is defined): `ConfigError` for a bad one."""
        return None

    def configure(
        self, config: BackendConfig, environ: Mapping[str, str], reachable: bool
    ) -> BackendConfig:
        """The config as loaded with the environment applied (overrides, `${NAME}` in values).
        `reachable` says whether some call can route to it: a variable it lacks then fails the
        load, else only the opening of the backend (see `streamcore.log.environ`)."""
        return config

    @abc.abstractmethod
    def open(self, config: BackendConfig, settings: StreamcoreConfig) -> LogManager:
        """A new manager of this backend for `config`, under `settings` (home, log defaults)."""

    def description(self) -> builtins.type[LogDescription] | None:
        """The `LogDescription` class of this backend's logs (how another process, a Spark
        executor, opens one), or None if no other process can open them."""
        return None

    def folder(self, config: BackendConfig, home: Path) -> Path | None:
        """The folder holding the logs of `config`, if they live in one (two configs must not
        share it); None for a backend that keeps them elsewhere."""
        return None

    def where(self, config: BackendConfig, home: Path) -> str:
        """Where the logs of `config` live, for `streamcore route` and messages."""
        folder = self.folder(config, home)
        return str(folder) if folder is not None else "this process"

    def compacted(self, options: dict[str, Any]) -> dict[str, Any]:
        """The `create` options of a key-compacted log (a `compact = true` rule): what the
        backend needs to know at creation, if anything."""
        return options


def register(backend: Backend) -> None:
    """Make `backend` the one of type `backend.type` (a new type, or another implementation of
    an existing one) for every configuration loaded afterwards."""
    if not backend.type or not isinstance(backend.type, str):
        raise ConfigError(f"{type(backend).__name__}.type must name the backend type")
    with _lock:
        _registered[backend.type] = backend


def backend_types() -> tuple[str, ...]:
    """Every backend type: the built-in ones, then those registered, in order."""
    return (*BUILTIN, *(name for name in _registered if name not in BUILTIN))


def backend_type(name: str) -> Backend:
    """The `Backend` of type `name` (its module imported on first use); `ConfigError` if there
    is none."""
    with _lock:
        found = _registered.get(name)
    if found is not None:
        return found
    module = BUILTIN.get(name)
    if module is None:
        raise ConfigError(
            f"unknown log backend type {name!r}; use one of {', '.join(backend_types())}"
        )
    backend: Backend = importlib.import_module(module).BACKEND
    with _lock:
        return _registered.setdefault(name, backend)


def partitions_in_range(count: int) -> bool:
    """Whether a log may have `count` partitions: 1 to `MAX_PARTITIONS`."""
    return 1 <= count <= MAX_PARTITIONS


def check_partitions(name: Name, count: int) -> None:
    """`ConfigError` if log `name` may not be created with `count` partitions."""
    if not partitions_in_range(count):
        raise ConfigError(
            f"cannot create {name}: partitions must be 1..{MAX_PARTITIONS}, got {count}"
        )


def description_from_json(text: str) -> LogDescription:
    """The description `LogDescription.to_json` of any backend wrote, as its backend's class."""
    try:
        kind = json.loads(text).get("backend")
    except (ValueError, AttributeError):
        kind = None
    cls = backend_type(kind).description() if isinstance(kind, str) else None
    if cls is None:
        raise ConfigError(
            f"not a log description: {text[:200]}; make it with describe() of the log's manager "
            "(a backend whose logs other processes can open)"
        )
    return cls.from_json(text)
