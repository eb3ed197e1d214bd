"""Which logs have transactions (`streamcore.log.capabilities.Transactional`): the Kafka backend
does; the local and memory logs do not, and asking them for one says what they guarantee
instead (at-least-once outputs, exactly-once state) and what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.errors import UnsupportedOperationError
from streamcore.log.capabilities import Transactional, transactions_of
from streamcore.log.kafka import KafkaLogManager
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.memory.manager import MemoryLogManager


def test_kafka_has_transactions() -> None:
    assert issubclass(KafkaLogManager, Transactional)


@pytest.mark.parametrize("backend", ["local", "memory"])
def test_local_and_memory_logs_refuse_with_their_guarantee(tmp_path: Path, backend: str) -> None:
    if backend == "local":
        config = StreamcoreConfig(home=tmp_path, log=LogDefaults())
        manager: object = LocalLogManager(tmp_path / "log", config)
    else:
        manager = MemoryLogManager()
    assert not isinstance(manager, Transactional)
    with pytest.raises(UnsupportedOperationError) as caught:
        transactions_of(manager)
    message = str(caught.value)
    assert type(manager).__name__ in message
    assert "at-least-once outputs" in message and "exactly-once state" in message
    assert "processing_guarantee='at_least_once'" in message and "Kafka log" in message
