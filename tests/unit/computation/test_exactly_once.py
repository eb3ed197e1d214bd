"""`Settings(processing_guarantee=)`: checked, and `exactly_once` refused on the logs without
transactions (memory, local) when the processor is made, with the error naming their guarantee
(at-least-once outputs, exactly-once state) instead of running at-least-once under its name.
The Kafka runs are in tests/integration/test_exactly_once_processor.py and
tests/faults/test_exactly_once_faults.py."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from streamcore.codecs import get_codec
from streamcore.computation import Processor, Settings, StreamProcessor, Topology
from streamcore.computation.exactly_once import transactional_id
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.errors import (
    ProducerFencedError,
    TopologyError,
    TransactionAbortedError,
    TransactionTimeoutError,
    UnsupportedOperationError,
)
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.memory import MemoryLogManager
from streamcore.record import Record


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
    assert Settings().transaction_timeout is None  # librdkafka's 60 s
    for bad in (0, -1.0, True, "10"):
        with pytest.raises(TopologyError, match="transaction_timeout"):
            Settings(transaction_timeout=bad)  # type: ignore[arg-type]


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


class _FakeTransactions:
    """Transactions on the memory log for the runner's paths: appends are held until `commit`,
    which appends them and commits the sent offsets; `fail` makes the next commit raise."""

    def __init__(self, manager: MemoryLogManager, fail: Exception | None) -> None:
        self.manager = manager
        self.open = False
        self.held: list[tuple[Any, list[Any], int | None]] = []
        self.offsets: tuple[Any, dict[Any, int]] | None = None
        self.fail = fail
        self.commits = 0

    def begin(self) -> None:
        self.open = True

    def appender(self, name: Any, codec: Any = None) -> Any:
        real, tx = self.manager.appender(name, codec), self

        class Held:
            def append_batch(self, items: Any, *, partition: Any = None, timestamps: Any = None):
                tx.held.append((real, list(items), partition))
                return []

        return Held()

    def send_offsets(self, tailer: Any, offsets: dict[Any, int]) -> None:
        self.offsets = (tailer, dict(offsets))

    def commit(self) -> None:
        failure, self.fail = self.fail, None
        if failure is not None:
            raise failure
        for real, items, partition in self.held:
            real.append_batch(items, partition=partition)
        if self.offsets is not None:
            tailer, offsets = self.offsets
            for partition, offset in offsets.items():
                tailer.commit_offset(partition, offset)
        self.abort()
        self.commits += 1

    def abort(self) -> None:
        self.open, self.held, self.offsets = False, [], None

    def close(self) -> None:
        self.abort()


class _TransactionalMemory(MemoryLogManager):
    """A memory log with (fake) transactions: `Transactional` for the processor."""

    def __init__(self, fail: Exception) -> None:
        super().__init__()
        self.fail = fail  # raised by the first commit
        self.made: list[_FakeTransactions] = []
        self.timeouts: list[float | None] = []  # transaction_timeout of each producer made

    def transactions(self, transactional_id: str, *, transaction_timeout: Any = None) -> Any:
        self.timeouts.append(transaction_timeout)
        self.made.append(_FakeTransactions(self, self.fail))
        self.fail = None  # the first producer's first commit only
        return self.made[-1]


def _outputs(manager: MemoryLogManager) -> list[Any]:
    tailer = manager.tailer("check", "app/out", get_codec("avro"))
    try:
        return [json.loads(r.message.data)["i"] for r in iter(lambda: tailer.read(0), None)]
    finally:
        tailer.close()


def _run(manager: _TransactionalMemory, **settings_args: Any) -> StreamProcessor:
    """Echo 10 records with exactly_once; the first checkpoint's commit raises `failure`."""
    manager.create("app/in", 1)
    manager.appender("app/in", get_codec("avro")).append_batch(
        [("k", Record("k", json.dumps({"i": i}).encode())) for i in range(10)]
    )
    settings = Settings(
        processing_guarantee="exactly_once", instance_id="t", checkpoint_pause=0, **settings_args
    )
    processor = StreamProcessor(manager, topology(), settings).start()
    deadline = time.monotonic() + 30
    while manager.lag("app/in", "app/echo").lag and not processor.failed_computations():
        assert time.monotonic() < deadline, "no checkpoint within 30 s"
        time.sleep(0.01)
    processor.stop()
    return processor


def test_an_aborted_checkpoint_rewinds_and_its_records_are_committed_once() -> None:
    manager = _TransactionalMemory(TransactionAbortedError("aborted by the broker"))
    processor = _run(manager)
    stats = processor.unit_stats()[0]
    assert stats.checkpoint_failures == 1 and stats.checkpoints >= 1
    assert stats.processed >= 20  # every record processed twice: before and after the rewind
    assert _outputs(manager) == list(range(10))  # once: the aborted outputs never landed
    assert manager.lag("app/in", "app/echo").lag == 0


def test_a_fenced_unit_commits_nothing_and_stops_naming_the_fix(
    caplog: pytest.LogCaptureFixture,
) -> None:
    manager = _TransactionalMemory(ProducerFencedError("fenced by a newer producer"))
    with caplog.at_level(logging.ERROR, logger="streamcore.computation.exactly_once"):
        processor = _run(manager)
    assert processor.failed_computations() == ["app/echo"]
    assert "Settings(instance_id=...)" in caplog.text and "app/echo/t/0" in caplog.text
    assert _outputs(manager) == []
    assert manager.lag("app/in", "app/echo").lag == 10


def test_a_timed_out_checkpoint_reopens_the_producer_with_the_set_timeout() -> None:
    manager = _TransactionalMemory(TransactionTimeoutError("open longer than its timeout"))
    processor = _run(manager, transaction_timeout=5.0)
    assert processor.unit_stats()[0].checkpoint_failures == 1
    assert manager.timeouts == [5.0, 5.0]  # the first producer and the one after the timeout
    assert _outputs(manager) == list(range(10))
