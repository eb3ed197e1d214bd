"""Log fixtures shared by the unit and fault suites: configurations, log managers per backend,
unique log names, codecs. Loaded from tests/conftest.py (`pytest_plugins`).

The `manager` fixture runs a test once per backend listed in `MANAGER_FACTORIES`. A backend is a
function `(tmp_path) -> LogManager`; adding Kafka later is one more entry, e.g.
`pytest.param("kafka", marks=pytest.mark.kafka)` mapped to a factory that builds a
`KafkaLogManager` on a unique topic prefix.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log import LogManager
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.memory import MemoryLogManager


def make_config(home: Path, **log: Any) -> StreamcoreConfig:
    """A configuration rooted at `home` that ignores the environment and include/streamcore.toml."""
    return StreamcoreConfig(home=home, log=LogDefaults(**log))


def _memory_manager(tmp_path: Path) -> LogManager:
    return MemoryLogManager()


def _local_manager(tmp_path: Path) -> LogManager:
    return LocalLogManager(tmp_path / "log", config=make_config(tmp_path))


# Kafka clients tuned for a fast suite on the loopback broker: short waits, quick group moves.
KAFKA_TEST_CONFIG = {
    "session.timeout.ms": 3000,
    "heartbeat.interval.ms": 250,
    "fetch.wait.max.ms": 50,
}


def _kafka_manager(tmp_path: Path) -> LogManager:
    """A KafkaLogManager on the local test broker (started if needed), on topics and groups of
    a prefix unique to the test; the session deletes them at its end (tests/kafka_broker.py)."""
    from kafka_broker import ensure_broker, scratch_prefix

    from streamcore.log.kafka import KafkaLogManager

    return KafkaLogManager(
        ensure_broker(), topic_prefix=scratch_prefix(), config=KAFKA_TEST_CONFIG, timeout=10.0
    )


MANAGER_FACTORIES: dict[str, Callable[[Path], LogManager]] = {
    "memory": _memory_manager,
    "local": _local_manager,
    "kafka": _kafka_manager,
}
BACKEND_PARAMS = [
    pytest.param(name, id=name, marks=pytest.mark.kafka if name == "kafka" else ())
    for name in MANAGER_FACTORIES
]


@pytest.fixture(params=BACKEND_PARAMS)
def backend(request: pytest.FixtureRequest) -> str:
    """The name of the backend under test ("memory", "local", ...)."""
    return request.param


@pytest.fixture
def manager(backend: str, tmp_path: Path) -> Iterator[LogManager]:
    """A fresh, empty log manager of each backend."""
    m = MANAGER_FACTORIES[backend](tmp_path)
    yield m
    m.close()


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    """`unique_name("prefix")` → a fresh `test/<prefix>-<n>` log name."""
    counter = itertools.count()

    def make(prefix: str = "log") -> str:
        return f"test/{prefix}-{next(counter)}"

    return make


@pytest.fixture
def new_log(manager: LogManager, unique_name: Callable[[str], str]) -> Callable[..., str]:
    """`new_log(partitions=2)` creates a log in `manager` and returns its URN."""

    def make(partitions: int = 1, prefix: str = "log", **options: Any) -> str:
        name = unique_name(prefix)
        assert manager.create(name, partitions, **options) is True
        return name

    return make


@pytest.fixture
def local_config(tmp_path: Path) -> Callable[..., StreamcoreConfig]:
    """`local_config(max_record_bytes=...)` → a configuration under tmp_path."""

    def make(**log: Any) -> StreamcoreConfig:
        return make_config(tmp_path, **log)

    return make


@pytest.fixture
def local_manager_factory(tmp_path: Path) -> Iterator[Callable[..., LocalLogManager]]:
    """`local_manager_factory(**log_defaults)` → a LocalLogManager on tmp_path/log; every manager
    made shares the folder (like separate processes would) and is closed at teardown."""
    made: list[LocalLogManager] = []

    def make(**log: Any) -> LocalLogManager:
        m = LocalLogManager(tmp_path / "log", config=make_config(tmp_path, **log))
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()


class JsonCodec:
    """A tiny codec for tests: JSON documents <-> UTF-8 bytes, counting its calls."""

    name = "test-json"

    def __init__(self) -> None:
        self.encoded = 0
        self.decoded = 0

    def encode(self, message: Any) -> bytes:
        self.encoded += 1
        return json.dumps(message, sort_keys=True).encode()

    def decode(self, data: bytes) -> Any:
        self.decoded += 1
        return json.loads(bytes(data))


@pytest.fixture
def json_codec() -> JsonCodec:
    return JsonCodec()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No STREAMCORE_* variable from the caller's environment leaks into the test."""
    for key in list(os.environ):
        if key.startswith("STREAMCORE_"):
            monkeypatch.delenv(key)
    return monkeypatch
