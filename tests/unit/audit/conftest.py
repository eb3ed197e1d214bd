"""Fixtures of the audit unit tests: the log the relay appends to, chosen per test by indirect
parametrization (`LOGS` in tests/audit_support.py), wrapped in a `SpyManager`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from audit_support import SpyManager

from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log import LogManager
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.memory import MemoryLogManager


@pytest.fixture
def log_manager(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SpyManager]:
    """A fresh `local` or `memory` log manager (`request.param`), recording its appends."""
    if request.param == "memory":
        manager: LogManager = MemoryLogManager()
    else:
        config = StreamcoreConfig(home=tmp_path, log=LogDefaults(fsync="always"))
        manager = LocalLogManager(tmp_path / "log", config=config)
    yield SpyManager(manager)
    manager.close()
