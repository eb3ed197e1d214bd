"""A new log backend is one folder plus one registry line (docs/log.md, "Adding a backend").

Proved here by doing it: a minimal backend of type `scratch` (the memory backend under another
type name, as a third-party backend would subclass or write its own manager) is registered with
one `register()` call, opened from a `[log.configs.*]` table naming its type, and the whole log
contract suite of test_log_contract.py runs over it (its test classes are collected here again,
with this module's `backend` and `manager` fixtures). The only file touched to add it is this
one; no module of streamcore/log names it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from log_fixtures import make_config
from test_log_contract import (  # noqa: F401  (collected here over the scratch backend)
    TestAppend,
    TestBackendNeutralAccess,
    TestCommitAndPositions,
    TestLagAndLatency,
    TestOffsetForTimestamp,
    TestReadArrow,
    TestTailerConflicts,
    TestTailerReads,
)
from test_log_contract import TestLifecycle as ContractLifecycle

from streamcore.config import StreamcoreConfig
from streamcore.log import LogManager, registry
from streamcore.log.config import LogConfig
from streamcore.log.memory.backend import MemoryBackend
from streamcore.log.memory.manager import MemoryLogManager
from streamcore.log.unified import UnifiedLogManager

SCRATCH = "scratch"


class ScratchLogManager(MemoryLogManager):
    """The backend's manager: here the memory manager under another name."""

    kind = SCRATCH


class ScratchBackend(MemoryBackend):
    """The backend's `Backend` (its folder's backend.py): its type, how it opens."""

    type = SCRATCH

    def open(self, config: object, settings: StreamcoreConfig) -> ScratchLogManager:
        return ScratchLogManager()


@pytest.fixture(autouse=True)
def scratch_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry line, for this module's tests only (the registry is restored after)."""
    monkeypatch.setattr(registry, "_registered", dict(registry._registered))
    registry.register(ScratchBackend())


@pytest.fixture(params=[SCRATCH])
def backend(request: pytest.FixtureRequest) -> str:
    """The backend under test: the scratch type (the contract's tests that name other backends
    through indirect parametrization run in test_log_contract.py)."""
    return request.param


class TestLifecycle(ContractLifecycle):
    """The contract's lifecycle tests over the scratch backend, but one: a scratch log, like a
    memory log, lives and dies with its manager, so no second manager sees it (the contract runs
    that test on the local log and Kafka only)."""

    test_incarnation_is_the_same_for_every_manager_of_the_log = None


@pytest.fixture
def manager(backend: str, tmp_path: Path) -> Iterator[LogManager]:
    """A manager of the scratch type, opened as a configuration naming the type opens it."""
    document = {"log": {"configs": {"default": {"type": SCRATCH}}}}
    config = LogConfig.parse(document, environ={}).configs["default"]
    opened = registry.backend_type(config.type).open(config, make_config(tmp_path))
    assert isinstance(opened, ScratchLogManager)
    yield opened
    opened.close()


def test_the_type_is_listed_and_routed_to(tmp_path: Path) -> None:
    """The registered type is one of `backend_types()` and a `[[log.match]]` rule routes to a
    config of that type, as to a built-in one."""
    assert SCRATCH in registry.backend_types()
    document = {
        "log": {
            "configs": {"fast": {"type": SCRATCH}},
            "match": [{"namespace": "fast", "config": "fast"}],
        }
    }
    settings = make_config(tmp_path)
    with UnifiedLogManager(settings, LogConfig.parse(document, environ={})) as unified:
        unified.create("fast/orders", 2)
        unified.appender("fast/orders").append("k", b"v")
        assert isinstance(unified.backend_for("fast/orders"), ScratchLogManager)
        assert sum(unified.end_offsets("fast/orders")) == 1
