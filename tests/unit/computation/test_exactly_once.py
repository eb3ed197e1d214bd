"""`Settings(processing_guarantee=)`: checked, and `exactly_once` refused on the logs without
transactions (memory, local) when the processor is made, with the error naming their guarantee
(at-least-once outputs, exactly-once state) instead of running at-least-once under its name.
The Kafka runs are in tests/integration/test_exactly_once_processor.py and
tests/faults/test_exactly_once_faults.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamcore.computation import Processor, Settings, StreamProcessor, Topology
from streamcore.computation.exactly_once import transactional_id
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.errors import TopologyError, UnsupportedOperationError
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.memory import MemoryLogManager


class Echo(Processor):
    def init(self, context) -> None:
        self.context = context

    def process(self, key, value) -> None:
        self.context.forward(key, value)


def topology() -> Topology:
    return (
        Topology.builder()
        .add_processor("app/echo", Echo, inputs=["app/in"], outputs=["app/out"], codec="json")
        .build()
    )


def test_the_guarantee_is_at_least_once_by_default_and_checked() -> None:
    assert Settings().processing_guarantee == "at_least_once"
    assert Settings(processing_guarantee="exactly_once").processing_guarantee == "exactly_once"
    with pytest.raises(TopologyError, match="unknown processing_guarantee 'exactly-once'"):
        Settings(processing_guarantee="exactly-once")
    with pytest.raises(TopologyError, match="instance_id"):
        Settings(instance_id="")


def test_exactly_once_is_refused_on_the_memory_log() -> None:
    manager = MemoryLogManager()
    settings = Settings(processing_guarantee="exactly_once")
    guarantee = r"at-least-once outputs.*exactly-once state"
    with pytest.raises(UnsupportedOperationError, match=guarantee):
        StreamProcessor(manager, topology(), settings)
    assert not manager.exists("app/out")  # refused before anything was created
    StreamProcessor(manager, topology(), Settings())  # at_least_once: accepted


def test_exactly_once_is_refused_on_the_local_log(tmp_path: Path) -> None:
    config = StreamcoreConfig(home=tmp_path, log=LogDefaults())
    manager = LocalLogManager(tmp_path / "log", config=config)
    try:
        with pytest.raises(UnsupportedOperationError, match="LocalLogManager has no transactions"):
            StreamProcessor(manager, topology(), Settings(processing_guarantee="exactly_once"))
    finally:
        manager.close()


def test_a_units_transactional_id_is_computation_instance_unit() -> None:
    assert transactional_id("app/count", 2, "node-a") == "app/count/node-a/2"
    assert transactional_id("app/count", 0).startswith("app/count/")  # the host name
    assert transactional_id("app/count", 0).endswith("/0")
